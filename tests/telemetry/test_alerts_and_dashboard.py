"""The shipped alert rules read the same for a daemon with workers as for one process, and every
query of the shipped Grafana dashboard returns data, both against a real Prometheus.

A daemon with `--workers 2` and one without serve the same topic to the same clients, each
scraped by a real Prometheus. Every alert expression of etc/prometheus/ssekd-rules.yml is
evaluated on both (the value each compares with its threshold): the workers' parent combines
the workers' pages, and summing every sample made a topic's lag and cache age and a kafka
client's connected gauge N times one process's, and open file descriptors N times one process's
against one process's limit. Request ratios come out the same because both daemons got the same
requests; file descriptors are compared with the busiest of the daemon's own processes;
latency and memory add up by design (the whole daemon's), and are checked for being there.

etc/grafana/ssekd.json: each panel query (Grafana's `$__rate_interval` and `$instance` filled in
as Grafana would) is run against the Prometheus scraping the daemon with workers, and returns
data that is a figure.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from ssekd.dev.broker import free_port, stop_process
from tests.support.broker import Kafka
from tests.support.daemon import Daemon, start_daemon
from tests.support.sse import SseClient
from tests.support.streamd import Streamd, write_config
from tests.support.telemetry import Prometheus, start_prometheus

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

ETC = Path(__file__).resolve().parents[2] / "etc"
RULES = ETC / "prometheus" / "ssekd-rules.yml"
DASHBOARD = ETC / "grafana" / "ssekd.json"
RECORDS = 100
LIVE = 20
STREAMS = 6
REFUSED = 2
COMPARISON = re.compile(r"\s*(?:>|<|==|!=|>=|<=)\s*[0-9.eE+-]+\s*$")


def value_parts(expr: str) -> list[str]:
    """The expressions an alert compares with its thresholds (`a > 1 and b < 2`: a, b)."""
    return [COMPARISON.sub("", part).strip()
            for part in re.split(r"\s+and\s+", expr.strip())]


@dataclass
class Scraped:
    streamd: Streamd
    prometheus: Prometheus
    clients: list[SseClient]

    def values(self, promql: str) -> dict[tuple[tuple[str, str], ...], float]:
        found = {}
        for r in self.prometheus.query(promql):
            labels = tuple(sorted((k, v) for k, v in r["metric"].items()
                                  if k not in ("instance", "job")))
            found[labels] = float(r["value"][1])
        return found

    def processes(self) -> list[psutil.Process]:
        parent = psutil.Process(self.streamd.daemon.process.pid)
        return [parent, *parent.children()]


def serve(kafka: Kafka, tmp: Path, topic: str, workers: int) -> Scraped:
    port, metrics_port = free_port(), free_port()
    config = write_config(tmp, kafka.bootstrap, port, prometheus_port=metrics_port,
                          bootstrap_topics=(topic,))
    daemon: Daemon = start_daemon(config, wait_ports=[port, metrics_port],
                                  extra_args=["--workers", str(workers)])
    try:
        daemon.wait_output("ENGINE_STARTED", count=workers + (workers > 1))
        folder = tmp / "prometheus"
        folder.mkdir()
        return Scraped(Streamd(daemon, port), start_prometheus(folder, metrics_port), [])
    except BaseException:
        daemon.stop()  # not handed to the fixture yet: it would be left running
        raise


@pytest.fixture(scope="module")
def daemons(kafka: Kafka, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[Scraped, Scraped]]:
    """A daemon with two workers and one without, the same requests to each, each scraped by
    a Prometheus of its own."""
    tmp_path = tmp_path_factory.mktemp("alerts")
    topic = kafka.topic(2)
    half_an_hour_ago = int((time.time() - 1800) * 1000)  # within the cache's max-age
    for i in range(RECORDS):
        kafka.produce(topic, b"%d" % i, key=b"%d" % (i % 10), partition=i % 2,
                      timestamp=half_an_hour_ago + i)
    kafka.flush()
    started: list[Scraped] = []
    try:
        for workers in (2, 1):
            folder = tmp_path / f"w{workers}"
            folder.mkdir()
            started.append(serve(kafka, folder, topic, workers))
        # scraped before any request: each rate then covers every request, from zero
        for s in started:
            s.prometheus.wait_for("count_over_time(up[5m])", lambda v: v is not None and v >= 2)
        for s in started:  # the same requests to both
            for _ in range(STREAMS):
                c = SseClient(s.streamd.port, f"/events/{topic}")
                assert len(c.events(RECORDS)) == RECORDS
                s.clients.append(c)
            for _ in range(REFUSED):  # refused (an internal topic)
                assert s.streamd.status("/events/__consumer_offsets") == 404
        for i in range(LIVE):  # records the streams get as they come (delivery latency)
            kafka.produce(topic, b"live-%d" % i, partition=i % 2)
        kafka.flush()
        for s in started:
            for c in s.clients:
                assert len(c.events(LIVE)) == LIVE
        yield started[0], started[1]
    finally:
        for s in started:
            for c in s.clients:
                c.close()
            stop_process(s.prometheus.process, 5)
            s.streamd.daemon.stop()


def scraped(s: Scraped) -> None:
    """Wait until the live deliveries are scraped (and enough scrapes for every rate)."""
    s.prometheus.wait_for("sum(increase(sse_delivery_latency_seconds_count[5m]))",
                          lambda v: v is not None and v >= STREAMS * LIVE * 0.9)


def test_with_workers_every_alert_expression_reads_as_for_one_process(
        daemons: tuple[Scraped, Scraped]) -> None:
    workers, single = daemons
    for s in daemons:
        scraped(s)
    groups = yaml.safe_load(RULES.read_text())["groups"]
    checked: dict[str, list[Any]] = {}
    for rule in (r for g in groups for r in g["rules"]):
        name = rule["alert"]
        for part in value_parts(rule["expr"]):
            got, one = workers.values(part), single.values(part)
            checked.setdefault(name, []).append((part, got, one))
            if name == "SsekdWorkerCrashLoop":
                # one process restarts no worker and has no such series; these workers none
                assert one == {} and got and all(v == 0 for v in got.values()), (part, got)
            elif name == "SsekdFileDescriptorsNearLimit":
                busiest = max(p.num_fds() / p.rlimit(psutil.RLIMIT_NOFILE)[0]
                              for p in workers.processes())
                (ratio,) = got.values()
                assert abs(ratio - busiest) <= 8 / workers.processes()[0].rlimit(
                    psutil.RLIMIT_NOFILE)[0], (ratio, busiest)
            elif name == "SsekdDeliveryLatencyHigh":
                # the whole daemon's deliveries (a sum by design): there, and not late
                assert set(got) == set(one) and all(v < 5 for v in got.values()), (got, one)
            else:
                assert set(got) == set(one), (name, part, got, one)
                for labels, value in got.items():
                    assert not math.isnan(value), (name, part, labels)  # a figure, not 0/0
                    assert value == pytest.approx(one[labels], rel=0.02, abs=1e-9), \
                        (name, part, labels, value, one[labels])
    # the ones that read N times too high before each family said how it combines
    age = "max by (namespace, binding, topic) (kafka_cache_oldest_age_seconds)"
    assert 1790 < next(iter(workers.values(age).values())) < 1900
    assert set(workers.values("kafka_client_connected").values()) == {1.0}
    assert set(checked) == {r["alert"] for g in groups for r in g["rules"]}
    print(f"\n{len(checked)} alerts, {sum(len(v) for v in checked.values())} expressions: "
          f"a daemon with 2 workers reads as one process")


def grafana_queries() -> list[tuple[str, str]]:
    """(panel title, query) of every target of the dashboard, rows' panels included."""
    dashboard = json.loads(DASHBOARD.read_text())
    panels = list(dashboard["panels"])
    found = []
    while panels:
        panel = panels.pop(0)
        panels.extend(panel.get("panels", []))
        for target in panel.get("targets", []):
            found.append((panel["title"], target["expr"]))
    return found


def as_grafana_sends_it(expr: str) -> str:
    """Grafana's variables as it fills them in: every daemon, a rate window of a minute."""
    return expr.replace("$__rate_interval", "1m").replace('"$instance"', '".*"')


def test_every_panel_of_the_grafana_dashboard_gets_data(daemons: tuple[Scraped, Scraped]
                                                        ) -> None:
    workers, _ = daemons
    scraped(workers)
    queries = grafana_queries()
    assert len(queries) >= 15
    titles = [title for title, _ in queries]
    assert titles[0].startswith("Delivery latency")  # the one number shown first
    for title, expr in queries:
        promql = as_grafana_sends_it(expr)
        assert "$" not in promql, (title, promql)
        result = workers.prometheus.query(promql)
        values = [float(r["value"][1]) for r in result]
        assert values and not all(math.isnan(v) for v in values), (title, promql, result)


def test_the_dashboard_is_grafanas_shape() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "ssekd" and dashboard["schemaVersion"] >= 36
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert {"type", "title", "gridPos", "targets", "datasource"} <= set(panel), panel
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        assert [t["refId"] for t in panel["targets"]] == \
            [chr(65 + i) for i in range(len(panel["targets"]))]
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert variables == {"datasource", "instance"}
