"""Fixtures for the streaming tests: a real broker (tansu), Kafka helpers, an SSE client, and the
real daemon (`twistd -n ssekd`) on free loopback ports with a config made for the test."""

from __future__ import annotations

import http.client
import itertools
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from ssekd.broker import Broker, free_port
from tests.conftest import Daemon, start_daemon

_names = itertools.count()


@dataclass
class Kafka:
    """Topic creation and production against the session broker."""

    bootstrap: str
    producer: Producer = field(init=False)

    def __post_init__(self) -> None:
        self.producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 1})
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})

    def topic(self, partitions: int = 3, compact: bool = False, prefix: str = "t") -> str:
        name = f"{prefix}-{next(_names)}-{uuid.uuid4().hex[:6]}"
        config = {"cleanup.policy": "compact"} if compact else {}
        futures = self.admin.create_topics([NewTopic(name, partitions, 1, config=config)])
        for f in futures.values():
            f.result(10)
        return name

    def produce(self, topic: str, value: bytes | None, key: bytes | None = None,
                partition: int | None = None,
                headers: list[tuple[str, bytes]] | None = None,
                timestamp: int | None = None) -> None:
        kw: dict[str, Any] = {"key": key, "value": value}
        if partition is not None:
            kw["partition"] = partition
        if headers:
            kw["headers"] = headers
        if timestamp is not None:
            kw["timestamp"] = timestamp
        self.producer.produce(topic, **kw)

    def flush(self) -> None:
        assert self.producer.flush(10) == 0


@pytest.fixture(scope="session")
def kafka(kafka_broker: Broker) -> Kafka:
    return Kafka(kafka_broker.bootstrap)


# -- the daemon --------------------------------------------------------------------------------

CONFIG = """\
name: test
bindings:
  tcp:
    type: tcp
    kind: server
    options: {{host: 127.0.0.1, port: {port}}}
    exit: http
  http:
    type: http
    kind: server
    routes:
      - when: [{{headers: {{":path": "/www/*"}}}}]
        exit: files_map
    exit: sse
  files_map:
    type: http-filesystem
    kind: proxy
    routes:
      - when: [{{path: "/www/{{path}}"}}]
        exit: files
        with: {{path: "${{params.path}}"}}
  files:
    type: filesystem
    kind: server
    options: {{location: {www}}}
  sse:
    type: sse
    kind: server
    options: {{max-idle-time: {idle}{retry}}}
    exit: sse_kafka
  sse_kafka:
    type: sse-kafka
    kind: proxy
    routes:
      - when: [{{path: "/events/{{topic}}"}}]
        exit: cache_client
        with: {{topic: "${{params.topic}}"}}
      - when: [{{path: "/keyed/{{topic}}"}}]
        exit: cache_client
        with:
          topic: "${{params.topic}}"
          event: {{id: '["${{base64(key)}}","${{etag}}"]'}}
      - when: [{{path: "/bykey/{{topic}}/{{key}}"}}]
        exit: cache_client
        with:
          topic: "${{params.topic}}"
          filters: [{{key: "${{params.key}}"}}]
      - when: [{{path: "/byheader/{{topic}}"}}]
        exit: cache_client
        with:
          topic: "${{params.topic}}"
          filters: [{{headers: {{colour: red}}}}]
      - when: [{{path: "/keyheader/{{topic}}"}}]
        exit: cache_client
        with:
          topic: "${{params.topic}}"
          filters: [{{key: a, headers: {{colour: red, size: big}}}}]
      - when: [{{path: "/anyof/{{topic}}"}}]
        exit: cache_client
        with:
          topic: "${{params.topic}}"
          filters: [{{key: a}}, {{headers: {{colour: blue}}}}]
      - when: [{{path: "/tiny/{{topic}}"}}]
        exit: tiny_cache_client
        with: {{topic: "${{params.topic}}"}}
      - when: [{{path: "/live/{{topic}}"}}]
        exit: live_cache_client
        with: {{topic: "${{params.topic}}"}}
  cache_client:
    type: kafka
    kind: cache_client
    exit: cache_server
  cache_server:
    type: kafka
    kind: cache_server
    options:
      cache: {{max-messages: {max_messages}, max-bytes: {max_bytes}}}
    exit: kafka_client
  tiny_cache_client:
    type: kafka
    kind: cache_client
    exit: tiny_cache_server
  tiny_cache_server:
    type: kafka
    kind: cache_server
    options:
      cache: {{max-messages: 5}}
    exit: kafka_client
  live_cache_client:
    type: kafka
    kind: cache_client
    exit: live_cache_server
  live_cache_server:
    type: kafka
    kind: cache_server
    options:
      topics: [{live_topics}]
    exit: live_kafka_client
  kafka_client:
    type: kafka
    kind: client
    options:
      servers: ["{bootstrap}"]
      properties: {{fetch.wait.max.ms: 10}}
  live_kafka_client:
    type: kafka
    kind: client
    options:
      servers: ["{bootstrap}"]
      properties: {{fetch.wait.max.ms: 10}}
telemetry:
  exporters:
    stdout:
      type: stdout
"""

WWW = Path(__file__).resolve().parents[2] / "www"


@dataclass
class Streamd:
    """A running daemon with the test config, and how to reach it."""

    daemon: Daemon
    port: int

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def open(self, path: str, headers: dict[str, str] | None = None,
             timeout: float = 10.0) -> SseClient:
        return SseClient(self.port, path, headers, timeout)

    def status(self, path: str, method: str = "GET",
               headers: dict[str, str] | None = None) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        conn.request(method, path, headers=headers or {})
        status = conn.getresponse().status
        conn.close()
        return status


def write_config(tmp: Path, bootstrap: str, port: int, idle: float = 15, retry: int | None = None,
                 max_messages: int = 100000, max_bytes: int = 64 * 1024 * 1024,
                 live_topics: tuple[str, ...] = (), kafka_port_env: bool = False) -> Path:
    live = ", ".join(f"{{name: {t}, defaultOffset: live}}" for t in live_topics)
    text = CONFIG.format(port=port, www=str(WWW), idle=idle,
                         retry=f", retry: {retry}" if retry is not None else "",
                         bootstrap=bootstrap, max_messages=max_messages, max_bytes=max_bytes,
                         live_topics=live)
    path = tmp / f"zilla-{port}.yaml"
    path.write_text(text)
    return path


def run_streamd(tmp: Path, bootstrap: str, **kw: Any) -> Streamd:
    port = free_port()
    config = write_config(tmp, bootstrap, port, **kw)
    return Streamd(start_daemon(config, wait_ports=[port]), port)


@pytest.fixture(scope="module")
def streamd(kafka_broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Streamd]:
    """One daemon per test module, with every route of CONFIG, on the session broker."""
    s = run_streamd(tmp_path_factory.mktemp("streamd"), kafka_broker.bootstrap,
                    live_topics=("live-a", "live-b"))
    yield s
    s.daemon.stop()


# -- an SSE client -----------------------------------------------------------------------------

@dataclass
class Event:
    id: str | None
    event: str | None
    data: str | None
    received: float = 0.0


class SseClient:
    """A minimal text/event-stream reader over a raw socket (HTTP/1.1, chunked or not).

    Raw, because http.client's socket file refuses to read again after one timeout, and
    these tests wait with timeouts all the time.
    """

    def __init__(self, port: int, path: str, headers: dict[str, str] | None = None,
                 timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}",
                 "Accept: text/event-stream"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        self._raw = b""  # bytes from the socket not yet de-chunked
        self._body = b""  # de-chunked body not yet parsed into lines
        self.comments = 0
        self.retry: int | None = None
        self.ended = False
        deadline = time.monotonic() + timeout
        while b"\r\n\r\n" not in self._raw:
            if not self._recv(deadline):
                raise AssertionError(f"no response headers: {self._raw!r}")
        head, _, self._raw = self._raw.partition(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        self.status = int(status_line.split()[1])
        self.headers = {}
        for h in header_lines:
            name, _, value = h.partition(":")
            self.headers[name.strip()] = value.strip()
        self.chunked = self.headers.get("Transfer-Encoding", "").lower() == "chunked"

    def _recv(self, deadline: float) -> bool:
        """Read more from the socket; False on timeout or end of stream."""
        left = deadline - time.monotonic()
        if left <= 0 or self.ended:
            return False
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return False
        except OSError:
            data = b""
        if not data:
            self.ended = True
            return False
        self._raw += data
        return True

    def _dechunk(self) -> None:
        if not self.chunked:
            self._body += self._raw
            self._raw = b""
            return
        while True:
            size_line, sep, rest = self._raw.partition(b"\r\n")
            if not sep:
                return
            size = int(size_line.split(b";")[0], 16)
            if len(rest) < size + 2:
                return
            if size == 0:
                self.ended = True
                self._raw = b""
                return
            self._body += rest[:size]
            self._raw = rest[size + 2:]

    def _line(self, deadline: float) -> bytes | None:
        while True:
            self._dechunk()
            line, sep, rest = self._body.partition(b"\n")
            if sep:
                self._body = rest
                return line
            if self.ended or not self._recv(deadline):
                return None

    def next_event(self, timeout: float = 10.0) -> Event | None:
        """The next event, or None when the stream ended or `timeout` passed with none."""
        deadline = time.monotonic() + timeout
        fields: dict[str, str] = {}
        data: list[str] = []
        pending = b""
        while True:
            raw = self._line(deadline)
            if raw is None:
                # keep a half-read event for the next call
                if fields or data:
                    self._body = pending + self._body
                return None
            pending += raw + b"\n"
            line = raw.decode("utf-8")
            if line == "":
                pending = b""
                if fields or data:
                    return Event(fields.get("id"), fields.get("event"),
                                 "\n".join(data) if data else None, time.monotonic())
                continue
            if line.startswith(":"):
                self.comments += 1
                continue
            name, _, value = line.partition(":")
            if name == "data":
                data.append(value)
            elif name == "retry":
                self.retry = int(value)
            else:
                fields[name] = value

    def events(self, n: int, timeout: float = 10.0) -> list[Event]:
        """Exactly `n` events, or fail naming how many arrived."""
        out: list[Event] = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            e = self.next_event(max(0.0, deadline - time.monotonic()))
            if e is None:
                raise AssertionError(f"got {len(out)} of {n} events: {out[-3:]}")
            out.append(e)
        return out

    def quiet(self, seconds: float = 0.5) -> list[Event]:
        """Events arriving within `seconds` (to check that nothing more comes)."""
        out = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            e = self.next_event(left)
            if e is None:
                break
            out.append(e)
        return out

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
