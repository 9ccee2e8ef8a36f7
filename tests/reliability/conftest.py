"""Fixtures for the reliability tests: one daemon per module with the default limits (see
`tests.support.reliability` for its config)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ssekd.dev.broker import Broker, free_port
from tests.support.daemon import Daemon, start_daemon
from tests.support.reliability import daemon_config


@pytest.fixture(scope="module")
def served(kafka_broker: Broker, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[Daemon, int]]:
    """One daemon with the default limits for a test module: (daemon, port)."""
    port = free_port()
    config = daemon_config(tmp_path_factory.mktemp("reliability"), port, kafka_broker.bootstrap)
    daemon = start_daemon(config, wait_ports=[port])
    yield daemon, port
    daemon.stop()
