"""The browser client's size: `www/ssekd-client/` minified by esbuild and gzipped, all of it
(index.js bundled) and each module alone, in bytes. The aim is at most 8 KiB for all of it.

    .venv/bin/python -m bench.client_size

esbuild comes from npm into the venv's node folder (`make client-size` installs it)."""

from __future__ import annotations

import gzip
import os
import subprocess
from pathlib import Path

from bench.common import BIN, ROOT, table, write_result

CLIENT = ROOT / "www" / "ssekd-client"
ESBUILD = Path(os.environ.get("ESBUILD", BIN.parent / "node" / "node_modules" / ".bin" / "esbuild"))
AIM = 8 * 1024


PARTS = ("stream.js", "collection.js", "writes.js", "tabs.js")


def minified(entry: str) -> bytes:
    """esbuild's minified ES module of `entry` (ES module source) bundled with what it imports."""
    argv = [str(ESBUILD), "--bundle", "--minify", "--format=esm", "--target=es2020",
            "--log-level=warning"]
    return subprocess.run(argv, input=entry.encode(), cwd=CLIENT, capture_output=True,
                          check=True).stdout


def measure() -> dict[str, dict[str, int]]:
    """Bytes of each part alone and of all of them (what `import ... from "ssekd-client"`
    loads; the parts not written yet are left out of it)."""
    present = [name for name in PARTS if (CLIENT / name).exists()]
    entries = {name: f'export * from "./{name}";' for name in present}
    entries["all"] = "".join(entries.values())
    rows: dict[str, dict[str, int]] = {}
    for label, entry in entries.items():
        files = present if label == "all" else [label]
        code = minified(entry)
        rows[label] = {"source": sum((CLIENT / f).stat().st_size for f in files),
                       "minified": len(code), "gzipped": len(gzip.compress(code, 9, mtime=0))}
    return rows


def main() -> None:
    version = subprocess.run([str(ESBUILD), "--version"], capture_output=True, text=True,
                             check=True).stdout.strip()
    rows = measure()
    print(table(f"ssekd-client size in bytes (esbuild {version} --minify, gzip -9)",
                ["part", "source", "minified", "min+gzip"],
                [[k, v["source"], v["minified"], v["gzipped"]] for k, v in rows.items()]))
    total = rows.get("all", {}).get("gzipped")
    if total is not None:
        print(f"\nall of it: {total / 1024:.2f} KiB minified+gzipped (aim: at most 8 KiB)")
    path = write_result("client_size", {"esbuild": version, "aim_bytes": AIM, "parts": rows})
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
