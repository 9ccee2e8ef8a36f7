"""The sum of the workers' metrics pages: counters, gauges and histogram buckets add up, times
and limits keep the earliest, and the result renders in both exposition formats."""

from __future__ import annotations

from prometheus_client import generate_latest

from ssekd.telemetry.metrics import Metrics
from ssekd.telemetry.summed import render


def page(opens: int, active: int, sizes: list[float]) -> str:
    m = Metrics()
    m.configure("ns", None, {}, {}, ["sse", "http"])
    m.counter("stream.opens.sent", "sse").value += opens
    m.gauge("stream.active.sent", "sse").value += active
    h = m.histogram("http.response.size", "http")
    for s in sizes:
        h.observe(s)
    return generate_latest(m.registry).decode()


def rendered(pages: list[str]) -> dict[str, float]:
    body, content_type = render(pages, "")
    assert content_type.startswith("text/plain")
    values = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    om, om_type = render(pages, "application/openmetrics-text")
    assert om_type.startswith("application/openmetrics-text") and om.endswith(b"# EOF\n")
    return values


def test_counters_gauges_and_buckets_add_up() -> None:
    v = rendered([page(3, 2, [10.0, 5000.0]), page(4, 1, [100.0])])
    assert v['stream_opens_sent_total{binding="sse",namespace="ns"}'] == 7.0
    assert v['stream_active_sent{binding="sse",namespace="ns"}'] == 3.0
    assert v['http_response_size_bytes_bucket{binding="http",le="64.0",namespace="ns"}'] == 1.0
    assert v['http_response_size_bytes_bucket{binding="http",le="256.0",namespace="ns"}'] == 2.0
    assert v['http_response_size_bytes_count{binding="http",namespace="ns"}'] == 3.0
    assert v['http_response_size_bytes_sum{binding="http",namespace="ns"}'] == 5110.0


def test_times_and_limits_keep_the_earliest() -> None:
    a = "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds 100.0\n" \
        "# TYPE process_max_fds gauge\nprocess_max_fds 1024.0\n"
    b = "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds 90.0\n" \
        "# TYPE process_max_fds gauge\nprocess_max_fds 1024.0\n"
    v = rendered([a, b, ""])  # a worker that did not answer in time adds nothing
    assert v["process_start_time_seconds"] == 90.0
    assert v["process_max_fds"] == 1024.0
