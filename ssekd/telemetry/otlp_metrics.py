"""The metrics of one engine as OTLP data: what a Prometheus scrape shows, under Zilla's names.

The OTLP exporter reads the same `prometheus_client` registry the Prometheus page is rendered
from (`Metrics.registry`), so both exporters always agree: the same metrics, the same selection
(`telemetry.metrics`, a binding's own list), the same bindings, the same values. Only the naming
differs, as it does in Zilla: OTLP carries the dotted name (`stream.active.sent`) and the unit
apart, the `namespace` and `binding` labels become data point attributes, and the
`telemetry.attributes` describe the resource (the process), not each point.

Why not the SDK's own instruments: ours are plain numbers the reactor thread bumps without a
lock (see `ssekd.telemetry.metrics`), and the SDK reads its instruments on its reader's thread.
Feeding SDK instruments as well would put a lock and an attribute lookup on every request's path;
reading ours from another thread would race the reactor (a dict that changes size while it is
walked). The SDK also has no asynchronous histogram for counts already in buckets. So the
reactor takes the snapshot, at the cost of a scrape (O(series)), and the SDK's data classes and
OTLP/HTTP exporter carry it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import cast

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from prometheus_client.metrics_core import Metric as Family

from ssekd import __version__
from ssekd.telemetry.metrics import METRICS, PROCESS_METRICS, prometheus_name

SCOPE = InstrumentationScope("ssekd", __version__)

#: Prometheus family name -> (dotted name, unit, help) for every metric ssekd defines.
_NAMES: dict[str, tuple[str, str, str]] = {
    prometheus_name(d): (d.name, d.unit, d.help) for d in METRICS.values()}
#: The process collector's families (`process_resident_memory_bytes`) by their dotted name.
_PROCESS = {n.replace(".", "_"): n for n in PROCESS_METRICS}

Labels = tuple[tuple[str, str], ...]


def metrics_data(families: Iterable[Family], resource: Resource, hidden: Iterable[str],
                 start_ns: int, now_ns: int) -> MetricsData:
    """The OTLP form of `families` (a registry's `collect()`), counted from `start_ns`.

    `hidden` are the labels that describe the resource (the `telemetry.attributes`), left off
    each data point. Counts are cumulative, as on the Prometheus page."""
    drop = frozenset(hidden)
    metrics = [m for f in families if (m := _metric(f, drop, start_ns, now_ns)) is not None]
    scope = ScopeMetrics(scope=SCOPE, metrics=metrics, schema_url="")
    return MetricsData(resource_metrics=[
        ResourceMetrics(resource=resource, scope_metrics=[scope], schema_url="")])


def naming(family: Family) -> tuple[str, str, str] | None:
    """(dotted name, unit, description) of a family, None for one ssekd does not define."""
    found = _NAMES.get(family.name)
    if found is not None:
        return found
    for base, dotted in _PROCESS.items():
        if family.name == base or family.name.startswith(base + "_"):
            unit = family.name[len(base) + 1:] or dotted.rpartition(".")[2]
            return dotted, unit if unit in ("bytes", "seconds") else "", family.documentation
    return None


def _metric(family: Family, drop: frozenset[str], start_ns: int, now_ns: int) -> Metric | None:
    named = naming(family)
    if named is None:
        return None
    name, unit, description = named
    data: Sum | Gauge | Histogram
    if family.type == "histogram":
        data = Histogram(data_points=_histogram_points(family, drop, start_ns, now_ns),
                         aggregation_temporality=AggregationTemporality.CUMULATIVE)
    elif family.type == "counter":
        points = [_number(s.labels, s.value, drop, start_ns, now_ns)
                  for s in family.samples if s.name == family.name + "_total"]
        data = Sum(data_points=points, is_monotonic=True,
                   aggregation_temporality=AggregationTemporality.CUMULATIVE)
    elif family.type == "gauge":
        data = Gauge(data_points=[_number(s.labels, s.value, drop, start_ns, now_ns)
                                  for s in family.samples])
    else:
        return None
    return Metric(name=name, description=description, unit=unit, data=data)


def _attributes(labels: Mapping[str, str], drop: frozenset[str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k not in drop}


def _number(labels: Mapping[str, str], value: float, drop: frozenset[str], start_ns: int,
            now_ns: int) -> NumberDataPoint:
    # Whole numbers go as integers (OTLP's as_int), as Zilla sends its counts.
    exact: int | float = int(value) if float(value).is_integer() else value
    return NumberDataPoint(attributes=_attributes(labels, drop), start_time_unix_nano=start_ns,
                           time_unix_nano=now_ns, value=exact)


def _histogram_points(family: Family, drop: frozenset[str], start_ns: int,
                      now_ns: int) -> list[HistogramDataPoint]:
    """Prometheus gives each series as cumulative `_bucket{le}` samples plus `_sum` and
    `_count`; OTLP wants the bounds and each bucket's own count."""
    buckets: dict[Labels, list[tuple[float, float]]] = {}
    sums: dict[Labels, float] = {}
    labels_of: dict[Labels, dict[str, str]] = {}
    for s in family.samples:
        series = {k: v for k, v in s.labels.items() if k != "le"}
        key = tuple(sorted(series.items()))
        labels_of[key] = series
        if s.name == family.name + "_bucket":
            buckets.setdefault(key, []).append((float(s.labels["le"]), s.value))
        elif s.name == family.name + "_sum":
            sums[key] = s.value
    points = []
    for key, cumulative in buckets.items():
        cumulative.sort()
        counts, before = [], 0.0
        for _, total in cumulative:
            counts.append(int(total - before))
            before = total
        bounds = [b for b, _ in cumulative if b != float("inf")]
        points.append(HistogramDataPoint(
            attributes=_attributes(labels_of[key], drop), start_time_unix_nano=start_ns,
            time_unix_nano=now_ns, count=int(before), sum=sums.get(key, 0.0),
            bucket_counts=counts, explicit_bounds=bounds,
            # Counts kept per bucket know no smallest or largest value: OTLP's min and max are
            # optional, and the encoder leaves them out when None.
            min=cast(float, None), max=cast(float, None)))
    return points
