"""A Spark standalone cluster on loopback, from PySpark's own launcher: a master and workers, each
in its own JVM (`spark-class` with the Master and Worker classes), and worker Pythons that have
the jobs' dependencies but not this project.

What a real cluster has and one machine hides, made explicit here:

- Executors find Python by a command name (`spark.pyspark.python`), resolved on *their* machine:
  each worker is started with its own PATH, where `ssekd-worker-python` runs a Python of that
  "machine". The driver's PATH has its own `ssekd-worker-python` (the driver's data source
  planners run the same command).
- The worker Pythons are venvs holding every package of the test venv except this project
  (its editable install and dist-info are left out), so the code can only reach them the way it
  reaches a real cluster: shipped with the job. A second command,
  `ssekd-worker-python-lacking-kafka`, runs one without confluent-kafka on the workers (and a
  complete one on the driver): a worker machine where it was never installed.
- Evidence of where tasks ran: each job's event log (uncompressed JSON lines) and the workers'
  JSON status pages (`/json/`), which list the executors each worker ran for an application.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyspark

from ssekd.dev.broker import free_port

SPARK_HOME = Path(pyspark.__file__).resolve().parent
PYTHON = "ssekd-worker-python"
PYTHON_LACKING_KAFKA = "ssekd-worker-python-lacking-kafka"
#: Small JVMs: the machine has 2 cores and other work. C1 only: short jobs warm up faster.
DAEMON_MEMORY = "256m"
EXECUTOR_MEMORY = "512m"
QUICK_JIT = "-XX:TieredStopAtLevel=1"


def _is_project(name: str) -> bool:
    """Entries of site-packages that install this project (editable or not)."""
    return name.startswith(("__editable__", "ssekd-")) or name == "ssekd"


def make_worker_env(path: Path, leave_out: Sequence[str] = ()) -> Path:
    """A venv whose site-packages links every entry of this one's, except the project and the
    top-level names in `leave_out` (with their dist-info). Returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True,
                   timeout=60)
    ours = Path(sysconfig.get_paths()["purelib"])
    python = path / "bin" / "python"
    theirs = Path(subprocess.run([str(python), "-c",
                                  "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 check=True, capture_output=True, text=True,
                                 timeout=60).stdout.strip())
    for entry in sorted(ours.iterdir()):
        name = entry.name
        if _is_project(name) or any(name == m or name.startswith((m + "-", m + "."))
                                    for m in leave_out):
            continue
        target = theirs / name
        if not target.exists():
            target.symlink_to(entry)
    return python


def command(folder: Path, name: str, python: Path) -> None:
    """`folder/name` runs `python` (a script, not a symlink: a venv is recognized by the path
    its python is started with)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / name
    script.write_text(f'#!/bin/sh\nexec {python} "$@"\n')
    script.chmod(0o755)


def json_get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (loopback)
        return json.load(response)


@dataclass
class Cluster:
    """A running master and workers. `master` is the URL jobs are submitted to."""

    root: Path
    master_port: int
    master_ui: int
    worker_uis: list[int]
    driver_path: str
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def master(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def status(self) -> Any:
        return json_get(f"http://127.0.0.1:{self.master_ui}/json/")

    def worker_status(self) -> list[Any]:
        return [json_get(f"http://127.0.0.1:{port}/json/") for port in self.worker_uis]

    def driver_env(self) -> dict[str, str]:
        """The environment of a driver on this cluster's "driver machine"."""
        env = dict(os.environ)
        env.update(PATH=f"{self.driver_path}:{env.get('PATH', '')}", SPARK_LOCAL_IP="127.0.0.1")
        env.pop("PYSPARK_PYTHON", None)
        return env

    def spark_conf(self, event_log: Path, python: str = PYTHON) -> list[str]:
        """`--conf` arguments of ssekd-spark for a job on this cluster."""
        event_log.mkdir(parents=True, exist_ok=True)
        settings = {
            "spark.pyspark.python": python,
            "spark.driver.memory": EXECUTOR_MEMORY,
            "spark.executor.memory": EXECUTOR_MEMORY,
            "spark.driver.extraJavaOptions": QUICK_JIT,
            "spark.executor.extraJavaOptions": QUICK_JIT,
            # Start only once both executors are there, so the tasks can spread over both.
            "spark.cores.max": "2",
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.enabled": "false",
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": event_log.as_uri(),
            "spark.eventLog.compress": "false",
            "spark.eventLog.rolling.enabled": "false",
        }
        return [arg for k, v in settings.items() for arg in ("--conf", f"{k}={v}")]

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for process in self.processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)


def _daemon(cls: str, args: list[str], log: Path, path: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.update(SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1",
               SPARK_DAEMON_MEMORY=DAEMON_MEMORY, SPARK_DAEMON_JAVA_OPTS=QUICK_JIT,
               PATH=f"{path}:{env.get('PATH', '')}")
    env.pop("PYSPARK_PYTHON", None)
    with log.open("wb") as out:
        # Its own process group: stopping it stops the executors and Pythons it started.
        return subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), cls, *args],
                                stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def start_cluster(root: Path, workers: int = 2, timeout_s: float = 120.0) -> Cluster:
    """Master and `workers` workers (1 core, 512 MiB each), on free loopback ports."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise RuntimeError("Spark needs Java (make system-deps installs default-jre-headless)")
    full = make_worker_env(root / "env")
    lacking = make_worker_env(root / "env-lacking-kafka", leave_out=("confluent_kafka",))
    driver_bin, worker_bin = root / "driver-bin", root / "worker-bin"
    command(driver_bin, PYTHON, full)
    command(driver_bin, PYTHON_LACKING_KAFKA, full)
    command(worker_bin, PYTHON, full)
    command(worker_bin, PYTHON_LACKING_KAFKA, lacking)
    cluster = Cluster(root, free_port(), free_port(), [free_port() for _ in range(workers)],
                      str(driver_bin))
    try:
        cluster.processes.append(_daemon(
            "org.apache.spark.deploy.master.Master",
            ["--host", "127.0.0.1", "--port", str(cluster.master_port),
             "--webui-port", str(cluster.master_ui)], root / "master.log", str(driver_bin)))
        for i, ui in enumerate(cluster.worker_uis):
            work = root / f"worker-{i}"
            work.mkdir()
            cluster.processes.append(_daemon(
                "org.apache.spark.deploy.worker.Worker",
                ["--host", "127.0.0.1", "--cores", "1", "--memory", EXECUTOR_MEMORY,
                 "--webui-port", str(ui), "--work-dir", str(work), cluster.master],
                root / f"worker-{i}.log", str(worker_bin)))
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if cluster.status().get("aliveworkers") == workers:
                    return cluster
            except OSError:
                pass
            if time.monotonic() > deadline or any(p.poll() is not None
                                                  for p in cluster.processes):
                logs = "\n".join(f"{p.name}: {p.read_text()[-2000:]}"
                                 for p in sorted(root.glob("*.log")))
                raise RuntimeError(f"the standalone cluster did not come up:\n{logs}")
            time.sleep(0.5)
    except BaseException:
        cluster.stop()
        raise


@dataclass(frozen=True)
class JobEvidence:
    """Where one application's tasks ran, from its event log and the workers' status pages."""

    app_id: str
    #: Tasks that ended, per executor id ("driver" would mean the driver ran them).
    tasks: dict[str, int]
    #: Executor id -> (host, cores), as each executor registered.
    executors: dict[str, tuple[str, int]]
    #: Worker id -> the executor ids it ran for this application.
    by_worker: dict[str, list[str]]


def job_evidence(cluster: Cluster, event_log: Path) -> JobEvidence:
    (log,) = [p for p in event_log.iterdir() if not p.name.endswith(".inprogress")]
    tasks: collections.Counter[str] = collections.Counter()
    executors: dict[str, tuple[str, int]] = {}
    app_id = ""
    for line in log.read_text().splitlines():
        event = json.loads(line)
        kind = event["Event"]
        if kind == "SparkListenerApplicationStart":
            app_id = event["App ID"]
        elif kind == "SparkListenerExecutorAdded":
            info = event["Executor Info"]
            executors[event["Executor ID"]] = (info["Host"], info["Total Cores"])
        elif kind == "SparkListenerTaskEnd":
            tasks[event["Task Info"]["Executor ID"]] += 1
    by_worker = {
        status["id"]: sorted(str(e["id"]) for e in status["finishedexecutors"] + status["executors"]
                             if e["appid"] == app_id)
        for status in cluster.worker_status()}
    return JobEvidence(app_id, dict(tasks), executors, by_worker)
