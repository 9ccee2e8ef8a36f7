"""The Parquet export reads back, with pyarrow, as the same rows the topic holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from ssekd.dev.broker import Broker
from ssekd.spark.export import MALFORMED_FOLDER, run_export
from ssekd.spark.quality import RecordRules
from tests.support.kafka_records import Change, Record, create_topic, produce

pytestmark = [pytest.mark.spark, pytest.mark.broker]

# Records around two UTC midnights: the date partition must follow UTC, not the session's zone
# (the test session runs in America/Los_Angeles).
START = datetime(2024, 3, 9, 22, 0, tzinfo=UTC)


def test_export_reads_back_with_the_same_rows_and_count(
        spark_session: SparkSession, spark_broker: Broker, kafka_config: dict[str, str],
        topic_name: str, tmp_path: Path) -> None:
    create_topic(spark_broker.bootstrap, topic_name, 3)
    changes = []
    for i in range(3000):
        when = START + timedelta(minutes=i)  # 50 hours: three UTC dates
        key = None if i % 50 == 0 else f"k{i % 70}".encode()
        value = None if i % 9 == 0 else f"value {i}".encode()
        if i == 1234:
            value = b"x" * 5000  # oversized for this export
        headers = [("etag", f"{i}".encode()), ("etag", None)] if i % 4 == 0 else None
        changes.append(Change(key, value, headers, timestamp_ms=int(when.timestamp() * 1000)))
    produced = produce(spark_broker.bootstrap, topic_name, changes)
    output = tmp_path / "export"
    report = run_export(spark_session, kafka_config, topic_name, str(output),
                        rules=RecordRules(key_format="binary", max_value_bytes=1000,
                                          require_key=False))
    print(report.describe())
    assert (report.records, report.written, report.malformed.total) == (3000, 2999, 1)

    table = pq.read_table(output)  # pyarrow; hive partitions; `_malformed` is skipped
    assert table.num_rows == report.written == len(produced) - 1
    rows = sorted(
        ((Record(r["partition"], r["offset"], r["key"], r["value"],
                [(h["key"], h["value"]) for h in r["headers"]],
                int(r["timestamp"].timestamp() * 1000)), str(r["date"]))
         for r in table.to_pylist()), key=lambda row: (row[0].partition, row[0].offset))
    expected = [(r, datetime.fromtimestamp(r.timestamp_ms / 1000, UTC).date().isoformat())
                for r in produced if r.value is None or len(r.value) <= 1000]
    assert rows == expected
    assert {d for _, d in rows} == {"2024-03-09", "2024-03-10", "2024-03-11"}
    assert table.schema.field("timestamp").type.unit == "us"
    assert sorted(p.name for p in output.iterdir() if p.is_dir()) == [
        MALFORMED_FOLDER, "date=2024-03-09", "date=2024-03-10", "date=2024-03-11"]

    kept = ds.dataset(output / MALFORMED_FOLDER).to_table().to_pylist()
    assert [(r["offset"], r["problem"], len(r["value"])) for r in kept] == [
        (next(r.offset for r in produced if r.value and len(r.value) == 5000),
         "oversized_value", 5000)]

    with pytest.raises(Exception, match="already exists"):
        run_export(spark_session, kafka_config, topic_name, str(output))
