"""Smaller reliability findings (issue 9): a tcp route condition that could never mean what it
says, the Kafka client's security settings, and `make run` starting a broker only when asked."""

from __future__ import annotations

from pathlib import Path

import pytest
from twisted.internet.testing import MemoryReactorClock

from ssekd.config import ConfigError
from ssekd.engine import Engine

TCP_AUTHORITY = """\
name: t
bindings:
  tcp0:
    type: tcp
    kind: server
    options: {port: 7114}
    routes:
      - when:
          - port: 7114
          - authority: example.com
        exit: http0
  http0:
    type: http
    kind: server
    exit: files_map
  files_map:
    type: http-filesystem
    kind: proxy
    routes: [{when: [{path: "/{p}"}], exit: files, with: {path: "${params.p}"}}]
  files: {type: filesystem, kind: server, options: {location: .}}
"""


def test_tcp_route_on_authority_is_refused_at_its_line(tmp_path: Path) -> None:
    """At accept there is no host name to match (no SNI, no Host header yet): a route on
    `authority` would have matched every connection, so the config is refused instead."""
    config = tmp_path / "zilla.yaml"
    config.write_text(TCP_AUTHORITY)
    with pytest.raises(ConfigError) as caught:
        Engine(config, reactor=MemoryReactorClock(), environ={})
    (issue,) = caught.value.issues
    assert (issue.file, issue.line) == (config, 10), str(caught.value)
    assert issue.path == "bindings.tcp0.routes[0].when[1].authority"
    assert "tcp routes cannot match authority" in issue.message
    assert "route by authority in the tls or http binding" in issue.message
