"""http-kafka config: Zilla's keys are accepted, and what cannot work stops the daemon before it
listens, with the file, line and path: a key of the other capability, `async` without
`reply-to`, a reference a route cannot fill, a wait the http binding would cut, a producer
property librdkafka refuses. `ssekd check` prints the binding in the graph."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from twisted.internet.testing import MemoryReactorClock

from ssekd.cli import main
from ssekd.config import ConfigError
from ssekd.engine import Engine

HEAD = """\
name: hk
bindings:
  tcp0: {type: tcp, kind: server, options: {host: 127.0.0.1, port: 8080}, exit: http0}
  http0:
    type: http
    kind: server
    options: {limits: {idle-timeout: 40}}
    exit: hk0
  cc: {type: kafka, kind: cache_client, exit: cs}
  cs: {type: kafka, kind: cache_server, exit: kc}
  kc: {type: kafka, kind: client, options: {servers: ["127.0.0.1:9"]}}
"""


def build(tmp_path: Path, binding: str) -> Engine:
    config = tmp_path / "zilla.yaml"
    config.write_text(HEAD + textwrap.indent(textwrap.dedent(binding), "  "))
    return Engine(config, reactor=MemoryReactorClock(), environ={})


def issues(tmp_path: Path, binding: str) -> list[tuple[int | None, str, str]]:
    with pytest.raises(ConfigError) as caught:
        build(tmp_path, binding)
    return [(i.line, i.path, i.message) for i in caught.value.issues]


def test_zillas_keys_are_accepted(tmp_path: Path) -> None:
    engine = build(tmp_path, """\
        hk0:
          type: http-kafka
          kind: proxy
          options:
            idempotency: {header: idempotency-key}
            correlation: {headers: {reply-to: zilla:reply-to, correlation-id: zilla:correlation-id}}
          routes:
            - when: [{method: PUT, path: "/items/{id}"}, {method: GET, path: "/items/{id};{correlationId}"}]
              exit: cc
              with:
                capability: produce
                topic: items-commands
                acks: leader_only
                key: ${params.id}
                overrides: {zilla:identity: fixed}
                reply-to: items-replies
                async: {location: "/items/${params.id};${correlationId}"}
            - when: [{method: POST, path: /items}]
              exit: cc
              with: {capability: produce, topic: items-commands, key: "${idempotencyKey}",
                     correlation-id: requestId, reply-to: items-replies}
            - when: [{method: GET, path: /items}]
              exit: cc
              with:
                capability: fetch
                topic: items-snapshots
                filters: [{headers: {owner: fixed}}]
                merge: {content-type: application/json, patch: {initial: "[]", path: /-}}
            - when: [{method: GET, path: "/items/{id}"}]
              exit: cc
              with: {capability: fetch, topic: items-snapshots, filters: [{key: "${params.id}"}]}
        """)
    assert engine.built is not None


def test_a_key_of_the_other_capability_is_named(tmp_path: Path) -> None:
    found = issues(tmp_path, """\
        hk0:
          type: http-kafka
          kind: proxy
          routes:
            - when: [{method: GET, path: /items}]
              exit: cc
              with: {capability: fetch, topic: t, reply-to: r}
        """)
    assert found == [(18, "bindings.hk0.routes[0].with.reply-to",
                      "`reply-to` belongs to capability produce, not fetch")]


def test_async_needs_reply_to(tmp_path: Path) -> None:
    ((line, path, message),) = issues(tmp_path, """\
        hk0:
          type: http-kafka
          kind: proxy
          routes:
            - when: [{method: PUT, path: "/items/{id}"}]
              exit: cc
              with:
                capability: produce
                topic: t
                async: {location: "/items/${params.id};${correlationId}"}
        """)
    assert (line, path) == (21, "bindings.hk0.routes[0].with.async")
    assert "needs `reply-to`" in message


def test_a_reference_no_path_captures_is_a_config_error(tmp_path: Path) -> None:
    ((line, path, message),) = issues(tmp_path, """\
        hk0:
          type: http-kafka
          kind: proxy
          routes:
            - when: [{method: PUT, path: "/items/{id}"}]
              exit: cc
              with: {capability: produce, topic: t, key: "${params.item}"}
        """)
    assert path == "bindings.hk0.routes[0].with"
    assert "item is not captured" in message


def test_a_route_without_with_and_a_capability_zilla_lacks(tmp_path: Path) -> None:
    found = issues(tmp_path, """\
        hk0:
          type: http-kafka
          kind: proxy
          routes:
            - when: [{method: PUT, path: /x}]
              exit: cc
              with: {capability: consume, topic: t}
        """)
    assert [(p, m) for _, p, m in found] == [
        ("bindings.hk0.routes[0].with.capability",
         "expected one of 'produce', 'fetch'; got 'consume'")]
    ((_, path, message),) = issues(tmp_path, """\
        hk0:
          type: http-kafka
          kind: proxy
          routes:
            - when: [{method: PUT, path: /x}]
              exit: cc
        """)
    assert path == "bindings.hk0.routes[0]" and "expected `with`" in message


def test_a_wait_the_http_binding_would_cut_points_at_max_wait(tmp_path: Path) -> None:
    ((line, path, message),) = issues(tmp_path, """\
        hk0:
          type: http-kafka
          kind: proxy
          options: {max-wait: 45}
          routes:
            - when: [{method: POST, path: /x}]
              exit: cc
              with: {capability: produce, topic: t}
        """)
    assert (line, path) == (15, "bindings.hk0.options.max-wait")
    assert "less than the idle-timeout of http binding 'http0' (40 s)" in message


def test_ack_timeout_within_max_wait(tmp_path: Path) -> None:
    ((_, path, message),) = issues(tmp_path, """\
        hk0:
          type: http-kafka
          kind: proxy
          options: {max-wait: 5, ack-timeout: 8}
          routes:
            - when: [{method: POST, path: /x}]
              exit: cc
              with: {capability: produce, topic: t}
        """)
    assert path == "bindings.hk0.options.ack-timeout" and "at most max-wait (5 s)" in message


def test_a_producer_property_librdkafka_refuses(tmp_path: Path) -> None:
    config = tmp_path / "zilla.yaml"
    config.write_text(HEAD.replace('options: {servers: ["127.0.0.1:9"]}',
                                   'options: {servers: ["127.0.0.1:9"], '
                                   'producer-properties: {linger.msec: 5}}')
                      + "  hk0: {type: http-kafka, kind: proxy, routes: [{exit: cc, "
                        "with: {capability: produce, topic: t}}]}\n")
    with pytest.raises(ConfigError) as caught:
        Engine(config, reactor=MemoryReactorClock(), environ={})
    (issue,) = caught.value.issues
    assert issue.path == "bindings.kc.options.producer-properties.linger.msec"
    assert "No such configuration property" in issue.message


def test_check_prints_the_binding_and_its_routes(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "zilla.yaml"
    config.write_text(HEAD + textwrap.indent(textwrap.dedent("""\
        hk0:
          type: http-kafka
          kind: proxy
          routes:
            - when: [{method: POST, path: /items}]
              exit: cc
              with: {capability: produce, topic: t}
        """), "  "))
    assert main(["check", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "hk0 (http-kafka proxy)" in out
    assert "when method=POST path=/items -> cc (kafka cache_client)" in out
