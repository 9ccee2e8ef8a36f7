"""The relay daemon against upstreams that misbehave, and over TLS, on real sockets.

Each bad upstream (a 503, HTML, a line over 1 MiB, bytes that are not UTF-8, silence) is one
`BINDING_SSE_UPSTREAM_FAILED` line with the reason and a retry after the configured delay, backing
off - never a traceback, never an error to the browser - while a good upstream's stream on the
same relay goes on. The http client's `overrides` reach the upstream; the ring is bounded by
`history-bytes`; a path no route matches is 404. An https upstream is read when its certificate
chains to the vault's `trust` entry and names `sni`, and refused otherwise.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.support.daemon import start_daemon
from tests.support.jwt import rsa_key
from tests.support.pki import ENV, PASSWORD, Pki
from tests.support.relay import ONE_PROCESS, Relay, relay_config, start_relay
from tests.support.scripted_upstream import (
    SSE_HEAD,
    Script,
    ScriptedUpstream,
    answer,
    events_then_hold,
    server_context,
)
from tests.support.sse import SseClient
from tests.support.wait import wait_until

pytestmark = pytest.mark.daemon

BIG = b"x" * 1000


def ok_script(first: bytes, more: bytes, go: threading.Event, hold: threading.Event) -> Script:
    """A good upstream: `first`, keepalives until `go`, `more`, keepalives until `hold`."""
    def run(sock: socket.socket) -> None:
        sock.sendall(SSE_HEAD + first)
        while not go.wait(0.2):
            sock.sendall(b":\n\n")
        sock.sendall(more)
        while not hold.wait(0.2):
            sock.sendall(b":\n\n")
    return run


@pytest.fixture
def hold() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def test_bad_upstreams_are_events_and_bounded_retries_while_a_good_one_streams_on(
        tmp_path: Path, hold: threading.Event) -> None:
    go = threading.Event()
    first = b"".join(b"id:%d\nevent:big\ndata:%s\n\n" % (i, BIG) for i in range(1, 6))
    scripts = {
        "/events/ok": ok_script(b": hello\n\n" + first, b"id:6\ndata:later\n\n", go, hold),
        "/events/status": answer(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"),
        "/events/html": answer(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
                               b"Content-Length: 5\r\n\r\n", b"hello"),
        "/events/long": answer(SSE_HEAD, b"data:" + b"y" * (1024 * 1024 + 10) + b"\n\n"),
        "/events/utf8": answer(SSE_HEAD, b"id:1\ndata:\xff\xfe\n\n", hold),
        "/events/silent": answer(SSE_HEAD, b"", hold),
    }
    upstream = ScriptedUpstream(scripts)
    relay = start_relay(tmp_path, upstream.port,
                        relay_options="{retry: 300, idle-timeout: 1, history-bytes: 3000, "
                                      "max-upstreams: 6}",
                        http_options='{overrides: {":authority": example.test, x-relay: ssekd}}',
                        # one process's ring and count of upstream URLs (max-upstreams)
                        extra_args=ONE_PROCESS)
    try:
        good = relay.open("/events/ok")
        assert [e.id for e in good.events(5)] == ["1", "2", "3", "4", "5"]
        seen = upstream.requests("/events/ok")[0]
        assert seen.headers["host"] == "example.test" and seen.headers["x-relay"] == "ssekd"
        assert seen.headers["accept"] == "text/event-stream"
        # a second stream without an id starts at the ring's start: 3000 bytes hold 2 events
        with relay.open("/events/ok") as late:
            assert [e.id for e in late.events(2)] == ["4", "5"]

        reasons = {"status": "status 503",
                   "html": "content type text/html, not text/event-stream",
                   "long": "a line longer than 1048576 bytes",
                   "utf8": "bytes that are not UTF-8",
                   "silent": "nothing from the upstream for 1 s"}
        bad = {name: relay.open(f"/events/{name}") for name in reasons}
        started = time.monotonic()
        assert {c.status for c in bad.values()} == {200}
        for name, why in reasons.items():
            url = f"GET http://127.0.0.1:{upstream.port}/events/{name}: "
            relay.daemon.wait_output(url, timeout=15)
            failed = [line for line in relay.daemon.output().splitlines()
                      if "BINDING_SSE_UPSTREAM_FAILED" in line and url in line]
            assert why in failed[0] and failed[0].endswith("again in 0.3 s"), failed
            wait_until(lambda name=name: len(upstream.requests(f"/events/{name}")) >= 2, 15)
        elapsed = time.monotonic() - started
        for name in reasons:
            # 0.3 s, then 0.6, 1.2, 2.4 ...: a handful of attempts, not a storm
            attempts = len(upstream.requests(f"/events/{name}"))
            assert attempts <= 2 + elapsed / 0.3, (name, attempts, elapsed)
        for client in bad.values():
            assert client.next_event(0.2) is None and not client.ended
        # a seventh URL while six are followed: told to come back later, the upstream not asked
        with relay.open("/events/seventh") as seventh:
            assert seventh.status == 200 and seventh.next_event(2) is None
            assert seventh.retry == 5000
            assert "try later: 6 upstream URLs relayed (max-upstreams)" in seventh.comment_lines
        assert upstream.requests("/events/seventh") == []
        go.set()
        assert good.events(1)[0].data == "later"
        assert "Traceback" not in relay.daemon.output()
    finally:
        hold.set()
        relay.daemon.stop()
        upstream.close()


def test_a_path_no_route_matches_is_404(tmp_path: Path) -> None:
    upstream = ScriptedUpstream({})
    relay = start_relay(tmp_path, upstream.port)
    try:
        client = SseClient(relay.port, "/elsewhere")
        assert client.status == 404
        relay.daemon.wait_output("BINDING_SSE_CLIENT_NO_ROUTE")
        assert upstream.seen == []
    finally:
        relay.daemon.stop()
        upstream.close()


def tls_relay(tmp_path: Path, pki: Pki, upstream: ScriptedUpstream, tls_options: str,
              trust_store: Path) -> Relay:
    return start_relay(tmp_path, upstream.port, env=ENV, tls_options=tls_options,
                       trust_store=trust_store)


@pytest.mark.parametrize("tls_options,store,reads", [
    ("{trust: [ca], sni: [localhost], alpn: [http/1.1]}", "keys", True),
    ("{sni: [localhost]}", "keys", True),  # the whole trust store
    ("{trust: [clientca], sni: [localhost]}", "trust", False),  # a CA that did not sign it
    ("{trust: [ca], sni: [other.test]}", "keys", False),  # a name it does not carry
    # the system's CAs instead of the vault (which would have trusted it): none signed it
    ("{trustcacerts: true, sni: [localhost]}", "keys", False),
], ids=["trusted", "whole-store", "untrusted-ca", "wrong-name", "system-cas-instead"])
def test_https_upstream_needs_a_trusted_certificate_for_the_name(
        tmp_path: Path, pki: Pki, hold: threading.Event, tls_options: str, store: str,
        reads: bool) -> None:
    scripts = {"/events/x": answer(SSE_HEAD, b"id:1\ndata:secure\n\n", hold)}
    upstream = ScriptedUpstream(scripts, tls=server_context(pki.keys, PASSWORD, tmp_path))
    relay = tls_relay(tmp_path, pki, upstream, tls_options,
                      pki.keys if store == "keys" else pki.trust)
    try:
        with relay.open("/events/x") as client:
            if reads:
                assert client.events(1)[0].data == "secure"
                seen = upstream.requests("/events/x")[0]
                assert seen.alpn == ("http/1.1" if "alpn" in tls_options else None)
                relay.daemon.wait_output("BINDING_SSE_UPSTREAM_CONNECTED")
            else:
                relay.daemon.wait_output("BINDING_SSE_UPSTREAM_FAILED")
                assert client.next_event(0.5) is None
                assert upstream.requests("/events/x") == []
                assert f"GET https://127.0.0.1:{upstream.port}/events/x" in relay.daemon.output()
    finally:
        hold.set()
        relay.daemon.stop()
        upstream.close()


def test_a_browser_that_reads_nothing_costs_the_relay_no_memory(tmp_path: Path,
                                                                hold: threading.Event) -> None:
    """10 MiB of events (10,000 a second) pass while one client reads nothing (a 4 KiB receive
    buffer): the relay keeps only its ring for it, then ends its stream when the ring moves past
    it (it would come back with its last id); a client that reads gets every event, in order."""
    count = 10_000
    go = threading.Event()

    def flood(sock: socket.socket) -> None:
        sock.sendall(SSE_HEAD)
        go.wait(30)
        for start in range(0, count, 100):
            sock.sendall(b"".join(b"id:%d\ndata:%s\n\n" % (i, BIG)
                                  for i in range(start, start + 100)))
            time.sleep(0.01)
        hold.wait(30)

    upstream = ScriptedUpstream({"/events/flood": flood})
    relay = start_relay(tmp_path, upstream.port)
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        stalled.connect(("127.0.0.1", relay.port))
        stalled.sendall(b"GET /events/flood HTTP/1.1\r\nHost: relay\r\n\r\n")
        reader = relay.open("/events/flood", timeout=30)
        process = psutil.Process(relay.daemon.process.pid)
        before = process.memory_info().rss
        go.set()
        got = reader.events(count, timeout=60)
        assert [e.id for e in got] == [str(i) for i in range(count)]
        grew = (process.memory_info().rss - before) / 2**20
        print(f"relay RSS grew {grew:.1f} MiB while 10 MiB passed a client that read nothing")
        assert grew < 15, f"relay RSS grew {grew:.1f} MiB for 10 MiB relayed"
        # what the stalled client finds once it reads: a little, then the end of its stream
        stalled.settimeout(10)
        seen = b""
        while not seen.endswith(b"\r\n0\r\n\r\n"):
            chunk = stalled.recv(65536)
            assert chunk, seen[-200:]
            seen += chunk
        assert b"this stream fell behind the relay's history; reconnect" in seen
        # what it got before (the sockets' buffers' worth) has no gap: it resumes by its last id
        ids = [int(line[3:]) for line in seen.split(b"\n") if line.startswith(b"id:")]
        assert 0 < len(ids) < count and ids == list(range(len(ids)))
    finally:
        hold.set()
        stalled.close()
        relay.daemon.stop()
        upstream.close()


GUARDED_RELAY_GUARD = """\
guards:
  jwt0:
    type: jwt
    options:
      keys: [{jwk}]
"""
GUARDED_RELAY_AUTHORIZATION = """\
    kind: server
    options:
      authorization:
        jwt0:
          credentials:
            query: {access_token: "{credentials}"}
    routes:
"""


def test_tokens_and_made_up_parameters_stay_at_the_relay_and_dot_paths_never_leave_it(
        tmp_path: Path, hold: threading.Event) -> None:
    """A token in the query string (EventSource's only way) went upstream in the request line
    and into the relay's events, made an upstream connection per user, and a relayed path with
    `..` or `%2e%2e` reached the upstream as it was. Now: one upstream request for every user,
    carrying only what the route's `with.query` names (never the credential parameter, even
    named), no token in the relay's output, and dot-segment paths 404 at the relay."""
    scripts = {"/events/x": events_then_hold(b"id:1\ndata:one\n\n", hold)}
    upstream = ScriptedUpstream(scripts)
    config, port = relay_config(tmp_path, upstream.port, relay_options="{retry: 200}")
    signing = rsa_key("k1")
    text = config.read_text()
    text = text.replace("name: relay\n", "name: relay\n" + GUARDED_RELAY_GUARD.format(
        jwk=json.dumps(signing.jwk)), 1)
    text = text.replace("    kind: server\n    routes:\n", GUARDED_RELAY_AUTHORIZATION, 1)
    text = text.replace("        exit: upstream_http\n",
                        "        exit: upstream_http\n        with: {query: [v, access_token]}\n")
    config.write_text(text)
    relay = Relay(start_daemon(config, wait_ports=[port], extra_args=ONE_PROCESS), port)
    tokens = [signing.token(sub=f"user{i}") for i in range(5)]
    try:
        clients = [relay.open(f"/events/x?access_token={t}&v=1&junk={i}")
                   for i, t in enumerate(tokens)]
        for c in clients:
            assert [e.data for e in c.events(1)] == ["one"]
        assert [s.path for s in upstream.seen] == ["/events/x?v=1"]
        for path in ("/events/../admin/secret", "/events/%2e%2e/internal", "/events/..;/x"):
            with relay.open(path) as refused:
                assert refused.status == 404, path
        relay.daemon.wait_output("dot segment in the path", count=3)
        assert [s.path for s in upstream.seen] == ["/events/x?v=1"]
        relay.daemon.wait_output("BINDING_SSE_UPSTREAM_CONNECTED")
        output = relay.daemon.output()
        for token in tokens:
            assert token not in output and token.split(".")[2] not in output
        for c in clients:
            c.close()
    finally:
        hold.set()
        relay.daemon.stop()
        upstream.close()
