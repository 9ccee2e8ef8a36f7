"""A quic server as a config makes it (the loader and the engine's graph builder, on a memory
reactor): its keys from a vault and the one a server name picks, its routes by `authority`,
the `sni` names that may choose, its options reaching the runtime, an http server's `alt-svc`,
and the configs it refuses, each at its path."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography import x509

from ssekd.bindings import quic as quic_binding
from ssekd.bindings.connection_limits import OpenConnections
from ssekd.bindings.quic.server import QuicServer
from ssekd.config import ConfigError
from ssekd.dev.certs import write_store
from ssekd.engine import Engine
from ssekd.telemetry.events import EventLog
from tests.bindings.quic.wire import Client, Wire, clock, keys
from tests.support import zilla_config as zc
from tests.support.http_fakes import http11
from tests.support.pki import keytool_merge

PASSWORD = "quic-test-pw"
PORT = 7443


@pytest.fixture(autouse=True)
def own_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """A count of QUIC connections of the test's own: the process's outlives each engine (a
    reload keeps it), and the tests leave their connections open."""
    monkeypatch.setattr(quic_binding, "QUIC_CONNECTIONS", OpenConnections(20000))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PKCS#12 store of two keys, `a` (a.example, localhost) and `b` (b.example), as users
    make one (keytool merges single-key stores)."""
    folder = tmp_path_factory.mktemp("quic-keys")
    k = keys()
    write_store(folder / "a.p12", "a", k.a, PASSWORD)
    write_store(folder / "b.p12", "b", k.b, PASSWORD)
    keytool_merge(folder / "keys.p12", [folder / "a.p12", folder / "b.p12"], PASSWORD)
    return folder / "keys.p12"


def _site(folder: Path, name: str) -> zc.Node:
    www = folder / f"www_{name}"
    www.mkdir(exist_ok=True)
    (www / "index.html").write_text(f"{name} side\n")
    return zc.files(www, prefix="/", mapper=f"map_{name}", server=f"files_{name}")


def config(folder: Path, store: Path, *, quic: zc.Node | None = None,
           routes: list[zc.Node] | None = None, http_a: zc.Node | None = None,
           vault: bool = True) -> Path:
    """quic0 -> http_a (files saying `a side`), routes may lead to http_b (`b side`)."""
    quic_binding: zc.Node = {"type": "quic", "kind": "server"}
    if vault:
        quic_binding["vault"] = "server"
    quic_binding["options"] = {"host": "127.0.0.1", "port": PORT, **(quic or {})}
    if routes:
        quic_binding["routes"] = routes
    quic_binding["exit"] = "http_a"
    bindings: zc.Node = {
        "quic0": quic_binding,
        "http_a": zc.http_server("map_a", options=http_a),
        **_site(folder, "a"),
        "http_b": zc.http_server("map_b"),
        **_site(folder, "b"),
    }
    vaults = {"server": zc.keys_vault(store, PASSWORD)}
    return zc.write(folder / "zilla.yaml", zc.zilla("quictest", bindings, vaults=vaults))


def server_of(path: Path) -> tuple[Wire, Engine]:
    c = clock()
    engine = Engine(path, reactor=c, events=EventLog("t", clock=c.seconds), print_events=False)
    graph = engine.built
    assert graph is not None
    server = graph.runtimes["quic0"]
    assert isinstance(server, QuicServer)
    return Wire(server, c), engine


def unchecked(wire: Wire, name: str | None, port: int) -> Client:
    """A client that takes any certificate (to see which one it was shown)."""
    client = wire.client(port, server_name=name)
    client.quic._configuration.verify_mode = ssl.CERT_NONE  # noqa: SLF001 - before connect's flight
    return client


def shown(client: Client) -> list[str]:
    """The DNS names of the certificate the server showed `client`."""
    cert: x509.Certificate | None = client.quic.tls._peer_certificate  # noqa: SLF001
    assert cert is not None
    return cert.extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)


def index(wire: Wire, client: Client) -> bytes:
    stream = client.request(path="/index.html")
    wire.run(0.2)
    assert client.status(stream) == b"200", client.status(stream)
    return client.body(stream)


def test_the_server_name_picks_the_key_and_unknown_names_get_the_first(
        tmp_path: Path, store: Path) -> None:
    wire, _ = server_of(config(tmp_path, store, quic={"keys": ["a", "b"]}))
    for port, name in enumerate(("a.example", "b.example"), 40000):
        client = wire.connect(port, server_name=name)  # verified: the certificate names it
        assert name in shown(client)
    for port, other in enumerate(("c.example", None, "B.EXAMPLE"), 41000):
        client = unchecked(wire, other, port)
        wire.run(0.2)
        assert client.h3 is not None
        assert shown(client) == (["b.example"] if other == "B.EXAMPLE"
                                 else ["a.example", "localhost"])


def test_keys_default_to_every_key_of_the_vault(tmp_path: Path, store: Path) -> None:
    wire, _ = server_of(config(tmp_path, store))
    assert shown(wire.connect(40000, server_name="b.example")) == ["b.example"]


def test_routes_by_authority_pick_the_exit(tmp_path: Path, store: Path) -> None:
    routes = [{"when": [{"authority": "b.example"}, {"authority": "*.c.example"}],
               "exit": "http_b"}]
    wire, _ = server_of(config(tmp_path, store, routes=routes))
    for port, (name, side) in enumerate((("a.example", b"a side\n"), ("b.example", b"b side\n"),
                                         ("x.c.example", b"b side\n"), ("B.Example", b"b side\n"),
                                         ("c.example", b"a side\n"), (None, b"a side\n")),
                                        40000):
        client = unchecked(wire, name, port)
        wire.run(0.2)
        assert index(wire, client) == side, name


def test_the_sni_list_limits_the_names_that_choose(tmp_path: Path, store: Path) -> None:
    """b.example is a key of the server and a route's authority, but not an accepted name:
    served like an unknown name (the first key, the routes without `authority`)."""
    routes = [{"when": [{"authority": "b.example"}], "exit": "http_b"}]
    wire, _ = server_of(config(tmp_path, store, quic={"keys": ["a", "b"], "sni": ["a.example"]},
                               routes=routes))
    client = unchecked(wire, "b.example", 40000)
    wire.run(0.2)
    assert shown(client) == ["a.example", "localhost"]
    assert index(wire, client) == b"a side\n"
    accepted = wire.connect(40001, server_name="a.example")
    assert index(wire, accepted) == b"a side\n"


def test_the_options_reach_the_server(tmp_path: Path, store: Path) -> None:
    limits = {"connections": 5, "connections-per-ip": 2, "streams": 7, "idle-timeout": 9,
              "handshake-timeout": 4}
    wire, _ = server_of(config(tmp_path, store, quic={"retry": False, "limits": limits,
                                                      "alpn": ["h3"]}))
    server = wire.server
    assert [(s.host, s.port) for s in server.datagram_specs()] == [("127.0.0.1", PORT)]
    assert (server.limits.connections.connections, server.limits.connections.per_ip) == (5, 2)
    assert server.limits.handshake_timeout == 4 and server.retry is None
    client = wire.client(40000)
    for data in client.flight():
        server.datagram_received(data, client.addr)
    assert server.peers  # `retry: false`: the first Initial opened the connection
    wire.run(0.2)
    assert client.quic._remote_max_streams_bidi == 7  # noqa: SLF001
    wire.run(8.5)
    assert server.peers
    wire.run(1.0)
    assert not server.peers  # silent for `idle-timeout`
    wire.connect(40001)
    wire.connect(40002)
    wire.client(40003)
    wire.run(0.2)
    assert len(server.peers) == 2  # `connections-per-ip`


def test_alt_svc_is_sent_when_configured_and_only_then(tmp_path: Path, store: Path) -> None:
    routes = [{"when": [{"authority": "b.example"}], "exit": "http_b"}]
    wire, engine = server_of(config(tmp_path, store, routes=routes,
                                    http_a={"alt-svc": {"h3": 443, "max-age": 3600}}))
    a = wire.connect(40000, server_name="a.example")
    b = wire.connect(40001, server_name="b.example")
    stream_a, stream_b = a.request(path="/index.html"), b.request(path="/index.html")
    wire.run(0.2)
    assert a.response_headers(stream_a)[b"alt-svc"] == b'h3=":443"; ma=3600'
    assert b"alt-svc" not in b.response_headers(stream_b)
    # every response of the http server (a 404 too), over TCP too: how browsers learn of it
    graph = engine.built
    assert graph is not None
    proto, transport = http11(graph.runtimes["http_a"].site)  # type: ignore[attr-defined]
    proto.dataReceived(b"GET /missing.html HTTP/1.1\r\nHost: a.example\r\n\r\n")
    assert b'\r\nAlt-Svc: h3=":443"; ma=3600\r\n' in transport.value()

    wire, _ = server_of(config(tmp_path, store, http_a={"alt-svc": {"h3": 7443}}))
    client = wire.connect(40000)
    stream = client.request(path="/index.html")
    wire.run(0.2)
    assert client.response_headers(stream)[b"alt-svc"] == b'h3=":7443"; ma=86400'


# -- refused -----------------------------------------------------------------------------------

def refused(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as e:
        server_of(path)
    return [str(i) for i in e.value.issues]


#: (case, config, path of the issue, what its message says)
CASES: list[tuple[str, Callable[[Path, Path], Path], str, str]] = [
    ("no-vault", lambda f, s: config(f, s, vault=False), "bindings.quic0",
     "quic server 'quic0' needs a `vault` holding its keys"),
    ("unknown-key", lambda f, s: config(f, s, quic={"keys": ["a", "nope"]}),
     "bindings.quic0.options.keys[1]", "nope"),
    ("alpn-h2", lambda f, s: config(f, s, quic={"alpn": ["h3", "h2"]}),
     "bindings.quic0.options.alpn[1]", "h3"),
]


@pytest.mark.parametrize(("case", "make", "path", "says"), CASES, ids=[c[0] for c in CASES])
def test_configs_refused_at_their_path(case: str, make: Callable[[Path, Path], Path], path: str,
                                       says: str, tmp_path: Path, store: Path) -> None:
    issues = refused(make(tmp_path, store))
    assert len(issues) == 1, issues
    where, at, message = issues[0].split(": ", 2)
    assert where.startswith(str(tmp_path / "zilla.yaml") + ":"), issues  # file and line
    assert at == path and says in message, (case, issues)
