"""Specs held by a schema registry (a `schema-registry` catalog, the registry of
tests/support/schema_registry.py on a real socket): read by subject and `version`, a problem in
one said at `<catalog>:<subject>@<version>:<line>`, and a reload - on the reactor thread - never
waits for the registry: it uses the text held and asks again in the background, and a new text
is a reload of its own."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from twisted.internet.testing import MemoryReactorClock

from ssekd.catalogs.catalog import Schema
from ssekd.config import ConfigError
from ssekd.config.compose import RemoteTexts
from ssekd.config.load import load_config
from ssekd.config.model import Config
from ssekd.engine import Engine
from ssekd.spi.plugins import discover
from ssekd.telemetry.events import EventLog
from tests.support.asyncapi_example import EXAMPLE
from tests.support.schema_registry import Registry

SSE = (EXAMPLE / "specs" / "sse-asyncapi.yaml").read_text()
#: The second version of the SSE spec: its channel moved.
SSE_V2 = SSE.replace("    address: /events", "    address: /v2/events")

Asked = list[tuple[Callable[[], Schema], Callable[[Schema], None], Callable[[Exception], None]]]


@pytest.fixture
def registry() -> Iterator[Registry]:
    r = Registry().start()
    r.register("sse", SSE, kind="JSON")
    yield r
    r.stop()


def example(folder: Path, registry: Registry, version: str | None = None) -> Path:
    """Zilla's example with its SSE spec read from `registry` (subject `sse`, at `version`
    when given); the Kafka spec stays a file."""
    shutil.copytree(EXAMPLE, folder, dirs_exist_ok=True)
    config = folder / "zilla.yaml"
    text = (EXAMPLE / "zilla.yaml").read_text()
    text = text.replace("catalogs:\n", f"catalogs:\n  registry:\n    type: schema-registry\n"
                                       f"    options: {{url: '{registry.url}'}}\n")
    pinned = f"\n              version: {version}" if version else ""
    text = text.replace("            host_filesystem:\n              subject: sse",
                        f"            registry:\n              subject: sse{pinned}")
    config.write_text(text)
    return config


def path_of(config: Config) -> str:
    [route] = config.bindings["south_kafka_proxy"].routes
    return str(route.when[0]["path"])


def test_specs_from_a_registry_by_subject_and_version(tmp_path: Path,
                                                      registry: Registry) -> None:
    registry.register("sse", SSE_V2, kind="JSON")
    latest = load_config(example(tmp_path / "a", registry), discover())
    assert path_of(latest) == "/v2/events"
    assert latest.bindings["north_sse_server.http_server"].routes[0].when == (
        {"headers": {":path": "/v2/events", ":method": "GET"}},)
    first = load_config(example(tmp_path / "b", registry, version="1"), discover())
    assert path_of(first) == "/events"
    assert "/subjects/sse/versions/1" in registry.requests
    # a spec with a problem: said at the registry's subject and version, and the spec's line
    registry.register("sse", SSE.replace('method: "GET"', 'method: "POST"'), kind="JSON")
    with pytest.raises(ConfigError) as e:
        load_config(example(tmp_path / "c", registry), discover())
    line = SSE.splitlines().index('        method: "GET"') + 1
    assert [str(i) for i in e.value.issues] == [
        f"registry:sse@latest:{line}: operations.receiveEvents.bindings.x-zilla-sse.method: "
        f"SSE operation 'receiveEvents': an event stream is opened with GET, not POST (spec "
        f"'sse_api')"]
    # a version the registry does not have: at each line of the config that names it
    with pytest.raises(ConfigError) as e:
        load_config(example(tmp_path / "d", registry, version="9"), discover())
    assert [(i.line, i.path) for i in e.value.issues] == [
        (26, "bindings.north_sse_server.options.specs.sse_api.catalog.registry.subject"),
        (39, "bindings.south_kafka_proxy.options.specs.sse_api.catalog.registry.subject")]
    assert all("subject 'sse' version 9 not found" in str(i) for i in e.value.issues)


def test_a_reload_never_waits_for_the_registry_and_a_new_version_is_a_reload(
        tmp_path: Path, registry: Registry) -> None:
    config = example(tmp_path, registry)
    engine = Engine(config, reactor=MemoryReactorClock(), events=EventLog("t"),
                    print_events=False)
    asked: Asked = []
    # the background questions are held here and answered when the test says (the daemon
    # runs them on the reactor's thread pool)
    engine.texts.run = lambda fetch, answered, failed: asked.append((fetch, answered, failed))
    engine.texts.blocking = False  # what startService does: loads now run on the reactor

    def reloads() -> list[str]:
        return [line for line in engine.events.recent if "CONFIG_RELOAD" in line]

    def answer_all() -> None:
        while asked:
            fetch, answered, _ = asked.pop(0)
            answered(fetch())

    registry.register("sse", SSE_V2, kind="JSON")
    requests = len(registry.requests)
    assert engine.reload()
    assert len(registry.requests) == requests, "the reload asked the registry on its thread"
    assert engine.graph is not None and path_of(engine.graph.config) == "/events"  # held
    assert len(asked) == 1, "one question in the background"
    answer_all()  # version 2 arrives: a reload with it
    assert engine.graph is not None and path_of(engine.graph.config) == "/v2/events"
    assert len(reloads()) == 2 and all("CONFIG_RELOADED" in line for line in reloads())
    answer_all()  # the same text again: nothing to do
    assert len(reloads()) == 2

    # a version never read before cannot be waited for: that reload fails, and the one its
    # answer brings succeeds
    example(tmp_path, registry, version="1")
    assert not engine.reload()
    assert "is being fetched (a reload must not wait for the registry)" in reloads()[-1]
    answer_all()
    assert "CONFIG_RELOADED" in reloads()[-1], reloads()
    assert path_of(engine.graph.config) == "/events"


def test_a_failed_background_question_keeps_the_text_held() -> None:
    """A registry that does not answer leaves the held text in use and asks again at the next
    load (one question at a time per text)."""
    asked: Asked = []
    changes: list[None] = []
    texts = RemoteTexts(blocking=False, changed=lambda: changes.append(None),
                        run=lambda fetch, answered, failed: asked.append((fetch, answered,
                                                                          failed)))
    held = Schema("sse", 1, 1, "old")
    texts.held[("r", "http://x", "sse", "latest")] = held

    class Down:
        name = "r"

        def fetch_blocking(self, subject: str, version: str | int) -> Schema:
            raise AssertionError("not on the reactor thread")

    catalog = Down()
    assert texts.fetch(catalog, "http://x", "sse", "latest") is held  # type: ignore[arg-type]
    assert texts.fetch(catalog, "http://x", "sse", "latest") is held  # type: ignore[arg-type]
    assert len(asked) == 1, "one question at a time"
    asked.pop()[2](OSError("refused"))
    assert changes == []
    assert texts.fetch(catalog, "http://x", "sse", "latest") is held  # type: ignore[arg-type]
    assert len(asked) == 1, "asked again after the failure"
