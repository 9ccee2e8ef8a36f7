"""`ssekd-spark snapshot|export ...`: the jobs from a shell, on `--master local[*]` or a cluster.

Exit status: 0 done; 1 the job failed; 2 bad arguments; 3 `--strict` and malformed records were
found (they are reported either way, and never written where good records go).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

EXIT_FAILED = 1
EXIT_MALFORMED = 3


def _pairs(values: Sequence[str] | None, flag: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in values or ():
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"ssekd-spark: {flag} takes name=value, got {item!r}")
        pairs[name.strip()] = value
    return pairs


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap", default="127.0.0.1:9092",
                        help="Kafka bootstrap servers, host:port[,host:port] "
                             "(default: %(default)s, the dev broker of `make run`)")
    parser.add_argument("--topic", required=True, help="topic to read")
    parser.add_argument("--master", default="local[*]",
                        help="Spark master: local[*], local[2], spark://host:7077, yarn, ... "
                             "(default: %(default)s)")
    parser.add_argument("--conf", action="append", metavar="NAME=VALUE",
                        help="a Spark setting, repeatable (e.g. spark.sql.shuffle.partitions=8)")
    parser.add_argument("--kafka", action="append", metavar="NAME=VALUE",
                        help="a librdkafka setting for every consumer and producer, repeatable "
                             "(e.g. security.protocol=SASL_SSL)")
    parser.add_argument("--starting-offsets", default="earliest",
                        help='earliest, latest, or JSON {"partition": offset} '
                             "(default: %(default)s)")
    parser.add_argument("--since", help="start at this time instead: epoch ms or ISO-8601")
    parser.add_argument("--max-value-bytes", type=int, default=1024 * 1024,
                        help="larger values are malformed (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--strict", action="store_true",
                        help=f"exit with status {EXIT_MALFORMED} when malformed records were found")
    parser.add_argument("--log-level", default="WARN", help="Spark log level (default: WARN)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ssekd-spark",
        description="Spark jobs for ssekd's snapshot topics (needs the [spark] extra).")
    jobs = parser.add_subparsers(dest="job", required=True)

    snapshot = jobs.add_parser(
        "snapshot", help="fold a change topic into its compacted snapshot topic",
        description="Latest value per key of a change topic, written to its snapshot topic "
                    "(created compacted when missing); a rerun writes only what differs.")
    _common(snapshot)
    snapshot.add_argument("--snapshot-topic", help="target topic (default: <topic>-snapshots)")
    snapshot.add_argument("--key-format", choices=("utf8", "binary"), default="utf8",
                          help="utf8: keys that are not UTF-8 are malformed (default)")
    snapshot.add_argument("--streaming", action="store_true",
                          help="keep following the change topic (needs --checkpoint)")
    snapshot.add_argument("--checkpoint", help="streaming checkpoint folder (local, HDFS, S3...)")
    snapshot.add_argument("--available-now", action="store_true",
                          help="streaming: process what is there now, then stop")
    snapshot.add_argument("--trigger-interval", type=float, default=1.0,
                          help="streaming: seconds between micro-batches (default: %(default)s)")
    snapshot.add_argument("--max-offsets-per-trigger", type=int,
                          help="streaming: at most this many records per micro-batch")

    export = jobs.add_parser(
        "export", help="write a topic to Parquet, partitioned by date",
        description="Records of a topic to Parquet files under OUTPUT/date=YYYY-MM-DD/.")
    _common(export)
    export.add_argument("--output", required=True, help="output folder (local, HDFS, S3...)")
    export.add_argument("--ending-offsets", default="latest",
                        help='latest, or JSON {"partition": offset} (default: %(default)s)')
    export.add_argument("--mode", default="errorifexists",
                        choices=("errorifexists", "overwrite", "append", "ignore"),
                        help="when OUTPUT exists (default: %(default)s)")
    export.add_argument("--time-zone", default="UTC",
                        help="zone of the date partitions (default: %(default)s)")
    export.add_argument("--key-format", choices=("utf8", "binary"), default="binary",
                        help="utf8: keys that are not UTF-8 are malformed (default: binary)")
    return parser


def _print(report: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report.as_dict(), default=str, indent=2))
    else:
        print(report.describe())


def _stop_on_signals() -> threading.Event:
    """SIGINT/SIGTERM end a streaming run between micro-batches, with its report printed."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def run(args: argparse.Namespace) -> int:
    from pyspark.sql import SparkSession

    from .quality import RecordRules
    from .session import build_session

    conf = ({"spark.sql.shuffle.partitions": "8", "spark.ui.showConsoleProgress": "false"}
            | _pairs(args.conf, "--conf"))
    kafka = {"bootstrap.servers": args.bootstrap} | _pairs(args.kafka, "--kafka")
    # Called from Python where a session already runs (a notebook, a test), use it and leave
    # it running; from the shell, the session is ours to stop.
    borrowed = SparkSession.getActiveSession() is not None
    session = build_session(args.master, f"ssekd-spark {args.job} {args.topic}", conf)
    session.sparkContext.setLogLevel(args.log_level)
    try:
        if args.job == "snapshot":
            from .snapshot import run_snapshot, run_snapshot_stream

            rules = RecordRules(key_format=args.key_format, max_value_bytes=args.max_value_bytes)
            if args.streaming:
                stop = _stop_on_signals()
                report: Any = run_snapshot_stream(
                    session, kafka, args.topic, args.snapshot_topic,
                    checkpoint=args.checkpoint, rules=rules, starting=args.starting_offsets,
                    since=args.since, available_now=args.available_now,
                    interval_s=args.trigger_interval,
                    max_offsets_per_trigger=args.max_offsets_per_trigger,
                    should_stop=stop.is_set)
            else:
                report = run_snapshot(session, kafka, args.topic, args.snapshot_topic,
                                      rules=rules, starting=args.starting_offsets,
                                      since=args.since)
        else:
            from .export import run_export

            rules = RecordRules(key_format=args.key_format, max_value_bytes=args.max_value_bytes,
                                require_key=False)
            report = run_export(session, kafka, args.topic, args.output,
                                starting=args.starting_offsets, ending=args.ending_offsets,
                                since=args.since, mode=args.mode, time_zone=args.time_zone,
                                rules=rules)
    finally:
        if not borrowed:
            session.stop()
    _print(report, args.json)
    if args.strict and report.malformed.total:
        return EXIT_MALFORMED
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.job == "snapshot" and args.streaming and not args.checkpoint:
        parser.error("--streaming needs --checkpoint")
    if args.job == "snapshot" and not args.streaming and (args.available_now
                                                           or args.max_offsets_per_trigger):
        parser.error("--available-now and --max-offsets-per-trigger need --streaming")
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print("ssekd-spark needs the [spark] extra: pip install 'ssekd[spark]' (and Java 17+)",
              file=sys.stderr)
        return EXIT_FAILED
    from .options import OptionError

    try:
        return run(args)
    except OptionError as e:
        print(f"ssekd-spark: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
