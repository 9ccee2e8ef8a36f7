"""The write path's tests: a daemon config with an http-kafka route of every kind, a responder
standing for the service behind (it answers each command on its reply-to topic as the request's
own headers ask), and a small HTTP client."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from tests.support.jwt import AUDIENCE, ISSUER

CONFIG = """\
name: writes
guards:
  jwt0:
    type: jwt
    options:
      issuer: {issuer}
      audience: {audience}
      keys: {keys}
bindings:
  tcp0:
    type: tcp
    kind: server
    options: {{host: 127.0.0.1, port: {port}}}
    exit: http0
  http0:
    type: http
    kind: server
    options:
      limits: {{body-bytes: {body_bytes}}}
      authorization:
        jwt0:
          credentials:
            headers: {{authorization: "Bearer {{credentials}}"}}
            query: {{access_token: "{{credentials}}"}}
    exit: hk0
  hk0:
    type: http-kafka
    kind: proxy
    options: {{max-wait: {max_wait}, ack-timeout: {ack_timeout}}}
    routes:
      - when: [{{method: POST, path: /oneway}}]
        exit: cc
        with: {{capability: produce, topic: {oneway}, key: "${{idempotencyKey}}",
                overrides: {{origin: tests}}}}
      - when: [{{method: POST, path: /commands}}]
        exit: cc
        with: {{capability: produce, topic: {commands}, key: "${{idempotencyKey}}",
                reply-to: {replies}}}
      - when: [{{method: PUT, path: "/items/{{id}}"}},
               {{method: GET, path: "/items/{{id}};{{correlationId}}"}}]
        exit: cc
        with:
          capability: produce
          topic: {commands}
          key: "${{params.id}}"
          reply-to: {replies}
          async: {{location: "/items/${{params.id}};${{correlationId}}"}}
      - when: [{{method: POST, path: /guarded}}]
        exit: cc
        guarded: {{jwt0: [write]}}
        with:
          capability: produce
          topic: {commands}
          reply-to: {replies}
          overrides: {{owner: "${{guarded['jwt0'].identity}}"}}
      - when: [{{method: GET, path: /items}}]
        exit: cc
        with: {{capability: fetch, topic: {snapshots},
                merge: {{content-type: application/json}}}}
      - when: [{{method: GET, path: "/items/{{id}}"}}]
        exit: cc
        with: {{capability: fetch, topic: {snapshots}, filters: [{{key: "${{params.id}}"}}]}}
      - when: [{{method: GET, path: /mine}}]
        exit: cc
        guarded: {{jwt0: [read]}}
        with:
          capability: fetch
          topic: {snapshots}
          filters: [{{headers: {{owner: "${{guarded['jwt0'].identity}}"}}}}]
          merge: {{content-type: application/json}}
  cc:
    type: kafka
    kind: cache_client
    exit: cs
  cs:
    type: kafka
    kind: cache_server
    options: {{bootstrap: [{replies}, {snapshots}]}}
    exit: kc
  kc:
    type: kafka
    kind: client
    options:
      servers: ["{bootstrap}"]
      properties: {{fetch.wait.max.ms: 10, reconnect.backoff.max.ms: 500}}
telemetry:
  exporters:
    stdout:
      type: stdout
"""


@dataclass
class Topics:
    oneway: str
    commands: str
    replies: str
    snapshots: str


def write_config(folder: Path, port: int, bootstrap: str, topics: Topics,
                 keys: list[dict[str, Any]], max_wait: float = 3, ack_timeout: float = 2,
                 body_bytes: int = 4096) -> Path:
    path = folder / f"zilla-writes-{port}.yaml"
    path.write_text(CONFIG.format(issuer=ISSUER, audience=AUDIENCE, keys=json.dumps(keys),
                                  port=port, bootstrap=bootstrap, max_wait=max_wait,
                                  ack_timeout=ack_timeout, body_bytes=body_bytes,
                                  oneway=topics.oneway, commands=topics.commands,
                                  replies=topics.replies, snapshots=topics.snapshots))
    return path


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


def read_records(bootstrap: str, topic: str, timeout: float = 5.0) -> list[Any]:
    """Every record of `topic` (from its beginning to the end the fetches report)."""
    from confluent_kafka import KafkaError

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                         "enable.partition.eof": True, "fetch.wait.max.ms": 10})
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
