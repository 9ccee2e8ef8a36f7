"""The http-kafka write path under random requests, against a real daemon and broker: random
methods, paths built on its routes (topics from the path among them: internal names, dots,
escapes, made-up ones), headers (idempotency keys from empty to 20,000 bytes, content types,
`Prefer`, `If-Match`, `If-None-Match`, overrides' names, credentials, anything) and bodies (up
to past the body limit), sent over raw sockets many at a time.

What must hold for every case: a well-formed answer with an expected status (never a `500`),
no traceback in the daemon's output, the daemon alive; a write whose idempotency key is not
1-256 visible ASCII characters is `400`; a write to a topic the request names is `404` when the
topic is internal or nobody created it. And what the daemon keeps is bounded per request: its
RSS may grow by `PER_REQUEST` bytes a request at most over the run, which ends with a burst of
well-formed writes carrying 15,000-byte keys (the audit's case: each one used to stay in memory
for the idempotency window).
"""

from __future__ import annotations

import re
import socket
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from confluent_kafka.admin import AdminClient
from hypothesis import given
from hypothesis import strategies as st

from ssekd.dev.broker import Broker, free_port
from tests.support import fuzzing
from tests.support import zilla_config as zc
from tests.support.broker import Kafka
from tests.support.daemon import Daemon, start_daemon
from tests.support.faults import time_limit, tracebacks
from tests.support.jwt import AUDIENCE, ISSUER, SigningKey, ec_key

pytestmark = [pytest.mark.timeout(time_limit()), pytest.mark.daemon, pytest.mark.broker]

#: Bytes of RSS the daemon may gain per request over the run (a remembered write costs ~700).
PER_REQUEST = 2048
#: What the daemon may gain once, whatever the number of requests (first use of code paths,
#: allocator arenas).
SLACK = 16 * 1024 * 1024
#: Statuses a request may get here; anything else (a 500 above all) fails the case.
EXPECTED = {200, 202, 204, 304, 400, 401, 403, 404, 405, 408, 411, 412, 413, 414, 415, 431,
            501, 503, 504}
BODY_LIMIT = 65536
#: Bytes of a request past which the daemon may answer (400, 413) before reading it all.
HEAD_LIMIT = 8192
STATUS = re.compile(rb"^HTTP/1\.1 (\d{3}) ")


@dataclass
class Target:
    daemon: Daemon
    port: int
    topics: dict[str, str]
    key: SigningKey


def config(port: int, bootstrap: str, topics: dict[str, str], key: SigningKey) -> zc.Node:
    def route(when: list[tuple[str, str]], with_: zc.Node, guarded: bool = False) -> zc.Node:
        r: zc.Node = {"when": [{"method": m, "path": p} for m, p in when], "exit": "cc"}
        if guarded:
            r["guarded"] = {"jwt0": ["write"]}
        r["with"] = with_
        return r

    produce = {"capability": "produce"}
    http_kafka = {"type": "http-kafka", "kind": "proxy",
                  "options": {"max-wait": 1, "ack-timeout": 1},
                  "routes": [
                      route([("POST", "/w/{topic}")],
                            {**produce, "topic": "${params.topic}", "key": "${idempotencyKey}"}),
                      route([("PUT", "/items/{id}"), ("DELETE", "/items/{id}"),
                             ("PATCH", "/items/{id}")],
                            {**produce, "topic": topics["items"], "key": "${params.id}"}),
                      route([("PUT", "/tasks/{id}"), ("GET", "/tasks/{id};{correlationId}")],
                            {**produce, "topic": topics["tasks"], "key": "${params.id}",
                             "reply-to": topics["replies"],
                             "async": {"location": "/tasks/${params.id};${correlationId}"}}),
                      route([("POST", "/mine")],
                            {**produce, "topic": topics["items"],
                             "overrides": {"user": "${guarded['jwt0'].identity}"}}, True),
                      route([("GET", "/items")],
                            {"capability": "fetch", "topic": topics["items"],
                             "merge": {"content-type": "application/json"}}),
                      route([("GET", "/items/{id}")],
                            {"capability": "fetch", "topic": topics["items"],
                             "filters": [{"key": "${params.id}"}]}),
                  ]}
    bindings = {"tcp0": zc.tcp_server(port, "http0"),
                "http0": zc.http_server("hk0", authorization=zc.authorization(),
                                        limits={"body-bytes": BODY_LIMIT, "header-timeout": 2}),
                "hk0": http_kafka,
                **zc.kafka(bootstrap, cache={"bootstrap": [topics["replies"]]},
                           properties=zc.FAST_RECONNECT, cache_client="cc", cache_server="cs",
                           client="kc")}
    return zc.zilla("fuzzw", bindings, guards={"jwt0": zc.jwt_guard(ISSUER, AUDIENCE, [key.jwk])},
                    telemetry=zc.stdout_telemetry())


@pytest.fixture(scope="module")
def target(kafka_broker: Broker, kafka: Kafka,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    topics = {"items": kafka.topic(2, compact=True, prefix="fz-items"),
              "tasks": kafka.topic(1, prefix="fz-tasks"),
              "replies": kafka.topic(1, prefix="fz-replies")}
    key = ec_key()
    port = free_port()
    path: Path = zc.write(tmp_path_factory.mktemp("fuzzw") / "zilla.yaml",
                          config(port, kafka_broker.bootstrap, topics, key))
    daemon = start_daemon(path, wait_ports=[port])
    try:
        yield Target(daemon, port, topics, key)
    finally:
        daemon.stop()


# -- requests ------------------------------------------------------------------------------

#: Visible ASCII, what a valid idempotency key is made of.
VISIBLE = st.characters(min_codepoint=0x21, max_codepoint=0x7E)
#: Header values: printable Latin-1 and tabs (CR, LF and NUL are the smuggling tests' job).
VALUE = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, blacklist_characters="\x7f"),
                max_size=60)
SEGMENTS = st.one_of(
    st.sampled_from(["connect-configs", "connect-offsets", "__consumer_offsets", "_schemas",
                     ".", "..", "%2e%2e", "%2E", "a%00b", "a%0Ab", "x" * 300, "%ZZ", "a;b",
                     "a%2Fb", "", "made-up"]),
    st.from_regex(r"[A-Za-z0-9._-]{1,20}", fullmatch=True),
    fuzzing.URLISH.map(lambda s: s.replace(" ", "%20").replace("#", "%23").replace("?", "%3F")
                       .replace("\\", "%5C").replace("\t", "%09")),
)


def idempotency_keys() -> st.SearchStrategy[str]:
    return st.one_of(
        st.text(VISIBLE, min_size=1, max_size=256),
        st.text(VISIBLE, min_size=257, max_size=400),
        st.integers(257, 20_000).map(lambda n: "k" * n),
        st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=40),
        st.just(str(uuid.uuid4())),
    )


@dataclass(frozen=True)
class Case:
    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def header(self, name: str) -> str | None:
        """The value the daemon reads: without the spaces and tabs around it (RFC 9110 §5.5),
        so a key of one space is an empty key, which is no key."""
        found = [v for n, v in self.headers if n.lower() == name]
        return found[-1].strip(" \t") if found else None

    def describe(self) -> str:
        return f"{self.method} {self.path[:80]} {[(n, v[:40]) for n, v in self.headers]}"

    def wire(self, port: int) -> bytes:
        lines = [f"{self.method} {self.path} HTTP/1.1", f"Host: 127.0.0.1:{port}",
                 "Connection: close", f"Content-Length: {len(self.body)}",
                 *(f"{n}: {v}" for n, v in self.headers)]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8") + self.body


#: (method, path template) the routes take: `{}` a random segment, `{topic}` a created topic.
PLAUSIBLE = [("POST", "/w/{}"), ("POST", "/w/{topic}"), ("PUT", "/items/{}"),
             ("DELETE", "/items/{}"), ("PATCH", "/items/{}"), ("PUT", "/tasks/{}"),
             ("GET", "/tasks/{};{}"), ("POST", "/mine"), ("GET", "/items"), ("GET", "/items/{}")]


@st.composite
def cases(draw: st.DrawFn, token: str, topic: str) -> Case:
    """Half of the cases are what a client of these routes might send (a route's method and
    path, a valid token or none, no foreign origin), so that they reach the write or the fetch;
    the other half are anything."""
    plausible = draw(st.booleans())
    if plausible:
        method, template = draw(st.sampled_from(PLAUSIBLE))
    else:
        method = draw(st.one_of(st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH",
                                                 "HEAD", "OPTIONS"]),
                                st.from_regex(r"[A-Z]{1,10}", fullmatch=True)))
        template = draw(st.sampled_from(["/w/{}", "/items/{}", "/tasks/{}", "/tasks/{};{}",
                                         "/mine", "/items", "/{}", "/w/{}/x"]))
    path = template.replace("{topic}", topic).format(draw(SEGMENTS), draw(SEGMENTS))
    headers: list[tuple[str, str]] = []
    if draw(st.booleans()):
        headers.append(("Idempotency-Key", draw(idempotency_keys())))
    choices = [
        ("Content-Type", st.sampled_from(["application/json", "text/html", "text/plain",
                                          "application/x-challenge-response", ""])),
        ("Prefer", st.sampled_from(["respond-async", "wait=1", "respond-async, wait=1",
                                    "wait=99999999999", "wait=-1", "x"])),
        ("If-None-Match", st.one_of(fuzzing.event_ids(), VALUE)),
        ("User", VALUE), ("X-Api-Key", VALUE), ("Authorization", st.just(f"Bearer {token}")),
        (draw(st.from_regex(r"[A-Za-z][A-Za-z0-9-]{0,20}", fullmatch=True)), VALUE)]
    if not plausible:
        choices += [("If-Match", st.one_of(fuzzing.event_ids(), VALUE)),
                    ("Authorization", st.sampled_from(["Bearer x.y.z", "Basic Zm9v"])),
                    ("Origin", st.sampled_from(["null", "http://evil.example"]))]
    for name, values in choices:
        if draw(st.integers(0, 3)) == 0:
            headers.append((name, draw(values)))
    sizes = [0, 0, 1, 10, 1000] + ([] if plausible else [BODY_LIMIT, BODY_LIMIT + 1])
    size = draw(st.sampled_from(sizes))
    body = draw(st.binary(min_size=min(size, 64), max_size=min(size, 64))) * \
        max(1, size // 64) if size else b""
    return Case(method, path, tuple(headers), body[:size])


def send(port: int, case: Case) -> int:
    """The status the daemon answers `case` with (0: it closed without one)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(case.wire(port))
        except OSError:
            pass  # refused and closed before the body was read (413)
        out = b""
        while b"\r\n" not in out:
            try:
                got = sock.recv(4096)
            except OSError:
                break
            if not got:
                break
            out += got
    m = STATUS.match(out)
    assert m is not None or out == b"", f"malformed answer {out[:80]!r} to {case}"
    return int(m.group(1)) if m else 0


def check(case: Case, status: int, port: int) -> None:
    if status == 0:
        # refused before it was read whole: the daemon answered and closed while the client
        # was still sending, and the client's socket was reset before it read the answer
        assert len(case.wire(port)) > HEAD_LIMIT, f"no answer to {case.describe()}"
        return
    assert status in EXPECTED, f"{status} to {case.describe()}"
    key = case.header("idempotency-key")
    writes = case.method == "POST" and re.fullmatch(r"/w/[^/?#]+", case.path) is not None
    # a POST of `application/x-challenge-response` is a renewal (any path), not a write
    plain = case.header("if-match") is None and case.header("origin") is None and \
        len(case.body) <= BODY_LIMIT and \
        case.header("content-type") != "application/x-challenge-response"
    if writes and plain and key and (len(key) > 256 or re.fullmatch(r"[!-~]+", key) is None):
        # (an empty key is no key: the write gets a new one)
        assert status == 400, f"{status}: idempotency key of {len(key)} characters: {case.describe()}"
    if writes and plain and status == 0:
        return
    if writes and plain and status not in (400, 503):
        topic = case.path[len("/w/"):]
        if not topic.startswith("fz-"):
            assert status == 404, f"{status}: POST {case.path[:80]} named no created topic"


def rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


def test_random_writes_and_fetches_answer_cleanly_in_bounded_memory(target: Target,
                                                                    kafka_broker: Broker) -> None:
    token = target.key.token("mallory", scope="write", ttl=3600)
    found: list[Case] = []

    @fuzzing.examples(1500, 15000)
    @given(cases(token, target.topics["items"]))
    def collect(case: Case) -> None:
        found.append(case)

    collect()
    warm, run = found[:200], found[200:]
    # the burst of the audit: well-formed writes, each with a 15,000-byte key of its own
    burst = [Case("POST", f"/w/{target.topics['items']}",
                  (("Idempotency-Key", f"{i:05d}" + "k" * 14_995),
                   ("Content-Type", "application/json")), b'{"n": %d}' % i)
             for i in range(3000)]
    statuses: Counter[int] = Counter()
    with ThreadPoolExecutor(8) as pool:
        for case, status in zip(warm, pool.map(lambda c: send(target.port, c), warm),
                                strict=True):
            check(case, status, target.port)
        before = rss(target.daemon.process.pid)
        for batch in (run, burst):
            for case, status in zip(batch, pool.map(lambda c: send(target.port, c), batch),
                                    strict=True):
                check(case, status, target.port)
                statuses[status] += 1
    after = rss(target.daemon.process.pid)
    requests = len(run) + len(burst)
    output = target.daemon.output()
    assert target.daemon.alive()
    assert not tracebacks(output), "\n".join(tracebacks(output)[:5]) + output[-3000:]
    grown = after - before
    print(f"\nwrite path fuzz: {requests} requests, statuses {dict(statuses.most_common())}; "
          f"RSS {before / 2**20:.1f} -> {after / 2**20:.1f} MiB "
          f"({grown / requests:.0f} bytes a request)")
    assert grown <= SLACK + PER_REQUEST * requests, \
        f"RSS grew {grown / 2**20:.1f} MiB over {requests} requests"
    assert statuses[400] >= len(burst), "every key of the burst was refused"
    # nothing the requests named was created
    made = set(AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
               .list_topics(timeout=10).topics)
    named = {c.path[len("/w/"):] for c in found if c.path.startswith("/w/")}
    assert not {t for t in named & made if not t.startswith("fz-")}
