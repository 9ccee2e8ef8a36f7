"""The metrics as OTLP data: what the Prometheus page shows, under Zilla's names and units, with
the resource's attributes off the points and histogram buckets given one by one."""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.sdk.metrics.export import Gauge, Histogram, Sum
from opentelemetry.sdk.resources import Resource

from ssekd.telemetry.metrics import Metrics
from ssekd.telemetry.otlp_metrics import metrics_data


def _metrics() -> Metrics:
    m = Metrics()
    m.configure("ns", None, {"service.namespace": "example"}, {}, {"sse", "http", "cache"})
    m.gauge("stream.active.sent", "sse").inc(3)
    m.counter("stream.data.sent", "sse").inc(1234)
    h = m.histogram("http.duration", "http")
    for ms in (0.5, 3.0, 3.5, 70.0, 10**9):
        h.observe(ms)
    m.reader("cache", "t", lambda: [("kafka.cache.messages", {"topic": "orders"}, 7.0)])
    return m


def test_names_units_kinds_and_attributes_as_zilla_sends_them() -> None:
    data = metrics_data(_metrics().registry.collect(), Resource({"service.namespace": "example"}),
                        ["service_namespace"], start_ns=1, now_ns=2)
    found = {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics
             for m in sm.metrics}
    active = found["stream.active.sent"]
    assert isinstance(active.data, Gauge)
    [point] = active.data.data_points
    # the attribute labels describe the resource, not each point
    assert dict(point.attributes or {}) == {"namespace": "ns", "binding": "sse"}
    assert point.value == 3 and isinstance(point.value, int)
    sent = found["stream.data.sent"]
    assert isinstance(sent.data, Sum) and sent.data.is_monotonic and sent.unit == "bytes"
    assert sent.data.data_points[0].value == 1234
    assert sent.data.data_points[0].start_time_unix_nano == 1
    cached = found["kafka.cache.messages"]
    assert isinstance(cached.data, Gauge)
    assert dict(cached.data.data_points[0].attributes or {})["topic"] == "orders"
    assert "process.resident.memory" in found and found["process.resident.memory"].unit == "bytes"
    duration = found["http.duration"]
    assert isinstance(duration.data, Histogram) and duration.unit == "milliseconds"
    [hp] = duration.data.data_points
    assert hp.count == 5 and hp.sum == 0.5 + 3.0 + 3.5 + 70.0 + 10**9
    assert len(hp.bucket_counts) == len(hp.explicit_bounds) + 1
    # each bucket's own count (Prometheus gives them cumulative): 0.5 ≤ 1, two ≤ 5, 70 ≤ 100,
    # and one beyond the last bound
    by_bound = dict(zip([*hp.explicit_bounds, float("inf")], hp.bucket_counts, strict=True))
    assert (by_bound[1.0], by_bound[5.0], by_bound[100.0], by_bound[float("inf")]) == (1, 2, 1, 1)
    assert sum(hp.bucket_counts) == 5
    # the SDK's encoder takes it (min and max are left out, not zero)
    pb = encode_metrics(data)
    [encoded] = [m for m in pb.resource_metrics[0].scope_metrics[0].metrics
                 if m.name == "http.duration"]
    assert not encoded.histogram.data_points[0].HasField("min")


def test_selection_applies_as_on_the_prometheus_page() -> None:
    m = _metrics()
    m.configure("ns", ["stream.*"], {}, {}, {"sse", "http", "cache"})
    data = metrics_data(m.registry.collect(), Resource({}), [], 1, 2)
    names = {x.name for rm in data.resource_metrics for sm in rm.scope_metrics
             for x in sm.metrics}
    assert names == {"stream.active.sent", "stream.data.sent"}
