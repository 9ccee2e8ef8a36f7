"""The write path's tests: a daemon config with an http-kafka route of every kind, a responder
standing for the service behind (it answers each command on its reply-to topic as the request's
own headers ask), and a small HTTP client."""

from __future__ import annotations

import http.client
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from tests.support import zilla_config as zc
from tests.support.jwt import AUDIENCE, ISSUER


@dataclass
class Topics:
    oneway: str
    commands: str
    replies: str
    snapshots: str


def config(port: int, bootstrap: str, topics: Topics, keys: list[dict[str, Any]],
           max_wait: float = 3, ack_timeout: float = 2, body_bytes: int = 4096) -> zc.Node:
    """tcp -> http (guarded by jwt0) -> http-kafka with a route of every kind -> kafka."""
    identity = "${guarded['jwt0'].identity}"
    produce = {"capability": "produce", "topic": topics.commands}
    fetch = {"capability": "fetch", "topic": topics.snapshots}
    json_merge = {"merge": {"content-type": "application/json"}}

    def route(when: list[tuple[str, str]], with_: zc.Node, guarded: str | None = None) -> zc.Node:
        r: zc.Node = {"when": [{"method": m, "path": p} for m, p in when], "exit": "cc"}
        if guarded:
            r["guarded"] = {"jwt0": [guarded]}
        r["with"] = with_
        return r

    http_kafka = {"type": "http-kafka", "kind": "proxy",
                  "options": {"max-wait": max_wait, "ack-timeout": ack_timeout},
                  "routes": [
                      route([("POST", "/oneway")],
                            {**produce, "topic": topics.oneway, "key": "${idempotencyKey}",
                             "overrides": {"origin": "tests"}}),
                      route([("DELETE", "/oneway/{id}"), ("POST", "/oneway/{id}")],
                            {**produce, "topic": topics.oneway, "key": "${params.id}"}),
                      route([("POST", "/commands")],
                            {**produce, "key": "${idempotencyKey}", "reply-to": topics.replies}),
                      route([("PUT", "/items/{id}"), ("GET", "/items/{id};{correlationId}")],
                            {**produce, "key": "${params.id}", "reply-to": topics.replies,
                             "async": {"location": "/items/${params.id};${correlationId}"}}),
                      route([("POST", "/guarded")],
                            {**produce, "reply-to": topics.replies,
                             "overrides": {"owner": identity}}, "write"),
                      route([("GET", "/items")], {**fetch, **json_merge}),
                      route([("GET", "/items/{id}")],
                            {**fetch, "filters": [{"key": "${params.id}"}]}),
                      route([("GET", "/mine")],
                            {**fetch, "filters": [{"headers": {"owner": identity}}],
                             **json_merge}, "read")]}
    bindings = {"tcp0": zc.tcp_server(port, "http0"),
                "http0": zc.http_server("hk0", limits={"body-bytes": body_bytes},
                                        authorization=zc.authorization()),
                "hk0": http_kafka,
                **zc.kafka(bootstrap, cache={"bootstrap": [topics.replies, topics.snapshots]},
                           properties=zc.FAST_RECONNECT, cache_client="cc", cache_server="cs",
                           client="kc")}
    return zc.zilla("writes", bindings,
                    guards={"jwt0": zc.jwt_guard(ISSUER, AUDIENCE, keys)},
                    telemetry=zc.stdout_telemetry())


def write_config(folder: Path, port: int, bootstrap: str, topics: Topics,
                 keys: list[dict[str, Any]], max_wait: float = 3, ack_timeout: float = 2,
                 body_bytes: int = 4096) -> Path:
    return zc.write(folder / f"zilla-writes-{port}.yaml",
                    config(port, bootstrap, topics, keys, max_wait, ack_timeout, body_bytes))


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    seconds: float = 0.0


def request(port: int, method: str, path: str, headers: dict[str, str] | None = None,
            body: bytes | None = None, timeout: float = 20.0) -> Answer:
    """One HTTP/1.1 request on a new connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    began = time.monotonic()
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        data = response.read()
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, data,
                      time.monotonic() - began)
    finally:
        conn.close()


def header(record: Any, name: str) -> bytes | None:
    for n, v in record.headers() or ():
        if n == name:
            return bytes(v) if v is not None else None
    return None


@dataclass
class Responder:
    """Stands for the service behind a command topic: each record with a reply-to header is
    answered there, with the same correlation id, as the request's own (forwarded) headers
    say: `x-reply: 201` (the default; `location: /items/<key>`, the body echoed),
    `x-reply: none` (no answer), `x-reply-delay: 1.5` (seconds before the answer). It counts
    the records of each correlation id, to see that nothing is written twice."""

    bootstrap: str
    topic: str
    correlation_header: str = "zilla:correlation-id"
    reply_to_header: str = "zilla:reply-to"
    seen: Counter[str] = field(default_factory=Counter)
    records: list[Any] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._ready = threading.Event()
        self._producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0})

    def start(self) -> Responder:
        self._thread.start()
        assert self._ready.wait(20), "responder did not start"
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._producer.flush(5)

    def _run(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "responder",
                             "fetch.wait.max.ms": 10, "enable.auto.commit": False})
        meta = consumer.list_topics(self.topic, timeout=10).topics[self.topic]
        consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING)
                         for p in meta.partitions])
        self._ready.set()
        try:
            while not self._stop.is_set():
                m = consumer.poll(0.05)
                if m is None or m.error() is not None:
                    self._producer.poll(0)
                    continue
                self.records.append(m)
                correlation = header(m, self.correlation_header)
                if correlation is not None:
                    self.seen[correlation.decode()] += 1
                reply_to = header(m, self.reply_to_header)
                want = (header(m, "x-reply") or b"201").decode()
                if reply_to is None or correlation is None or want == "none":
                    continue
                delay = float((header(m, "x-reply-delay") or b"0").decode())
                reply = (reply_to.decode(), m.key(),
                         [(self.correlation_header, correlation), (":status", want.encode()),
                          ("location", b"/items/" + (m.key() or b"")),
                          ("content-type", b"application/json")], m.value())
                if delay:
                    threading.Timer(delay, self._reply, reply).start()
                else:
                    self._reply(*reply)
        finally:
            consumer.close()

    def _reply(self, topic: str, key: bytes | None, headers: list[tuple[str, bytes]],
               value: bytes | None) -> None:
        self._producer.produce(topic, key=key, value=value, headers=headers)
        self._producer.poll(0)


def read_records(bootstrap: str, topic: str, timeout: float = 5.0,
                 security: dict[str, str] | None = None) -> list[Any]:
    """Every record of `topic` (from its beginning to the end the fetches report); `security`
    adds librdkafka settings (`security.protocol`, `ssl.ca.location`) for a TLS listener."""
    from confluent_kafka import KafkaError

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                         "enable.partition.eof": True, "fetch.wait.max.ms": 10,
                         **(security or {})})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        left = set(partitions)
        out = []
        deadline = time.monotonic() + timeout
        while left and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is None:
                continue
            error = m.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    left.discard(m.partition())
                continue
            out.append(m)
        assert not left, f"{topic}: partitions {left} not read to their end"
        return out
    finally:
        consumer.close()
