"""The write path's security audit (issue 36), each finding replayed against a real daemon and a
broker of this module's own (it holds Kafka Connect's `connect-configs`, which no other test
should see): topics a request may name, headers a client may not forge, topics a write may not
create, idempotency keys, what a fetch serves, and async locations."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from ssekd.dev.broker import Broker, free_port, start_broker
from tests.support import zilla_config as zc
from tests.support.broker import Kafka
from tests.support.daemon import Daemon, start_daemon
from tests.support.jwt import AUDIENCE, ISSUER, SigningKey, ec_key
from tests.support.wait import wait_until
from tests.support.writes import Answer, header, read_records, request

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

#: What Kafka Connect keeps in its config topic: connector configs, passwords included.
CONNECT_RECORD = b'{"properties": {"connection.password": "hunter2"}}'
IDENTITY = "${guarded['jwt0'].identity}"


@dataclass
class Audit:
    daemon: Daemon
    port: int
    broker: Broker
    kafka: Kafka
    key: SigningKey

    def call(self, method: str, path: str, headers: dict[str, str] | None = None,
             body: bytes | None = None) -> Answer:
        return request(self.port, method, path, headers, body)

    def bearer(self, sub: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key.token(sub, scope='write')}"}

    def topics(self) -> set[str]:
        return set(AdminClient({"bootstrap.servers": self.broker.bootstrap})
                   .list_topics(timeout=10).topics)


def config(port: int, bootstrap: str, key: SigningKey) -> zc.Node:
    def route(when: list[tuple[str, str]], with_: zc.Node, guarded: bool = False) -> zc.Node:
        r: zc.Node = {"when": [{"method": m, "path": p} for m, p in when], "exit": "cc"}
        if guarded:
            r["guarded"] = {"jwt0": ["write"]}
        r["with"] = with_
        return r

    internal = ["audit-*"]
    http_kafka = {"type": "http-kafka", "kind": "proxy",
                  "options": {"max-wait": 2, "ack-timeout": 2, "internal-topics": internal},
                  "routes": [
                      route([("POST", "/w/{topic}")],
                            {"capability": "produce", "topic": "${params.topic}"}),
                      route([("GET", "/r/{topic}")],
                            {"capability": "fetch", "topic": "${params.topic}",
                             "merge": {"content-type": "application/json"}}),
                      route([("PUT", "/owned/{id}"), ("GET", "/owned/{id};{correlationId}")],
                            {"capability": "produce", "topic": "commands", "key": "${params.id}",
                             "reply-to": "replies", "overrides": {"user": IDENTITY},
                             "async": {"location": "/owned/${params.id};${correlationId}"}},
                            guarded=True),
                      route([("POST", "/notes/{id}")],
                            {"capability": "produce", "topic": "notes", "key": "${params.id}"}),
                      route([("GET", "/notes/{id}")],
                            {"capability": "fetch", "topic": "notes",
                             "filters": [{"key": "${params.id}"}]}),
                      route([("GET", "/notes")],
                            {"capability": "fetch", "topic": "notes",
                             "merge": {"content-type": "application/json"}}),
                  ]}
    http = zc.http_server("hk0", authorization=zc.authorization(),
                          routes=[zc.header_route("/events/*", "sse")])
    bindings = {"tcp0": zc.tcp_server(port, "http0"), "http0": http, "hk0": http_kafka,
                "sse": zc.sse_server("sk0"),
                "sk0": zc.sse_kafka([zc.sse_route("/events/{topic}", exit="cc")],
                                    internal_topics=internal),
                **zc.kafka(bootstrap, cache={"bootstrap": ["replies"]},
                           properties=zc.FAST_RECONNECT, cache_client="cc", cache_server="cs",
                           client="kc")}
    return zc.zilla("audit", bindings, guards={"jwt0": zc.jwt_guard(ISSUER, AUDIENCE, [key.jwk])},
                    telemetry=zc.stdout_telemetry())


@pytest.fixture(scope="module")
def audit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Audit]:
    folder = tmp_path_factory.mktemp("audit")
    with start_broker(log_path=folder / "tansu.log") as broker:
        kafka = Kafka(broker.bootstrap)
        from confluent_kafka.admin import NewTopic

        made = kafka.admin.create_topics(
            [NewTopic(name, 1, 1, config={"cleanup.policy": "compact"} if name == "notes" else {})
             for name in ("connect-configs", "audit-log", "commands", "replies", "notes")])
        for f in made.values():
            f.result(10)
        kafka.produce("connect-configs", CONNECT_RECORD, b"connector-jdbc")
        kafka.flush()
        key = ec_key()
        port = free_port()
        path: Path = zc.write(folder / "zilla.yaml", config(port, broker.bootstrap, key))
        daemon = start_daemon(path, wait_ports=[port])
        try:
            yield Audit(daemon, port, broker, kafka, key)
        finally:
            daemon.stop()


# -- 1. topics a request names ---------------------------------------------------------------

@pytest.mark.parametrize("topic", ["connect-configs", "connect-offsets", "connect-status",
                                   "__consumer_offsets", "_schemas", "audit-log", ".", ".."])
def test_connect_and_internal_topics_are_404_to_every_binding(audit: Audit, topic: str) -> None:
    """Finding 1: `POST /w/connect-configs` was 204 and `GET /r/connect-configs` answered
    Connect's stored configs; sse-kafka refused them. Both bindings now apply one rule, with
    the same `internal-topics` option (`audit-*` here)."""
    written = audit.call("POST", f"/w/{topic}", {"Content-Type": "application/json"}, b"{}")
    fetched = audit.call("GET", f"/r/{topic}")
    streamed = audit.call("GET", f"/events/{topic}")
    assert (written.status, fetched.status, streamed.status) == (404, 404, 404)
    assert b"hunter2" not in fetched.body + streamed.body
    if topic == "connect-configs":
        assert [r.value() for r in read_records(audit.broker.bootstrap, topic)] == \
            [CONNECT_RECORD], "nothing was written to Connect's topic"


def test_a_topic_a_route_takes_from_the_path_still_reads_and_writes(audit: Audit) -> None:
    assert audit.call("POST", "/w/notes", {"Content-Type": "application/json"},
                      b'{"ok": true}').status == 204
    got = audit.call("GET", "/r/notes")
    assert got.status == 200 and b'{"ok": true}' in got.body


# -- 3. a write never creates a topic --------------------------------------------------------

def test_writes_to_topics_nobody_created_are_404_and_create_none(audit: Audit) -> None:
    """Finding 3: 200 POSTs to made-up names made 200 topics (the producer asked the broker to
    create them, and the development broker, like Kafka by default, does)."""
    names = [f"made-up-{uuid.uuid4().hex[:8]}" for _ in range(20)]
    answers = [audit.call("POST", f"/w/{name}", {"Content-Type": "text/plain"}, b"x")
               for name in names]
    assert [a.status for a in answers] == [404] * len(names)
    assert max(a.seconds for a in answers) < 2, "answered from the cluster's metadata, at once"
    assert not set(names) & audit.topics()
    # the same name again is answered from what was just learnt, and creates nothing either
    assert audit.call("POST", f"/w/{names[0]}", {}, b"x").status == 404
    assert names[0] not in audit.topics()


# -- 2. and 10. headers a client may not forge, nor leak --------------------------------------

def test_a_client_header_never_pre_empts_an_override_nor_carries_a_secret(audit: Audit) -> None:
    """Finding 2: with `overrides: {user: <identity>}`, a request carrying `User: admin` made a
    record with `user: admin, user: mallory`. Finding 10: `X-Api-Key` reached Kafka."""
    got = audit.call("PUT", "/owned/o1", {**audit.bearer("mallory"), "User": "admin",
                                           "X-Api-Key": "k-123", "X-Auth-Token": "t-456",
                                           "X-Trace": "t1", "Prefer": "respond-async",
                                           "Idempotency-Key": f"o-{uuid.uuid4()}"}, b"{}")
    assert got.status == 202, got
    (record,) = [r for r in read_records(audit.broker.bootstrap, "commands")
                 if r.key() == b"o1"]
    headers = record.headers()
    assert [v for n, v in headers if n == "user"] == [b"mallory"]
    names = [n for n, _ in headers]
    assert "x-api-key" not in names and "x-auth-token" not in names
    assert "authorization" not in names and header(record, "x-trace") == b"t1"


def test_a_route_without_a_reply_writes_zillas_headers_only(audit: Audit) -> None:
    key = f"n-{uuid.uuid4().hex[:8]}"
    got = audit.call("POST", f"/notes/{key}", {"Content-Type": "application/json",
                                               "X-Api-Key": "k", "User": "admin"}, b"{}")
    assert got.status == 204
    (record,) = [r for r in read_records(audit.broker.bootstrap, "notes")
                 if r.key() == key.encode()]
    assert record.headers() == [("content-type", b"application/json")]


# -- 4. idempotency keys ---------------------------------------------------------------------

@pytest.mark.parametrize("key", ["k" * 15_000, "k" * 257, "a b", "ké"])
def test_an_idempotency_key_too_long_or_not_visible_ascii_is_400(audit: Audit, key: str) -> None:
    """Finding 4: 15,000-byte keys cost 14.7 KiB per write, remembered for the window."""
    got = request(audit.port, "POST", "/notes/k1",
                  {"Idempotency-Key": key.encode("utf-8").decode("latin-1")}, b"{}")
    assert got.status == 400
    assert b"1 to 256 characters of visible ASCII" in got.body


def test_an_idempotency_key_at_the_bound_is_taken(audit: Audit) -> None:
    assert audit.call("POST", "/notes/k1", {"Idempotency-Key": "k" * 256}, b"{}").status == 204


# -- 6. what a fetch serves ------------------------------------------------------------------

def test_a_writers_html_is_served_back_as_bytes_that_nothing_runs(audit: Audit) -> None:
    """Finding 6: a `POST` with `Content-Type: text/html` and a `<script>` body was served
    back as `text/html` from the daemon's origin."""
    assert audit.call("POST", "/notes/h1", {"Content-Type": "text/html"},
                      b"<script>alert(document.cookie)</script>").status == 204
    assert audit.call("POST", "/notes/j1", {"Content-Type": "application/json"},
                      b'{"a": 1}').status == 204
    html = wait_for_note(audit, "h1")
    assert html.headers["content-type"] == "application/octet-stream"
    assert html.headers["x-content-type-options"] == "nosniff"
    assert "default-src 'none'" in html.headers["content-security-policy"]
    assert "sandbox" in html.headers["content-security-policy"]
    json_note = wait_for_note(audit, "j1")
    assert json_note.headers["content-type"] == "application/json"
    assert json_note.headers["x-content-type-options"] == "nosniff"
    merged = audit.call("GET", "/notes")
    assert merged.status == 200 and merged.headers["x-content-type-options"] == "nosniff"
    assert "content-security-policy" in merged.headers


def wait_for_note(audit: Audit, key: str) -> Answer:
    got: list[Answer] = []

    def there() -> bool:
        got[:] = [audit.call("GET", f"/notes/{key}")]
        return got[0].status == 200

    wait_until(there, 10)
    return got[0]


# -- 9. async locations ----------------------------------------------------------------------

def test_a_location_answers_only_its_path_and_identity_and_never_reaches_the_log(
        audit: Audit) -> None:
    """Finding 9: anyone holding `/tasks/x;<id>` read the reply, `{id}` was not checked
    against the request that made it, and the full location was logged."""
    put = audit.call("PUT", "/owned/t1", {**audit.bearer("alice"), "Prefer": "respond-async",
                                          "Idempotency-Key": f"t-{uuid.uuid4()}"}, b"{}")
    assert put.status == 202, put
    location = put.headers["location"]
    assert location.startswith("/owned/t1;")
    token = location.partition(";")[2]
    assert audit.call("GET", location, audit.bearer("alice")).status == 202
    assert audit.call("GET", location, audit.bearer("bob")).status == 404
    assert audit.call("GET", location.replace("/owned/t1;", "/owned/t2;"),
                      audit.bearer("alice")).status == 404
    assert audit.call("GET", location).status == 401
    audit.daemon.wait_output("BINDING_HTTP_KAFKA_LOCATION_REFUSED")
    output = audit.daemon.output()
    assert "/owned/t1;…" in output
    assert token not in output and token.partition(".")[0] not in output


def test_the_same_key_and_body_to_two_topics_are_two_writes(audit: Audit) -> None:
    """Found by the write path's fuzz test: without a reply the correlation id hashes
    `content-type` alone (Zilla's), so the same idempotency key and body sent to a second topic
    was taken for a repeat of the first write and answered `204` without being written."""
    key = f"same-{uuid.uuid4()}"
    for topic in ("notes", "commands"):
        got = audit.call("POST", f"/w/{topic}", {"Idempotency-Key": key,
                                                 "Content-Type": "application/json"}, b"{}")
        assert got.status == 204, (topic, got)
    for topic in ("notes", "commands"):
        assert [r for r in read_records(audit.broker.bootstrap, topic)
                if header(r, "content-type") == b"application/json" and r.value() == b"{}"
                and r.key() is None], f"nothing written to {topic}"
