"""The binding contract at work: an exit that cannot play the role its binding needs, or a `with`
that refers to a capture its route does not make or to a guard the config lacks, is refused by
`ssekd check` (and so by the daemon) with file:line, never an AttributeError or a 404 per request
later."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.http.roles import HttpBinding
from ssekd.config import ConfigError
from ssekd.engine import Engine
from ssekd.spi.binding import BindingType, KindSpec
from ssekd.spi.plugins import Registry, discover

SSEKD = str(Path(sys.executable).with_name("ssekd"))

KAFKA = """\
name: roles
bindings:
  tcp0: {type: tcp, kind: server, options: {host: 127.0.0.1, port: 7114}, exit: http0}
  http0: {type: http, kind: server, exit: sse0}
  sse0: {type: sse, kind: server, exit: map0}
  map0:
    type: sse-kafka
    kind: proxy
    routes:
      - when: [{path: "/{topic}"}]
        exit: cc
        with: {topic: "${params.topic}"}
  cc: {type: kafka, kind: cache_client, exit: cs}
  cs: {type: kafka, kind: cache_server, exit: kc}
  kc: {type: kafka, kind: client, options: {servers: ["localhost:9092"]}}
"""

# (id, replace-this, with-this, line, words the error must contain)
CASES = [
    ("sse-kafka-to-kafka-client", "        exit: cc\n", "        exit: kc\n", 11,
     "bindings.map0.routes[0].exit: exit 'kc' of binding 'map0' is a kafka client "
     "(kafka client); expected a binding that is kafka cache"),
    ("cache-client-to-kafka-client", "kind: cache_client, exit: cs}",
     "kind: cache_client, exit: kc}", 13,
     "bindings.cc.exit: exit 'kc' of binding 'cc' is a kafka client (kafka client); "
     "expected a binding that is kafka cache"),
    ("cache-server-to-cache-server", "kind: cache_server, exit: kc}",
     "kind: cache_server, exit: cc}", 14,
     "bindings.cs.exit: exit 'cc' of binding 'cs' is a kafka cache_client (kafka cache); "
     "expected a binding that is kafka client"),
    ("cache-client-to-cache-client", "kind: cache_client, exit: cs}\n",
     "kind: cache_client, exit: cc2}\n  cc2: {type: kafka, kind: cache_client, exit: cs}\n", 13,
     "bindings.cc.exit: exit 'cc2' of binding 'cc' is a kafka cache_client; expected a binding "
     "that provides CacheServer"),
    ("with-refers-to-no-capture", 'with: {topic: "${params.topic}"}',
     'with: {topic: "${params.name}"}', 12,
     "bindings.map0.routes[0].with: expected references to what every `when.path` captures; "
     "name is not captured by all of them"),
    ("with-refers-to-no-guard", 'with: {topic: "${params.topic}"}',
     """with: {topic: "${params.topic}", filters: [{key: "${guarded['jwt0'].identity}"}]}""", 12,
     "bindings.map0.routes[0].with: expected `guarded[...]` to name a guard defined under "
     "guards; jwt0 is not"),
]


def check(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "zilla.yaml"
    config.write_text(text)
    return subprocess.run([SSEKD, "check", "--config", str(config)], capture_output=True,
                          text=True, timeout=60)


def test_the_base_config_passes(tmp_path: Path) -> None:
    result = check(tmp_path, KAFKA)
    assert result.returncode == 0, result.stderr
    assert "tcp0 (tcp server 127.0.0.1:7114) -> http0 (http server) -> sse0 (sse server) -> " \
           "map0 (sse-kafka proxy)" in result.stdout
    assert "-> cc (kafka cache_client) -> cs (kafka cache_server) -> " \
           "kc (kafka client localhost:9092)" in result.stdout


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_check_refuses_with_file_and_line(tmp_path: Path,
                                          case: tuple[str, str, str, int, str]) -> None:
    _, old, new, line, words = case
    text = KAFKA.replace(old, new, 1)
    assert text != KAFKA
    result = check(tmp_path, text)
    assert result.returncode == 1, result.stdout
    assert f"{tmp_path / 'zilla.yaml'}:{line}: {words}" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_a_type_that_builds_the_wrong_thing_is_named(tmp_path: Path) -> None:
    """A plugin whose runtime object does not offer its role's protocol is reported at build,
    naming the binding, not as an AttributeError at its first request."""
    broken = BindingType("echo", {"server": KindSpec(role=HttpBinding,
                                                     build=lambda ctx, b: object())})
    real = discover()
    registry = Registry({**real.types, "echo": broken})
    config = tmp_path / "zilla.yaml"
    config.write_text("name: t\nbindings:\n"
                      "  tcp0: {type: tcp, kind: server, options: {port: 7114}, exit: http0}\n"
                      "  http0: {type: http, kind: server, exit: echo0}\n"
                      "  echo0: {type: echo, kind: server}\n")
    with pytest.raises(ConfigError) as caught:
        Engine(config, MemoryReactorClock(), registry=registry, environ={})
    (issue,) = caught.value.issues
    assert (issue.line, issue.path) == (5, "bindings.echo0")
    assert issue.message == "cannot build echo server: TypeError: object does not provide " \
                            "HttpBinding (role http)"
