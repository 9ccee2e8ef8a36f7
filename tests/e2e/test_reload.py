"""SIGHUP with a new route: the route answers at once, and an SSE stream opened before the
reload goes on receiving, without a reconnect."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.support import streamd
from tests.support import zilla_config as zc
from tests.support.broker import Kafka
from tests.support.streamd import WWW, run_streamd

pytestmark = [pytest.mark.daemon, pytest.mark.broker]


def test_open_stream_survives_a_reload_that_adds_a_route(kafka: Kafka, tmp_path: Path) -> None:
    topic = kafka.topic(2)
    s = run_streamd(tmp_path, kafka.bootstrap)
    try:
        with s.open(f"/events/{topic}") as stream:
            kafka.produce(topic, b"before", key=b"a")
            kafka.flush()
            (first,) = stream.events(1)
            assert first.data == "before"
            assert s.status("/extra/index.html") == 404  # no such route yet
            # the same config with /extra/* served from the same folder as /www/*
            changed = streamd.config(kafka.bootstrap, s.port)
            bindings = changed["bindings"]
            bindings["http"]["routes"].insert(0, zc.header_route("/extra/*", "extra_map"))
            bindings["extra_map"] = zc.files(WWW, prefix="/extra/", mapper="extra_map")["extra_map"]
            zc.write(s.daemon.config, changed)
            s.daemon.signal(signal.SIGHUP)
            s.daemon.wait_output("CONFIG_RELOADED")
            kafka.produce(topic, b"after", key=b"a")
            kafka.flush()
            (second,) = stream.events(1)
            assert second.data == "after"
            assert second.id != first.id
        assert s.status("/extra/index.html") == 200
        assert "CONFIG_RELOAD_FAILED" not in s.daemon.output()
    finally:
        s.daemon.stop()

