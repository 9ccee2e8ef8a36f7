"""A librdkafka property librdkafka refuses is a config error: the daemon stops before it listens,
naming the file, line and property, instead of a consumer thread dying with a traceback later."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from twisted.internet.testing import MemoryReactorClock

from ssekd.config import ConfigError
from ssekd.dev.broker import free_port, port_open
from ssekd.engine import Engine
from tests.support.daemon import TWISTD

CONFIG = """\
name: props
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
      - when: [{{headers: {{":path": /events}}}}]
        exit: sse0
  sse0:
    type: sse
    kind: server
    exit: ssekafka0
  ssekafka0:
    type: sse-kafka
    kind: proxy
    routes:
      - when: [{{path: /events}}]
        exit: cache_client0
        with: {{topic: t}}
  cache_client0: {{type: kafka, kind: cache_client, exit: cache_server0}}
  cache_server0: {{type: kafka, kind: cache_server, exit: kafka0}}
  kafka0:
    type: kafka
    kind: client
    options:
      servers: [127.0.0.1:9]
      sasl: {{mechanism: plain, username: u, password: hunter2-secret}}
      properties:
        fetch.wait.max.ms: 10
        {bad}
"""

CASES = [
    ("unknown", "no.such.property: 1", "no.such.property", "No such configuration property"),
    ("bad-value", "fetch.min.bytes: lots", "fetch.min.bytes", "Invalid value"),
    ("missing-file", "ssl.ca.location: /nonexistent/ca.pem", "ssl.ca.location",
     "ssl.ca.location failed"),
]


def _write(tmp_path: Path, bad: str, port: int = 7114) -> Path:
    config = tmp_path / "zilla.yaml"
    config.write_text(CONFIG.format(port=port, bad=bad))
    return config




@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_refused_property_is_a_config_error_at_its_line(tmp_path: Path, case: tuple) -> None:
    _, bad, key, words = case
    config = _write(tmp_path, bad)
    with pytest.raises(ConfigError) as caught:
        Engine(config, reactor=MemoryReactorClock(), environ={})
    (issue,) = caught.value.issues
    assert issue.path == f"bindings.kafka0.options.properties.{key}", str(caught.value)
    assert issue.line == 35, str(caught.value)
    assert words in issue.message and "hunter2-secret" not in str(caught.value)


def test_properties_librdkafka_accepts_build(tmp_path: Path) -> None:
    config = _write(tmp_path, "fetch.min.bytes: 1")
    Engine(config, reactor=MemoryReactorClock(), environ={})


@pytest.mark.daemon
def test_the_daemon_refuses_to_start_on_one(tmp_path: Path) -> None:
    port = free_port()
    config = _write(tmp_path, "no.such.property: 1", port)
    result = subprocess.run([TWISTD, "-n", "--pidfile=", "ssekd", "--config", str(config)],
                            capture_output=True, timeout=30, cwd=tmp_path,
                            env={"PATH": "/usr/bin:/bin"})
    output = (result.stdout + result.stderr).decode()
    assert result.returncode == 1, output
    assert f"{config}:35: bindings.kafka0.options.properties.no.such.property" in output, output
    assert "Traceback" not in output and not port_open("127.0.0.1", port)
