"""How `make test` hands test files to its processes: pytest-xdist's `--dist loadfile`, except
that every file of `tests/spark/` goes to one process.

Why: the local Spark session is made once per test process (`tests/spark/conftest.py`), and
making one costs about 30 s of a quiet machine's time (its JVM, then the first jobs compiling
Spark's code paths): `test_models.py` and `test_kafka_source.py` took 41 s and 49 s in two
processes, 59 s in one. Spread over three processes as single files, the Spark files started
three sessions, each beside other tests on two cores. Together they are one work unit, handed
out where `tests/spark/test_cluster.py` (the longest file, `LONG_FIRST` in tests/conftest.py)
would be, so it still starts first.
"""

from __future__ import annotations

from xdist.scheduler import LoadFileScheduling

#: Test files under this folder share one process.
TOGETHER = "tests/spark/"


class SparkInOneProcess(LoadFileScheduling):
    """`loadfile`, with the files under `TOGETHER` one unit of work."""

    def _split_scope(self, nodeid: str) -> str:
        scope: str = super()._split_scope(nodeid)
        return TOGETHER if scope.startswith(TOGETHER) else scope
