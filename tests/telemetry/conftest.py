"""Fixtures for the telemetry tests: the streaming test daemon with a prometheus exporter, and a
real Prometheus server scraping it (helpers in `tests.support.telemetry`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ssekd.dev.broker import Broker, stop_process
from tests.support.telemetry import Prometheus, Telemetryd, run_telemetryd, start_prometheus


@pytest.fixture(scope="module")
def telemetryd(kafka_broker: Broker,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Telemetryd]:
    t = run_telemetryd(tmp_path_factory.mktemp("telemetryd"), kafka_broker.bootstrap)
    yield t
    t.daemon.stop()


@pytest.fixture
def prometheus(telemetryd: Telemetryd, tmp_path: Path) -> Iterator[Prometheus]:
    p = start_prometheus(tmp_path, telemetryd.metrics_port)
    yield p
    stop_process(p.process, 10)
