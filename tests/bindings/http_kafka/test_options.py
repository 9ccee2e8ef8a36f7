"""http-kafka's options and the `with` keys the other tests leave at their defaults, taking
effect on a daemon with the real broker: another idempotency header and window, other
correlation header names (binding-wide and per route), `acks: leader_only` and `none`, and
`merge` in Zilla's patch form."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from ssekd.dev.broker import free_port
from tests.support.broker import Kafka
from tests.support.daemon import Daemon, start_daemon
from tests.support.wait import wait_until
from tests.support.writes import Responder, header, read_records, request

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

CONFIG = """\
name: options
bindings:
  tcp0: {{type: tcp, kind: server, options: {{host: 127.0.0.1, port: {port}}}, exit: http0}}
  http0: {{type: http, kind: server, exit: hk0}}
  hk0:
    type: http-kafka
    kind: proxy
    options:
      idempotency: {{header: x-request-id, window: 1}}
      correlation: {{headers: {{reply-to: app:reply-to, correlation-id: app:correlation}}}}
      max-wait: 5
      ack-timeout: 3
    routes:
      - when: [{{method: POST, path: /leader}}]
        exit: cc
        with: {{capability: produce, topic: {commands}, acks: leader_only, reply-to: {replies},
                key: "${{idempotencyKey}}"}}
      - when: [{{method: POST, path: /fire}}]
        exit: cc
        with: {{capability: produce, topic: {fire}, acks: none}}
      - when: [{{method: POST, path: /named}}]
        exit: cc
        with: {{capability: produce, topic: {named}, reply-to: {replies},
                correlation-id: requestId}}
      - when: [{{method: GET, path: /merged}}]
        exit: cc
        with:
          capability: fetch
          topic: {snapshots}
          merge: {{content-type: application/json, patch: {{initial: "[]", path: /-}}}}
  cc: {{type: kafka, kind: cache_client, exit: cs}}
  cs: {{type: kafka, kind: cache_server, options: {{bootstrap: [{replies}]}}, exit: kc}}
  kc:
    type: kafka
    kind: client
    options: {{servers: ["{bootstrap}"], properties: {{fetch.wait.max.ms: 10}}}}
telemetry: {{exporters: {{stdout: {{type: stdout}}}}}}
"""


def test_other_header_names_acks_window_and_patch_merge(kafka: Kafka, tmp_path: Path,
                                                        daemons: list[Daemon]) -> None:
    commands, fire, named = (kafka.topic(1, prefix=p) for p in ("commands", "fire", "named"))
    replies, snapshots = kafka.topic(1, prefix="replies"), kafka.topic(1, compact=True)
    port = free_port()
    config = tmp_path / "zilla.yaml"
    config.write_text(CONFIG.format(port=port, bootstrap=kafka.bootstrap, commands=commands,
                                    fire=fire, named=named, replies=replies,
                                    snapshots=snapshots))
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

        got = request(port, "POST", "/named", {"X-Request-Id": "n1"}, b"two")
        assert got.status == 201, got
        (named_record,) = by_name.records
        assert (header(named_record, "requestId") or b"").startswith(b"n1-")

        # acks none: answered at once; a repeat within the 1 s window is not written again,
        # after it, a write without reply-to is no longer recognised and is written
        assert request(port, "POST", "/fire", {"X-Request-Id": "f1"}, b"x").status == 204
        assert request(port, "POST", "/fire", {"X-Request-Id": "f1"}, b"x").status == 204
        time.sleep(1.2)
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
