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

CONFIG = """\
name: walk
vaults:
  keys:
    type: filesystem
    options:
      keys: {{store: {store}, type: pkcs12, password: ssekd-dev-password}}
guards:
  jwt0:
    type: jwt
    options:
      issuer: https://issuer.test
      audience: ssekd-test
      keys: {jwks}
bindings:
  tcp:
    type: tcp
    kind: server
    options: {{host: 127.0.0.1, port: [{plain}, {secure}]}}
    routes:
      - when: [{{port: {secure}}}]
        exit: tls
    exit: http
  tls:
    type: tls
    kind: server
    vault: keys
    options: {{keys: [localhost], alpn: [http/1.1]}}
    exit: http
  http:
    type: http
    kind: server
    options:
      asyncapi: {{path: /asyncapi.yaml}}
      health: {{}}
      authorization:
        jwt0:
          credentials:
            headers: {{authorization: "Bearer {{credentials}}"}}
    routes:
      - when: [{{headers: {{":path": "/static/*"}}}}]
        exit: files_map
      - when: [{{headers: {{":scheme": https, ":path": "/secure/{{x}}"}}}}]
        exit: sse
      - when: [{{headers: {{":path": /events}}}}]
        exit: sse
      - when: [{{headers: {{":path": "/topics/{{name}}"}}}}]
        exit: sse
      - when: [{{headers: {{":method": POST, ":path": "/{{x}}/post"}}}}]
        exit: sse
      - when: [{{headers: {{":path": /mine}}}}]
        exit: sse
        guarded: {{jwt0: [read]}}
      - when: [{{headers: {{":path": /asyncapi.yaml}}}}]
        exit: sse
    exit: files_map
  files_map:
    type: http-filesystem
    kind: proxy
    routes:
      - when: [{{path: "/{{path}}"}}]
        exit: files
        with: {{path: "${{params.path}}"}}
  files:
    type: filesystem
    kind: server
    options: {{location: {www}}}
  sse:
    type: sse
    kind: server
    exit: sse_kafka
  sse_kafka:
    type: sse-kafka
    kind: proxy
    routes:
      - when: [{{path: /events}}]
        exit: cache_client
        with: {{topic: events}}
      - when: [{{path: "/topics/{{topic}}"}}]
        exit: cache_client
      - when: [{{path: "/secure/{{topic}}"}}]
        exit: cache_client
        with: {{topic: "${{params.topic}}"}}
      - when: [{{path: /mine}}]
        exit: cache_client
        with: {{topic: "inbox-${{guarded['jwt0'].identity}}"}}
      - when: [{{path: "/static/{{topic}}"}}, {{path: "/{{topic}}/post"}}]
        exit: cache_client
      - when: [{{path: "/{{topic}}"}}]
        exit: cache_client
  cache_client:
    type: kafka
    kind: cache_client
    exit: cache_server
  cache_server:
    type: kafka
    kind: cache_server
    exit: kafka_client
  kafka_client:
    type: kafka
    kind: client
    options:
      servers: ["{bootstrap}"]
      properties: {{fetch.wait.max.ms: 10}}
"""

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
    path.write_text(CONFIG.format(plain=plain, secure=secure, bootstrap=bootstrap, jwks=jwks,
                                  store=store, www=folder / "www"))
    return path
