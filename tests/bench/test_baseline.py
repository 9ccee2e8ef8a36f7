"""The benchmarks' baseline bridge (bench/baseline/app.py) is a working SSE server: it streams a
topic, resumes after `Last-Event-ID` from its ring buffer, and follows new records live. A
baseline that served nothing would make every comparison in bench/fanout meaningless."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ssekd.dev.broker import free_port, port_open
from tests.support.broker import Kafka
from tests.support.sse import SseClient
from tests.support.wait import wait_until

APP = Path(__file__).resolve().parents[2] / "bench" / "baseline" / "app.py"


@pytest.mark.broker
def test_baseline_streams_resumes_from_an_id_and_follows_live(kafka: Kafka) -> None:
    topic = kafka.topic(partitions=1)
    kafka.send(topic, [b"v0", b"v1", b"v2"])
    port = free_port()
    app = subprocess.Popen([sys.executable, str(APP), "--bootstrap", kafka.bootstrap,
                            "--port", str(port)])
    try:
        wait_until(lambda: port_open("127.0.0.1", port) or app.poll() is not None, timeout=20)
        assert app.poll() is None
        with SseClient(port, f"/events/{topic}") as first:
            got = first.events(3)
            assert [e.data for e in got] == ["v0", "v1", "v2"]
            assert [e.id for e in got] == ["0-0", "0-1", "0-2"]
            kafka.send(topic, [b"v3"])
            live = first.events(1)
            assert [(e.id, e.data) for e in live] == [("0-3", "v3")]
        with SseClient(port, f"/events/{topic}", {"Last-Event-ID": "0-1"}) as resumed:
            got = resumed.events(2)
            assert [(e.id, e.data) for e in got] == [("0-2", "v2"), ("0-3", "v3")]
            assert resumed.next_event(timeout=0.5) is None  # nothing twice, nothing more
    finally:
        app.terminate()
        app.wait(10)
