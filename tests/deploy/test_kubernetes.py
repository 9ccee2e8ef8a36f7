"""deploy/kubernetes/ssekd.yaml: it parses, its container ports are the ports of etc/zilla.yaml,
its probes ask the health paths that config's http binding answers on a cleartext port, the
Service and the PodDisruptionBudget select the pods, and the pods' command is one twistd
accepts."""

from __future__ import annotations

from typing import Any

import yaml

from ssekd.tap import Options
from tests.support.deploy import DEPLOY, health_paths, served_ports, shipped_config


def documents() -> dict[str, Any]:
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "ssekd.yaml").read_text()))
    return {d["kind"]: d for d in docs}


def test_the_manifests_parse_and_hold_a_deployment_service_and_budget() -> None:
    assert set(documents()) == {"Deployment", "Service", "PodDisruptionBudget"}


def test_ports_and_probes_match_the_shipped_config() -> None:
    config = shipped_config()
    served = served_ports(config)
    pod = documents()["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert sorted(ports.values()) == sorted(served)
    for probe, kind in (("readinessProbe", "readiness"), ("livenessProbe", "liveness"),
                        ("startupProbe", "liveness")):
        get = container[probe]["httpGet"]
        target = served[ports[get["port"]]]
        assert target.cleartext_http is not None, f"{probe} asks a port that is not plain http"
        paths = health_paths(config, target.cleartext_http)
        assert paths is not None, f"{target.cleartext_http} has no options.health"
        assert get["path"].encode() == getattr(paths, kind), probe
        assert get.get("scheme", "HTTP") == "HTTP"


def test_service_and_budget_select_the_pods() -> None:
    docs = documents()
    deployment = docs["Deployment"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    service = docs["Service"]["spec"]
    assert service["selector"].items() <= labels.items()
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    names = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert {p["targetPort"] for p in service["ports"]} == set(names)
    assert all(p["port"] == names[p["targetPort"]] for p in service["ports"])
    budget = docs["PodDisruptionBudget"]["spec"]
    assert budget["selector"]["matchLabels"].items() <= labels.items()
    assert budget["maxUnavailable"] < deployment["spec"]["replicas"]


def test_the_command_is_one_twistd_accepts() -> None:
    (container,) = documents()["Deployment"]["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    assert command[:4] == ["twistd", "--nodaemon", "--pidfile=", "ssekd"]
    options = Options()
    options.parseOptions(command[4:])
    assert options["config"] == "/etc/ssekd/zilla.yaml" and options["workers"] == "2"
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert options["config"] in mounts
