"""A binding's `telemetry.attributes` (Zilla's http.metrics example): what each expression reads
from a request or its response, the bounds ssekd puts on what clients send (no query string,
what logs hide hidden, values cut, at most `max_sets` sets), the series an http server makes of
them, and the configs `ssekd check` refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.echo import EchoServer
from ssekd.bindings.http.channel import Limits
from ssekd.bindings.http.cors import AccessControl
from ssekd.bindings.http.server import HttpRoot, HttpSite, HttpStats
from ssekd.cli import main
from ssekd.telemetry.attributes import (
    MAX_VALUE,
    OTHER,
    Attribute,
    BindingAttributes,
    compile_attributes,
    parse,
)
from ssekd.telemetry.events import EventLog
from ssekd.telemetry.metrics import Metrics
from tests.support.http_fakes import http11


def test_what_each_expression_reads() -> None:
    assert parse("method", "${http.request.method}") == Attribute("method", "request", ":method")
    assert parse("path", "${http.request.path}") == Attribute("path", "request", ":path")
    assert parse("status", "${http.response.status}") == Attribute("status", "response",
                                                                     ":status")
    assert parse("ct", "${http.request.Content-Type}") == Attribute("ct", "request",
                                                                     "content-type")
    assert parse("host", "${http.request.:authority}") == Attribute("host", "request",
                                                                     ":authority")
    assert parse("service.tier", "edge") == Attribute("service_tier", "constant", "edge")
    for value, says in (("${http.request.status}", "a request has no status"),
                        ("${http.response.path}", "a response has no path"),
                        ("${http.request.Authorization}", "carries credentials"),
                        ("${http.response.set-cookie}", "carries credentials"),
                        ("${env.HOME}", "expected ${http.request.<field>}")):
        problem = parse("x", value)
        assert isinstance(problem, str) and says in problem, (value, problem)
    _, problems = compile_attributes({"token": "${http.request.x-api-token}"}, {"x-api-token"})
    assert "where the http binding reads tokens" in problems["token"]


ATTRIBUTES = {"method": "${http.request.method}", "path": "${http.request.path}",
              "status": "${http.response.status}", "tier": "edge",
              "agent": "${http.request.user-agent}"}


def stats_site(metrics: Metrics, max_sets: int = 1000) -> HttpSite:
    found, problems = compile_attributes(ATTRIBUTES)
    assert not problems
    clock = MemoryReactorClock()
    stats = HttpStats(metrics, "http0", clock, BindingAttributes(found, max_sets=max_sets))
    root = HttpRoot("http0", [], EchoServer("echo0"), AccessControl(), EventLog("test"),
                    stats=stats)
    return HttpSite(root, Limits(), clock)


def samples(metrics: Metrics, family: str) -> dict[frozenset[tuple[str, str]], float]:
    found = {}
    for metric in metrics.families():
        for sample in metric.samples:
            if sample.name == family:
                found[frozenset(sample.labels.items())] = sample.value
    return found


def series(**labels: str) -> frozenset[tuple[str, str]]:
    return frozenset({"namespace": "default", "binding": "http0", **labels}.items())


def request(site: HttpSite, raw: bytes) -> bytes:
    proto, transport = http11(site)
    proto.dataReceived(raw)
    return bytes(transport.value())


def test_an_http_servers_series_carry_each_requests_attributes() -> None:
    """The request's attributes on every http series, the response's on those measured once it
    is answered; the path without its query string and with what logs hide hidden; no series
    without the attributes."""
    metrics = Metrics()
    site = stats_site(metrics)
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhIn0.c2lnbmF0dXJlc2lnbmF0dXJl"
    request(site, b"POST /items?access_token=secret HTTP/1.1\r\nHost: h\r\nUser-Agent: t/1\r\n"
                  b"Content-Length: 5\r\n\r\nhello")
    request(site, b"GET /k/" + jwt.encode() + b" HTTP/1.1\r\nHost: h\r\n\r\n")
    post = {"method": "POST", "path": "/items", "tier": "edge", "agent": "t/1"}
    get = {"method": "GET", "tier": "edge", "agent": ""}
    [get_path] = [dict(s)["path"] for s in samples(metrics, "http_request_size_bytes_count")
                  if dict(s)["method"] == "GET"]
    assert jwt not in get_path and get_path.startswith("/k/")
    get["path"] = get_path
    assert samples(metrics, "http_request_size_bytes_sum") == {series(**post): 5.0,
                                                               series(**get): 0.0}
    assert samples(metrics, "http_active_requests") == {series(**post): 0.0,
                                                        series(**get): 0.0}
    assert samples(metrics, "http_duration_milliseconds_count") == {
        series(**post, status="200"): 1.0, series(**get, status="200"): 1.0}
    assert samples(metrics, "http_response_size_bytes_sum") == {
        series(**post, status="200"): 5.0, series(**get, status="200"): 0.0}


def test_after_max_sets_new_values_count_as_other() -> None:
    metrics = Metrics()
    site = stats_site(metrics, max_sets=2)
    for path in (b"/a", b"/b", b"/c", b"/d", b"/a"):
        request(site, b"GET " + path + b" HTTP/1.1\r\nHost: h\r\n\r\n")
    counts = {(dict(s)["path"], dict(s)["method"], dict(s)["agent"]): v
              for s, v in samples(metrics, "http_request_size_bytes_count").items()}
    assert counts == {("/a", "GET", ""): 2.0, ("/b", "GET", ""): 1.0,
                      (OTHER, OTHER, OTHER): 2.0}


def test_a_long_value_is_cut() -> None:
    metrics = Metrics()
    site = stats_site(metrics)
    request(site, b"GET /x HTTP/1.1\r\nHost: h\r\nUser-Agent: " + b"a" * 5000 + b"\r\n\r\n")
    [labels] = samples(metrics, "http_request_size_bytes_count")
    assert dict(labels)["agent"] == "a" * MAX_VALUE


def test_series_with_and_without_attributes_share_a_family() -> None:
    """One binding with attributes, one without: every series has every label, empty where it
    has none (Prometheus reads an empty label as none)."""
    metrics = Metrics()
    metrics.counter("tls.handshakes", "tls0", outcome="ok", protocol="h2").value += 1
    metrics.counter("tls.handshakes", "tls1", attributes={"tier": "edge"}, outcome="ok",
                    protocol="h2").value += 2
    assert samples(metrics, "tls_handshakes_total") == {
        frozenset({"namespace": "default", "binding": "tls0", "outcome": "ok",
                   "protocol": "h2", "tier": ""}.items()): 1.0,
        frozenset({"namespace": "default", "binding": "tls1", "outcome": "ok",
                   "protocol": "h2", "tier": "edge"}.items()): 2.0}


CONFIG = """\
name: attributes
telemetry:
  attributes: {service.tier: web}
bindings:
  tcp0:
    type: tcp
    kind: server
    options: {host: 127.0.0.1, port: 8080}
    exit: http0
  http0:
    type: http
    kind: server
    options:
      authorization:
        jwt0:
          credentials:
            headers: {x-token: "{credentials}"}
    telemetry:
      attributes:
%s
    exit: echo0
  echo0:
    type: echo
    kind: server
guards:
  jwt0:
    type: jwt
    options:
      keys: [{kty: oct, kid: k, alg: HS256, k: c2VjcmV0}]
"""


@pytest.mark.parametrize("attribute,says", [
    ("binding: ${http.request.method}", "would be the label 'binding', which ssekd's metrics"),
    ("service-tier: ${http.request.method}",
     "would be the label 'service_tier', which telemetry.attributes"),
    ("who: ${http.request.cookie}", "cookie carries credentials: never a label"),
    ("who: ${http.request.x-token}", "x-token is where the http binding reads tokens"),
    ("when: ${http.request.date-of-birth", "expected ${http.request.<field>}"),
])
def test_attributes_that_cannot_be_labels_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], attribute: str, says: str) -> None:
    config = tmp_path / "zilla.yaml"
    config.write_text(CONFIG % f"        {attribute}")
    assert main(["check", "--config", str(config)]) == 1
    out: Any = capsys.readouterr()
    text = out.out + out.err
    assert f"bindings.http0.telemetry.attributes.{attribute.split(':')[0]}" in text, text
    assert says in text, text


def test_the_http_metrics_example_attributes_pass(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "zilla.yaml"
    config.write_text(CONFIG % "        method: ${http.request.method}\n"
                               "        path: ${http.request.path}")
    assert main(["check", "--config", str(config)]) == 0, capsys.readouterr()
