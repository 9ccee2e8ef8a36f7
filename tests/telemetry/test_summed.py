"""The sum of the workers' metrics pages: counters, gauges and histogram buckets add up, times
and limits keep the earliest, the result renders in both exposition formats, and a scrape no
worker answers fails."""

from __future__ import annotations

from prometheus_client.openmetrics.exposition import generate_latest
from twisted.internet.testing import MemoryReactorClock
from twisted.web.server import NOT_DONE_YET
from twisted.web.test.requesthelper import DummyRequest

from ssekd.telemetry.metrics import Metrics
from ssekd.workers.summed_metrics import SummedPage, render


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


def test_units_survive_the_sum_in_openmetrics() -> None:
    """The workers' pages are read as OpenMetrics: the text format has no `# UNIT` lines, and a
    sum read from it could not give them back to a scraper that asks for OpenMetrics."""
    om, _ = render([page(1, 1, [10.0]), page(2, 0, [])], "application/openmetrics-text")
    text = om.decode()
    assert "# UNIT http_response_size_bytes bytes" in text
    assert 'stream_opens_sent_total{binding="sse",namespace="ns"} 3.0' in text


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
        "# TYPE process_max_fds gauge\nprocess_max_fds 1024.0\n# EOF\n"
    b = "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds 90.0\n" \
        "# TYPE process_max_fds gauge\nprocess_max_fds 1024.0\n# EOF\n"
    v = rendered([a, b, ""])  # a worker that did not answer in time adds nothing
    assert v["process_start_time_seconds"] == 90.0
    assert v["process_max_fds"] == 1024.0


def test_a_scrape_no_worker_answers_fails_instead_of_emptying_every_series() -> None:
    """Before the workers are up (or while all restart), the page is a 503, which Prometheus
    records as a failed scrape; an empty 200 would end every series until the next scrape."""
    clock = MemoryReactorClock()
    page_ = SummedPage(clock, lambda: [], "/metrics")
    req = DummyRequest([b"metrics"])
    req.path = b"/metrics"
    assert page_.render(req) == NOT_DONE_YET
    assert req.finished and req.responseCode == 503
    assert req.responseHeaders.getRawHeaders(b"retry-after") == [b"1"]
    assert b"".join(req.written) == b""


def shared_state_page(lag: float, age: float, subscribers: float, open_fds: float,
                      max_fds: float, ready: float) -> str:
    """One worker's page: a topic's lag and cache age (every worker consumes the same
    partitions), its own streams, its own descriptors, whether it is ready."""
    m = Metrics()
    m.configure("ns", ["kafka.*", "ssekd.*"], {}, {}, ["cache"])  # process_*: written below
    m.reader("cache", "t", lambda: [
        ("kafka.consumer.lag", {"topic": "t", "partition": "0"}, lag),
        ("kafka.cache.oldest.age", {"topic": "t"}, age),
        ("kafka.cache.subscribers", {"topic": "t"}, subscribers),
        ("ssekd.ready", {}, ready)])
    process = (f"# TYPE process_open_fds gauge\nprocess_open_fds {open_fds}\n"
               f"# TYPE process_max_fds gauge\nprocess_max_fds {max_fds}\n")
    return process + generate_latest(m.registry).decode()


def test_each_family_combines_as_it_declares() -> None:
    """Summing every sample made a topic's lag and cache age N times what each worker sees
    (lag alerts fired N times too early, a full cache was hidden) and summed open fds against
    one process's limit (the fd alert fired N times too early)."""
    v = rendered([shared_state_page(120.0, 3600.0, 5.0, 900.0, 1024.0, 1.0),
                  shared_state_page(100.0, 3590.0, 7.0, 700.0, 1024.0, 0.0)])
    labels = 'binding="cache",namespace="ns"'
    assert v[f'kafka_consumer_lag{{{labels},partition="0",topic="t"}}'] == 120.0
    assert v[f'kafka_cache_oldest_age_seconds{{{labels},topic="t"}}'] == 3600.0
    assert v[f'kafka_cache_subscribers{{{labels},topic="t"}}'] == 12.0  # streams: each its own
    assert v["process_open_fds"] == 900.0 and v["process_max_fds"] == 1024.0
    assert v[f"ssekd_ready{{{labels}}}"] == 0.0  # ready only when every worker is


def test_every_family_declares_how_it_combines() -> None:
    from ssekd.telemetry.metrics import METRICS, across_workers, prometheus_name
    across = across_workers()
    assert all(across[prometheus_name(d)] in ("sum", "max", "min") for d in METRICS.values())
    assert {n: across[n] for n in ("kafka_consumer_lag", "kafka_cache_oldest_age_seconds",
                                   "kafka_cache_size_bytes", "kafka_cache_messages",
                                   "process_open_fds", "process_max_fds",
                                   "process_resident_memory_bytes", "ssekd_ready",
                                   "kafka_client_connected")} == {
        "kafka_consumer_lag": "max", "kafka_cache_oldest_age_seconds": "max",
        "kafka_cache_size_bytes": "max", "kafka_cache_messages": "max",
        "process_open_fds": "max", "process_max_fds": "min",
        "process_resident_memory_bytes": "sum", "ssekd_ready": "min",
        "kafka_client_connected": "min"}
