"""The engine's reload logic, driven in-process with a memory reactor: what is kept, what is
rebuilt, and that sockets survive."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from twisted.application.service import Service
from twisted.internet.error import CannotListenError
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.filesystem import FileServing
from ssekd.dev.certs import issue, make_ca, write_store
from ssekd.engine import Engine
from ssekd.spi.binding import BindingType, KindSpec
from ssekd.spi.plugins import Registry, discover
from ssekd.telemetry.events import EventLog

CONFIG = """\
name: t
vaults:
  keys:
    type: filesystem
    options:
      keys: {{store: server.p12, password: pw}}
bindings:
  tcp0:
    type: tcp
    kind: server
    options: {{host: 127.0.0.1, port: [7001, 7002]}}
    routes:
      - when: [{{port: 7001}}]
        exit: tls0
    exit: http0
  tls0:
    type: tls
    kind: server
    vault: keys
    options: {{keys: [localhost], alpn: [h2, http/1.1]}}
    exit: http0
  http0:
    type: http
    kind: server
    exit: map0
  map0:
    type: http-filesystem
    kind: proxy
    routes:
      - when: [{{path: "/{{path}}"}}]
        exit: fs0
        with: {{path: "${{params.path}}"}}
  fs0:
    type: filesystem
    kind: server
    options: {{location: {location}}}
"""


def setup(tmp_path: Path, location: str = "www") -> tuple[Path, Engine, MemoryReactorClock]:
    (tmp_path / "www").mkdir(exist_ok=True)
    (tmp_path / "other").mkdir(exist_ok=True)
    ca = make_ca()
    write_store(tmp_path / "server.p12", "localhost", issue(ca, ["localhost"]), "pw")
    config = tmp_path / "zilla.yaml"
    config.write_text(CONFIG.format(location=location))
    reactor = MemoryReactorClock()
    engine = Engine(config, reactor=reactor, events=EventLog("t"), print_events=False)
    engine.startService()
    return config, engine, reactor


def test_unchanged_config_keeps_everything(tmp_path: Path) -> None:
    config, engine, reactor = setup(tmp_path)
    before = dict(engine.graph.runtimes)  # type: ignore[union-attr]
    assert [p[0] for p in reactor.tcpServers] == [7001, 7002]
    assert engine.reload()
    assert engine.graph.reused == set(before)  # type: ignore[union-attr]
    assert len(reactor.tcpServers) == 2, "no socket reopened"


def test_changed_leaf_rebuilds_its_ancestors_only(tmp_path: Path) -> None:
    config, engine, reactor = setup(tmp_path)
    old = dict(engine.graph.runtimes)  # type: ignore[union-attr]
    config.write_text(CONFIG.format(location="other"))
    assert engine.reload()
    graph = engine.graph
    assert graph is not None
    assert graph.reused == set(), "fs0 changed; every binding leads to it"
    assert graph.runtimes["fs0"] is not old["fs0"]
    assert len(reactor.tcpServers) == 2, "ports stay, only the factory behind them changes"


def test_rotated_certificate_rebuilds_tls(tmp_path: Path) -> None:
    config, engine, reactor = setup(tmp_path)
    old = dict(engine.graph.runtimes)  # type: ignore[union-attr]
    store = tmp_path / "server.p12"
    write_store(store, "localhost", issue(make_ca(), ["localhost"]), "pw")
    st = store.stat()
    os.utime(store, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert engine.reload()
    graph = engine.graph
    assert graph is not None
    assert graph.runtimes["tls0"] is not old["tls0"]
    assert {"http0", "map0", "fs0"} <= graph.reused


def test_bad_reload_keeps_the_old_graph(tmp_path: Path) -> None:
    config, engine, reactor = setup(tmp_path)
    graph = engine.graph
    config.write_text("name: t\nbindings: {}\n")
    assert not engine.reload()
    assert engine.graph is graph
    assert any("CONFIG_RELOAD_FAILED" in line for line in engine.events.recent)


def test_removed_port_is_closed_and_new_one_opened(tmp_path: Path) -> None:
    config, engine, reactor = setup(tmp_path)
    config.write_text(CONFIG.format(location="www").replace("[7001, 7002]", "[7001, 7003]"))
    assert engine.reload()
    assert sorted(engine.listening_ports()) == [("127.0.0.1", 7001), ("127.0.0.1", 7003)]
    assert [p[0] for p in reactor.tcpServers] == [7001, 7002, 7003]


class UnprivilegedReactor(MemoryReactorClock):
    """Refuses ports under 1024, as the kernel does once twistd has dropped root (`--uid`)."""

    def listenTCP(self, port: int, factory: Any, backlog: int = 50,
                  interface: str = "") -> Any:
        if port < 1024:
            raise CannotListenError(interface, port, PermissionError(13, "Permission denied"))
        return super().listenTCP(port, factory, backlog, interface)


class FilesService(Service):
    """A files binding that is also a service, to see which services a reload leaves running."""

    def serve(self, request: Any, path: str) -> bytes:
        return b""


SERVICES = Registry({**discover().types, "svc": BindingType("svc", {"server": KindSpec(
    role=FileServing, build=lambda ctx, b: FilesService(), options={"type": "object"})})})

SERVICE_CONFIG = """\
name: t
bindings:
  tcp0: {{type: tcp, kind: server, options: {{host: 127.0.0.1, port: {ports}}}, exit: http0}}
  http0: {{type: http, kind: server, exit: map0}}
  map0: {{type: http-filesystem, kind: proxy, exit: svc0}}
  svc0: {{type: svc, kind: server, options: {{n: {n}}}}}
"""


def test_a_reload_that_cannot_listen_starts_nothing(tmp_path: Path) -> None:
    """Under `--uid`, a reload that adds port 80 fails: the old graph stays, sockets and
    services alike, and none of the new graph's services is left running."""
    config = tmp_path / "zilla.yaml"
    config.write_text(SERVICE_CONFIG.format(ports="[7001]", n=1))
    engine = Engine(config, reactor=UnprivilegedReactor(), registry=SERVICES,
                    events=EventLog("t"), print_events=False)
    engine.privilegedStartService()
    engine.startService()
    graph = engine.graph
    assert graph is not None
    old = graph.runtimes["svc0"]
    assert isinstance(old, FilesService)
    assert list(engine) == [old] and old.running
    config.write_text(SERVICE_CONFIG.format(ports="[7001, 80]", n=2))
    assert not engine.reload()
    assert engine.graph is graph
    assert list(engine) == [old] and old.running, "no service of the refused graph is running"
    assert engine.listening_ports() == {("127.0.0.1", 7001): 7001}
    assert any("CONFIG_RELOAD_FAILED CannotListenError" in line and ":80" in line
               for line in engine.events.recent), engine.events.recent


def test_listening_sockets_queue_a_reconnect_storm(tmp_path: Path) -> None:
    """A thousand browsers reconnecting at once must find room in the accept queue: with
    Twisted's default backlog of 50 their SYNs were dropped and retried seconds later."""
    from ssekd.engine import LISTEN_BACKLOG

    _, _, reactor = setup(tmp_path)
    assert LISTEN_BACKLOG >= 1024
    assert [p[2] for p in reactor.tcpServers] == [LISTEN_BACKLOG, LISTEN_BACKLOG]


def _named(ctx: Any, b: Any) -> FilesService:
    service = FilesService()
    service.setName(b.name)  # as the sse server and the kafka cache_server name theirs
    return service


NAMED = Registry({**discover().types, "svc": BindingType("svc", {"server": KindSpec(
    role=FileServing, build=_named, options={"type": "object"})})})


def test_a_rebuilt_service_takes_over_its_predecessors_name(tmp_path: Path) -> None:
    """A binding that runs as a named service and is rebuilt by a reload (its config changed)
    replaces the old one: the old stops, the new runs, under the same name."""
    config = tmp_path / "zilla.yaml"
    config.write_text(SERVICE_CONFIG.format(ports="[7001]", n=1))
    engine = Engine(config, reactor=MemoryReactorClock(), registry=NAMED, events=EventLog("t"),
                    print_events=False)
    engine.startService()
    old = engine.graph.runtimes["svc0"]  # type: ignore[union-attr]
    config.write_text(SERVICE_CONFIG.format(ports="[7001]", n=2))
    assert engine.reload(), engine.events.recent
    new = engine.graph.runtimes["svc0"]  # type: ignore[union-attr]
    assert isinstance(old, FilesService) and isinstance(new, FilesService) and new is not old
    assert list(engine) == [new] and engine.getServiceNamed("svc0") is new
    assert new.running and not old.running
