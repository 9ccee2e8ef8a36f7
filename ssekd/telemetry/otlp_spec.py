"""What an otlp exporter is to do, read from its options: the part of `ssekd.telemetry.otlp` a
config check needs. The exporter itself (`otlp.OtlpExporter`) needs the OpenTelemetry SDK,
whose import alone takes about a third of a second; it is imported only where a config has an
otlp exporter, so `ssekd check` and daemons without one do not pay for it.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_INTERVAL = 30.0
DEFAULT_PATHS = {"metrics": "/v1/metrics", "logs": "/v1/logs"}
SIGNALS = ("metrics", "logs")
#: The longest one post may take (retries included), and the longest a stop waits.
MAX_EXPORT_SECONDS = 10.0


@dataclass(frozen=True)
class OtlpSpec:
    """One `type: otlp` exporter's options, defaults applied and URLs resolved."""

    name: str
    interval: float
    signals: frozenset[str]
    metrics_url: str
    logs_url: str

    @property
    def timeout(self) -> float:
        return min(self.interval, MAX_EXPORT_SECONDS)


def spec(name: str, options: Mapping[str, Any]) -> OtlpSpec:
    """The spec of an exporter from its (schema-checked) options. Each signal's path is
    resolved against `endpoint.location` as a URI reference, as Zilla does: `/v1/metrics`
    replaces the location's path, a whole URL replaces the location."""
    endpoint = options["endpoint"]
    location = str(endpoint["location"])
    overrides = endpoint.get("overrides", {})
    urls = {s: urllib.parse.urljoin(location, str(overrides.get(s, DEFAULT_PATHS[s])))
            for s in SIGNALS}
    return OtlpSpec(name, float(options.get("interval", DEFAULT_INTERVAL)),
                    frozenset(options.get("signals", SIGNALS)), urls["metrics"], urls["logs"])


def specs(exporters: Sequence[tuple[str, str, Mapping[str, Any]]]) -> list[OtlpSpec]:
    """The specs of the `(name, type, options)` exporters that are otlp ones."""
    return [spec(name, options) for name, type_, options in exporters if type_ == "otlp"]
