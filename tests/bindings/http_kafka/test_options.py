"""http-kafka's options and the `with` keys the other tests leave at their defaults, taking
effect on a daemon with the real broker: another idempotency header, window and key length, other
correlation header names (binding-wide and per route), `acks: leader_only` and `none`, and
`merge` in Zilla's patch form."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from ssekd.dev.broker import free_port
from tests.support import zilla_config as zc
from tests.support.broker import Kafka
from tests.support.daemon import Daemon, start_daemon
from tests.support.wait import wait_until
from tests.support.writes import Responder, header, read_records, request

pytestmark = [pytest.mark.daemon, pytest.mark.broker]
#: Seconds a write without reply-to is remembered: a repeat comes well within it on a loaded
#: machine too.
WINDOW = 3

def daemon_config(port: int, bootstrap: str, commands: str, fire: str, named: str,
                  replies: str, snapshots: str) -> zc.Node:
    """http-kafka with other idempotency and correlation header names, acks other than all,
    a named correlation id, and a merged fetch that patches."""
    def route(method: str, path: str, **with_: object) -> zc.Node:
        return {"when": [{"method": method, "path": path}], "exit": "cc", "with": with_}

    hk0 = {"type": "http-kafka", "kind": "proxy",
           "options": {"idempotency": {"header": "x-request-id", "window": WINDOW,
                                       "max-length": 40, "max-bytes": 65536},
                       "correlation": {"headers": {"reply-to": "app:reply-to",
                                                   "correlation-id": "app:correlation"}},
                       "max-wait": 5, "ack-timeout": 3},
           "routes": [
               route("POST", "/leader", capability="produce", topic=commands,
                     acks="leader_only", **{"reply-to": replies}, key="${idempotencyKey}"),
               route("POST", "/fire", capability="produce", topic=fire, acks="none"),
               route("POST", "/named", capability="produce", topic=named,
                     **{"reply-to": replies, "correlation-id": "requestId"}),
               route("GET", "/merged", capability="fetch", topic=snapshots,
                     merge={"content-type": "application/json",
                            "patch": {"initial": "[]", "path": "/-"}})]}
    return zc.zilla("options", {
        "tcp0": zc.tcp_server(port, "http0"), "http0": zc.http_server("hk0"), "hk0": hk0,
        **zc.kafka(bootstrap, cache={"bootstrap": [replies]}, cache_client="cc",
                   cache_server="cs", client="kc")}, telemetry=zc.stdout_telemetry())


def test_other_header_names_acks_window_and_patch_merge(kafka: Kafka, tmp_path: Path,
                                                        daemons: list[Daemon]) -> None:
    commands, fire, named = (kafka.topic(1, prefix=p) for p in ("commands", "fire", "named"))
    replies, snapshots = kafka.topic(1, prefix="replies"), kafka.topic(1, compact=True)
    port = free_port()
    config = tmp_path / "zilla.yaml"
    zc.write(config, daemon_config(port, kafka.bootstrap, commands, fire, named, replies,
                                   snapshots))
    leader = Responder(kafka.bootstrap, commands, "app:correlation", "app:reply-to").start()
    by_name = Responder(kafka.bootstrap, named, "requestId", "app:reply-to").start()
    daemon = start_daemon(config, wait_ports=[port], extra_args=["--workers", "1"])
    daemons.append(daemon)
    try:
        key = f"k-{uuid.uuid4()}"
        for _ in range(2):  # the second is a repeat: recognised by x-request-id
            got = request(port, "POST", "/leader", {"X-Request-Id": key}, b"one")
            assert (got.status, got.body) == (201, b"one"), got
        (record,) = leader.records
        assert record.key() == key.encode()
        assert header(record, "app:reply-to") == replies.encode()
        correlation = header(record, "app:correlation")
        assert correlation is not None and correlation.startswith(key.encode() + b"-")
        assert header(record, "zilla:correlation-id") is None

        # `max-length: 40`: a key of 41 characters is refused before anything is written
        refused = request(port, "POST", "/named", {"X-Request-Id": "r" * 41}, b"two")
        assert refused.status == 400 and b"1 to 40 characters" in refused.body, refused

        got = request(port, "POST", "/named", {"X-Request-Id": "n1"}, b"two")
        assert got.status == 201, got
        (named_record,) = by_name.records
        assert (header(named_record, "requestId") or b"").startswith(b"n1-")

        # acks none: answered at once; a repeat within the window is not written again,
        # after it, a write without reply-to is no longer recognised and is written
        first = time.monotonic()
        assert request(port, "POST", "/fire", {"X-Request-Id": "f1"}, b"x").status == 204
        assert request(port, "POST", "/fire", {"X-Request-Id": "f1"}, b"x").status == 204
        assert time.monotonic() - first < WINDOW, "the repeat came after the window"
        time.sleep(WINDOW + 0.2)
        assert request(port, "POST", "/fire", {"X-Request-Id": "f1"}, b"x").status == 204
        wait_until(lambda: len(read_records(kafka.bootstrap, fire)) == 2, 10)

        kafka.produce(snapshots, b'{"a": 1}', b"a")
        kafka.produce(snapshots, b'{"b": 2}', b"b")
        kafka.flush()
        wait_until(lambda: json.loads(request(port, "GET", "/merged").body) ==
                   [{"a": 1}, {"b": 2}], 10)
    finally:
        leader.stop()
        by_name.stop()
