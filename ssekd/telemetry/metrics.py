"""Metrics: Zilla's stream and http metrics plus ssekd's own, kept as plain numbers.

Every metric has a Zilla-style dotted name (`stream.data.sent`), which is what `telemetry.metrics`
and a binding's `telemetry.metrics` select by name or glob; the Prometheus name follows Zilla's
rule (`prometheus_name`): dots become `_`, then `_bytes` for byte units, `_milliseconds` for
durations, `_total` for counters (`stream_data_sent_bytes_total`).

Instruments are plain attributes the reactor thread bumps (`Counter.value += n`): no lock, no
label lookup on the hot path of a stream's write. A scrape reads them through one
`prometheus_client` collector, so its cost grows with the number of series (bindings, topics,
partitions), never with the number of open streams. Figures that are state rather than events
(cache sizes, consumer lag) are read at scrape time by callbacks, computed per topic.

One `Metrics` per engine (its own `CollectorRegistry`): tests run several in one process.
Instruments are keyed by (metric, binding, labels) and shared, so a binding rebuilt on reload
carries its counts on, and streams opened before the reload still count down the same gauge.

A binding's `telemetry.attributes` are labels of its own series (an http server's: the method,
path or status of each request, `ssekd.telemetry.attributes`): an instrument asked for with
`attributes` is one series per distinct set. Series of one metric that carry different labels
(one binding with attributes, one without) are exported with every label, empty where a series
has none, which Prometheus reads as the label being absent.
"""

from __future__ import annotations

import bisect
import fnmatch
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from ssekd import hotpath
from ssekd.telemetry.delivery import Deliveries

Kind = Literal["counter", "gauge", "histogram"]
Unit = Literal["", "bytes", "milliseconds", "seconds"]
#: How the parent of workers combines one series of every worker into the daemon's (see
#: `ssekd.workers.summed_metrics`): `sum` what each worker does on its own (requests, streams, bytes);
#: `max` state every worker holds alike (a shared topic's lag, cache age and size: each worker
#: consumes the same partitions); `min` limits and start times.
Across = Literal["sum", "max", "min"]

#: Buckets of the byte-size histograms (bytes).
SIZE_BUCKETS = (64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0)
#: Buckets of `http.duration` (milliseconds): a static file takes ~1 ms, an SSE stream minutes.
DURATION_BUCKETS = (1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0,
                    10000.0, 60000.0, 300000.0, 3600000.0)

#: Buckets of `sse.delivery.latency` (seconds): a few ms on a quiet daemon, seconds when late.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                   30.0, 60.0)


@dataclass(frozen=True)
class MetricDef:
    """One metric: its dotted name, type, unit, extra labels and help text."""

    name: str
    kind: Kind
    help: str
    unit: Unit = ""
    labels: tuple[str, ...] = ()
    zilla: bool = False
    across: Across = "sum"


def _defs(*defs: MetricDef) -> dict[str, MetricDef]:
    return {d.name: d for d in defs}


#: Every metric ssekd exports, Zilla's first. docs/telemetry.md's metric table is made from
#: this (tests/telemetry/test_rules.py).
METRICS: Mapping[str, MetricDef] = _defs(
    MetricDef("stream.active.received", "gauge", "Streams open that clients opened "
              "(SSE responses in progress).", zilla=True),
    MetricDef("stream.active.sent", "gauge", "Event streams open, sending to clients.",
              zilla=True),
    MetricDef("stream.opens.received", "counter", "Stream requests received (including "
              "refused ones).", zilla=True),
    MetricDef("stream.opens.sent", "counter", "Event streams started (a 200 sent).", zilla=True),
    MetricDef("stream.closes.received", "counter", "Streams the client closed.", zilla=True),
    MetricDef("stream.closes.sent", "counter", "Streams the server ended (shutdown, a "
              "limit).", zilla=True),
    MetricDef("stream.errors.received", "counter", "Stream requests refused (400, 404, 405, "
              "503).", zilla=True),
    MetricDef("stream.errors.sent", "counter", "Streams ended by an error on the server side "
              "(a limit).", zilla=True),
    MetricDef("stream.data.received", "counter", "Bytes clients sent on their streams after "
              "the request (always 0 for SSE, which is one-way).", "bytes", zilla=True),
    MetricDef("stream.data.sent", "counter", "Bytes of events, comments and keepalives sent "
              "on streams (after gzip, on a compressed stream).", "bytes", zilla=True),
    MetricDef("http.request.size", "histogram", "Request sizes (headers are not counted: "
              "the body, by Content-Length or as read).", "bytes", zilla=True),
    MetricDef("http.response.size", "histogram", "Response body sizes.", "bytes", zilla=True),
    MetricDef("http.duration", "histogram", "Time from a request's arrival to the end of its "
              "response (an SSE stream's whole life).", "milliseconds", zilla=True),
    MetricDef("http.active.requests", "gauge", "Requests being answered.", zilla=True),
    MetricDef("kafka.cache.messages", "gauge", "Records in a topic's cache.", labels=("topic",),
              across="max"),
    MetricDef("kafka.cache.size", "gauge", "Bytes a topic's cache holds (keys, values, "
              "headers and about 120 bytes per record).", "bytes", labels=("topic",),
              across="max"),
    MetricDef("kafka.cache.oldest.age", "gauge", "Age of the oldest record a topic's cache "
              "holds, by its timestamp.", "seconds", labels=("topic",), across="max"),
    MetricDef("kafka.cache.subscribers", "gauge", "Streams reading a topic's cache.",
              labels=("topic",)),
    MetricDef("kafka.cache.invalid", "counter", "Records a topic's model refused (not "
              "delivered to any stream; counted once, as they enter the cache).",
              labels=("topic",), across="max"),
    MetricDef("kafka.consumer.lag", "gauge", "Records of a partition not yet consumed: "
              "high watermark minus next offset.", labels=("topic", "partition"),
              across="max"),
    MetricDef("sse.kafka.subscribers", "gauge", "Streams open per sse-kafka route.",
              labels=("route",)),
    MetricDef("sse.kafka.filtered", "counter", "Records at the tail a route's filters held "
              "back (counted once per group of streams with the same filters, not per stream; "
              "a stream catching up reads only the records its filters can take).",
              labels=("topic",)),
    MetricDef("sse.kafka.value.not.json", "counter", "Records at the tail a route's value "
              "filters could not read as JSON (they match none; counted once per record, "
              "however many filters looked).", labels=("topic",)),
    MetricDef("sse.kafka.resumes", "counter", "Streams that came back with a last event id, "
              "by where they resumed from (cache, kafka, undecodable).", labels=("outcome",)),
    MetricDef("sse.client.invalid", "counter", "Upstream events an sse client's `requests` "
              "model refused (not relayed to any stream; counted once per upstream event, by "
              "the entry's path pattern).", labels=("path",)),
    MetricDef("sse.pauses", "counter", "Times a slow client's full buffer paused its "
              "stream."),
    MetricDef("sse.gzip.input", "counter", "Bytes written to gzip streams before compression "
              "(`compression`; beside the bytes sent, what gzip saved).", "bytes"),
    MetricDef("sse.limit.ends", "counter", "Streams ended by a limit, by limit.",
              labels=("limit",)),
    MetricDef("tls.handshakes", "counter", "TLS handshakes by outcome (ok, failed) and "
              "negotiated protocol (h2, http/1.1, none; h3 for a quic binding's).",
              labels=("outcome", "protocol")),
    MetricDef("quic.connections", "gauge", "QUIC connections open (a quic binding's; their "
              "handshakes count in tls.handshakes, protocol h3)."),
    MetricDef("quic.migrations", "counter", "QUIC connections that moved to a new client "
              "address and went on (connection migration)."),
    MetricDef("sse.kafka.delivered", "counter", "Events written to streams per sse-kafka "
              "route (one per event per stream, history included).", labels=("route",)),
    MetricDef("sse.delivery.latency", "histogram", "Time from a record's Kafka timestamp to "
              "its write on a stream's socket, per event per stream, for records delivered "
              "as they arrive (not history a stream catches up on).", "seconds"),
    MetricDef("kafka.client.connected", "gauge", "1 while every consumer of the kafka client "
              "reaches a broker, 0 while one reaches none.", across="min"),
    MetricDef("ssekd.ready", "gauge", "1 while readiness answers 200 (bootstrap topics "
              "loaded once, not draining), else 0.", across="min"),
    MetricDef("ssekd.build.info", "gauge", "Always 1; the label `version` is ssekd's version, "
              "`hotpath` says whether the hot path runs compiled (`compiled`) or as plain "
              "Python (`python`).", labels=("version", "hotpath"), across="max"),
    MetricDef("ssekd.worker.restarts", "counter", "Workers the parent started again after "
              "they died or missed their heartbeats (only with workers)."),
    MetricDef("ssekd.memory.limit", "gauge", "The memory limit of the daemon's control group "
              "(systemd's MemoryMax, a container's limit); absent without one.", "bytes",
              across="min"),
)

#: How the process collector's families combine across workers (see `Across`): memory and CPU
#: add up to the daemon's; open file descriptors stay comparable to the per-process limit.
PROCESS_ACROSS: Mapping[str, Across] = {
    "process_cpu_seconds": "sum", "process_resident_memory_bytes": "sum",
    "process_virtual_memory_bytes": "sum", "process_open_fds": "max",
    "process_max_fds": "min", "process_start_time_seconds": "min"}


def across_workers() -> dict[str, Across]:
    """Family name (as a scrape names it, without `_total`) -> how it combines."""
    found = {prometheus_name(d): d.across for d in METRICS.values()}
    found.update(PROCESS_ACROSS)
    return found

#: The dotted names under which the process collector's metrics are selected.
PROCESS_METRICS = ("process.cpu.seconds", "process.open.fds", "process.max.fds",
                   "process.virtual.memory", "process.resident.memory", "process.start.time")


def prometheus_name(d: MetricDef) -> str:
    """Zilla's rule: dots to `_`, a unit suffix; `_total` is added on output for counters."""
    base = d.name.replace(".", "_").replace("-", "_")
    return f"{base}_{d.unit}" if d.unit and not base.endswith(d.unit) else base


def exported_name(d: MetricDef) -> str:
    """The name a Prometheus query uses (with `_total` for counters)."""
    return prometheus_name(d) + ("_total" if d.kind == "counter" else "")


def label_name(attribute: str) -> str:
    """A `telemetry.attributes` key as a label name (dots and dashes become `_`)."""
    return attribute.replace(".", "_").replace("-", "_")


def matches(patterns: Iterable[str], name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def known_names() -> tuple[str, ...]:
    """Every dotted name a `telemetry.metrics` entry can select."""
    return (*METRICS, *PROCESS_METRICS)


class Counter:
    """A count that only goes up; bump `value` directly on hot paths."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class Gauge:
    """A figure that goes up and down."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount

    def set(self, value: float) -> None:
        self.value = value


class Histogram:
    """Counts per bucket (not cumulative until exported), sum and count."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def observe_many(self, value: float, times: int) -> None:
        """`times` observations of the same value (the streams one write reached)."""
        self.counts[bisect.bisect_left(self.bounds, value)] += times
        self.sum += value * times

    def observe_ages(self, now: float, stamps: list[int], times: int) -> None:
        """`observe_many` of each of `stamps`' age in seconds at `now` (all in ms): a
        delivered batch's records, one loop of the hot path (`ssekd.hotpath`) for them all."""
        self.sum = hotpath.observe_ages(self.counts, self.bounds, now, stamps, times, self.sum)


Instrument = Counter | Gauge | Histogram
InstT = TypeVar("InstT", Counter, Gauge, Histogram)
Key = tuple[str, str, tuple[tuple[str, str], ...]]
#: A callback's figures: (dotted metric name, extra labels, value).
Reading = tuple[str, Mapping[str, str], float]


class Metrics:
    """The metrics of one engine: instruments, scrape-time readers, and what is selected."""

    def __init__(self, namespace: str = "default") -> None:
        self.namespace = namespace
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        self._instruments: dict[Key, Instrument] = {}
        self._readers: dict[tuple[str, str], Callable[[], Iterable[Reading]]] = {}
        self._selected: tuple[str, ...] | None = None
        self._per_binding: dict[str, tuple[str, ...]] = {}
        self._attributes: dict[str, str] = {}
        self._live: set[str] | None = None
        self._process: ProcessCollector | None = None
        #: The batch being delivered at the tail, for `sse.delivery.latency`.
        self.deliveries = Deliveries()

    # -- what the bindings use ------------------------------------------------------------------

    def counter(self, name: str, binding: str, *, attributes: Mapping[str, str] | None = None,
                **labels: str) -> Counter:
        return self._get(name, binding, labels, "counter", Counter, attributes)

    def gauge(self, name: str, binding: str, *, attributes: Mapping[str, str] | None = None,
              **labels: str) -> Gauge:
        return self._get(name, binding, labels, "gauge", Gauge, attributes)

    def histogram(self, name: str, binding: str, *,
                  attributes: Mapping[str, str] | None = None, **labels: str) -> Histogram:
        """`attributes`: the binding's `telemetry.attributes` of this series (label -> value)."""
        d = METRICS[name]
        buckets = DURATION_BUCKETS if d.unit == "milliseconds" else \
            LATENCY_BUCKETS if d.unit == "seconds" else SIZE_BUCKETS
        return self._get(name, binding, labels, "histogram", lambda: Histogram(buckets),
                         attributes)

    def reader(self, binding: str, key: str,
               read: Callable[[], Iterable[Reading]]) -> None:
        """Figures read at scrape time (state, not events), e.g. a cache's size per topic.

        `key` tells a binding's readers apart; registering again under the same key replaces
        the reader (a binding rebuilt on reload)."""
        self._readers[(binding, key)] = read

    def wanted(self, name: str, binding: str) -> bool:
        """Whether `name` is exported for `binding` (a binding may skip work it would feed)."""
        if self._selected is not None and not matches(self._selected, name):
            return False
        own = self._per_binding.get(binding)
        return own is None or matches(own, name)

    def _get(self, name: str, binding: str, labels: Mapping[str, str], kind: Kind,
             make: Callable[[], InstT], attributes: Mapping[str, str] | None = None) -> InstT:
        d = METRICS[name]
        if d.kind != kind or set(labels) != set(d.labels):
            raise ValueError(f"{name} is a {d.kind} labelled {d.labels}")
        if attributes:
            labels = {**attributes, **labels}  # the checks keep an attribute off ssekd's labels
        key = (name, binding, tuple(sorted(labels.items())))
        inst = self._instruments.get(key)
        if inst is None:
            inst = self._instruments[key] = make()
        return inst  # type: ignore[return-value]  # same key, same kind: made by `make`

    def forget(self, label: str, value: str) -> None:
        """Stop exporting every series labelled `label=value` (a topic the cache dropped): a
        client naming topic after topic must not grow the metrics, and the scrape, without end.
        An instrument still held keeps counting unexported; asked for again, a series starts
        from zero, which Prometheus reads as a counter reset."""
        for key in [k for k in self._instruments if (label, value) in k[2]]:
            del self._instruments[key]

    # -- configuration (engine) -----------------------------------------------------------------

    def configure(self, namespace: str, selected: Sequence[str] | None,
                  attributes: Mapping[str, str], per_binding: Mapping[str, Sequence[str]],
                  live: Iterable[str]) -> None:
        """Apply a config: which metrics, which labels, which bindings exist now.

        `selected` None keeps every metric. Instruments of bindings no longer configured stay
        (their counts come back if the binding does) but are not exported."""
        self.namespace = namespace
        self._selected = tuple(selected) if selected is not None else None
        self._attributes = {label_name(k): v for k, v in attributes.items()}
        self._per_binding = {b: tuple(p) for b, p in per_binding.items()}
        self._live = set(live)
        process = self._selected is None or any(matches(self._selected, n)
                                                for n in PROCESS_METRICS)
        if process and self._process is None:
            self._process = ProcessCollector(registry=self.registry)
        elif not process and self._process is not None:
            self.registry.unregister(self._process)
            self._process = None

    # -- scrape ---------------------------------------------------------------------------------

    def families(self) -> Iterator[Metric]:
        """One family per selected metric with its samples (reactor thread, O(series))."""
        base = {"namespace": self.namespace, **self._attributes}
        samples: dict[str, list[tuple[dict[str, str], Instrument | float]]] = {}
        for (name, binding, extra), inst in self._instruments.items():
            if self._live is not None and binding not in self._live:
                continue
            if self.wanted(name, binding):
                samples.setdefault(name, []).append(
                    ({**base, "binding": binding, **dict(extra)}, inst))
        for (binding, _), read in list(self._readers.items()):
            if self._live is not None and binding not in self._live:
                continue
            for name, labels, value in read():
                if self.wanted(name, binding):
                    samples.setdefault(name, []).append(
                        ({**base, "binding": binding, **labels}, value))
        for name, d in METRICS.items():
            found = samples.get(name)
            if found is None:
                continue
            yield _family(d, found)


def _family(d: MetricDef, found: list[tuple[dict[str, str], Instrument | float]]) -> Metric:
    """A prometheus_client family of `d` holding `found` (each with its labels)."""
    pname = prometheus_name(d)
    names = sorted({n for labels, _ in found for n in labels}, key=_label_order)
    found = [({n: labels.get(n, "") for n in names}, inst) for labels, inst in found]
    family: Metric
    if d.kind == "histogram":
        family = HistogramMetricFamily(pname, d.help, labels=names, unit=d.unit)
        for labels, inst in found:
            assert isinstance(inst, Histogram)
            cumulative, total = [], 0
            for bound, count in zip((*inst.bounds, float("inf")), inst.counts, strict=True):
                total += count
                cumulative.append((_bound(bound), float(total)))
            family.add_metric([labels[n] for n in names], cumulative, inst.sum)
        return family
    cls = CounterMetricFamily if d.kind == "counter" else GaugeMetricFamily
    family = cls(pname, d.help, labels=names, unit=d.unit)
    for labels, inst in found:
        assert not isinstance(inst, Histogram)
        value = inst if isinstance(inst, float | int) else inst.value
        family.add_metric([labels[n] for n in names], float(value))
    return family


def _label_order(name: str) -> tuple[int, str]:
    return ({"namespace": 0, "binding": 1}.get(name, 2), name)


def _bound(b: float) -> str:
    return "+Inf" if b == float("inf") else repr(float(b))


class _Collector:
    """The bridge to prometheus_client: `collect` is called by each scrape."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return self.metrics.families()
