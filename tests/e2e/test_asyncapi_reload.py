"""A changed AsyncAPI spec is a changed config: with `--watch` an edit of a spec file reloads the
daemon (as SIGHUP does), the bindings the change leaves alone are kept (the Kafka consumer among
them), a stream of a route that changed ends as any would (a finished 200: its client comes back
with its last id to the new route), and a spec that no longer composes is refused at its file and
line while the running config goes on serving."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from ssekd.dev.broker import free_port
from tests.support.asyncapi_example import adapt
from tests.support.broker import Kafka
from tests.support.daemon import Daemon
from tests.support.jwt import CurlStream
from tests.support.wait import wait_until

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

FILTER = ("      x-zilla-sse-kafka:\n"
          "        filters:\n"
          "          - headers:\n"
          "              my-app-header: \"7\"\n")
SSE = '      x-zilla-sse:\n        method: "GET"\n'


def _ids(stream: CurlStream) -> list[int]:
    return [json.loads(line[5:])["id"] for line in stream.text.splitlines()
            if line.startswith("data:")]


def test_a_spec_edit_reloads_keeps_what_it_did_not_change_and_a_bad_one_is_refused(
        tmp_path: Path, kafka: Kafka, run_daemon: Callable[..., Daemon]) -> None:
    port = free_port()
    config = adapt(tmp_path, port, kafka.bootstrap)
    topic = kafka.topic(partitions=1)  # a topic of this test's own on the session broker
    kafka_spec = config.parent / "specs" / "kafka-asyncapi.yaml"
    kafka_spec.write_text(kafka_spec.read_text().replace('address: "events"',
                                                         f'address: "{topic}"'))
    sse_spec = config.parent / "specs" / "sse-asyncapi.yaml"
    daemon = run_daemon(config, wait_ports=[port],
                        extra_args=["--watch", "--watch-interval", "0.2"])
    url = f"http://localhost:{port}/events"
    before = CurlStream(url)
    streams = [before]
    try:
        wait_until(lambda: "BINDING_HTTP_REQUEST_ACCEPTED" in daemon.output(), 10,
                   what="the stream was not opened")
        # the SSE spec gains a filter: only records with my-app-header 7 for new streams
        sse_spec.write_text(sse_spec.read_text().replace(SSE, SSE + FILTER))
        daemon.wait_output("CONFIG_RELOADED")
        reloaded = [line for line in daemon.output().splitlines() if "CONFIG_RELOADED" in line]
        # the Kafka side (cache_client, cache_server, client) is kept; the sse-kafka binding
        # changed, and so the bindings in front of it are new too (as in any config; the
        # listener keeps its socket)
        assert reloaded[0].endswith("(3 bindings kept)"), reloaded
        after = CurlStream(url)
        streams.append(after)
        wait_until(lambda: daemon.output().count("BINDING_HTTP_REQUEST_ACCEPTED") >= 2, 10,
                   what="the second stream was not opened")
        for i, header in enumerate([b"7", b"8", b"7"]):
            kafka.produce(topic, json.dumps({"id": i, "name": "x"}).encode(), key=b"k%d" % i,
                          headers=[("my-app-header", header)])
        kafka.flush()
        after.wait_for('data:{"id": 2,', timeout=20)
        assert _ids(after) == [0, 2]
        # opened before the reload on the route that changed: ended, to come back to the new
        before.wait_end()
        assert "status=200 duration_s=" in daemon.output() and "why=drain" in daemon.output()
        assert daemon.output().count("BINDING_KAFKA_BROKER_CONNECTED") == 1  # consumer kept

        # a Kafka spec that no longer fits: refused, with the spec's file and line
        good = kafka_spec.read_text()
        kafka_spec.write_text(good.replace("    action: receive", "    action: send"))
        daemon.wait_output("CONFIG_RELOAD_FAILED")
        failed = [line for line in daemon.output().splitlines()
                  if "CONFIG_RELOAD_FAILED" in line]
        assert f"{kafka_spec}:19: operations.receiveEvents.action: Kafka operation " \
               f"'receiveEvents' is 'send'" in failed[0], failed
        still = CurlStream(url)  # the running config goes on serving
        streams.append(still)
        still.wait_for('data:{"id": 2,', timeout=20)
        assert _ids(still) == [0, 2]

        # fixed again, and reloaded by SIGHUP this time (the watcher sees the edit too)
        kafka_spec.write_text(good)
        daemon.signal(signal.SIGHUP)
        daemon.wait_output("CONFIG_RELOADED", count=2)
        assert daemon.alive()
    finally:
        for s in streams:
            s.proc.kill()
