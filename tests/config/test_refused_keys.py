"""Keys that would be accepted and ignored are refused by `ssekd check` with the file, the line
and what to do instead. (The behaviour tests of keys that take effect live with their bindings:
tcp `cidr`, filesystem `symlinks`, tls `signers`, kafka `sasl`, telemetry selection, cors.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from ssekd.cli import main
from tests.support.pki import ENV, Pki, tls_config

BASE = """\
name: honest
bindings:
  tcp0:
    type: tcp
    kind: server
    options: {host: 127.0.0.1, port: 8080}
    exit: http0
  http0:
    type: http
    kind: server
    exit: files_map
  files_map:
    type: http-filesystem
    kind: proxy
    exit: files
  files:
    type: filesystem
    kind: server
    options: {location: .}
"""

KAFKA = """\
  sse0:
    type: sse
    kind: server
    exit: sk
  sk:
    type: sse-kafka
    kind: proxy
    routes:
      - when: [{path: "/{topic}"}]
        exit: cc
        with: {topic: "${params.topic}"}
  cc:
    type: kafka
    kind: cache_client
    exit: cs
  cs:
    type: kafka
    kind: cache_server
    exit: kc
  kc:
    type: kafka
    kind: client
    options: {servers: ["127.0.0.1:9"]}
"""


RELAY = """\
  sse0:
    type: sse
    kind: server
    exit: relay
  relay:
    type: sse
    kind: client
    exit: up_http
  up_http:
    type: http
    kind: client
    exit: up_tcp
  up_tcp:
    type: tcp
    kind: client
    options: {host: 127.0.0.1, port: 9}
"""


def check(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    config = tmp_path / "zilla.yaml"
    config.write_text(text)
    code = main(["check", "--config", str(config)])
    out = capsys.readouterr()
    return code, out.out + out.err


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


REFUSED: list[tuple[str, str, str, str, str]] = [
    # (case, config text, the line's needle, path in the message, what the message says)
    ("sse-kafka-exit", BASE + KAFKA.replace("    routes:\n      - when", "    exit: cc\n    "
                                            "routes:\n      - when"),
     "exit: cc", "bindings.sk.exit", "binding-level exit is never used"),
    ("http-filesystem-options", BASE.replace("    exit: files\n",
                                             "    exit: files\n    options: {root: x}\n"),
     "options: {root: x}", "bindings.files_map.options", "unexpected"),
    ("cache-client-options", BASE + KAFKA.replace("    exit: cs\n",
                                                  "    exit: cs\n    options: {anything: 1}\n"),
     "options: {anything: 1}", "bindings.cc.options", "unexpected"),
    ("sse-kafka-options", BASE + KAFKA.replace("    kind: proxy\n",
                                               "    kind: proxy\n    options: {topic: x}\n"),
     "options: {topic: x}", "bindings.sk.options", "unexpected"),
    ("tcp-authority", BASE.replace("    exit: http0\n", "    routes:\n      - when: "
                                   "[{authority: example.com}]\n        exit: http0\n"),
     "authority: example.com", "bindings.tcp0.routes[0].when[0].authority",
     "tcp routes cannot match authority"),
    ("tcp-client-address-under-kafka",
     BASE + KAFKA + "    exit: out\n  out:\n    type: tcp\n    kind: client\n"
                    "    options: {host: kafka, port: 9092}\n",
     "options: {host: kafka", "bindings.out.options",
     "options.host and port on the exit of kafka client 'kc' would be ignored"),
    ("tcp-client-routes", BASE + "  out:\n    type: tcp\n    kind: client\n    routes:\n"
                                 "      - when: [{cidr: 10.0.0.0/8}]\n",
     "routes:", "bindings.out.routes", "a tcp client has no routes"),
    ("tcp-client-host-without-port", BASE + "  out:\n    type: tcp\n    kind: client\n"
                                            "    options: {host: upstream}\n",
     "options: {host: upstream}", "bindings.out.options", "expected `port` beside `host`"),
    ("sse-client-requests-json-without-catalog",
     BASE + RELAY.replace("    kind: client\n    exit: up_http\n",
                          "    kind: client\n    exit: up_http\n"
                          "    options: {requests: [{path: /x, content: {model: json}}]}\n"),
     "requests: [{path: /x", "bindings.relay.options.requests[0].content",
     "a json model needs a `catalog` with its schema"),
    ("http-client-path-override",
     BASE + RELAY.replace("    exit: up_tcp\n",
                          "    exit: up_tcp\n    options: {overrides: {':path': /x}}\n"),
     "overrides: {':path'", "bindings.up_http.options.overrides.:path",
     "expected `:authority` or a header name"),
    ("kafka-exit-tls",
     BASE + KAFKA + "    exit: out_tls\n  out_tls:\n    type: tls\n    kind: client\n"
                    "    options: {trustcacerts: true}\n    exit: out\n  out:\n    type: tcp\n"
                    "    kind: client\n    options: {host: kafka, port: 9093}\n",
     "options: {host: kafka, port: 9093}", "bindings.out.options",
     "options.host and port on the exit of kafka client 'kc' would be ignored"),
    ("stdout-interval", BASE + "telemetry:\n  exporters:\n    out:\n      type: stdout\n"
                               "      options: {interval: 30}\n",
     "options: {interval: 30}", "telemetry.exporters.out.options", "interval"),
    ("stdout-format", BASE + "telemetry:\n  exporters:\n    out:\n      type: stdout\n"
                             "      options: {format: xml}\n",
     "options: {format: xml}", "telemetry.exporters.out.options.format", "'text', 'json'"),
    ("heartbeat-timeout", BASE + "engine: {heartbeat-timeout: 0}\n",
     "heartbeat-timeout: 0", "engine.heartbeat-timeout", "expected a number at least 1, got int 0"),
    ("otlp-endpoint", BASE + "telemetry:\n  exporters:\n    o:\n      type: otlp\n"
                             "      options: {interval: 5}\n",
     "options: {interval: 5}", "telemetry.exporters.o.options", "endpoint is required"),
    ("otlp-location", BASE + "telemetry:\n  exporters:\n    o:\n      type: otlp\n      options:\n"
                      "        endpoint: {location: collector:4318}\n",
     "endpoint: {location", "telemetry.exporters.o.options.endpoint.location",
     "expected a URL such as http://otel-collector:4318"),
    ("otlp-signals", BASE + "telemetry:\n  exporters:\n    o:\n      type: otlp\n      options:\n"
                     "        signals: [traces]\n        endpoint: {location: http://c:4318}\n",
     "signals: [traces]", "telemetry.exporters.o.options.signals[0]", "'metrics', 'logs'"),
    ("otlp-interval", BASE + "telemetry:\n  exporters:\n    o:\n      type: otlp\n      options:\n"
                      "        interval: 0\n        endpoint: {location: http://c:4318}\n",
     "interval: 0", "telemetry.exporters.o.options.interval", "minimum of 0"),
    ("otlp-protocol", BASE + "telemetry:\n  exporters:\n    o:\n      type: otlp\n      options:\n"
                      "        endpoint: {protocol: grpc, location: http://c:4318}\n",
     "endpoint: {protocol", "telemetry.exporters.o.options.endpoint.protocol",
     "expected 'http', got 'grpc'"),
    ("otlp-overrides", BASE + "telemetry:\n  exporters:\n    o:\n      type: otlp\n      options:\n"
                       "        endpoint:\n          location: http://c:4318\n"
                       "          overrides: {traces: /v1/traces}\n",
     "overrides: {traces", "telemetry.exporters.o.options.endpoint.overrides.traces",
     "expected one of: logs, metrics"),
    ("unknown-metric", BASE + "telemetry:\n  metrics: [stream.*, strem.active.sent]\n",
     "metrics: [stream.*", "telemetry.metrics[1]", "'strem.active.sent' matches no metric"),
    ("unknown-binding-metric", BASE.replace("    kind: server\n    exit: files_map\n",
                                            "    kind: server\n    exit: files_map\n"
                                            "    telemetry: {metrics: [htp.*]}\n"),
     "telemetry: {metrics: [htp.*]}", "bindings.http0.telemetry.metrics[0]",
     "'htp.*' matches no metric"),
    ("reserved-attribute", BASE + "telemetry:\n  attributes: {binding: x}\n",
     "attributes:", "telemetry.attributes.binding", "choose another name"),
    ("unused-vault", BASE + "vaults:\n  spare:\n    type: filesystem\n    options:\n"
                            "      keys: {store: garbage.p12, type: pkcs12, password: pw}\n",
     "store: garbage.p12", "vaults.spare.options.keys.store",
     "vault 'spare' keys store"),
]


@pytest.mark.parametrize("case,text,needle,path,says", REFUSED, ids=[r[0] for r in REFUSED])
def test_check_refuses_with_file_line_and_message(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str],
                                                  case: str, text: str, needle: str, path: str,
                                                  says: str) -> None:
    (tmp_path / "garbage.p12").write_bytes(b"not a PKCS#12 store")
    code, out = check(tmp_path, text, capsys)
    assert code == 1, out
    config = tmp_path / "zilla.yaml"
    wanted = f"{config}:{line_of(text, needle)}: {path}"
    found = [line for line in out.splitlines() if wanted in line]
    assert found and says in found[0], f"{wanted!r} / {says!r} not in:\n{out}"


def test_trustcacerts_true_is_refused_false_is_what_happens(tmp_path: Path, pki: Pki,
                                                            capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    config, _, _ = tls_config(tmp_path, pki, "{keys: [localhost], trustcacerts: true}")
    text = config.read_text()
    assert main(["check", "--config", str(config)]) == 1
    out = capsys.readouterr().err
    assert f"{config}:{line_of(text, 'trustcacerts')}: bindings.tls_in.options.trustcacerts" \
        f": trustcacerts: true is not supported" in out
    config.write_text(text.replace("trustcacerts: true", "trustcacerts: false"))
    assert main(["check", "--config", str(config)]) == 0
