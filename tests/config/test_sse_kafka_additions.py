"""ssekd's additions to sse-kafka routes and sse servers, misused: each is refused before the
daemon listens, naming file, line, path and what was expected (the in-process check of every
case, and the real `twistd ssekd` on one)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from twisted.internet.testing import MemoryReactorClock

from ssekd.config import ConfigError
from ssekd.config.load import load_config
from ssekd.dev.broker import free_port, port_open
from ssekd.engine import Engine
from ssekd.spi.plugins import discover
from tests.support.daemon import TWISTD

GOOD = """\
name: test
bindings:
  tcp0:
    type: tcp
    kind: server
    options: {{host: 127.0.0.1, port: {port}}}
    exit: http0
  http0:
    type: http
    kind: server
    routes:
      - when: [{{headers: {{":path": "/files/*"}}}}]
        exit: files_map
    exit: sse0
  files_map:
    type: http-filesystem
    kind: proxy
    routes:
      - when: [{{path: "/files/{{path}}"}}]
        exit: files
        with: {{path: "${{params.path}}"}}
  files:
    type: filesystem
    kind: server
    options: {{location: www}}
  sse0:
    type: sse
    kind: server
    exit: sse_kafka0
  sse_kafka0:
    type: sse-kafka
    kind: proxy
    routes:
      - when: [{{path: "/items/{{id}}"}}]
        exit: cache_client0
        with:
          topic: items
          filters:
            - key: "${{params.id}}"
              value: {{/status: open}}
  cache_client0: {{type: kafka, kind: cache_client, exit: cache_server0}}
  cache_server0: {{type: kafka, kind: cache_server, exit: kafka_client0}}
  kafka_client0:
    type: kafka
    kind: client
    options: {{servers: ["127.0.0.1:9"]}}
"""

# (id, replace-this, with-this, line, path, words the message must contain)
CASES = [
    ("credential-header-in-a-filter", 'key: "${{params.id}}"', 'key: "${{headers.authorization}}"',
     36, "bindings.sse_kafka0.routes[0].with",
     "expected a header that carries no credentials; authorization does"),
    ("cookie-in-the-topic", "topic: items", 'topic: "${{headers.Cookie}}"', 36,
     "bindings.sse_kafka0.routes[0].with", "cookie does"),
    ("request-value-in-a-file-path", 'with: {{path: "${{params.path}}"}}',
     'with: {{path: "${{headers.x-file}}"}}', 21, "bindings.files_map.routes[0].with.path",
     "`${headers...}` and `${query...}` are for sse-kafka routes"),
    ("value-filter-not-a-pointer", "value: {{/status: open}}", "value: {{status: open}}", 40,
     "bindings.sse_kafka0.routes[0].with.filters[0].value.status",
     "expected a JSON pointer such as /status"),
    ("value-filter-on-an-object", "value: {{/status: open}}", "value: {{/status: {{a: 1}}}}", 40,
     "bindings.sse_kafka0.routes[0].with.filters[0].value./status",
     "expected a string, number, true, false or null, or a list of them"),
    ("value-filter-empty-set", "value: {{/status: open}}", "value: {{/status: []}}", 40,
     "bindings.sse_kafka0.routes[0].with.filters[0].value./status",
     "expected a string, number, true, false or null, or a list of them"),
    ("value-filter-empty", "value: {{/status: open}}", "value: {{}}", 40,
     "bindings.sse_kafka0.routes[0].with.filters[0].value", "expected a map of at least one"),
    ("compression-level", "    kind: server\n    exit: sse_kafka0",
     "    kind: server\n    options: {{compression: {{level: 12}}}}\n    exit: sse_kafka0", 29,
     "bindings.sse0.options.compression.level", "expected a number at most 9, got int 12"),
    ("compression-window", "    kind: server\n    exit: sse_kafka0",
     "    kind: server\n    options: {{compression: {{window-bits: 8}}}}\n    exit: sse_kafka0",
     29, "bindings.sse0.options.compression.window-bits", "expected a number at least 9"),
    ("compression-unknown-key", "    kind: server\n    exit: sse_kafka0",
     "    kind: server\n    options: {{compression: {{brotli: true}}}}\n    exit: sse_kafka0",
     29, "bindings.sse0.options.compression.brotli",
     "unexpected property 'brotli' (expected one of: context, level, memory-level, "
     "window-bits)"),
    ("compression-context", "    kind: server\n    exit: sse_kafka0",
     "    kind: server\n    options: {{compression: {{context: batch}}}}\n    exit: sse_kafka0",
     29, "bindings.sse0.options.compression.context", "expected one of"),
    ("compress-not-a-boolean", "topic: items", "topic: items\n          compress: no-thanks", 38,
     "bindings.sse_kafka0.routes[0].with.compress", "expected boolean, got 'no-thanks'"),
    ("unknown-id-form", "value: {{/status: open}}",
     "value: {{/status: open}}\n          event: {{id: '[\"${{key}}\"]'}}", 41,
     "bindings.sse_kafka0.routes[0].with.event.id", "expected one of"),
    # several topics on one stream
    ("too-many-topics", "topic: items", "topic: [a, b, c, d, e, f, g, h, i]", 37,
     "bindings.sse_kafka0.routes[0].with.topic", "expected a topic, or a list of at most 8 topics"),
    ("too-many-topics-in-a-comma-list", "topic: items", "topic: ['a,b,c,d', 'e,f,g,h,i']", 37,
     "bindings.sse_kafka0.routes[0].with.topic", "9 topics: a stream may have at most 8"),
    ("a-topic-listed-twice", "topic: items", "topic: [a, 'b,a']", 37,
     "bindings.sse_kafka0.routes[0].with.topic", "topic 'a' listed twice"),
    ("not-a-topic-in-the-list", "topic: items", "topic: [a, 'b c']", 37,
     "bindings.sse_kafka0.routes[0].with.topic", "'b c' is not a topic name"),
    ("an-empty-topic-list", "topic: items", "topic: []", 37,
     "bindings.sse_kafka0.routes[0].with.topic", "expected a topic, or a list of at most 8 topics"),
    ("a-key-id-form-on-several-topics", "topic: items",
     "topic: [a, b]\n          event: {{id: '[\"${{key}}\",\"${{etag}}\"]'}}", 38,
     "bindings.sse_kafka0.routes[0].with.event.id", "a stream of several topics has ${etag} ids"),
    ("event-topic-on-one-topic", "topic: items",
     "topic: items\n          event: {{id: '${{etag}}', topic: field}}", 38,
     "bindings.sse_kafka0.routes[0].with.event.topic", "it needs a topic list in with.topic"),
    ("caught-up-not-a-boolean", "topic: items",
     "topic: items\n          event: {{caught-up: soon}}", 38,
     "bindings.sse_kafka0.routes[0].with.event.caught-up", "expected boolean, got 'soon'"),
    ("event-topic-unknown", "topic: items",
     "topic: [a, b]\n          event: {{id: '${{etag}}', topic: header}}", 38,
     "bindings.sse_kafka0.routes[0].with.event.topic", "expected one of 'event', 'field'"),
]


def broken(tmp_path: Path, case: tuple[str, str, str, int, str, str], port: int) -> Path:
    _, old, new, *_ = case
    text = GOOD.replace(old, new, 1)
    assert text != GOOD, f"case {case[0]} did not change the config"
    config = tmp_path / "zilla.yaml"
    config.write_text(text.format(port=port))
    (tmp_path / "www").mkdir(exist_ok=True)
    return config


def test_the_base_config_is_good(tmp_path: Path) -> None:
    config = tmp_path / "zilla.yaml"
    config.write_text(GOOD.format(port=free_port()))
    (tmp_path / "www").mkdir()
    Engine(config, reactor=MemoryReactorClock(), environ={})
    load_config(config, discover())


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_issue_names_file_line_path_and_expectation(tmp_path: Path, case: tuple) -> None:
    config = broken(tmp_path, case, 7114)
    with pytest.raises(ConfigError) as caught:
        Engine(config, reactor=MemoryReactorClock(), environ={})  # load, validate and build
    _, _, _, line, path, words = case
    issue = caught.value.issues[0]
    assert issue.file == config
    assert (issue.line, issue.path) == (line, path), str(caught.value)
    assert words in issue.message, str(caught.value)
    assert f"{config}:{line}: " in str(caught.value)


@pytest.mark.daemon
def test_daemon_refuses_to_start(tmp_path: Path) -> None:
    case = CASES[0]
    port = free_port()
    config = broken(tmp_path, case, port)
    result = subprocess.run([TWISTD, "-n", "--pidfile=", "ssekd", "--config", str(config)],
                            capture_output=True, timeout=30, cwd=tmp_path,
                            env={"PATH": "/usr/bin:/bin"})
    output = (result.stdout + result.stderr).decode()
    assert result.returncode == 1, output
    assert f"{config}:{case[3]}: " in output and case[5] in output
    assert "Traceback" not in output
    assert not port_open("127.0.0.1", port)


def test_compression_settings_reach_the_sse_server(tmp_path: Path) -> None:
    """Each key of the sse server's `compression` takes effect (left out: its default)."""
    from ssekd.bindings.sse.compression import Compression
    from ssekd.bindings.sse.server import SseServer

    built = []
    for options, expected in [
            ("{compression: {level: 1, window-bits: 12, memory-level: 3}}", Compression(1, 12, 3)),
            ("{compression: {}}", Compression(6, 10, 1, "stream")),
            ("{compression: {context: event}}", Compression(6, 10, 1, "event")),
            ("{}", None)]:
        config = tmp_path / f"zilla-{len(built)}.yaml"
        config.write_text(GOOD.replace("    kind: server\n    exit: sse_kafka0",
                                       "    kind: server\n    options: "
                                       + options.replace("{", "{{").replace("}", "}}")
                                       + "\n    exit: sse_kafka0").format(port=free_port()))
        (tmp_path / "www").mkdir(exist_ok=True)
        engine = Engine(config, reactor=MemoryReactorClock(), environ={})
        sse = engine._pending.runtimes["sse0"]  # type: ignore[union-attr]  # built, not started
        assert isinstance(sse, SseServer)
        assert sse.compression == expected, options
        built.append(sse)


def test_a_topic_list_on_an_http_kafka_route_is_refused(tmp_path: Path) -> None:
    """Only sse-kafka routes take a topic list: one on the write path (http-kafka) is refused
    at its line."""
    root = Path(__file__).resolve().parents[2]
    text = (root / "etc" / "zilla-todo.yaml").read_text()
    old = "          topic: task-commands\n"
    assert old in text
    broken_text = text.replace(old, "          topic: [task-commands, audit]\n", 1)
    config = tmp_path / "zilla.yaml"
    config.write_text(broken_text)
    line = broken_text.splitlines().index("          topic: [task-commands, audit]") + 1
    with pytest.raises(ConfigError) as caught:
        load_config(config, discover())
    found = [i for i in caught.value.issues if i.path.endswith(".with.topic")]
    assert found, str(caught.value)
    assert found[0].line == line and "expected" in found[0].message, str(caught.value)
    assert f"{config}:{line}: " in str(caught.value)
