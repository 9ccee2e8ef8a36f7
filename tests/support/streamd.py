"""The real daemon with a config made for the streaming tests: every sse-kafka route they use,
on a free loopback port, reading the given broker."""

from __future__ import annotations

import http.client
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ssekd.dev.broker import free_port
from tests.support.daemon import Daemon, start_daemon
from tests.support.sse import SseClient

#: The bindings that serve `/www/*` from the folder `{www}`: a fragment of the config templates
#: here and in the other daemon helpers, escaped for `str.format` as they are.
WWW_FILES = """\
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
"""

CONFIG = """\
name: test
bindings:
  tcp:
    type: tcp
    kind: server
    options: {{host: 127.0.0.1, port: {port}{tcp_options}}}
    exit: http
  http:
    type: http
    kind: server{http_options}
    routes:
      - when: [{{headers: {{":path": "/www/*"}}}}]
        exit: files_map
    exit: sse
""" + WWW_FILES + """  sse:
    type: sse
    kind: server
    options: {{max-idle-time: {idle}{retry}{compression}}}
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
      - when: [{{path: "/keytext/{{topic}}"}}]
        exit: cache_client
        with:
          topic: "${{params.topic}}"
          event: {{id: '["${{key}}","${{etag}}"]'}}
      - when: [{{path: "/byvalue/{{topic}}/{{owner}}"}}]
        exit: cache_client
        with:
          topic: "${{params.topic}}"
          filters:
            - {{value: {{/owner: "${{params.owner}}", /kind: [order, refund]}}}}
            - {{value: {{/all: true}}}}
      - when: [{{path: "/item"}}]
        exit: cache_client
        with:
          topic: "${{query.topic}}"
          filters: [{{key: "${{headers.x-item}}"}}]
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
      - when: [{{path: "/packed/{{topic}}"}}]
        exit: cache_client
        with: {{topic: "${{params.topic}}", compress: false}}
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
      cache: {{max-messages: {max_messages}, max-bytes: {max_bytes}}}{bootstrap_topics}{partition_wait}
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
      type: stdout{prometheus}
{engine}"""

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
                 live_topics: tuple[str, ...] = (), kafka_port_env: bool = False,
                 health: bool = False, prometheus_port: int | None = None,
                 engine: str = "", bootstrap_topics: tuple[str, ...] = (),
                 compression: str | None = None, partition_wait: float | None = None,
                 tcp_options: str = "", www: Path = WWW) -> Path:
    """`tcp_options` adds to the tcp server's options (`, proxy-protocol: {...}`), `health`
    adds the http binding's health endpoints (default paths, with the `details` a test reads
    what readiness waits for from), `prometheus_port` a prometheus exporter, `engine` the
    `engine` section (YAML flow mapping such as `{workers: 2, drain: 3}`), `bootstrap_topics`
    the cache's bootstrap list, `compression` the sse server's `compression` (a YAML flow
    mapping such as `{}`), `partition_wait` the cache's `partition-wait`, `www` the folder
    served at /www/."""
    live = ", ".join(f"{{name: {t}, defaultOffset: live}}" for t in live_topics)
    boot = f"\n      bootstrap: [{', '.join(bootstrap_topics)}]" if bootstrap_topics else ""
    text = CONFIG.format(bootstrap_topics=boot, port=port, tcp_options=tcp_options,
                         www=str(www), idle=idle,
                         retry=f", retry: {retry}" if retry is not None else "",
                         compression=f", compression: {compression}"
                         if compression is not None else "",
                         partition_wait=f"\n      partition-wait: {partition_wait}"
                         if partition_wait is not None else "",
                         bootstrap=bootstrap, max_messages=max_messages, max_bytes=max_bytes,
                         live_topics=live,
                         http_options="\n    options: {health: {details: true}}"
                         if health else "",
                         prometheus=(f"\n    prometheus:\n      type: prometheus\n"
                                     f"      options: {{endpoints: [{{port: {prometheus_port}}}]}}"
                                     if prometheus_port else ""),
                         engine=f"engine: {engine}\n" if engine else "")
    path = tmp / f"zilla-{port}.yaml"
    path.write_text(text)
    return path


def run_streamd(tmp: Path, bootstrap: str, **kw: Any) -> Streamd:
    port = free_port()
    config = write_config(tmp, bootstrap, port, **kw)
    return Streamd(start_daemon(config, wait_ports=[port]), port)
