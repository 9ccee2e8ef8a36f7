"""The write path end to end: a daemon with an http-kafka route of every kind, the session's
broker, and a responder standing for the service behind. Requests are real HTTP (http.client,
curl for HTTP/2); what reaches Kafka is read back with a consumer."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path

import pytest

from ssekd.dev.broker import Broker, free_port
from ssekd.event_ids import ProgressId
from tests.support.broker import Kafka
from tests.support.daemon import Daemon, start_daemon
from tests.support.jwt import SigningKey, ec_key
from tests.support.reliability import RawH2
from tests.support.wait import wait_until
from tests.support.writes import (
    Answer,
    Responder,
    Topics,
    header,
    read_records,
    request,
    write_config,
)

pytestmark = [pytest.mark.daemon, pytest.mark.broker]


@dataclass
class WriteDaemon:
    daemon: Daemon
    port: int
    topics: Topics
    responder: Responder
    kafka: Kafka
    key: SigningKey
    config: Path

    def call(self, method: str, path: str, headers: dict[str, str] | None = None,
             body: bytes | None = None) -> Answer:
        return request(self.port, method, path, headers, body)


@pytest.fixture(scope="module")
def writes(kafka_broker: Broker, kafka: Kafka,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[WriteDaemon]:
    topics = Topics(kafka.topic(2, prefix="oneway"), kafka.topic(2, prefix="commands"),
                    kafka.topic(2, prefix="replies"), kafka.topic(2, compact=True,
                                                                  prefix="snapshots"))
    key = ec_key()
    port = free_port()
    config = write_config(tmp_path_factory.mktemp("writes"), port, kafka.bootstrap, topics,
                          [key.jwk])
    responder = Responder(kafka.bootstrap, topics.commands).start()
    # One process: a repeat is recognised by the worker that holds the first write (or by its
    # reply once that worker's cache has it); test_workers_write_and_fetch below runs two.
    daemon = start_daemon(config, wait_ports=[port], extra_args=["--workers", "1"])
    try:
        yield WriteDaemon(daemon, port, topics, responder, kafka, key, config)
    finally:
        daemon.stop()
        responder.stop()


def correlation_of(w: WriteDaemon, idempotency_key: str) -> list[str]:
    return [c for c in w.responder.seen if c.startswith(idempotency_key + "-")]


def test_produce_without_reply_is_204_and_the_record_is_zillas(writes: WriteDaemon) -> None:
    """Body -> value, the key from the idempotency key, and as Zilla's no-reply scripts have
    it only `content-type` and the route's override as headers: no pseudo-headers, no
    correlation id, and none of the request's other headers (a trace, a token, an API key)."""
    key = f"oneway-{uuid.uuid4()}"
    got = writes.call("POST", "/oneway?x=1&access_token=not-a-token",
                      {"Content-Type": "application/json", "Idempotency-Key": key,
                       "X-Trace": "t1", "Prefer": "return=minimal", "X-Api-Key": "k",
                       "Authorization": "Bearer not-a-token"},
                      b'{"n": 1}')
    assert got.status == 204, got
    (record,) = [r for r in read_records(writes.kafka.bootstrap, writes.topics.oneway)
                 if r.key() == key.encode()]
    assert record.value() == b'{"n": 1}'
    assert record.headers() == [("content-type", b"application/json"), ("origin", b"tests")]


def test_a_request_without_a_body_on_a_route_without_reply_is_a_tombstone(
        writes: WriteDaemon) -> None:
    """Zilla's delete.item.no.reply script: a DELETE is a record with a null value (a
    tombstone, which deletes the key from a compacted topic), not an empty one; so is any
    request without a body there. A body, even of one byte, is a value."""
    key = f"gone-{uuid.uuid4().hex[:8]}"
    assert writes.call("DELETE", f"/oneway/{key}").status == 204
    assert writes.call("POST", f"/oneway/{key}-empty", {"Content-Length": "0"}, b"").status == 204
    assert writes.call("POST", f"/oneway/{key}-x", {}, b"x").status == 204
    records = {r.key(): r.value() for r in read_records(writes.kafka.bootstrap,
                                                        writes.topics.oneway)
               if (r.key() or b"").startswith(key.encode())}
    assert records == {key.encode(): None, f"{key}-empty".encode(): None,
                       f"{key}-x".encode(): b"x"}


def test_produce_with_reply_carries_the_requests_headers_as_zilla_copies_them(
        writes: WriteDaemon) -> None:
    """A route with a reply: the pseudo-headers, then the request's headers in order (not
    content-length, prefer, authorization, host, secrets by name, nor the token's query
    parameter in `:path`), the reply-to header, then the correlation id `<key>-<md5>`."""
    key = f"c-{uuid.uuid4()}"
    got = writes.call("POST", "/commands?x=1&access_token=not-a-token",
                      {"Content-Type": "application/json", "Idempotency-Key": key,
                       "X-Trace": "t1", "Prefer": "return=minimal", "X-Api-Key": "k",
                       "Authorization": "Bearer not-a-token"}, b'{"n": 2}')
    assert got.status == 201, got
    (record,) = [r for r in writes.responder.records if r.key() == key.encode()]
    names = [n for n, _ in record.headers() if n != "accept-encoding"]  # http.client's own
    assert names == [":method", ":scheme", ":authority", ":path", "content-type",
                     "idempotency-key", "x-trace", "zilla:reply-to", "zilla:correlation-id"]
    assert dict(record.headers())[":path"] == b"/commands?x=1"
    assert dict(record.headers())[":authority"] == f"127.0.0.1:{writes.port}".encode()
    correlation = header(record, "zilla:correlation-id")
    assert correlation is not None and correlation.startswith(key.encode() + b"-")
    assert len(correlation) == len(key) + 1 + 32


def test_produce_with_reply_answers_the_reply(writes: WriteDaemon) -> None:
    key = f"c-{uuid.uuid4()}"
    got = writes.call("POST", "/commands", {"Content-Type": "application/json",
                                            "Idempotency-Key": key}, b'{"title": "one"}')
    assert got.status == 201, got
    assert got.headers["location"] == f"/items/{key}"
    assert got.headers["content-type"] == "application/json"
    assert got.body == b'{"title": "one"}'
    assert "zilla:correlation-id" not in got.headers


def test_a_repeated_request_is_answered_without_writing_again(writes: WriteDaemon) -> None:
    key = f"r-{uuid.uuid4()}"
    first = writes.call("POST", "/commands", {"Idempotency-Key": key}, b"same")
    again = writes.call("POST", "/commands", {"Idempotency-Key": key}, b"same")
    assert (first.status, again.status) == (201, 201)
    assert first.body == again.body
    other = writes.call("POST", "/commands", {"Idempotency-Key": key}, b"another body")
    assert other.status == 201  # another request under the same key: written
    wait_until(lambda: len(correlation_of(writes, key)) == 2, 5)
    assert sorted(writes.responder.seen[c] for c in correlation_of(writes, key)) == [1, 1]
    writes.daemon.wait_output("BINDING_HTTP_KAFKA_REPLAYED")


def test_no_reply_in_time_is_504_and_a_repeat_gets_the_reply_when_it_comes(
        writes: WriteDaemon) -> None:
    key = f"t-{uuid.uuid4()}"
    got = writes.call("POST", "/commands", {"Idempotency-Key": key, "X-Reply": "none"}, b"x")
    assert got.status == 504, got
    assert 2.5 <= got.seconds < 6, got.seconds  # max-wait: 3
    (correlation,) = correlation_of(writes, key)
    # the service answers late; the same request again finds the reply, writes nothing
    writes.kafka.produce(writes.topics.replies, b"late", key.encode(),
                         headers=[("zilla:correlation-id", correlation.encode()),
                                  (":status", b"202"), ("x-late", b"yes")])
    writes.kafka.flush()
    again = writes.call("POST", "/commands", {"Idempotency-Key": key, "X-Reply": "none"}, b"x")
    assert (again.status, again.body, again.headers.get("x-late")) == (202, b"late", "yes")
    assert writes.responder.seen[correlation] == 1


def test_respond_async_then_a_get_of_the_location_waits_for_the_reply(
        writes: WriteDaemon) -> None:
    got = writes.call("PUT", "/items/a1", {"Prefer": "respond-async", "Idempotency-Key":
                                          f"a-{uuid.uuid4()}", "X-Reply": "204",
                                          "X-Reply-Delay": "1.5"}, b'{"done": true}')
    assert got.status == 202, got
    location = got.headers["location"]
    assert location.startswith("/items/a1;a-")
    not_yet = writes.call("GET", location)
    assert (not_yet.status, not_yet.headers["location"]) == (202, location)
    waited = writes.call("GET", location, {"Prefer": "wait=3"})
    assert waited.status == 204, waited
    assert waited.seconds < 2.9
    assert writes.call("GET", location).status == 204  # the reply stays the answer


def test_a_get_of_a_location_nobody_answers_is_202_after_the_wait(writes: WriteDaemon) -> None:
    put = writes.call("PUT", "/items/a2", {"Prefer": "respond-async", "X-Reply": "none",
                                           "Idempotency-Key": f"n-{uuid.uuid4()}"}, b"{}")
    assert put.status == 202, put
    location = put.headers["location"]
    got = writes.call("GET", location, {"Prefer": "wait=1"})
    assert got.status == 202 and got.headers["location"] == location
    assert 0.9 <= got.seconds < 3
    # a location nobody issued, or one issued for another item, is no location at all
    assert writes.call("GET", "/items/a2;nobody-0123").status == 404
    assert writes.call("GET", location.replace("/items/a2;", "/items/a3;")).status == 404


def snapshot(w: WriteDaemon, key: str, value: bytes | None, etag: str | None = None,
             owner: str | None = None) -> None:
    headers = [("content-type", b"application/json")] if value is not None else []
    headers += [("etag", etag.encode())] if etag else []
    headers += [("owner", owner.encode())] if owner else []
    w.kafka.produce(w.topics.snapshots, value, key.encode(), headers=headers)
    w.kafka.flush()


def test_fetch_merged_with_etag_304_and_long_poll(writes: WriteDaemon) -> None:
    snapshot(writes, "k1", b'{"k": 1}', "e1")
    snapshot(writes, "k2", b'{"k": 2}', "e1")
    snapshot(writes, "k3", b'{"k": 3}')
    snapshot(writes, "k3", None)  # deleted
    snapshot(writes, "k1", b'{"k": 11}', "e2")  # replaced

    def items(answer: Answer) -> list[object]:
        return sorted(json.dumps(v) for v in json.loads(answer.body))

    wait_until(lambda: items(writes.call("GET", "/items")) ==
               sorted(['{"k": 11}', '{"k": 2}']), 10)
    got = writes.call("GET", "/items")
    assert got.headers["content-type"] == "application/json"
    etag = got.headers["etag"]
    assert ProgressId.decode(etag)  # a progress token: partition -> next offset
    same = writes.call("GET", "/items", {"If-None-Match": etag})
    assert (same.status, same.body, same.headers["etag"]) == (304, b"", etag)
    asked = time.time()
    quiet = writes.call("GET", "/items", {"If-None-Match": etag, "Prefer": "wait=2"})
    assert quiet.status == 304 and 1.9 <= quiet.seconds < 3.5
    # `Date` says when it was answered, not when it came (RFC 9110: when the message was made)
    answered = parsedate_to_datetime(quiet.headers["date"]).timestamp()
    assert answered >= int(asked) + 1, (asked, quiet.headers["date"])

    answers: list[Answer] = []
    poll = threading.Thread(target=lambda: answers.append(
        writes.call("GET", "/items", {"If-None-Match": etag, "Prefer": "wait=3"})))
    poll.start()
    threading.Event().wait(0.5)
    snapshot(writes, "k4", b'{"k": 4}')
    poll.join(10)
    (changed,) = answers
    assert changed.status == 200 and changed.seconds < 2.9, changed
    assert '{"k": 4}' in items(changed) and changed.headers["etag"] != etag


def test_fetch_one_item_etag_404_and_wait(writes: WriteDaemon) -> None:
    snapshot(writes, "item-1", b'{"id": 1}', "rev-7")
    wait_until(lambda: writes.call("GET", "/items/item-1").status == 200, 10)
    got = writes.call("GET", "/items/item-1")
    assert got.body == b'{"id": 1}' and got.headers["content-type"] == "application/json"
    progress, _, etag = got.headers["etag"].partition("/")
    assert etag == "rev-7" and ProgressId.decode(progress)
    assert writes.call("GET", "/items/item-1",
                       {"If-None-Match": got.headers["etag"]}).status == 304
    assert writes.call("GET", "/items/missing").status == 404
    snapshot(writes, "item-2", b'{"id": 2}')
    snapshot(writes, "item-2", None)
    wait_until(lambda: writes.call("GET", "/items/item-2").status == 404, 10)
    answers: list[Answer] = []
    poll = threading.Thread(target=lambda: answers.append(
        writes.call("GET", "/items/late", {"Prefer": "wait=3"})))
    poll.start()
    threading.Event().wait(0.5)
    snapshot(writes, "late", b'{"late": true}')
    poll.join(10)
    assert answers[0].status == 200 and answers[0].body == b'{"late": true}'
    assert writes.call("GET", "/items/never", {"Prefer": "wait=1"}).status == 404


def test_a_filtered_fetch_by_identity(writes: WriteDaemon) -> None:
    snapshot(writes, "m1", b'"alice 1"', owner="alice")
    snapshot(writes, "m2", b'"bob 1"', owner="bob")
    snapshot(writes, "m3", b'"alice 2"', owner="alice")
    alice = {"Authorization": f"Bearer {writes.key.token(sub='alice', scope='read')}"}
    wait_until(lambda: json.loads(writes.call("GET", "/mine", alice).body) ==
               ["alice 1", "alice 2"], 10)
    assert writes.call("GET", "/mine").status == 401


def test_a_guarded_write_needs_its_role(writes: WriteDaemon) -> None:
    reader = writes.key.token(sub="alice", scope="read")
    writer = writes.key.token(sub="alice", scope="read write")
    key = f"g-{uuid.uuid4()}"
    refused = writes.call("POST", "/guarded", {"Authorization": f"Bearer {reader}",
                                               "Idempotency-Key": key}, b"x")
    assert refused.status == 403
    assert writes.call("POST", "/guarded", {"Idempotency-Key": key}, b"x").status == 401
    writes.daemon.wait_output("GUARD_JWT_AUTHORIZATION_FAILED")
    ok = writes.call("POST", "/guarded", {"Authorization": f"Bearer {writer}",
                                          "Idempotency-Key": key}, b"x")
    assert ok.status == 201
    (correlation,) = correlation_of(writes, key)  # only the allowed one was written
    (record,) = [r for r in writes.responder.records
                 if header(r, "zilla:correlation-id") == correlation.encode()]
    assert header(record, "owner") == b"alice"
    assert header(record, "authorization") is None  # the token stays out of Kafka


def test_a_body_over_the_limit_is_413_and_not_written(writes: WriteDaemon) -> None:
    key = f"big-{uuid.uuid4()}"
    got = writes.call("POST", "/commands", {"Idempotency-Key": key}, b"x" * 5000)
    assert got.status == 413
    assert writes.call("POST", "/commands", {"Idempotency-Key": key + "s"}, b"x" * 4000) \
        .status == 201
    assert correlation_of(writes, key) == []


def test_if_match_is_forwarded_as_its_etag_or_refused(writes: WriteDaemon) -> None:
    key = f"m-{uuid.uuid4()}"
    refused = writes.call("PUT", "/items/x", {"Idempotency-Key": key, "If-Match": "AQQAAgIC"},
                          b"{}")
    assert refused.status == 400 and b"etag" in refused.body
    quoted = writes.call("PUT", "/items/x", {"Idempotency-Key": key,
                                             "If-Match": '"AQQAAgIC/3"'}, b"{}")
    assert quoted.status == 400
    assert correlation_of(writes, key) == []
    ok = writes.call("PUT", "/items/x", {"Idempotency-Key": key, "If-Match": "AQQAAgIC/3"},
                     b"{}")
    assert ok.status == 201
    (correlation,) = correlation_of(writes, key)
    (record,) = [r for r in writes.responder.records
                 if header(r, "zilla:correlation-id") == correlation.encode()]
    assert header(record, "if-match") == b"3"


def test_http2_write(writes: WriteDaemon) -> None:
    key = f"h2-{uuid.uuid4()}"
    out = subprocess.run(["curl", "-s", "--http2-prior-knowledge", "-o", "/dev/null",
                          "-w", "%{http_code} %{http_version}", "-X", "POST",
                          "-H", f"Idempotency-Key: {key}", "--data-binary", "h2 body",
                          f"http://127.0.0.1:{writes.port}/commands"],
                         capture_output=True, timeout=20, check=True).stdout.decode()
    assert out == "201 2"
    (correlation,) = correlation_of(writes, key)
    (record,) = [r for r in writes.responder.records
                 if header(r, "zilla:correlation-id") == correlation.encode()]
    assert record.value() == b"h2 body"
    assert [n for n, _ in record.headers()][:4] == [":method", ":scheme", ":authority",
                                                     ":path"]


def test_workers_write_and_fetch(writes: WriteDaemon, tmp_path: Path) -> None:
    """With two workers each has its own producer and cache: writes through either are
    answered with their replies, and fetches see the same topic."""
    port = free_port()
    config = write_config(tmp_path, port, writes.kafka.bootstrap, writes.topics,
                          [writes.key.jwk])
    daemon = start_daemon(config, wait_ports=[port], extra_args=["--workers", "2"])
    try:
        keys = [f"w-{uuid.uuid4()}" for _ in range(12)]
        answers = [request(port, "POST", "/commands", {"Idempotency-Key": k}, k.encode())
                   for k in keys]
        assert [(a.status, a.body) for a in answers] == [(201, k.encode()) for k in keys]
        snapshot(writes, "from-workers", b'"both"')
        wait_until(lambda: all(request(port, "GET", "/items/from-workers").status == 200
                               for _ in range(6)), 10)
        assert len({int(line.split("pid ")[1].split()[0]) for line in
                    daemon.output().splitlines() if "ENGINE_STARTED" in line
                    and " worker " in line}) == 2
    finally:
        daemon.stop()


@pytest.mark.parametrize("version", ["HTTP/1.1", "HTTP/2"])
def test_each_answer_is_an_access_event_with_its_status_bytes_and_time(
        writes: WriteDaemon, version: str) -> None:
    """`BINDING_HTTP_REQUEST_ANSWERED`: the status, the body's bytes, the time and the exit of
    every answered request - a 204, a 304, a 404 no route took, a reply's 412 and a 413 the
    connection gave before any route saw the request (exit `-`) - over HTTP/1.1 and HTTP/2."""
    # (the http binding sends every path to http-kafka here, whose own routes answer the 404)
    tag = f"{version[-1]}-{uuid.uuid4().hex[:6]}"
    etag = writes.call("GET", "/items").headers["etag"]

    def call(method: str, path: str, headers: dict[str, str], body: bytes) -> int:
        if version == "HTTP/1.1":
            return writes.call(method, path, headers, body or None).status
        if path.endswith("-413"):
            # answered on the HEADERS (their content-length is over the limit), the stream
            # reset if the body was still coming: curl 7.88 may then fail the upload (exit
            # 92) before it reads the 413 (test_request_bodies has the reset itself)
            client = RawH2(writes.port)
            try:
                stream_id = client.request(method, path, end_stream=False, headers=[
                    *headers.items(), ("content-length", str(len(body)))])
                client.conn.send_data(stream_id, body, end_stream=True)
                client.flush()
                assert client.wait(lambda: client.status(stream_id) is not None), "no answer"
                return int(client.status(stream_id) or 0)
            finally:
                client.close()
        args = ["curl", "-s", "--http2-prior-knowledge", "-o", "/dev/null", "-w",
                "%{http_code}", "-X", method]
        for name, value in headers.items():
            args += ["-H", f"{name}: {value}"]
        if body:
            args += ["--data-binary", "@-"]
        done = subprocess.run([*args, f"http://127.0.0.1:{writes.port}{path}"], input=body,
                              capture_output=True, check=False, timeout=30)
        return int(done.stdout)

    reply = b'{"no": "changed since"}'
    cases = [("POST", f"/oneway?a={tag}-204", {}, b"{}", 204, 0, "hk0"),
             ("GET", f"/items?a={tag}-304", {"If-None-Match": etag}, b"", 304, 0, "hk0"),
             ("GET", f"/nowhere?a={tag}-404", {}, b"", 404, 0, "hk0"),  # no route of its
             ("POST", f"/commands?a={tag}-412",
              {"X-Reply": "412", "Idempotency-Key": f"k-{tag}"}, reply, 412, len(reply), "hk0"),
             ("POST", f"/oneway?a={tag}-413", {"Content-Type": "text/plain"}, b"x" * 5000, 413,
              0, "-")]
    for method, path, headers, body, status, _, _ in cases:
        assert call(method, path, headers, body) == status, path
    for method, path, _, _, status, size, route in cases:
        writes.daemon.wait_output(f"path={path} ")
        (event,) = [x for x in writes.daemon.output().splitlines()
                    if "BINDING_HTTP_REQUEST_ANSWERED" in x and f"path={path} " in x]
        m = re.search(r"peer=127\.0\.0\.1:\d+ method=(\S+) path=(\S+) route=(\S+) status=(\d+) "
                      r"bytes=(\d+) duration_ms=([\d.]+) version=(\S+)", event)
        assert m is not None, event
        assert (m[1], m[3], int(m[4]), int(m[5]), m[7]) == \
            (method, route, status, size, version), event
        assert float(m[6]) < 10_000
