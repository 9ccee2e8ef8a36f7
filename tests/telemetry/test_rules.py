"""The shipped Prometheus files: `promtool` accepts them, and every metric their expressions
name is one ssekd exports (a renamed metric must not leave an alert that never fires)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from ssekd.telemetry.metrics import METRICS, exported_name
from tests.support.telemetry import PROMTOOL

ETC = Path(__file__).resolve().parents[2] / "etc" / "prometheus"
DATA = Path(__file__).resolve().parents[1] / "data"
PROCESS = {"process_open_fds", "process_max_fds", "process_cpu_seconds_total",
           "process_resident_memory_bytes"}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60)


def test_promtool_checks_the_rules_and_the_example_config() -> None:
    rules = promtool("check", "rules", str(ETC / "ssekd-rules.yml"))
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert "SUCCESS: 13 rules found" in rules.stdout
    config = promtool("check", "config", str(ETC / "prometheus.yml"))
    assert config.returncode == 0, config.stdout + config.stderr


def test_rules_name_only_metrics_ssekd_exports() -> None:
    known = {exported_name(d) for d in METRICS.values()} | PROCESS | {"up"}
    known |= {f"{exported_name(d)}_bucket" for d in METRICS.values() if d.kind == "histogram"}
    groups = yaml.safe_load((ETC / "ssekd-rules.yml").read_text())["groups"]
    exprs = [r["expr"] for g in groups for r in g["rules"]]
    assert {"lag", "error", "saturation"} <= {
        "lag" if "kafka_consumer_lag" in e else "error" if "errors" in e or "failed" in e
        else "saturation" if "fds" in e or "pauses" in e else "other" for e in exprs}
    for expr in exprs:
        bare = re.sub(r"\bby\s*\([^)]*\)|\{[^}]*\}|\[[^\]]*\]", " ", expr)
        for name in re.findall(r"\b([a-z_][a-z0-9_]*)\b(?!\s*\()", bare):
            if name in {"and", "or", "unless", "on", "ignoring", "group_left"}:
                continue
            assert name in known, f"{name} in {expr!r} is not a metric ssekd exports"


def test_the_telemetry_page_lists_every_metric() -> None:
    """docs/telemetry.md (where the README sends a reader for the metrics) has a row for each."""
    page = (ETC.parents[1] / "docs" / "telemetry.md").read_text()
    section = page[page.index("## Metrics (prometheus exporter)"):
                   page.index("## Events (stdout exporter)")]
    for d in METRICS.values():
        assert f"| `{d.name}` | `{exported_name(d)}` |" in section, d.name


def test_the_alerts_fire_on_what_they_watch() -> None:
    """`promtool test rules`: a daemon never ready, a broker lost, workers restarting, memory
    near the control group's limit, deliveries late - each alert fires, with its runbook."""
    out = promtool("test", "rules", str(DATA / "ssekd-rules.test.yml"))
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def test_every_alert_links_its_runbook_entry() -> None:
    """Each `runbook_url` is a heading of docs/operations.md (its anchor as GitHub makes it)."""
    text = (ETC.parents[1] / "docs" / "operations.md").read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
               for h in re.findall(r"^#+ (.+)$", text, re.MULTILINE)}
    groups = yaml.safe_load((ETC / "ssekd-rules.yml").read_text())["groups"]
    alerts = [r for g in groups for r in g["rules"]]
    for rule in alerts:
        url = rule["annotations"]["runbook_url"]
        page, _, anchor = url.partition("#")
        assert page == "docs/operations.md" and anchor in anchors, (rule["alert"], url)
    names = {r["alert"] for r in alerts}
    assert {"SsekdNotReady", "SsekdBrokerDown", "SsekdWorkerCrashLoop",
            "SsekdMemoryNearLimit", "SsekdDeliveryLatencyHigh"} <= names
