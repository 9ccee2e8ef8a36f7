"""A job file for `spark-submit --py-files ssekd-spark.zip`: the batch snapshot of one topic,
its report printed as JSON. The driver's Python has the dependencies but not ssekd: the code
comes from the zip, on the driver as on the executors.

    spark-submit --master spark://... --py-files ssekd-spark.zip submitted_snapshot.py \
        BOOTSTRAP TOPIC SNAPSHOT_TOPIC
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession

from ssekd.spark.session import register
from ssekd.spark.snapshot import run_snapshot


def main(bootstrap: str, topic: str, target: str) -> None:
    session = register(SparkSession.builder.getOrCreate())
    try:
        report = run_snapshot(session, {"bootstrap.servers": bootstrap,
                                        "fetch.wait.max.ms": "10"}, topic, target)
    finally:
        session.stop()
    print(json.dumps(report.as_dict(), default=str))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
