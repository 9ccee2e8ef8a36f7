"""Fixtures shared by every test folder: the real daemon on loopback ports, the session's broker,
the throwaway PKI. Only fixtures (and three hooks) live here; the helpers they use are in
`tests/support/`.

Tests that start a daemon are marked `daemon`, tests that need the broker `broker` (see
pyproject.toml); a test using one of the fixtures below without its mark is a collection error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from ssekd.dev.broker import Broker, free_port, start_broker
from tests.support.broker import Kafka
from tests.support.daemon import Daemon, start_daemon
from tests.support.hotpath import hot_path  # noqa: F401 - a fixture
from tests.support.pki import ENV, Pki, make_pki, tls_config
from tests.support.scheduling import SparkInOneProcess
from tests.support.static_site import write_site
from tests.support.streamd import Streamd, run_streamd

#: Fixture -> the mark a test using it must carry (directly or through another fixture).
NEEDS_MARK = {"run_daemon": "daemon", "site": "daemon", "streamd": "daemon", "tls_daemon": "daemon",
              "kafka_broker": "broker"}


#: Test files that take minutes, longest first: `make test` runs them first. Its processes
#: take whole files in the order collected, so a long file collected last ran alone at the end
#: while the others had finished (the Spark cluster's 3 to 4 minutes, the image build's
#: 2 on a clean machine, the README's commands' 1.5): begun first, the short files fill in
#: beside them.
LONG_FIRST = ("tests/spark/test_cluster.py", "tests/deploy/test_image.py",
              "tests/e2e/test_readme.py", "tests/e2e/test_kafka_outage.py",
              "tests/spark/test_snapshot.py", "tests/spark/test_malformed_and_cli.py")


def _long_first(item: pytest.Item) -> int:
    path = item.nodeid.split("::", 1)[0]
    return LONG_FIRST.index(path) if path in LONG_FIRST else len(LONG_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_long_first)  # stable: the rest keep their order
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        for fixture, mark in NEEDS_MARK.items():
            if fixture in fixtures and item.get_closest_marker(mark) is None:
                raise pytest.UsageError(f"{item.nodeid} uses `{fixture}` and must be marked "
                                        f"`{mark}`")


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile` (as `make test` runs) with the Spark files in one process
    (tests/support/scheduling.py says why); any other `--dist` as pytest-xdist has it."""
    if config.getvalue("dist") != "loadfile":
        return None
    return SparkInOneProcess(config, log)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Figures that passing tests measured (`record_property("figure", text)`), such as the
    container image's build time and size, in their own section at the end of `make test`:
    `pytest -q` shows nothing a passing test prints. The properties travel in the reports, so
    they arrive from pytest-xdist's workers too."""
    figures = [str(value) for report in terminalreporter.stats.get("passed", [])
               for name, value in getattr(report, "user_properties", ()) if name == "figure"]
    if figures:
        terminalreporter.section("figures measured")
        for figure in figures:
            terminalreporter.write_line(figure)


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    """Collects daemons started by a test and stops them afterwards, whatever happened."""
    started: list[Daemon] = []
    yield started
    for d in started:
        d.stop()


@pytest.fixture
def run_daemon(daemons: list[Daemon]) -> Callable[..., Daemon]:
    """`run_daemon(config_path, env=..., wait_ports=[...])` -> a Daemon stopped after the test."""

    def run(config: Path, env: Mapping[str, str] | None = None,
            wait_ports: list[int] | None = None, **kw: Any) -> Daemon:
        d = start_daemon(config, env, wait_ports, **kw)
        daemons.append(d)
        return d

    return run


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def site(tmp_path: Path, run_daemon: Callable[..., Daemon], port: int) -> tuple[Daemon, str]:
    """The static site of `tests.support.static_site` served on `port`: (daemon, base url)."""
    config = write_site(tmp_path)
    daemon = run_daemon(config, env={"HTTP_PORT": str(port)}, wait_ports=[port])
    return daemon, f"http://localhost:{port}"


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """One tansu broker for the whole test session, on a free port; tests keep apart by topic."""
    log = tmp_path_factory.mktemp("broker") / "tansu.log"
    broker = start_broker(log_path=log)
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def kafka(kafka_broker: Broker) -> Kafka:
    """Topic creation and production against the session broker."""
    return Kafka(kafka_broker.bootstrap)


@pytest.fixture(scope="module")
def streamd(kafka_broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Streamd]:
    """One daemon per test module, with every route of the streaming config, on the session
    broker."""
    s = run_streamd(tmp_path_factory.mktemp("streamd"), kafka_broker.bootstrap,
                    live_topics=("live-a", "live-b"))
    yield s
    s.daemon.stop()


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """Keys, certificates and PKCS#12 stores made once for the session."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def tls_daemon(tmp_path: Path, pki: Pki,
               run_daemon: Callable[..., Daemon]) -> Callable[..., tuple[Daemon, int, int]]:
    """`tls_daemon("{keys: [localhost], alpn: [h2, http/1.1]}", ...)` -> (daemon, tls, h2c)."""

    def start(tls_options: str, **kw: Any) -> tuple[Daemon, int, int]:
        config, tls_port, clear_port = tls_config(tmp_path, pki, tls_options, **kw)
        daemon = run_daemon(config, env=ENV, wait_ports=[tls_port, clear_port])
        return daemon, tls_port, clear_port

    return start
