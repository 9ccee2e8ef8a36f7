"""`--workers 2`: one daemon, two processes serving the same port. A worker killed with SIGKILL
loses no client for good (its clients resume, nothing missing or repeated, on the other worker or
its replacement); SIGTERM with a thousand open streams exits 0 quickly; one scrape sums both
workers; workers stop when their parent is killed; TLS, HTTP/2 and reload work as with one
process."""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from ssekd.dev.broker import free_port
from tests.support.broker import Kafka
from tests.support.daemon import Daemon, start_daemon
from tests.support.http import curl
from tests.support.pki import ENV, Pki, tls_config
from tests.support.resume import ResumingClient
from tests.support.streamd import write_config
from tests.support.wait import wait_until

pytestmark = [pytest.mark.daemon, pytest.mark.broker]


def start_workers(tmp_path: Path, kafka: Kafka, workers: int = 2, by_config: bool = False,
                  **kw: object) -> tuple[Daemon, int]:
    """The streaming test config with `workers` (`--workers`, or the config's `engine.workers`
    when `by_config`), once every worker has started."""
    port = free_port()
    if by_config:
        kw["engine"] = f"{{workers: {workers}}}"
    config = write_config(tmp_path, kafka.bootstrap, port, **kw)  # type: ignore[arg-type]
    daemon = start_daemon(config, wait_ports=[port],
                          extra_args=[] if by_config else ["--workers", str(workers)])
    try:
        daemon.wait_output("ENGINE_STARTED", count=workers + 1)
    except AssertionError:
        daemon.stop()
        raise
    return daemon, port


def scrape(port: int) -> dict[str, float]:
    """Sample name with labels -> value, from the classic text format."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    values = {}
    for line in text.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def active_streams(prom: int) -> float:
    return sum(v for k, v in scrape(prom).items() if k.startswith("stream_active_sent{"))


def test_sigkill_of_a_worker_loses_no_client(kafka: Kafka, tmp_path: Path) -> None:
    topic = kafka.topic(2)
    daemon, port = start_workers(tmp_path, kafka)
    clients: list[ResumingClient] = []
    try:
        sent: list[str] = []

        def produce(tag: str, n: int) -> list[str]:
            values = [f"{tag}-{i}" for i in range(n)]
            for v in values:
                kafka.produce(topic, v.encode(), key=v.encode())
            sent.extend(values)
            markers = kafka.mark(topic, (0, 1))
            sent.extend(markers)
            return markers

        clients = [ResumingClient(port, f"/events/{topic}") for _ in range(40)]
        first = produce("before", 20)
        for c in clients:
            c.read_until(first)
        victim = daemon.worker_pids()[1]
        os.kill(victim, signal.SIGKILL)
        daemon.wait_output(f"ENGINE_WORKER_DIED worker 1 pid {victim} killed by SIGKILL")
        during = produce("during", 20)
        for c in clients:
            c.read_until(during)
        daemon.wait_output("ENGINE_WORKER_STARTED worker 1", count=2)
        after = produce("after", 20)
        for c in clients:
            c.read_until(after)
        for c in clients:
            assert Counter(c.data) == Counter(sent), c.last_id
        cut = [c for c in clients if c.reconnects]
        # the kernel spread the clients over both workers: some were cut, the others were not
        assert 0 < len(cut) < len(clients)
        assert daemon.alive()
    finally:
        for c in clients:
            c.close()
        assert daemon.stop() == 0


def test_workers_stop_when_their_parent_is_killed(kafka: Kafka, tmp_path: Path) -> None:
    """A parent killed outright (SIGKILL, the OOM killer) cannot forward anything: its workers
    notice they were handed to init and stop, so none serves on unsupervised, holding the port."""
    daemon, port = start_workers(tmp_path, kafka)
    workers = list(daemon.worker_pids().values())
    assert len(workers) == 2
    daemon.signal(signal.SIGKILL)
    daemon.process.wait(10)

    def gone(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # a zombie until init reaps it: gone as far as serving goes
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"

    try:
        wait_until(lambda: all(gone(p) for p in workers), timeout=10,
                   what="workers still running after their parent died")
        assert daemon.output().count("ENGINE_PARENT_GONE") == 2
        with socket.socket() as s:  # the port is free again
            s.bind(("127.0.0.1", port))
    finally:
        for pid in workers:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)


def test_sigterm_with_two_workers_and_a_thousand_streams_exits_0_in_5_s(
        kafka: Kafka, tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    topic = kafka.topic(1)
    kafka.send(topic, [b"hello"])
    prom = free_port()
    daemon, port = start_workers(tmp_path, kafka, prometheus_port=prom)
    socks: list[socket.socket] = []
    try:
        request = (f"GET /events/{topic} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                   f"Accept: text/event-stream\r\n\r\n").encode()
        for _ in range(1000):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(request)
            socks.append(s)
        wait_until(lambda: active_streams(prom) == 1000, 60,
                   what=lambda: f"{active_streams(prom)} streams open, not 1000")
        started = time.monotonic()
        daemon.signal(signal.SIGTERM)
        code = daemon.process.wait(10)
        took = time.monotonic() - started
        assert code == 0, daemon.output()[-3000:]
        assert took < 5.0, took
        assert daemon.output().count("ENGINE_WORKER_STOPPED") == 2
    finally:
        for s in socks:
            s.close()
        daemon.stop()


def test_one_scrape_sums_the_workers(kafka: Kafka, tmp_path: Path) -> None:
    topic = kafka.topic(1)
    kafka.send(topic, [b"hello"])
    prom = free_port()
    daemon, port = start_workers(tmp_path, kafka, by_config=True, prometheus_port=prom)
    clients: list[ResumingClient] = []
    try:
        clients = [ResumingClient(port, f"/events/{topic}") for _ in range(30)]
        for c in clients:
            c.read_until(["hello"])
        wait_until(lambda: active_streams(prom) == 30, 10,
                   what=lambda: f"{active_streams(prom)} streams open, not 30")
        values = scrape(prom)
        opened = sum(v for k, v in values.items() if k.startswith("stream_opens_sent_total{"))
        assert opened == 30
        # a time is not summed: the earliest start of the workers
        assert values["process_start_time_seconds"] < time.time()
        assert values["process_start_time_seconds"] > time.time() - 600
    finally:
        for c in clients:
            c.close()
        assert daemon.stop() == 0


@pytest.mark.parametrize("workers", [1, 2])
def test_tls_http2_and_reload(workers: int, tmp_path: Path, pki: Pki) -> None:
    """The same checks with one process and with two: a worker is a whole daemon."""
    config, tls_port, clear = tls_config(tmp_path, pki, "{keys: [localhost], alpn: [h2, "
                                                        "http/1.1]}")
    daemon = start_daemon(config, ENV, [tls_port, clear],
                          extra_args=["--workers", str(workers)])
    try:
        daemon.wait_output("ENGINE_STARTED", count=workers + (workers > 1))
        resolve = ["--resolve", f"localhost:{tls_port}:127.0.0.1", "--cacert", str(pki.ca_pem),
                   "-w", "\n%{http_version}"]
        for _ in range(10):  # new connections: the kernel spreads them over the workers
            out = subprocess.run(["curl", "-s", "--max-time", "10", "--http2", *resolve,
                                  f"https://localhost:{tls_port}/index.html"],
                                 capture_output=True, text=True, timeout=20).stdout
            assert out == "hello over tls\n\n2"
        (tmp_path / "other").mkdir()
        (tmp_path / "other" / "extra.txt").write_text("after reload\n")
        assert curl(f"http://127.0.0.1:{clear}/extra.txt")[0] == 404
        config.write_text(config.read_text().replace("location: www/", "location: other/"))
        daemon.signal(signal.SIGHUP)
        daemon.wait_output("CONFIG_RELOADED", count=workers)
        for _ in range(10):
            status, _, body = curl("--http2-prior-knowledge", f"http://127.0.0.1:{clear}/extra.txt")
            assert (status, body) == (200, b"after reload\n")
        assert "CONFIG_RELOAD_FAILED" not in daemon.output()
    finally:
        assert daemon.stop() == 0


def test_a_config_change_that_moves_the_port_moves_every_worker(kafka: Kafka,
                                                                  tmp_path: Path) -> None:
    """With --watch the parent notices the change: it closes the old port's sockets (which it
    holds for every worker) and tells the workers, which each open the new port."""
    old, new = free_port(), free_port()
    config = write_config(tmp_path, kafka.bootstrap, old)
    daemon = start_daemon(config, wait_ports=[old],
                          extra_args=["--workers", "2", "--watch", "--watch-interval", "0.2"])
    try:
        daemon.wait_output("ENGINE_STARTED", count=3)
        config.write_text(config.read_text().replace(f"port: {old}", f"port: {new}"))
        daemon.wait_output("CONFIG_RELOADED", count=2)
        daemon.wait_output(f"ENGINE_CLOSED 127.0.0.1:{old}", count=3)  # parent and workers
        for _ in range(20):  # new connections, spread over both workers by the kernel
            status, _, body = curl(f"http://127.0.0.1:{new}/www/index.html")
            assert status == 200
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", old), timeout=5).close()
    finally:
        assert daemon.stop() == 0


def test_the_worker_sockets_are_private_to_the_daemons_user(kafka: Kafka,
                                                            tmp_path: Path) -> None:
    """Each worker's Unix socket answers its parent's scrapes and its siblings' renewals (which
    carry tokens): it lives in a folder only the daemon's user may enter (mode 0700), made
    afresh for each start, so another local user can neither connect nor put a socket of their
    own among the siblings."""
    daemon, _ = start_workers(tmp_path, kafka)
    try:
        sockets = []
        for pid in daemon.worker_pids().values():
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            sockets.append(Path(argv[argv.index(b"--metrics-socket") + 1].decode()))
        assert len(sockets) == 2
        folders = {s.parent for s in sockets}
        assert len(folders) == 1, "one folder for the siblings"
        [folder] = folders
        info = folder.stat()
        assert info.st_mode & 0o777 == 0o700, oct(info.st_mode)
        assert info.st_uid == os.getuid()
        assert folder.name.startswith("ssekd-workers-")
        for path in sockets:
            assert path.is_socket() and path.stat().st_uid == os.getuid()
    finally:
        daemon.stop()
