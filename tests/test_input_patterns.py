"""Patterns that guard input match the whole value: Python's `$` also matches before a final
newline, so `^[A-Za-z0-9._-]{1,249}$` with `.match()` took `"x\\n"`. Every such guard uses
`fullmatch` (or reads `$` as the end of the string, for JSON Schema's `pattern`): a topic name
from the path or from a token's identity, a progress token, a config name or server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ssekd.bindings.http.roles import HttpContext
from ssekd.bindings.sse.roles import StreamRequest
from ssekd.bindings.sse_kafka.proxy import RouteSubscription, SseKafkaProxy, SseKafkaRoute
from ssekd.config import ConfigError
from ssekd.config.load import load_config
from ssekd.config.schema import schema_files
from ssekd.event_ids import UndecodableId, b64url_decode
from ssekd.guards.jwt import JwtSession
from ssekd.patterns import Pattern
from ssekd.spi.plugins import discover
from ssekd.telemetry.events import EventLog


class Cache:
    """A kafka cache that records the topics it was asked to follow."""

    def __init__(self) -> None:
        self.topics: list[str] = []

    def subscribe(self, topic: str, encoder: Any, sink: Any, start: Any) -> Any:
        self.topics.append(topic)
        return _Handle()

    def topic(self, name: str) -> Any:
        return None  # followed: nothing here needs its cache


class _Handle:
    closed = False

    def close(self) -> None:
        self.closed = True


def _proxy(cache: Cache) -> SseKafkaProxy:
    routes = (
        SseKafkaRoute((Pattern.compile("/events/{topic}"),), "cache", None),
        SseKafkaRoute((Pattern.compile("/mine"),), "cache",
                      {"topic": "inbox-${guarded['jwt0'].identity}"}),
    )
    return SseKafkaProxy("sse_kafka", routes, {"cache": cache}, EventLog("t"))  # type: ignore[dict-item]


def _open(proxy: SseKafkaProxy, path: str, identity: str | None = None) -> Any:
    context = HttpContext("http0")
    if identity is not None:
        context.sessions["jwt0"] = JwtSession(identity, frozenset(), None)
    return proxy.open(StreamRequest(path, None, context=context, describe=f"GET {path}"),
                      None)  # type: ignore[arg-type]


@pytest.mark.parametrize("path", ["/events/connect-configs%0A", "/events/orders%0A",
                                  "/events/connect-status%0a"])
def test_a_topic_name_with_a_final_newline_is_404_and_never_followed(path: str) -> None:
    """`/connect-configs%0A` used to pass the name check and, not being `connect-configs`,
    the internal-topic refusal too."""
    cache = Cache()
    assert _open(_proxy(cache), path) == 404
    assert cache.topics == []


def test_an_identity_with_a_final_newline_names_no_topic() -> None:
    cache = Cache()
    proxy = _proxy(cache)
    assert _open(proxy, "/mine", identity="alice\n") == 404
    assert cache.topics == []
    assert isinstance(_open(proxy, "/mine", identity="alice"), RouteSubscription)
    assert cache.topics == ["inbox-alice"]


@pytest.mark.parametrize("text", ["AQQABAIC\n", "AQQABAICAA==\n", "AQQA\n"])
def test_a_progress_token_with_a_final_newline_is_not_base64url(text: str) -> None:
    with pytest.raises(UndecodableId, match="not base64url"):
        b64url_decode(text)


CONFIG = """\
name: t
bindings:
  {name}:
    type: kafka
    kind: client
    options:
      servers: [{server}]
"""


@pytest.mark.parametrize(("name", "server", "where"), [
    ('"south\\n"', "localhost:9092", "bindings"),
    ("south", '"localhost:9092\\n"', "bindings.south.options.servers[0]"),
])
def test_config_patterns_match_whole_values(tmp_path: Path, name: str, server: str,
                                            where: str) -> None:
    config = tmp_path / "zilla.yaml"
    config.write_text(CONFIG.format(name="south", server="localhost:9092"))
    load_config(config, discover())  # the same without the newline is fine
    config.write_text(CONFIG.format(name=name, server=server))
    with pytest.raises(ConfigError) as caught:
        load_config(config, discover())
    assert any(issue.path.startswith(where) and "expected" in issue.message
               for issue in caught.value.issues), str(caught.value)


def _patterns(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
        return own + [p for v in node.values() for p in _patterns(v)]
    if isinstance(node, list):
        return [p for v in node for p in _patterns(v)]
    return []


def test_every_schema_pattern_anchors_its_end_only_at_the_end() -> None:
    """A `$` elsewhere than last would keep Python's meaning (before a final newline)."""
    patterns = _patterns(list(schema_files().values()))
    assert patterns, "the schema files have patterns"
    for pattern in patterns:
        assert "$" not in pattern[:-1].replace("\\$", ""), pattern
