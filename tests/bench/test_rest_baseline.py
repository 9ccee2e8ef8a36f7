"""The write benchmark's baseline (bench/baseline/rest.py) is a working REST handler: a POST is
written to the commands topic and answered with the reply the service behind sends, status,
location and body. A baseline that answered without writing would make bench/write_path.py's
comparison meaningless."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ssekd.dev.broker import free_port, port_open
from tests.support.broker import Kafka
from tests.support.wait import wait_until
from tests.support.writes import Responder, header, request

APP = Path(__file__).resolve().parents[2] / "bench" / "baseline" / "rest.py"


@pytest.mark.broker
def test_rest_baseline_writes_and_answers_with_the_reply(kafka: Kafka) -> None:
    commands, replies = kafka.topic(2, prefix="commands"), kafka.topic(2, prefix="replies")
    responder = Responder(kafka.bootstrap, commands).start()
    port = free_port()
    app = subprocess.Popen([sys.executable, str(APP), "--bootstrap", kafka.bootstrap,
                            "--port", str(port), "--commands", commands, "--replies", replies])
    try:
        wait_until(lambda: port_open("127.0.0.1", port) or app.poll() is not None, timeout=20)
        assert app.poll() is None
        key = str(uuid.uuid4())
        got = request(port, "POST", "/commands", {"Idempotency-Key": key}, b'{"n": 1}')
        assert (got.status, got.headers["location"], got.body) == \
            (201, f"/items/{key}", b'{"n": 1}')
        (record,) = [r for r in responder.records if r.key() == key.encode()]
        assert record.value() == b'{"n": 1}'
        assert header(record, "zilla:reply-to") == replies.encode()
    finally:
        app.terminate()
        app.wait(10)
        responder.stop()
