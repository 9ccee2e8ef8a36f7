"""deploy/kubernetes/ssekd-spark.yaml: it parses; the CronJob's and the Deployment's commands are
ones `ssekd-spark` accepts (a batch snapshot; a streaming one with its checkpoint on the claimed
volume); they read the daemon's own config from the daemon's ConfigMap with every schema file
its catalogs name, and the topic they snapshot has a model there; every `$(VAR)` they use is
defined; the Spark driver's settings for client mode on Kubernetes are there; and the
ServiceAccount they run as may manage executor pods."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from ssekd.spark.cli import build_parser
from ssekd.spark.models import models_for
from tests.support.deploy import DEPLOY, ROOT

#: The daemon's config on Kubernetes, and where the ConfigMap's schema files come from (the
#: `kubectl create configmap` in the manifests' headers).
CONFIG = DEPLOY / "zilla.yaml"
SCHEMAS = ROOT / "etc"
MANIFEST = DEPLOY / "kubernetes" / "ssekd-spark.yaml"
DAEMON = DEPLOY / "kubernetes" / "ssekd.yaml"
ENV_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
CRON_FIELD = re.compile(r"^(\*|\d+(-\d+)?)(/\d+)?(,(\*|\d+(-\d+)?)(/\d+)?)*$")


def documents() -> dict[str, Any]:
    docs = list(yaml.safe_load_all(MANIFEST.read_text()))
    return {d["kind"]: d for d in docs}


def pods() -> dict[str, dict[str, Any]]:
    docs = documents()
    return {"CronJob": docs["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"],
            "Deployment": docs["Deployment"]["spec"]["template"]["spec"]}


def conf(args: Any) -> dict[str, str]:
    return dict(item.split("=", 1) for item in args.conf or [])


def test_the_manifests_parse_and_hold_the_jobs_their_account_and_the_checkpoint_claim() -> None:
    assert set(documents()) == {"ServiceAccount", "Role", "RoleBinding", "CronJob", "Deployment",
                                "PersistentVolumeClaim"}


@pytest.mark.parametrize("kind", ["CronJob", "Deployment"])
def test_the_command_is_a_snapshot_job_ssekd_spark_accepts(kind: str) -> None:
    (container,) = pods()[kind]["containers"]
    command = container["command"]
    assert command[0] == "ssekd-spark"
    args = build_parser().parse_args(command[1:])
    assert args.job == "snapshot" and args.topic == "events"
    assert args.streaming is (kind == "Deployment")
    assert not args.available_now, "the Deployment keeps following; the CronJob is a batch"
    settings = conf(args)
    # Spark's driver in a pod, client mode: executors reach it at the pod's address and are
    # owned by the pod (deleted with it).
    assert args.master == "k8s://https://kubernetes.default.svc:443"
    assert settings["spark.driver.host"] == "$(POD_IP)"
    assert settings["spark.kubernetes.driver.pod.name"] == "$(POD_NAME)"
    assert settings["spark.kubernetes.container.image"] == container["image"]
    assert settings["spark.pyspark.python"] == "python3"
    env = {e["name"]: e for e in container["env"]}
    for name in ENV_REFERENCE.findall(" ".join(command)):
        assert name in env, f"$({name}) is not defined: Kubernetes would pass it as it is"
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


@pytest.mark.parametrize("kind", ["CronJob", "Deployment"])
def test_the_jobs_read_the_daemons_config_with_its_schema_files_and_its_environment(
        kind: str, tmp_path: Path) -> None:
    pod = pods()[kind]
    (container,) = pod["containers"]
    args = build_parser().parse_args(container["command"][1:])
    config = Path(args.config)
    (mount,) = [m for m in container["volumeMounts"] if config.is_relative_to(m["mountPath"])]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    # The daemon's ConfigMap (deploy/kubernetes/ssekd.yaml), holding the config...
    daemon = next(d for d in yaml.safe_load_all(DAEMON.read_text()) if d["kind"] == "Deployment")
    daemon_maps = {v["configMap"]["name"] for v in daemon["spec"]["template"]["spec"]["volumes"]
                   if "configMap" in v}
    assert volume["configMap"]["name"] in daemon_maps
    files = {item["path"]: item["key"] for item in volume["configMap"]["items"]}
    assert files[str(config.relative_to(mount["mountPath"]))] == "zilla.yaml"
    # ...and every schema file its filesystem catalogs read, beside it as in etc/.
    shipped = yaml.safe_load(CONFIG.read_text())
    for catalog in shipped["catalogs"].values():
        if catalog["type"] == "filesystem":
            for subject in catalog["options"]["subjects"].values():
                assert subject["path"] in files, f"{subject['path']} is not mounted"
                (tmp_path / subject["path"]).parent.mkdir(parents=True, exist_ok=True)
                (tmp_path / subject["path"]).write_bytes(
                    (SCHEMAS / subject["path"]).read_bytes())
    # Read as the daemon reads it: every ${{ env.X }} it uses is set in the pod.
    used = set(re.findall(r"\$\{\{\s*env\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", CONFIG.read_text()))
    env = {e["name"] for e in container["env"]}
    assert used <= env
    # The topic it snapshots has a model there, which resolves (the job would check records).
    (tmp_path / "zilla.yaml").write_bytes(CONFIG.read_bytes())
    models = models_for(tmp_path / "zilla.yaml",
                        [args.topic, args.snapshot_topic or f"{args.topic}-snapshots"],
                        # a secret's value is not in the manifest: any will do
                        environ={e["name"]: e.get("value", "x") for e in container["env"]
                                 if e["name"] in used})
    assert models.describe() == ["events value: json (demo_schemas: events version latest)"]


def test_the_cronjob_runs_one_at_a_time_on_a_valid_schedule_and_stops_on_bad_input() -> None:
    spec = documents()["CronJob"]["spec"]
    fields = spec["schedule"].split()
    assert len(fields) == 5 and all(CRON_FIELD.match(f) for f in fields), spec["schedule"]
    assert spec["concurrencyPolicy"] == "Forbid"
    job = spec["jobTemplate"]["spec"]
    assert job["template"]["spec"]["restartPolicy"] == "Never"  # podFailurePolicy needs it
    (rule,) = job["podFailurePolicy"]["rules"]
    assert rule["action"] == "FailJob" and set(rule["onExitCodes"]["values"]) == {2, 3}
    (container,) = job["template"]["spec"]["containers"]
    assert rule["onExitCodes"]["containerName"] == container["name"]
    assert "--strict" in container["command"], "exit 3 only comes with --strict"


def test_the_streaming_driver_is_alone_on_its_checkpoint_and_the_claim_outlives_it() -> None:
    docs = documents()
    deployment = docs["Deployment"]["spec"]
    assert deployment["replicas"] == 1 and deployment["strategy"]["type"] == "Recreate"
    assert deployment["selector"]["matchLabels"].items() \
        <= deployment["template"]["metadata"]["labels"].items()
    pod = deployment["template"]["spec"]
    (container,) = pod["containers"]
    args = build_parser().parse_args(container["command"][1:])
    checkpoint = Path(args.checkpoint)
    (mount,) = [m for m in container["volumeMounts"] if checkpoint.is_relative_to(m["mountPath"])]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    claim = docs["PersistentVolumeClaim"]
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"], "one driver writes it"
    assert not mount.get("readOnly")


def test_the_service_account_may_manage_executor_pods() -> None:
    docs = documents()
    account = docs["ServiceAccount"]["metadata"]["name"]
    assert all(pod["serviceAccountName"] == account for pod in pods().values())
    binding = docs["RoleBinding"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": docs["Role"]["metadata"]["name"]}
    assert {"kind": "ServiceAccount", "name": account} in binding["subjects"]
    granted = {(resource, verb) for rule in docs["Role"]["rules"] if rule["apiGroups"] == [""]
               for resource in rule["resources"] for verb in rule["verbs"]}
    for resource in ("pods", "configmaps", "persistentvolumeclaims"):
        for verb in ("create", "get", "list", "watch", "delete", "deletecollection"):
            assert (resource, verb) in granted, (resource, verb)
