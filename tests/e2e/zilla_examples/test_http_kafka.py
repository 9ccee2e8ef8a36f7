"""Zilla's http-kafka examples on ssekd: http.kafka.sync, http.kafka.async, http.kafka.cache and
http.kafka.crud, each started as published (`tests.support.zilla_examples`) and checked the way
its `.github/test.sh` checks it, then further: the record a write makes is the one Zilla's
protocol scripts describe, the async example's real async path (`Prefer: respond-async`, `202`
with a location, the GET that waits), and the crud example's DELETE deleting."""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from email.utils import formatdate
from typing import Any

import pytest

from tests.e2e.zilla_examples.conftest import RunExample
from tests.support.broker import Kafka
from tests.support.wait import wait_until
from tests.support.writes import Answer, header, read_records, request

pytestmark = [pytest.mark.daemon, pytest.mark.broker]


def first_record(bootstrap: str, topic: str, key: bytes) -> Any:
    """The first record of `topic` with `key`, once there (what test.sh reads with kafkacat)."""
    found: list[Any] = []

    def there() -> bool:
        found[:] = [r for r in read_records(bootstrap, topic) if r.key() == key]
        return bool(found)

    wait_until(there, 20, what=f"a record keyed {key!r} on {topic}")
    return found[0]


def reply(bootstrap: str, key: bytes, correlation: bytes, value: bytes,
          status: bytes = b"200") -> None:
    """What test.sh writes with kafkacat on `items-responses`."""
    kafka = Kafka(bootstrap)
    kafka.produce("items-responses", value, key,
                  headers=[(":status", status), ("zilla:correlation-id", correlation)])
    kafka.flush()


def in_background(call: Any) -> tuple[threading.Thread, list[Answer]]:
    out: list[Answer] = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    return thread, out


@pytest.mark.parametrize("name", ["http.kafka.sync", "http.kafka.async"])
def test_a_put_is_answered_with_the_reply_as_test_sh_does(run_example: RunExample,
                                                           name: str) -> None:
    """test.sh of both: a PUT with an idempotency key waits; the correlation id is read from
    the record on `items-requests`; a reply carrying it on `items-responses` answers the PUT."""
    example = run_example(name)
    assert example.bootstrap is not None
    port = example.port(7114)
    item = str(int(time.time()))
    greeting = f"Hello, World! {item}"
    answer_text = f"Hello, World! {formatdate(usegmt=True)}"
    thread, answered = in_background(lambda: request(
        port, "PUT", f"/items/{item}", {"Idempotency-Key": item,
                                        "Content-Type": "application/json"},
        json.dumps({"greeting": greeting}, separators=(",", ":")).encode(), timeout=60))
    record = first_record(example.bootstrap, "items-requests", item.encode())
    correlation = header(record, "zilla:correlation-id")
    assert correlation is not None
    expected = json.dumps({"greeting": answer_text}, separators=(",", ":")).encode()
    reply(example.bootstrap, item.encode(), correlation, expected)
    thread.join(30)
    assert answered and answered[0].status == 200, answered
    assert answered[0].body == expected

    # the record is Zilla's (its protocol scripts, put.item): the request's headers in order,
    # the reply-to header, then the correlation id `<idempotency key>-<md5>` of all of it
    names = [n for n, _ in record.headers() if n != "accept-encoding"]
    assert names == [":method", ":scheme", ":authority", ":path", "idempotency-key",
                     "content-type", "zilla:reply-to", "zilla:correlation-id"]
    assert header(record, ":path") == f"/items/{item}".encode()
    assert header(record, "zilla:reply-to") == b"items-responses"
    digest = hashlib.md5(usedforsecurity=False)
    digest.update(item.encode())
    for n, v in record.headers():
        if n != "zilla:correlation-id":
            digest.update(n.encode() + v)
    digest.update(record.value())
    assert correlation == f"{item}-{digest.hexdigest()}".encode()


def test_the_async_example_through_its_async_path(run_example: RunExample) -> None:
    """Beyond test.sh (which only waits on the PUT): `Prefer: respond-async` is `202` with
    the example's location `/items/<id>;cid=<correlation id>...`; a GET of it with
    `Prefer: wait` is `202` again while no reply came, and the reply once it does."""
    example = run_example("http.kafka.async")
    assert example.bootstrap is not None
    port = example.port(7114)
    item = f"a{uuid.uuid4().hex[:8]}"
    put = request(port, "PUT", f"/items/{item}",
                  {"Idempotency-Key": item, "Content-Type": "application/json",
                   "Prefer": "respond-async"}, b'{"greeting":"Hello"}')
    assert put.status == 202, put
    location = put.headers["location"]
    assert location.startswith(f"/items/{item};cid={item}-")
    waited = request(port, "GET", location, {"Prefer": "wait=1"})
    assert waited.status == 202 and waited.headers["location"] == location
    assert waited.seconds >= 0.9
    record = first_record(example.bootstrap, "items-requests", item.encode())
    correlation = header(record, "zilla:correlation-id")
    assert correlation is not None and location.split(";cid=")[1].startswith(
        correlation.decode())
    thread, answered = in_background(lambda: request(port, "GET", location,
                                                     {"Prefer": "wait=20"}, timeout=30))
    time.sleep(0.5)  # the GET waits for the reply
    reply(example.bootstrap, item.encode(), correlation, b'{"greeting":"done"}')
    thread.join(30)
    assert answered and (answered[0].status, answered[0].body) == (200, b'{"greeting":"done"}')
    assert answered[0].seconds < 15, "answered when the reply came, not at the end of the wait"


def test_cache_answers_the_topics_latest_values_as_test_sh_does(
        run_example: RunExample) -> None:
    example = run_example("http.kafka.cache")
    assert example.bootstrap is not None
    port = example.port(7114)
    wait_until(lambda: request(port, "GET", "/items").body == b"[]", 20)
    kafka = Kafka(example.bootstrap)
    kafka.produce("items-snapshots", b'{"message":"Hello World"}',
                  b"5cf7a1d5-3772-49ef-86e7-ba6f2c7d7d07",
                  headers=[("content-type", b"application/json")])
    kafka.flush()
    wait_until(lambda: request(port, "GET", "/items").body == b'[{"message":"Hello World"}]',
               20)
    one = request(port, "GET", "/items/5cf7a1d5-3772-49ef-86e7-ba6f2c7d7d07")
    assert (one.status, one.body, one.headers["content-type"]) == \
        (200, b'{"message":"Hello World"}', "application/json")


def test_crud_creates_reads_updates_and_deletes(run_example: RunExample) -> None:
    """test.sh: a POST with `Idempotency-Key: 1` is read back at /items/1. Then what its
    routes promise beyond: a PUT replaces the item, and a DELETE - a record with no value, a
    tombstone on the compacted topic - deletes it."""
    example = run_example("http.kafka.crud")
    assert example.bootstrap is not None
    port = example.port(7114)
    body = b'{"greeting":"Hello, world1"}'

    def created() -> bool:
        request(port, "POST", "/items", {"Idempotency-Key": "1",
                                         "Content-Type": "application/json"}, body)
        return request(port, "GET", "/items/1").body == body

    wait_until(created, 30, interval=1)
    assert request(port, "PUT", "/items/1", {"Content-Type": "application/json"},
                   b'{"greeting":"Hello, again"}').status == 204
    wait_until(lambda: request(port, "GET", "/items/1").body == b'{"greeting":"Hello, again"}',
               10)
    assert request(port, "DELETE", "/items/1").status == 204
    wait_until(lambda: request(port, "GET", "/items/1").status == 404, 10)
    assert request(port, "GET", "/items").body == b"[]"
    (tombstone,) = [r for r in read_records(example.bootstrap, "items-snapshots")
                    if r.key() == b"1" and r.value() is None]
    assert tombstone.headers() is None or tombstone.headers() == []
