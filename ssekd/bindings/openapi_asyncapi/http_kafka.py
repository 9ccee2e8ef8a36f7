"""One HTTP operation paired with one Kafka operation, as an http-kafka route: what Zilla's
openapi-asyncapi proxy composes for each pair.

- the route's `when`: the operation's method and path (`{name}` parts capture a segment);
- a Kafka operation that `receive`s: `fetch` of its channel's topic; when a JSON response of the
  HTTP operation is an array, the answer is every key's latest value merged into one array
  (`merge`, Zilla's `initial: "[]"`, `path: "/-"`); with path parameters, only the records
  keyed by the last one;
- one that `send`s: `produce` to its topic, acknowledged by the in-sync replicas, keyed by the
  last path parameter, else by the request's idempotency key; its `reply` channel is the topic
  the answer comes from (`reply-to`), and a `202` response whose header's schema `format` is a
  location with `{correlationId}` makes the route answer asynchronously (`async`);
- the HTTP operation's `x-zilla-http-kafka` extension: `filters` for a fetch, `key` and
  `overrides` for a produce.

Kept behind one function (`http_kafka_route`) with plain inputs, so that another composer of
HTTP operations onto Kafka (an AsyncAPI HTTP spec) can share it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: A `{name}` part of a path, a topic or a location.
_PARAMETER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_CORRELATION = "{correlationId}"
EXTENSION = "x-zilla-http-kafka"


@dataclass(frozen=True)
class HttpSide:
    """What the route needs of the HTTP operation."""

    method: str
    path: str
    #: The media type and schema of each response content, by status.
    responses: Mapping[str, Sequence[tuple[str, Any]]]
    #: Header name -> its schema, of the `202` response.
    accepted_headers: Mapping[str, Any]
    #: The `x-zilla-http-kafka` extension, or None.
    extension: Mapping[str, Any] | None


@dataclass(frozen=True)
class KafkaSide:
    """What the route needs of the Kafka operation."""

    action: str  # send or receive
    topic: str
    reply_topic: str | None


def _params(text: str) -> str:
    return _PARAMETER.sub(r"${params.\1}", text)


def _is_json(media_type: str) -> bool:
    return re.match(r"^application/(?:[^;]+\+)?json(?:;.*)?$", media_type.strip(),
                    re.IGNORECASE) is not None


def http_kafka_route(http: HttpSide, kafka: KafkaSide, exit_name: str,
                     identity: str | None = None) -> dict[str, Any]:
    """The http-kafka route (as zilla.yaml writes it) for one pair. `identity` is what
    `{identity}` in the extension stands for (a guard's `${guarded['g'].identity}`)."""
    names = _PARAMETER.findall(http.path)
    last = f"${{params.{names[-1]}}}" if names else None
    extension = http.extension or {}

    def resolved(value: Any) -> str:
        text = str(value)
        if identity is not None:
            text = text.replace("{identity}", identity)
        return _params(text)

    with_: dict[str, Any] = {"capability": "fetch" if kafka.action == "receive" else "produce",
                             "topic": _params(kafka.topic)}
    if kafka.action == "receive":
        if any(_is_json(t) and isinstance(s, Mapping) and s.get("type") == "array"
               for contents in http.responses.values() for t, s in contents):
            with_["merge"] = {"content-type": "application/json",
                              "patch": {"initial": "[]", "path": "/-"}}
        filters: list[dict[str, Any]] = [{"key": last}] if last else []
        for item in extension.get("filters") or ():
            if isinstance(item, Mapping):
                entry: dict[str, Any] = {}
                if "key" in item:
                    entry["key"] = resolved(item["key"])
                if isinstance(item.get("headers"), Mapping):
                    entry["headers"] = {str(k): resolved(v) for k, v in item["headers"].items()}
                filters.append(entry)
        if filters:
            with_["filters"] = filters
    else:
        with_["acks"] = "in_sync_replicas"
        with_["key"] = resolved(extension["key"]) if "key" in extension \
            else last or "${idempotencyKey}"
        if isinstance(extension.get("overrides"), Mapping):
            with_["overrides"] = {str(k): resolved(v)
                                  for k, v in extension["overrides"].items()}
        if kafka.reply_topic is not None:
            with_["reply-to"] = _params(kafka.reply_topic)
            located = {str(name): str(schema["format"])
                       for name, schema in http.accepted_headers.items()
                       if isinstance(schema, Mapping) and _CORRELATION in
                       str(schema.get("format", ""))}
            if located:
                with_["async"] = {name: _params(value.replace(_CORRELATION,
                                                              "${correlationId}"))
                                  for name, value in located.items()}
    return {"when": [{"method": http.method, "path": http.path}], "exit": exit_name,
            "with": with_}
