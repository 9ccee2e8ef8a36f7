"""A config whose routes make a channel walk interesting, for the AsyncAPI tests: two listeners
(one through TLS), an http binding whose routes send some paths to static files, some to the
event streams (one on https only, one guarded, one for POST only), its own paths (the AsyncAPI
document, health), and an sse-kafka binding whose routes overlap. Which paths reach a stream:

- `/events` (topic `events`), on both ports;
- `/topics/{topic}` (the topic from the path), on both ports, through `/topics/{name}`;
- `/secure/{topic}`, on the TLS port only (its http route wants `:scheme: https`);
- `/mine`, guarded, whose topic is `inbox-` and the token's identity.

Not: sse-kafka's `/{topic}` (the http routes let no such path through but /events, which its
route 0 takes first), `/static/{topic}` (the http binding sends /static/* to files first),
`/{topic}/post` (its http route takes POST only), `/asyncapi.yaml` (the http binding's own path).
"""

from __future__ import annotations

from pathlib import Path

from tests.support import zilla_config as zc


def walk_config(plain: int, secure: int, bootstrap: str, jwks: str, store: str,
                www: Path) -> zc.Node:
    """The config the module's docstring walks, as data."""
    guarded = {"jwt0": ["read"]}
    bindings: zc.Node = {
        "tcp": zc.tcp_server([plain, secure], routes=[zc.port_route(secure, "tls")]),
        "tls": zc.tls_server("keys", alpn=["http/1.1"]),
        "http": zc.http_server(
            "files_map",
            asyncapi={"path": "/asyncapi.yaml"}, health={},
            authorization=zc.authorization(credentials=zc.BEARER),
            routes=[zc.header_route("/static/*", "files_map"),
                    zc.header_route("/secure/{x}", "sse", scheme="https"),
                    zc.header_route("/events", "sse"),
                    zc.header_route("/topics/{name}", "sse"),
                    zc.header_route("/{x}/post", "sse", method="POST"),
                    zc.header_route("/mine", "sse", guarded=guarded),
                    zc.header_route("/asyncapi.yaml", "sse")]),
        **zc.files(www, prefix="/"),
        "sse": zc.sse_server(),
        "sse_kafka": zc.sse_kafka([
            zc.sse_route("/events", "events"),
            zc.sse_route("/topics/{topic}", None),
            zc.sse_route("/secure/{topic}"),
            zc.sse_route("/mine", "inbox-${guarded['jwt0'].identity}"),
            zc.sse_route(["/static/{topic}", "/{topic}/post"], None),
            zc.sse_route("/{topic}", None)]),
        **zc.kafka(bootstrap)}
    return zc.zilla("walk", bindings,
                    vaults={"keys": zc.keys_vault(store, "ssekd-dev-password")},
                    guards={"jwt0": zc.jwt_guard("https://issuer.test", "ssekd-test", jwks)})


#: address -> (topic as the document titles it, ports it is served on: "plain", "secure")
EXPECTED = {
    "/events": ("events", {"plain", "secure"}),
    "/topics/{topic}": ("{topic}", {"plain", "secure"}),
    "/secure/{topic}": ("{topic}", {"secure"}),
    "/mine": ("inbox-{identity of guard jwt0}", {"plain", "secure"}),
}


def write_walk_config(folder: Path, plain: int, secure: int, bootstrap: str = "127.0.0.1:9",
                      jwks: str = "http://127.0.0.1:9/jwks.json",
                      store: str = "tls/localhost.p12") -> Path:
    (folder / "www").mkdir(exist_ok=True)
    path = folder / "walk.yaml"
    return zc.write(path, walk_config(plain, secure, bootstrap, jwks, store, folder / "www"))
