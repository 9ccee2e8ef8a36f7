"""The real daemon with a config made for the streaming tests: every sse-kafka route they use,
on a free loopback port, reading the given broker."""

from __future__ import annotations

import http.client
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ssekd.dev.broker import free_port
from tests.support import zilla_config as zc
from tests.support.daemon import Daemon, start_daemon
from tests.support.sse import SseClient

WWW = Path(__file__).resolve().parents[2] / "www"

#: sse-kafka's routes in the streaming tests' config, one per kind of route they read.
ROUTES = [
    zc.sse_route("/events/{topic}"),
    zc.sse_route("/keyed/{topic}", event={"id": '["${base64(key)}","${etag}"]'}),
    zc.sse_route("/keytext/{topic}", event={"id": '["${key}","${etag}"]'}),
    zc.sse_route("/byvalue/{topic}/{owner}",
                 filters=[{"value": {"/owner": "${params.owner}", "/kind": ["order", "refund"]}},
                          {"value": {"/all": True}}]),
    zc.sse_route("/item", "${query.topic}", filters=[{"key": "${headers.x-item}"}]),
    zc.sse_route("/bykey/{topic}/{key}", filters=[{"key": "${params.key}"}]),
    zc.sse_route("/byheader/{topic}", filters=[{"headers": {"colour": "red"}}]),
    zc.sse_route("/keyheader/{topic}",
                 filters=[{"key": "a", "headers": {"colour": "red", "size": "big"}}]),
    zc.sse_route("/anyof/{topic}", filters=[{"key": "a"}, {"headers": {"colour": "blue"}}]),
    zc.sse_route("/packed/{topic}", compress=False),
    zc.sse_route("/tiny/{topic}", exit="tiny_cache_client"),
    zc.sse_route("/live/{topic}", exit="live_cache_client"),
    # several topics on one stream: `/many/a,b`, and the fixed `feed` plus the path's
    zc.sse_route("/many/{topics}", ["${params.topics}"]),
    zc.sse_route("/manyfield/{topics}", ["${params.topics}"],
                 event={"id": "${etag}", "topic": "field"}),
    zc.sse_route("/manybykey/{topics}/{key}", ["${params.topics}"],
                 filters=[{"key": "${params.key}"}]),
    # the catch-up signal (an ssekd addition), on a keyed stream and on several filtered topics
    zc.sse_route("/caughtup/{topic}",
                 event={"id": '["${base64(key)}","${etag}"]', "caught-up": True}),
    zc.sse_route("/manycaughtup/{topics}/{key}", ["${params.topics}"],
                 filters=[{"key": "${params.key}"}], event={"caught-up": True}),
]


def config(bootstrap: str, port: int, idle: float = 15, retry: int | None = None,
           max_messages: int = 100000, max_bytes: int = 64 * 1024 * 1024,
           live_topics: tuple[str, ...] = (), health: bool = False,
           prometheus_port: int | None = None, engine: str = "",
           bootstrap_topics: tuple[str, ...] = (), compression: str | None = None,
           partition_wait: float | None = None, tcp_options: str = "",
           www: Path = WWW, properties: zc.Node | None = None) -> zc.Node:
    """The streaming tests' config as data (the arguments as `write_config` says)."""
    sse: dict[str, object] = {"max-idle-time": idle}
    if retry is not None:
        sse["retry"] = retry
    if compression is not None:
        sse["compression"] = zc.flow(compression)
    cache: zc.Node = {"cache": {"max-messages": max_messages, "max-bytes": max_bytes}}
    if bootstrap_topics:
        cache["bootstrap"] = list(bootstrap_topics)
    if partition_wait is not None:
        cache["partition-wait"] = partition_wait
    extra = {**zc.kafka(bootstrap, cache={"cache": {"max-messages": 5}},
                        cache_client="tiny_cache_client", cache_server="tiny_cache_server"),
             **zc.kafka(bootstrap, cache={"topics": zc.topics_live(live_topics)},
                        cache_client="live_cache_client", cache_server="live_cache_server",
                        client="live_kafka_client", properties=properties)}
    del extra["kafka_client"]
    return zc.sse_stack(
        port, bootstrap, routes=ROUTES, www=www, cache=cache, extra=extra, properties=properties,
        http=zc.http_server(health={"details": True}) if health else None,
        sse=zc.sse_server(options=sse),
        tcp_options=zc.flow("{" + tcp_options.lstrip(", ") + "}") if tcp_options else None,
        telemetry=zc.stdout_telemetry(prometheus_port=prometheus_port), engine=engine or None)




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
                 tcp_options: str = "", www: Path = WWW,
                 properties: zc.Node | None = None) -> Path:
    """`tcp_options` adds to the tcp server's options (`, proxy-protocol: {...}`), `health`
    adds the http binding's health endpoints (default paths, with the `details` a test reads
    what readiness waits for from), `prometheus_port` a prometheus exporter, `engine` the
    `engine` section (YAML flow mapping such as `{workers: 2, drain: 3}`), `bootstrap_topics`
    the cache's bootstrap list, `compression` the sse server's `compression` (a YAML flow
    mapping such as `{}`), `partition_wait` the cache's `partition-wait`, `www` the folder
    served at /www/, `properties` the kafka clients' (librdkafka's) instead of the fast fetch."""
    text = zc.dump(config(bootstrap, port, idle, retry, max_messages, max_bytes, live_topics,
                          health, prometheus_port, engine, bootstrap_topics, compression,
                          partition_wait, tcp_options, www, properties))
    path = tmp / f"zilla-{port}.yaml"
    path.write_text(text)
    return path


def run_streamd(tmp: Path, bootstrap: str, **kw: Any) -> Streamd:
    port = free_port()
    config = write_config(tmp, bootstrap, port, **kw)
    return Streamd(start_daemon(config, wait_ports=[port]), port)
