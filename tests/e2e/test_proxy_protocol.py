"""The PROXY protocol with the real daemon on loopback: this test plays the balancer from
127.0.0.2, the one address `proxy-protocol.from` trusts, and names clients in its headers.
Streams flow to the named clients, the per-address limit counts them and not the balancer, and
a header from elsewhere, or none from the balancer, closes the connection with an event that
says why. (tests/e2e/test_haproxy_tls.py puts the real HAProxy and a browser in front.)"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest

from ssekd.dev.broker import free_port
from tests.support.broker import Kafka
from tests.support.daemon import SSEKD, start_daemon
from tests.support.proxy_header import v1, v2
from tests.support.sse import SseClient
from tests.support.streamd import write_config

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

BALANCER = "127.0.0.2"
ELSEWHERE = "127.0.0.3"


def answer(port: int, preamble: bytes, source: str, path: str = "/www/index.html") -> bytes:
    """What the daemon sends back to one request (b"" when it closes the connection unanswered)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5,
                                  source_address=(source, 0)) as s:
        s.sendall(preamble + f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                  .encode())
        received = b""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                data = s.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            received += data
        return received


def test_a_trusted_balancer_names_the_clients_and_no_one_else_can(
        kafka: Kafka, tmp_path: Path) -> None:
    topic = kafka.topic(1)
    port = free_port()
    config = write_config(tmp_path, kafka.bootstrap, port, tcp_options=(
        f", proxy-protocol: {{from: [{BALANCER}/32], timeout: 2}}, "
        "limits: {connections-per-ip: 2}"))
    # one process: the per-address count is each worker's own (docs/operations.md, Workers)
    daemon = start_daemon(config, extra_args=["--workers", "1"], wait_output="ENGINE_STARTED")
    try:
        # two streams of one client through the balancer, its events reach them
        alice = [SseClient(port, f"/events/{topic}", source=BALANCER,
                           preamble=v2("198.51.100.7", 50000 + i)) for i in range(2)]
        assert [c.status for c in alice] == [200, 200]
        markers = kafka.mark(topic)
        for c in alice:
            assert c.until(markers) == []
        # a third connection of hers is over connections-per-ip; the balancer's other clients
        # (here in a version 1 header) are not
        assert answer(port, v2("198.51.100.7", 50002), BALANCER) == b""
        daemon.wait_output("BINDING_TCP_CONNECTION_REFUSED 198.51.100.7: connections-per-ip "
                           "limit 2 reached")
        assert answer(port, v1("198.51.100.8"), BALANCER).startswith(b"HTTP/1.1 200")
        assert answer(port, v2("2001:db8::8"), BALANCER).startswith(b"HTTP/1.1 200")
        assert answer(port, v2("", local=True), BALANCER).startswith(b"HTTP/1.1 200")
        # clients straight from elsewhere are served, unless they claim an address
        assert answer(port, b"", ELSEWHERE).startswith(b"HTTP/1.1 200")
        assert answer(port, v2("198.51.100.9"), ELSEWHERE) == b""
        daemon.wait_output(f"BINDING_TCP_CONNECTION_REFUSED {ELSEWHERE}: a PROXY protocol "
                           "header from an address proxy-protocol.from does not list")
        # the balancer without a header, or too slow with one
        assert answer(port, b"", BALANCER) == b""
        daemon.wait_output(f"BINDING_TCP_CONNECTION_REFUSED {BALANCER}: no PROXY protocol "
                           "header, and proxy-protocol.from names this address")
        with socket.create_connection(("127.0.0.1", port), source_address=(BALANCER, 0)) as s:
            s.settimeout(5)
            started = time.monotonic()
            try:
                assert s.recv(1) == b""
            except ConnectionResetError:
                pass  # aborted: closed without lingering
            assert 1.5 < time.monotonic() - started < 4.5
        daemon.wait_output(f"BINDING_TCP_CONNECTION_REFUSED {BALANCER}: no PROXY protocol "
                           "header within 2 s")
        # the streams went on meanwhile, and nothing was logged as a failure
        markers = kafka.mark(topic)
        for c in alice:
            assert c.until(markers) == []
            c.sock.close()
        # the access events of her streams name her, as the balancer did
        daemon.wait_output("BINDING_SSE_STREAM_ENDED peer=198.51.100.7:50000 ")
        daemon.wait_output("BINDING_SSE_STREAM_ENDED peer=198.51.100.7:50001 ")
        assert daemon.stop() == 0
        assert "Traceback" not in daemon.output()
    finally:
        daemon.stop()


EVERYONE = """\
name: t
bindings:
  tcp0:
    type: tcp
    kind: server
    options:
      host: 127.0.0.1
      port: {port}
      proxy-protocol:
        from: [127.0.0.2, "{network}"]
    exit: http0
  http0: {{type: http, kind: server, exit: files_map}}
  files_map:
    type: http-filesystem
    kind: proxy
    routes: [{{when: [{{path: "/{{path}}"}}], exit: files, with: {{path: "${{params.path}}"}}}}]
  files: {{type: filesystem, kind: server, options: {{location: www}}}}
telemetry: {{exporters: {{stdout_logs_exporter: {{type: stdout}}}}}}
"""
FORGE = ("any peer can then forge its client address with a PROXY header (past routes by cidr "
         "and connections-per-ip, into every event); list only the balancers' addresses")


def everyone(folder: Path, network: str, port: int = 7114) -> Path:
    (folder / "www").mkdir(exist_ok=True)
    (folder / "www" / "index.html").write_text("<p>hello</p>\n")
    config = folder / "zilla.yaml"
    config.write_text(EVERYONE.format(port=port, network=network))
    return config


@pytest.mark.parametrize(("network", "holds"), [("0.0.0.0/0", "every IPv4 address"),
                                                ("::/0", "every IPv6 address"),
                                                ("127.0.0.0/8", None)])
def test_ssekd_check_warns_of_a_from_that_holds_every_address(
        tmp_path: Path, network: str, holds: str | None) -> None:
    """`ssekd check` as typed: a `warning:` line with the entry's line and path, exit 0 (the
    config says what it means); nothing for a network that is only wide."""
    config = everyone(tmp_path, network)
    result = subprocess.run([SSEKD, "check", "--config", str(config)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "schema and references ok" in result.stdout
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    if holds is None:
        assert warnings == [] and "PROXY_PROTOCOL" not in result.stdout + result.stderr
        return
    [warning] = warnings
    assert warning.startswith("warning: t:tcp0 [")
    assert warning.endswith(f"BINDING_TCP_PROXY_PROTOCOL_UNSAFE {config}:10: bindings.tcp0."
                            f"options.proxy-protocol.from[1]: {network} holds {holds}: {FORGE}")


def test_the_daemon_says_so_at_start_and_then_believes_anyone(tmp_path: Path) -> None:
    """The same as an event when the daemon starts; and what it warns of is so: a header from
    127.0.0.3, which is no balancer, is believed."""
    port = free_port()
    daemon = start_daemon(everyone(tmp_path, "0.0.0.0/0", port), wait_ports=[port],
                          wait_output="ENGINE_STARTED")
    try:
        assert f"BINDING_TCP_PROXY_PROTOCOL_UNSAFE {tmp_path / 'zilla.yaml'}:10: bindings.tcp0" \
               f".options.proxy-protocol.from[1]: 0.0.0.0/0 holds every IPv4 address: " \
               f"{FORGE}" in daemon.output()
        assert answer(port, v2("198.51.100.7"), ELSEWHERE, "/index.html") \
            .startswith(b"HTTP/1.1 200")
        assert answer(port, b"", ELSEWHERE, "/index.html") == b"", \
            "and a peer without a header is refused: every peer is a balancer now"
    finally:
        assert daemon.stop() == 0
    assert "Traceback" not in daemon.output()
