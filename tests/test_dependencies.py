"""What a binding depends on outside itself is its kind's to say (`KindSpec.depends`), and the
engine and the loader ask it: a binding of a kind the engine has never heard of, naming a guard
in an option of its own, is rebuilt on reload when that guard changes and kept when it does
not, and naming a guard that does not exist is a config error at that option's line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.filesystem import FileServing
from ssekd.bindings.http import BINDING as HTTP
from ssekd.bindings.kafka import BINDING as KAFKA
from ssekd.config.errors import ConfigError
from ssekd.dev.certs import issue, make_ca, write_store
from ssekd.engine import Engine
from ssekd.spi.binding import BindingType, Dependencies, KindSpec
from ssekd.spi.plugins import Registry, discover
from ssekd.telemetry.events import EventLog
from tests.support.jwt import rsa_key


class Checker:
    """The runtime of a `checker`: it would check tokens with the guard its options name."""

    def serve(self, request: Any, path: str) -> bytes:
        return b""


def _depends(options: Mapping[str, Any]) -> Dependencies:
    """A `checker` names its guard in `options.checks`, its vault in `options.secrets` and the
    catalog it holds schemas of in `options.schemas`."""
    guards = {str(options["checks"]): ("checks",)} if "checks" in options else {}
    vaults = {str(options["secrets"]): ("secrets",)} if "secrets" in options else {}
    catalogs = {str(options["schemas"]): ("schemas",)} if "schemas" in options else {}
    return Dependencies(guards=guards, vaults=vaults, catalogs=catalogs)


CHECKER = BindingType("checker", {"server": KindSpec(
    role=FileServing, build=lambda ctx, b: Checker(), depends=_depends,
    options={"type": "object", "properties": {"checks": {"type": "string"},
                                              "secrets": {"type": "string"},
                                              "schemas": {"type": "string"}}})})

CONFIG = """\
name: t
guards:
  jwt0:
    type: jwt
    options:
      issuer: https://issuer.test
      challenge: {challenge}
      keys: {keys}
  jwt1:
    type: jwt
    options:
      issuer: https://other.test
      keys: {keys}
bindings:
  check0:
    type: checker
    kind: server
    options:
      checks: {guard}
  plain0:
    type: checker
    kind: server
    options: {{}}
"""


def _write(tmp_path: Path, challenge: int = 3, guard: str = "jwt0") -> Path:
    path = tmp_path / "zilla.yaml"
    path.write_text(CONFIG.format(challenge=challenge, guard=guard,
                                  keys=json.dumps([rsa_key().jwk])))
    return path


def _engine(path: Path) -> Engine:
    registry = Registry({**discover().types, "checker": CHECKER})
    return Engine(path, MemoryReactorClock(), registry=registry, environ={},
                  events=EventLog("t"), print_events=False)


def test_a_binding_that_names_a_guard_is_rebuilt_when_the_guard_changes(tmp_path: Path) -> None:
    path = _write(tmp_path)
    engine = _engine(path)
    engine.startService()
    before = dict(engine.graph.runtimes)  # type: ignore[union-attr]
    path.write_text(path.read_text().replace("challenge: 3", "challenge: 5"))
    assert engine.reload(), engine.events.recent
    graph = engine.graph
    assert graph is not None and "jwt0" not in graph.reused_guards
    assert graph.runtimes["check0"] is not before["check0"], "it checks with the new guard"
    assert graph.runtimes["plain0"] is before["plain0"]
    engine.stopService()


def test_a_binding_that_names_a_guard_is_kept_when_the_guard_is_unchanged(
        tmp_path: Path) -> None:
    path = _write(tmp_path)
    engine = _engine(path)
    engine.startService()
    before = dict(engine.graph.runtimes)  # type: ignore[union-attr]
    # another guard changes; the one check0 names does not
    path.write_text(path.read_text().replace("https://other.test", "https://else.test"))
    assert engine.reload(), engine.events.recent
    graph = engine.graph
    assert graph is not None and graph.reused_guards == {"jwt0"}
    assert graph.runtimes["check0"] is before["check0"]
    assert graph.reused == {"check0", "plain0"}
    engine.stopService()


def test_a_guard_an_option_names_must_exist(tmp_path: Path) -> None:
    path = _write(tmp_path, guard="jwt9")
    with pytest.raises(ConfigError) as raised:
        _engine(path)
    [issue] = raised.value.issues
    assert (issue.line, issue.path) == (19, "bindings.check0.options.checks"), str(issue)
    assert issue.message == "guard 'jwt9' used by binding 'check0' is not defined under guards"


def test_a_vault_an_option_names_must_exist(tmp_path: Path) -> None:
    path = _write(tmp_path)
    path.write_text(path.read_text().replace("      checks: jwt0\n",
                                             "      checks: jwt0\n      secrets: nope\n"))
    with pytest.raises(ConfigError) as raised:
        _engine(path)
    [issue] = raised.value.issues
    assert (issue.line, issue.path) == (20, "bindings.check0.options.secrets"), str(issue)
    assert "vault 'nope' used by binding 'check0' is not defined under vaults" in issue.message


def test_the_http_server_and_kafka_cache_server_say_what_their_options_name() -> None:
    """What the engine and the loader read of these bindings' options before: now their kinds'
    answer, and no other kind of ssekd's names anything in its options."""
    http = HTTP.kinds["server"].depends
    assert http({"authorization": {"jwt0": {}, "jwt1": {}}}) == Dependencies(
        guards={"jwt0": ("authorization", "jwt0"), "jwt1": ("authorization", "jwt1")})
    assert http({"asyncapi": {"path": "/asyncapi"}}) == Dependencies(every_catalog=True,
                                                                     whole_config=True)
    cache = KAFKA.kinds["cache_server"].depends
    assert cache({"topics": [{"name": "a", "value": {"model": "avro", "catalog": {"reg": []}}},
                             {"name": "b", "key": {"model": "json", "catalog": {"loc": []}}},
                             {"name": "c"}]}) == Dependencies(
        catalogs={"reg": ("topics", 0, "value", "catalog", "reg"),
                  "loc": ("topics", 1, "key", "catalog", "loc")}, inbound=True)
    assert cache({"topics": [{"name": "a", "value": {"model": "string"}}]}) == \
        Dependencies(every_catalog=True, inbound=True)
    for t in discover().types.values():
        for name, kind in t.kinds.items():
            if (t.name, name) not in {("http", "server"), ("kafka", "cache_server")}:
                assert kind.depends({}) == Dependencies(), (t.name, name)


VAULT_CONFIG = """\
name: t
vaults:
  keys:
    type: filesystem
    options:
      keys: {{store: {store}, password: pw}}
bindings:
  check0:
    type: checker
    kind: server
    options:
      secrets: keys
  plain0:
    type: checker
    kind: server
    options: {{}}
"""


def test_a_binding_that_names_a_vault_in_its_options_is_rebuilt_when_the_vault_changes(
        tmp_path: Path) -> None:
    ca = make_ca()
    for store in ("a.p12", "b.p12"):
        write_store(tmp_path / store, "localhost", issue(ca, ["localhost"]), "pw")
    path = tmp_path / "zilla.yaml"
    path.write_text(VAULT_CONFIG.format(store="a.p12"))
    engine = _engine(path)
    engine.startService()
    before = dict(engine.graph.runtimes)  # type: ignore[union-attr]
    assert engine.reload(), engine.events.recent
    assert engine.graph.reused == {"check0", "plain0"}  # type: ignore[union-attr]
    path.write_text(VAULT_CONFIG.format(store="b.p12"))
    assert engine.reload(), engine.events.recent
    graph = engine.graph
    assert graph is not None
    assert graph.runtimes["check0"] is not before["check0"], "it reads the vault's new store"
    assert graph.runtimes["plain0"] is before["plain0"]
    engine.stopService()


CATALOG_CONFIG = """\
name: t
catalogs:
  items:
    type: inline
    options:
      subjects:
        items: {{schema: '{{"type": "{items}"}}'}}
  other:
    type: inline
    options:
      subjects:
        other: {{schema: '{{"type": "{other}"}}'}}
bindings:
  check0:
    type: checker
    kind: server
    options:
      schemas: items
"""


def test_a_binding_that_names_a_catalog_is_rebuilt_when_that_catalog_changes(
        tmp_path: Path) -> None:
    path = tmp_path / "zilla.yaml"
    path.write_text(CATALOG_CONFIG.format(items="object", other="object"))
    engine = _engine(path)
    engine.startService()
    before = engine.graph.runtimes["check0"]  # type: ignore[union-attr]
    path.write_text(CATALOG_CONFIG.format(items="object", other="string"))
    assert engine.reload(), engine.events.recent
    graph = engine.graph
    assert graph is not None and graph.runtimes["check0"] is before, "another catalog changed"
    path.write_text(CATALOG_CONFIG.format(items="string", other="string"))
    assert engine.reload(), engine.events.recent
    graph = engine.graph
    assert graph is not None and graph.runtimes["check0"] is not before, "its schemas changed"
    engine.stopService()


class ThreadCalls(MemoryReactorClock):
    """A memory reactor the kafka client's threads may hand calls to (kept, never run: the
    test only stops the client)."""

    def __init__(self) -> None:
        super().__init__()
        self.from_threads: list[Any] = []

    def callFromThread(self, f: Any, *args: Any) -> None:  # noqa: N802
        self.from_threads.append((f, args))  # list.append: safe from another thread


KAFKA_CONFIG = """\
name: t
catalogs:
  items:
    type: inline
    options:
      subjects:
        items: {{schema: '{{"type": "{items}"}}'}}
bindings:
  cc:
    type: kafka
    kind: cache_client
    options:
      topics:
        - name: items
          value: {{model: {model}, catalog: {{items: [{{subject: items}}]}}}}
    exit: cs
  cs:
    type: kafka
    kind: cache_server
    exit: kc
  kc:
    type: kafka
    kind: client
    options: {{servers: ["127.0.0.1:9"]}}
"""


def test_a_cache_server_is_rebuilt_when_the_models_its_cache_clients_declare_change(
        tmp_path: Path) -> None:
    """The cache_server reads `items` with its cache_client's model (it has none of its own):
    a reload that changes that model, or the catalog it holds, gives the topic a new cache
    read with the new one; a reload that changes neither keeps the cache."""
    path = tmp_path / "zilla.yaml"
    path.write_text(KAFKA_CONFIG.format(items="object", model="json"))
    engine = Engine(path, ThreadCalls(), registry=discover(), environ={},
                    events=EventLog("t"), print_events=False)
    engine.startService()
    graph = engine.graph
    assert graph is not None
    before = graph.runtimes["cs"]
    assert before.models["items"].value.config.model == "json"  # type: ignore[attr-defined]
    for items, model, rebuilt in (("object", "json", False), ("string", "json", True),
                                  ("string", "string", True)):
        path.write_text(KAFKA_CONFIG.format(items=items, model=model))
        assert engine.reload(), engine.events.recent
        graph = engine.graph
        assert graph is not None and graph.runtimes["kc"] is before.client  # type: ignore
        now = graph.runtimes["cs"]
        assert (now is not before) == rebuilt, (items, model)
        assert now.models["items"].value.config.model == model  # type: ignore[attr-defined]
        before = now
    engine.stopService()
