"""How the code reaches the executors: `ssekd-spark pack` (and the CLI on a cluster master) zips
this project's packages, which a worker Python with only the dependencies can import from; and a
worker failure caused by a missing package becomes one sentence that names it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ssekd.spark.cli import main
from ssekd.spark.pack import pack_code
from ssekd.spark.workers import WorkerSetupError, explain, explained
from tests.spark.standalone import make_worker_env

pytestmark = pytest.mark.spark

#: What Spark 4.3 raised in the driver when an executor's Python lacked confluent-kafka
#: (taken from a run of tests/spark/test_cluster.py), and when a data source planner on the
#: driver's machine lacked pyarrow.
ON_EXECUTOR = """An exception was thrown from the Python worker:
Traceback (most recent call last):
  File "./ssekd-spark.zip/ssekd/spark/kafka_source.py", line 20, in <module>
    from confluent_kafka import Consumer
ModuleNotFoundError: No module named 'confluent_kafka'"""
ON_DRIVER = """[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: Traceback \
(most recent call last):
  File "/tmp/spark-7c/userFiles-ec7/ssekd-spark.zip/ssekd/spark/kafka_source.py", line 19, in <module>
    import pyarrow as pa
ModuleNotFoundError: No module named 'pyarrow'
 SQLSTATE: 38000"""


def test_a_worker_python_with_only_the_dependencies_imports_the_jobs_from_the_zip(
        tmp_path: Path) -> None:
    python = make_worker_env(tmp_path / "env")
    code = ("import ssekd.spark.kafka_source, ssekd.spark.models, ssekd.catalogs.models; "
            "print('ok')")
    without = subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                             timeout=120, cwd=tmp_path)
    assert "No module named 'ssekd'" in without.stderr, "the worker env must lack the project"
    archive = pack_code(tmp_path / "ssekd-spark.zip")
    shipped = subprocess.run([str(python), "-c", f"import sys; sys.path.insert(1, "
                                                 f"{str(archive)!r}); {code}"],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert shipped.stdout.strip() == "ok", shipped.stderr
    # The same code gives the same bytes (a rerun ships nothing new to a worker's cache).
    assert pack_code(tmp_path / "again.zip").read_bytes() == archive.read_bytes()


def test_the_pack_command_needs_no_spark_session(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pack", str(tmp_path / "code.zip")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "code.zip")
    listing = subprocess.run([sys.executable, "-m", "zipfile", "-l", str(tmp_path / "code.zip")],
                             capture_output=True, text=True, check=True, timeout=60).stdout
    assert "ssekd/spark/kafka_source.py" in listing and "ssekd/catalogs/models.py" in listing
    assert "__pycache__" not in listing


def test_a_missing_package_is_named_with_where_and_what_to_do() -> None:
    message = explain(RuntimeError(ON_EXECUTOR))
    assert message is not None
    assert message.startswith("confluent-kafka is not installed in the Python that Spark "
                              "started on the executors")
    assert "spark.pyspark.python" in message and "pip install 'ssekd[spark]'" in message
    planner = explain(RuntimeError(ON_DRIVER))
    assert planner is not None and planner.startswith(
        "pyarrow is not installed in the Python that Spark started on the driver's machine")
    code = explain(RuntimeError("ModuleNotFoundError: No module named 'ssekd'"))
    assert code is not None and code.startswith("the ssekd code did not reach")
    assert "ssekd-spark pack" in code
    assert explain(RuntimeError("Job aborted: Connection refused")) is None


def test_explained_keeps_the_original_failure_as_the_cause() -> None:
    original = RuntimeError(ON_EXECUTOR)
    with pytest.raises(WorkerSetupError) as caught, explained():
        raise original
    assert caught.value.__cause__ is original
    with pytest.raises(ValueError), explained():
        raise ValueError("something else")
