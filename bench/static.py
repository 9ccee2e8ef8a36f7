"""Static files: requests/s for a 1 KiB file over keep-alive (wrk), ssekd beside plain
`twistd web --path` in the same run; and the daemon's RSS growth while serving a 1 GiB file."""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import BIN, PeakRss, free_port, spawn, stop, table, wait_port, write_result
from tests.support import zilla_config as zc


def daemon_config(port: int) -> zc.Node:
    """tcp -> http -> the files of `www/`, at every path."""
    return zc.zilla("bench", {"tcp0": zc.tcp_server(port, "http0"),
                              "http0": zc.http_server("files_map"),
                              **zc.files("www", prefix="/")})


def wrk(url: str, seconds: int, connections: int) -> float:
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", url],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not m:
        raise RuntimeError(out)
    return float(m.group(1))


def large_file_growth(port: int, pid: int, size: int) -> dict[str, float]:
    with PeakRss(pid) as rss:
        started = time.monotonic()
        subprocess.run(["curl", "-s", "-o", "/dev/null", f"http://127.0.0.1:{port}/big.bin"],
                       check=True)
        elapsed = time.monotonic() - started
    return {"rss_before_mib": rss.before / 2**20, "rss_peak_mib": rss.peak / 2**20,
            "growth_mib": rss.growth / 2**20, "mib_per_s": size / 2**20 / elapsed}


def main(seconds: int = 5, connections: int = 50, rounds: int = 2) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        www = root / "www"
        www.mkdir()
        (www / "one-k.txt").write_bytes(b"x" * 1024)
        big = www / "big.bin"
        size = (1 << 30) + (64 << 20)
        with open(big, "wb") as f:
            f.truncate(size)
        ssekd_port, web_port = free_port(), free_port()
        zc.write(root / "zilla.yaml", daemon_config(ssekd_port))
        ssekd = spawn([str(BIN / "twistd"), "-n", "--pidfile=", "ssekd", "--config",
                       "zilla.yaml"], cwd=root)
        web = spawn([str(BIN / "twistd"), "-n", "--pidfile=", "--logfile=/dev/null", "web",
                     "--path", str(www), "--listen", f"tcp:{web_port}:interface=127.0.0.1"],
                    cwd=root)
        try:
            wait_port(ssekd_port, ssekd)
            wait_port(web_port, web)
            results: dict[str, list[float]] = {"ssekd": [], "twistd web": []}
            for _ in range(rounds):  # alternate, so neither gets the quieter moment
                results["ssekd"].append(
                    wrk(f"http://127.0.0.1:{ssekd_port}/one-k.txt", seconds, connections))
                results["twistd web"].append(
                    wrk(f"http://127.0.0.1:{web_port}/one-k.txt", seconds, connections))
            growth = large_file_growth(ssekd_port, ssekd.pid, size)
        finally:
            stop(ssekd)
            stop(web)
    best = {k: max(v) for k, v in results.items()}
    rows = [[name, best[name], ", ".join(f"{x:,.0f}" for x in runs)]
            for name, runs in results.items()]
    print(table(f"Static 1 KiB file, wrk -t1 -c{connections} -d{seconds}s, keep-alive",
                ["server", "best req/s", "runs"], rows))
    print()
    print(table("1.06 GiB file download (curl), ssekd RSS",
                ["before MiB", "peak MiB", "growth MiB", "MiB/s"],
                [[growth["rss_before_mib"], growth["rss_peak_mib"], growth["growth_mib"],
                  growth["mib_per_s"]]]))
    data = {"requests_per_s": results, "best": best,
            "ratio_ssekd_to_twistd_web": best["ssekd"] / best["twistd web"],
            "large_file": growth}
    path = write_result("static", data)
    print(f"\nwritten {path}")
    return data


if __name__ == "__main__":
    main()
