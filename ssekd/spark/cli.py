"""`ssekd-spark snapshot|export|pack ...`: the jobs from a shell, on `--master local[*]` or a
cluster.

On a master that is not `local`, the command ships this project's code to the executors itself
(a zip made from the running code, `ssekd.spark.pack`), so workers need only the dependencies.

Exit status: 0 done; 1 the job failed (a worker that lacks a package: one line saying which);
2 bad arguments or config; 3 `--strict` and malformed or invalid records were found (they are
reported either way, and never written where good records go).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Sequence
from typing import Any

from .workers import explained

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
    parser.add_argument("--no-ship-code", action="store_true",
                        help="on a cluster, do not send this project's code to the executors "
                             "(they have it installed, or it comes with spark.submit.pyFiles)")


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
    snapshot.add_argument("--config", metavar="ZILLA_YAML",
                          help="the daemon's config: records must pass the models it gives the "
                               "topic or the snapshot topic (catalogs as the daemon reads them); "
                               "those that fail are counted and never written")
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
    pack = jobs.add_parser(
        "pack", help="zip this project's code for spark-submit --py-files",
        description="The spark and ssekd packages as one zip, for executors that have the "
                    "dependencies installed but not ssekd (spark-submit --py-files ZIP).")
    pack.add_argument("output", nargs="?", default="ssekd-spark.zip",
                      help="the zip to write (default: %(default)s)")
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

    from .session import build_session

    conf = ({"spark.sql.shuffle.partitions": "8", "spark.ui.showConsoleProgress": "false"}
            | _pairs(args.conf, "--conf"))
    kafka = {"bootstrap.servers": args.bootstrap} | _pairs(args.kafka, "--kafka")
    models = None
    if getattr(args, "config", None):
        from .models import models_for
        from .snapshot import snapshot_topic_for

        # Before Spark starts: a bad config or an unreachable catalog stops the job at once.
        models = models_for(args.config, [args.topic,
                                          args.snapshot_topic or snapshot_topic_for(args.topic)])
    # Called from Python where a session already runs (a notebook, a test), use it and leave
    # it running; from the shell, the session is ours to stop. Only a session of our own can
    # be given the code to ship: a running one has its data source registered already.
    borrowed = SparkSession.getActiveSession() is not None
    shipped = None
    if not args.master.startswith("local") and not args.no_ship_code and not borrowed:
        from .pack import pack_code

        shipped = tempfile.mkdtemp(prefix="ssekd-spark-")
        py_files = [str(pack_code(f"{shipped}/ssekd-spark.zip"))]
    else:
        py_files = []
    try:
        session = build_session(args.master, f"ssekd-spark {args.job} {args.topic}", conf,
                                py_files)
        session.sparkContext.setLogLevel(args.log_level)
        return _run_jobs(args, session, kafka, models, stop_session=not borrowed)
    finally:
        if shipped is not None:
            shutil.rmtree(shipped, ignore_errors=True)


def _run_jobs(args: argparse.Namespace, session: Any, kafka: dict[str, str], models: Any,
              stop_session: bool) -> int:
    try:
        with explained():
            report = _job(args, session, kafka, models)
    finally:
        if stop_session:
            session.stop()
    _print(report, args.json)
    if args.strict and report.malformed.total:
        return EXIT_MALFORMED
    return 0


def _job(args: argparse.Namespace, session: Any, kafka: dict[str, str], models: Any) -> Any:
    from .quality import RecordRules

    if args.job == "snapshot":
        from .snapshot import run_snapshot, run_snapshot_stream

        rules = RecordRules(key_format=args.key_format, max_value_bytes=args.max_value_bytes,
                            models=models)
        if args.streaming:
            stop = _stop_on_signals()
            return run_snapshot_stream(
                session, kafka, args.topic, args.snapshot_topic,
                checkpoint=args.checkpoint, rules=rules, starting=args.starting_offsets,
                since=args.since, available_now=args.available_now,
                interval_s=args.trigger_interval,
                max_offsets_per_trigger=args.max_offsets_per_trigger,
                should_stop=stop.is_set)
        return run_snapshot(session, kafka, args.topic, args.snapshot_topic,
                            rules=rules, starting=args.starting_offsets, since=args.since)
    from .export import run_export

    rules = RecordRules(key_format=args.key_format, max_value_bytes=args.max_value_bytes,
                        require_key=False)
    return run_export(session, kafka, args.topic, args.output,
                      starting=args.starting_offsets, ending=args.ending_offsets,
                      since=args.since, mode=args.mode, time_zone=args.time_zone, rules=rules)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.job == "snapshot" and args.streaming and not args.checkpoint:
        parser.error("--streaming needs --checkpoint")
    if args.job == "snapshot" and not args.streaming and (args.available_now
                                                           or args.max_offsets_per_trigger):
        parser.error("--available-now and --max-offsets-per-trigger need --streaming")
    if args.job == "pack":
        from .pack import pack_code

        print(pack_code(args.output))
        return 0
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print("ssekd-spark needs the [spark] extra: pip install 'ssekd[spark]' (and Java 17+)",
              file=sys.stderr)
        return EXIT_FAILED
    from .options import OptionError
    from .workers import WorkerSetupError

    try:
        return run(args)
    except OptionError as e:
        print(f"ssekd-spark: {e}", file=sys.stderr)
        return 2
    except WorkerSetupError as e:
        print(f"ssekd-spark: {e}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as e:
        # A bad --config (file, line, path, what was expected) or a model whose schema cannot
        # be had: a message, not a traceback. Imported here: they need ssekd's catalogs.
        from ssekd.config.errors import ConfigError

        from .models import ModelUnavailable

        if isinstance(e, ConfigError):
            print(f"ssekd-spark: {e}", file=sys.stderr)
            return 2
        if isinstance(e, ModelUnavailable):
            print(f"ssekd-spark: a model of {args.config} cannot check records: {e}",
                  file=sys.stderr)
            return EXIT_FAILED
        raise


if __name__ == "__main__":
    sys.exit(main())
