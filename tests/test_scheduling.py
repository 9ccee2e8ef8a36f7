"""`make test`'s work units (tests/support/scheduling.py): a file each, the Spark files one."""

from __future__ import annotations

from tests.support.scheduling import SparkInOneProcess


def test_spark_files_are_one_unit_and_every_other_file_its_own() -> None:
    scheduler = object.__new__(SparkInOneProcess)  # _split_scope reads nothing of its state
    scope = scheduler._split_scope
    assert scope("tests/spark/test_cluster.py::test_a") == scope(
        "tests/spark/test_models.py::Models::test_b") == "tests/spark/"
    assert scope("tests/e2e/test_readme.py::test_c") == "tests/e2e/test_readme.py"
    assert scope("tests/e2e/test_readme.py::test_c") != scope("tests/e2e/test_haproxy.py::test_d")
    assert scope("tests/sparkle/test_x.py::test_e") == "tests/sparkle/test_x.py"
