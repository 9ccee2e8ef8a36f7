"""deploy/kubernetes/: every manifest is valid against the Kubernetes API schemas (offline, with
`kubernetes-validate`, strict: an unknown field is an error), and the files agree with each other
and with the image, as `kubectl apply` would meet them:

- the pod runs the image's entrypoint with arguments twistd accepts, as the image's uid, and its
  config folder (the ConfigMap the header's `kubectl create configmap` makes, mounted as the
  volume's items say) loads as the daemon would load it;
- ports, probes and the metrics port are the config's; the config and key store are folders
  that update (no subPath) and `--watch` follows them;
- engine.drain ends within terminationGracePeriodSeconds after the preStop sleep;
- the memory limit holds the bounds the config sets (the sum in ssekd.yaml's header);
- readiness does not flap, pods spread over nodes and zones, the budget and the Service, the
  PodMonitor and the Ingress select and name what exists.
(tests/deploy/test_image.py runs the image with these arguments, mounts and config.)"""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from ssekd.config.load import load_config
from ssekd.config.model import Config
from ssekd.spi.plugins import discover
from ssekd.tap import Options
from tests.support.deploy import DEPLOY, ROOT, health_paths, served_ports

KUBERNETES = DEPLOY / "kubernetes"
#: The oldest Kubernetes release the manifests are checked against, and the newest the
#: validator knows.
VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
#: Kinds defined by CRDs, whose schemas kubernetes-validate does not have: checked below.
CUSTOM = {("monitoring.coreos.com/v1", "PodMonitor")}
MIB = 1024 * 1024
#: Memory of one worker besides its caches and streams, and of one open stream (docs/scaling.md, "How
#: many daemons for an audience"), and the share added for what the byte bounds do not count.
PROCESS_MIB, STREAM_KIB, UNCOUNTED = 80, 10, 0.25


def manifests() -> Iterator[tuple[Path, dict[str, Any]]]:
    for path in sorted(KUBERNETES.glob("*.yaml")):
        if path.name == "zilla.yaml":
            continue  # the daemon's config, carried by the ConfigMap
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                yield path, doc


def kinds(name: str = "ssekd.yaml") -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for p, d in manifests() if p.name == name}


def pod() -> dict[str, Any]:
    spec: dict[str, Any] = kinds()["Deployment"]["spec"]["template"]["spec"]
    return spec


def container() -> dict[str, Any]:
    (found,) = pod()["containers"]
    return dict(found)


def containerfile(instruction: str) -> str:
    """The last `instruction` of the Containerfile: the one of the image's own stage."""
    text = (ROOT / "Containerfile").read_text().replace("\\\n", " ")
    found: list[str] = re.findall(rf"^{instruction} (.+)$", text, re.MULTILINE)
    return found[-1]


def environment() -> dict[str, str]:
    """What the daemon's environment holds in the pod: the image's ENV, then the container's
    `env` (a value from a Secret is not in the manifest: any will do)."""
    found = dict(pair.split("=", 1) for pair in containerfile("ENV").split())
    found.update({e["name"]: e.get("value", "x") for e in container()["env"]})
    return found


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_is_valid_against_the_kubernetes_schemas(version: str) -> None:
    checked = []
    for path, doc in manifests():
        if (doc["apiVersion"], doc["kind"]) in CUSTOM:
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{path.name}: {doc['kind']} {doc['metadata']['name']}: {e.message} "
                        f"at {'.'.join(map(str, e.path))}")
        checked.append(doc["kind"])
    assert {"Deployment", "Service", "PodDisruptionBudget", "Ingress"} <= set(checked)


def config_folder(tmp: Path) -> Path:
    """/etc/ssekd/config as the pod sees it: the ConfigMap made by the command in ssekd.yaml's
    header, mounted with the volume's items."""
    header = (KUBERNETES / "ssekd.yaml").read_text().split("\napiVersion:")[0]
    command = re.search(r"kubectl create configmap ssekd-config (.+?)\n#\s+kubectl create secret",
                        header, re.DOTALL)
    assert command, "the header says how to make the ConfigMap"
    files = dict(arg.removeprefix("--from-file=").split("=", 1)
                 for arg in shlex.split(command.group(1).replace("\\\n#", " ")))
    (volume,) = [v for v in pod()["volumes"] if v["name"] == "config"]
    assert volume["configMap"]["name"] == "ssekd-config"
    folder = tmp / "config"
    for item in volume["configMap"]["items"]:
        target = folder / item["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / files[item["key"]], target)
    return folder


@pytest.fixture
def config(tmp_path: Path) -> Config:
    folder = config_folder(tmp_path)
    return load_config(folder / "zilla.yaml", discover(), environ=environment())


def test_the_pod_runs_the_images_entrypoint_with_arguments_twistd_accepts(config: Config) -> None:
    entrypoint = yaml.safe_load(containerfile("ENTRYPOINT"))
    assert "command" not in container(), "the image's own entrypoint"
    assert entrypoint[:4] == ["twistd", "--nodaemon", "--pidfile=", "ssekd"]
    options = Options()
    options.parseOptions(entrypoint[4:] + container()["args"])
    assert options["watch"], "a changed ConfigMap or Secret applies without a restart"
    assert options["workers"] == "2"
    (mount,) = [m for m in container()["volumeMounts"]
                if options["config"].startswith(m["mountPath"] + "/")]
    assert mount["name"] == "config" and "subPath" not in mount, \
        "a subPath mount never sees a ConfigMap's updates"
    assert str(Path(options["config"]).relative_to(mount["mountPath"])) == "zilla.yaml"
    uid = int(containerfile("USER").split(":")[0])
    context = pod()["securityContext"]
    assert context["runAsUser"] == uid and context["runAsNonRoot"]
    assert container()["securityContext"]["readOnlyRootFilesystem"]


def test_the_key_store_comes_from_the_secret_folder_and_the_env_from_the_pod(
        config: Config) -> None:
    mounts = {m["name"]: m for m in container()["volumeMounts"]}
    volumes = {v["name"]: v for v in pod()["volumes"]}
    for name, vault in config.vaults.items():
        store = Path(vault.options["keys"]["store"])
        mount = mounts["tls"]
        assert store.parent == Path(mount["mountPath"]) and "subPath" not in mount, name
        secret = volumes["tls"]["secret"]
        assert {"key": store.name, "path": store.name} in secret["items"]
        # readable by the pod's group (fsGroup), not by everyone
        assert secret["defaultMode"] == 0o440 and pod()["securityContext"]["fsGroup"]
    used = set(re.findall(r"\$\{\{\s*env\.(\w+)\s*\}\}",
                          (DEPLOY / "zilla.yaml").read_text()))
    assert used <= set(environment()), "the config stops at an unset variable"
    env = {e["name"]: e for e in container()["env"]}
    assert env["KEYSTORE_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == \
        volumes["tls"]["secret"]["secretName"]


def test_ports_probes_and_metrics_are_the_configs(config: Config) -> None:
    served = served_ports(config)
    ports = {p["name"]: p["containerPort"] for p in container()["ports"]}
    (exporter,) = [e for e in config.telemetry.exporters.values() if e.type == "prometheus"]
    (endpoint,) = exporter.options["endpoints"]
    assert endpoint["host"] == "0.0.0.0", "scraped from outside the pod"
    assert sorted(ports.values()) == sorted([*served, endpoint["port"]])
    assert ports["metrics"] == endpoint["port"]
    for probe, kind in (("readinessProbe", "readiness"), ("livenessProbe", "liveness"),
                        ("startupProbe", "liveness")):
        get = container()[probe]["httpGet"]
        target = served[ports[get["port"]]]
        assert target.cleartext_http is not None, f"{probe} asks a port that is not plain http"
        paths = health_paths(config, target.cleartext_http)
        assert paths is not None, f"{target.cleartext_http} has no options.health"
        assert get["path"].encode() == getattr(paths, kind), probe
    annotations = kinds()["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == endpoint["port"]
    assert annotations["prometheus.io/path"] == endpoint["path"]
    monitor = kinds("podmonitor.yaml")["PodMonitor"]["spec"]
    labels = kinds()["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert monitor["selector"]["matchLabels"].items() <= labels.items()
    (scraped,) = monitor["podMetricsEndpoints"]
    assert scraped["port"] == "metrics" and scraped["path"] == endpoint["path"]


def test_readiness_does_not_flap_and_the_drain_ends_within_the_grace_period(
        config: Config) -> None:
    ready = container()["readinessProbe"]
    assert ready["failureThreshold"] >= 3 and ready["successThreshold"] == 1
    assert ready["failureThreshold"] * ready["periodSeconds"] >= 10
    command = container()["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    pre_stop = float(command[1])
    grace = pod()["terminationGracePeriodSeconds"]
    drain = config.engine.drain
    assert drain > 0, "streams are moved, not cut, on a rollout"
    # SIGTERM comes after the preStop sleep; the streams end `drain` later, then the workers
    # stop: at least 10 s of the grace period is left for that
    assert pre_stop + drain + 10 <= grace, (pre_stop, drain, grace)


def test_the_memory_limit_holds_what_the_config_bounds(config: Config) -> None:
    args = container()["args"]
    workers = int(args[args.index("--workers") + 1])
    caches = [b.options for b in config.bindings.values()
              if (b.type, b.kind) == ("kafka", "cache_server")]
    sse = [b.options for b in config.bindings.values() if (b.type, b.kind) == ("sse", "server")]
    cache_mib = sum(o["max-topics"] * o["cache"]["max-bytes"] / MIB for o in caches)
    streams_mib = sum(o["limits"]["streams"] * STREAM_KIB / 1024 for o in sse)
    needed = workers * (PROCESS_MIB + cache_mib + streams_mib) * (1 + UNCOUNTED)
    resources = container()["resources"]
    limit = quantity(resources["limits"]["memory"])
    assert needed <= limit / MIB, f"{needed:.0f} MiB needed, {limit / MIB:.0f} MiB allowed"
    assert resources["requests"] == resources["limits"], "Guaranteed: never evicted first"
    header = (KUBERNETES / "ssekd.yaml").read_text()
    assert f"{round(needed)} MiB" in header, "the header's sum is the one checked here"


def quantity(text: str) -> int:
    units = {"Ki": 1024, "Mi": MIB, "Gi": 1024 * MIB}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return int(float(text.removesuffix(suffix)) * factor)
    return int(text)


def test_pods_spread_and_the_budget_service_monitor_and_ingress_select_them() -> None:
    docs = kinds()
    deployment = docs["Deployment"]["spec"]
    labels = deployment["template"]["metadata"]["labels"]
    assert deployment["selector"]["matchLabels"].items() <= labels.items()
    spread = {c["topologyKey"]: c for c in pod()["topologySpreadConstraints"]}
    assert set(spread) == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
    assert all(c["labelSelector"]["matchLabels"].items() <= labels.items()
               for c in spread.values())
    budget = docs["PodDisruptionBudget"]["spec"]
    assert budget["selector"]["matchLabels"].items() <= labels.items()
    assert budget["maxUnavailable"] < deployment["replicas"]
    service = docs["Service"]
    assert service["spec"]["selector"].items() <= labels.items()
    names = {p["name"]: p["containerPort"] for p in container()["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= set(names)
    ingress = kinds("ingress-nginx.yaml")["Ingress"]
    notes = ingress["metadata"]["annotations"]
    assert notes["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    assert int(notes["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 3600
    assert ingress["spec"]["ingressClassName"] == "nginx"
    for rule in ingress["spec"]["rules"]:
        for path in rule["http"]["paths"]:
            backend = path["backend"]["service"]
            assert backend["name"] == service["metadata"]["name"]
            assert backend["port"]["name"] in {p["name"] for p in service["spec"]["ports"]}
