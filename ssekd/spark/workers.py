"""What a Spark worker needs to run the jobs, and a clear error when it lacks something.

On a cluster, each executor starts its own Python (`spark.pyspark.python`, the same command on
every machine) to read and write Kafka. That Python needs the jobs' dependencies installed
(confluent-kafka, pyarrow, pandas; jsonschema, fastavro and twisted for `--config` models) and
this project's code, which `ssekd-spark` ships itself (`ssekd.spark.pack`). When an import fails
there, Spark reports a Python traceback inside a Java stack trace, after retrying the task: this
module turns that into one sentence naming the package, the executor and what to do.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

#: Modules the executors import, and the distribution that provides each.
DISTRIBUTIONS = {
    "confluent_kafka": "confluent-kafka",
    "pyarrow": "pyarrow",
    "pandas": "pandas",
    "numpy": "numpy",
    "jsonschema": "jsonschema",
    "fastavro": "fastavro",
    "twisted": "twisted",
    "zope": "zope.interface",
    "yaml": "pyyaml",
}
#: This project's own packages: missing means the code did not reach the worker.
OWN_PACKAGES = ("ssekd",)

MISSING_MODULE = re.compile(r"No module named '([A-Za-z0-9_.]+)'")
#: What only a failure on the driver's machine shows: the planner of a Python data source
#: (creating the source, planning a read or a write), which imports the shipped zip from the
#: driver's `userFiles-` folder. Executors report their task failures without either.
ON_DRIVER = re.compile(r"PYTHON_DATA_SOURCE_ERROR|data source instance|userFiles-")


class WorkerSetupError(RuntimeError):
    """A Python process Spark started cannot import what the jobs need."""


def _failure_text(error: BaseException) -> str:
    """The Python side of the message and the Java exception under it (which names the
    executor), as far as either is there."""
    parts = [str(error)]
    origin = getattr(error, "_origin", None)  # a pyspark CapturedException's Java exception
    if origin is not None:
        try:
            parts.append(str(origin.toString()))
        except Exception:  # the JVM may be gone already; the Python text is enough
            pass
    cause = error.__cause__ or error.__context__
    if cause is not None and cause is not error:
        parts.append(str(cause))
    return "\n".join(parts)


def explain(error: BaseException) -> str | None:
    """One sentence for a failure caused by a worker's missing package, else None."""
    text = _failure_text(error)
    missing = MISSING_MODULE.search(text)
    if missing is None:
        return None
    module = missing.group(1)
    top = module.split(".")[0]
    where = ("on the driver's machine (the data source's planner)" if ON_DRIVER.search(text)
             else "on the executors (the Spark UI's Executors tab, or the workers' "
                  "work/<app>/<executor>/stderr, names the host)")
    python = os.environ.get("PYSPARK_PYTHON", "python3")
    if top in OWN_PACKAGES:
        return (f"the ssekd code did not reach the Python processes Spark started {where}: "
                f"`import {module}` failed. ssekd-spark ships it itself unless --no-ship-code; "
                f"with spark-submit, pass the zip of `ssekd-spark pack` with --py-files, or "
                f"install ssekd on every worker (ssekd/spark/README.md, On a cluster)")
    distribution = DISTRIBUTIONS.get(top, top)
    return (f"{distribution} is not installed in the Python that Spark started {where}: "
            f"`import {module}` failed there. That Python is spark.pyspark.python, here "
            f"{python!r}; it needs ssekd's dependencies on every worker (pip install "
            f"'ssekd[spark]', or an image or environment that has them: ssekd/spark/README.md, "
            f"On a cluster)")


@contextmanager
def explained() -> Iterator[None]:
    """Raise `WorkerSetupError` (from the original) for a failure `explain` recognizes."""
    try:
        yield
    except Exception as e:
        message = explain(e)
        if message is None:
            raise
        raise WorkerSetupError(message) from e
