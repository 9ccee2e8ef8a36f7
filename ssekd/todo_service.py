"""The todo demo's command service: what answers the writes of `etc/zilla-todo.yaml`.

Zilla's todo demo is CQRS over three topics: the page writes commands through http-kafka to
`task-commands` (POST a task, PUT an edit, DELETE it), this service applies each to the tasks it
keeps and writes the result to `task-snapshots` (compacted, keyed by task id, with an `etag`
header: the page reads it as Server-Sent Events with key-form ids), then answers on the record's
reply-to topic (`task-replies`) with the command's correlation id and a `:status`:

- create (`todo-command:operation: CreateTaskCommand`, else `POST`): the task
  `{"id": <key>, "title": ..., "completed": false}` with etag `1`; `201` with a `location`;
- update (`UpdateTaskCommand`, else `PUT` or `PATCH`): the body's `title` and `completed`, etag
  + 1; `204`;
- delete (`DeleteTaskCommand`, else `DELETE`): a tombstone; `204`;
- an `if-match` header that is not the task's etag: `412` and nothing written; a task that does
  not exist: `404`; a body that is not a JSON object with the right fields: `400`.

It is the demo's, for `make run` (`ssekd.dev` starts it beside the demo producer), not part of
the daemon. At start it reads `task-replies` (the correlation ids already answered) and
`task-snapshots` (each task and its etag) to their ends, then every command from the beginning,
skipping those answered: a restart neither loses a command nor applies one twice.

Without a broker it says so in one line and exits 1 after `--wait` seconds (librdkafka's lines
come once each, as the demo producer's do); SIGTERM or Ctrl-C stops it at any point.

    python -m ssekd.todo_service --bootstrap localhost:9092 [--prefix task] [--wait 30]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ssekd.dev.demo_producer import QuietLog

CORRELATION = "zilla:correlation-id"
REPLY_TO = "zilla:reply-to"
OPERATION = "todo-command:operation"
_BY_METHOD = {"POST": "CreateTaskCommand", "PUT": "UpdateTaskCommand",
              "PATCH": "UpdateTaskCommand", "DELETE": "DeleteTaskCommand"}

Headers = list[tuple[str, bytes]]
#: What the service's lines start with.
WHO = "todo service"
#: Seconds to wait at start for a broker to answer.
BROKER_WAIT = 30.0


@dataclass
class Output:
    """A record the service writes."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers = field(default_factory=list)


@dataclass
class Task:
    value: dict[str, Any]
    etag: int


class Tasks:
    """The tasks and the commands already answered; `apply` turns a command into records."""

    def __init__(self, snapshots: str, replies: str) -> None:
        self.snapshots = snapshots
        self.replies = replies
        self.tasks: dict[bytes, Task] = {}
        self.answered: set[bytes] = set()

    def load_snapshot(self, key: bytes | None, value: bytes | None,
                      headers: Headers) -> None:
        if key is None:
            return
        if value is None:
            self.tasks.pop(key, None)
            return
        etag = _header(headers, "etag")
        try:
            self.tasks[key] = Task(json.loads(value), int(etag or b"1"))
        except ValueError:
            return

    def load_reply(self, headers: Headers) -> None:
        correlation = _header(headers, CORRELATION)
        if correlation is not None:
            self.answered.add(correlation)

    def apply(self, key: bytes | None, value: bytes | None, headers: Headers) -> list[Output]:
        """The records a command makes: a snapshot (or none) then the reply."""
        correlation = _header(headers, CORRELATION)
        if correlation is None or correlation in self.answered:
            return []
        self.answered.add(correlation)
        reply_to = (_header(headers, REPLY_TO) or self.replies.encode()).decode()
        path = (_header(headers, ":path") or b"/tasks").decode("utf-8", "replace")
        operation = (_header(headers, OPERATION) or b"").decode() or \
            _BY_METHOD.get((_header(headers, ":method") or b"").decode(), "")
        if_match = _header(headers, "if-match")

        def reply(status: int, extra: Headers | None = None, body: bytes = b"") -> Output:
            assert correlation is not None
            return Output(reply_to, key, body,
                          [(CORRELATION, correlation), (":status", str(status).encode()),
                           *(extra or [])])

        def problem(status: int, why: str) -> list[Output]:
            return [reply(status, [("content-type", b"text/plain")], why.encode())]

        if key is None:
            return problem(400, "a command needs the task id as its key")
        task = self.tasks.get(key)
        if operation == "CreateTaskCommand":
            body = _json_object(value)
            if body is None or not isinstance(body.get("title"), str):
                return problem(400, 'expected {"title": "..."}')
            if task is not None:
                return problem(409, "a task with this id exists")
            task = self.tasks[key] = Task({"id": key.decode("utf-8", "replace"),
                                           "title": body["title"], "completed": False}, 1)
            return [self._snapshot(key, task),
                    reply(201, [("location", f"{path.rstrip('/')}/"
                                             f"{key.decode('utf-8', 'replace')}".encode())])]
        if task is None:
            return problem(404, "no such task")
        if if_match is not None and if_match != str(task.etag).encode():
            return problem(412, f"the task changed (etag {task.etag}); reload it")
        if operation == "UpdateTaskCommand":
            body = _json_object(value)
            if body is None or not isinstance(body.get("title", ""), str) or \
                    not isinstance(body.get("completed", False), bool):
                return problem(400, 'expected {"title": "...", "completed": true|false}')
            task.value.update({k: body[k] for k in ("title", "completed") if k in body})
            task.etag += 1
            return [self._snapshot(key, task), reply(204)]
        if operation == "DeleteTaskCommand":
            del self.tasks[key]
            return [Output(self.snapshots, key, None, [(CORRELATION, correlation)]), reply(204)]
        return problem(400, f"unknown command {operation!r}")

    def _snapshot(self, key: bytes, task: Task) -> Output:
        return Output(self.snapshots, key, json.dumps(task.value).encode(),
                      [("etag", str(task.etag).encode()),
                       ("content-type", b"application/json")])


def _header(headers: Headers | None, name: str) -> bytes | None:
    for n, v in headers or ():
        if n == name:
            return v
    return None


def _headers(record: Any) -> Headers:
    """A consumed record's headers (names and byte values; a null value as empty)."""
    return [(n, v if isinstance(v, bytes) else (v or "").encode())
            for n, v in (record.headers() or [])]


def _json_object(value: bytes | None) -> dict[str, Any] | None:
    try:
        parsed = json.loads(value or b"")
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


class NoBroker(Exception):
    """No broker answered at the bootstrap servers within the wait."""


def ensure_topics(bootstrap: str, topics: dict[str, dict[str, str]],
                  timeout: float = 30.0, stop: threading.Event | None = None,
                  log: QuietLog | None = None) -> bool:
    """Create the topics that do not exist (3 partitions, the given configs), waiting up to
    `timeout` seconds for a broker (`NoBroker` after that). False when `stop` was set first."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": log or QuietLog(WHO)}
    admin = AdminClient(conf)
    deadline = time.monotonic() + timeout
    while stop is None or not stop.is_set():
        try:
            have = admin.list_topics(timeout=1).topics
            missing = [NewTopic(t, 3, 1, config=c) for t, c in topics.items() if t not in have]
            for f in (admin.create_topics(missing).values() if missing else ()):
                try:
                    f.result(10)
                except KafkaException as e:
                    if "TOPIC_ALREADY_EXISTS" not in str(e):
                        raise
            return True
        except KafkaException as e:
            if time.monotonic() > deadline:
                raise NoBroker(f"no Kafka broker answered at {bootstrap} within {timeout:g} s "
                               f"({e.args[0].str() if e.args else e})") from None
            time.sleep(0.5)
    return False


def read_to_end(bootstrap: str, topic: str, each: Callable[[Any], None],
                log: QuietLog | None = None) -> None:
    """Every record of `topic` from its beginning to the end the fetches report."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ssekd-todo-load",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "fetch.wait.max.ms": 10, "logger": log or QuietLog(WHO)})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        left = set(partitions)
        while left:
            m = consumer.poll(1.0)
            if m is None:
                continue
            error = m.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    left.discard(m.partition())
                continue
            each(m)
    finally:
        consumer.close()


def serve(bootstrap: str, prefix: str = "task", stop: threading.Event | None = None,
          ready: Callable[[], None] | None = None, wait: float = BROKER_WAIT) -> int:
    """Answer commands until `stop` is set (or for ever); return how many were applied.
    `NoBroker` when no broker answers within `wait` seconds at start."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    commands, snapshots, replies = f"{prefix}-commands", f"{prefix}-snapshots", \
        f"{prefix}-replies"
    log = QuietLog(WHO)  # one for all the clients: a line said by one is not said again
    if not ensure_topics(bootstrap, {commands: {}, replies: {},
                                     snapshots: {"cleanup.policy": "compact"}}, wait, stop, log):
        return 0
    tasks = Tasks(snapshots, replies)
    read_to_end(bootstrap, replies, lambda m: tasks.load_reply(_headers(m)), log)
    read_to_end(bootstrap, snapshots,
                lambda m: tasks.load_snapshot(m.key(), m.value(), _headers(m)), log)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                         "enable.idempotence": True, "partitioner": "murmur2_random",
                         "logger": log})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ssekd-todo-service",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 10,
                         "fetch.queue.backoff.ms": 1, "logger": log})
    for topic in (snapshots, replies):  # learnt now, not when the first command waits on it
        producer.list_topics(topic, timeout=10)
    partitions = consumer.list_topics(commands, timeout=10).topics[commands].partitions
    consumer.assign([TopicPartition(commands, p, OFFSET_BEGINNING) for p in partitions])
    if ready is not None:
        ready()
    applied = 0
    try:
        while stop is None or not stop.is_set():
            first = consumer.poll(0.1)
            if first is None:
                producer.poll(0)
                continue
            for m in [first, *consumer.consume(100, 0)]:
                if m.error() is not None:
                    continue
                outputs = tasks.apply(m.key(), m.value(), _headers(m))
                applied += bool(outputs)
                for out in outputs:
                    producer.produce(out.topic, key=out.key, value=out.value,
                                     headers=list(out.headers))
            producer.poll(0)
    finally:
        producer.flush(10)
        consumer.close()
    return applied


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ssekd.todo_service",
        description="The todo demo's command service: applies the commands of "
                    "<prefix>-commands to the tasks, writes them to <prefix>-snapshots and "
                    "replies on each command's reply-to topic (make run starts it for "
                    "etc/zilla-todo.yaml).")
    parser.add_argument("--bootstrap", default="localhost:9092",
                        help="the Kafka bootstrap servers (default: localhost:9092)")
    parser.add_argument("--prefix", default="task",
                        help="the topics are <prefix>-commands, <prefix>-snapshots and "
                             "<prefix>-replies (default: task)")
    parser.add_argument("--wait", type=float, default=BROKER_WAIT,
                        help="seconds to wait at start for a broker to answer before giving "
                             f"up (default: {BROKER_WAIT:g})")
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        applied = serve(args.bootstrap, args.prefix, stop,
                        lambda: print(f"{WHO}: answering {args.prefix}-commands",
                                      file=sys.stderr, flush=True), args.wait)
    except KeyboardInterrupt:
        return 0
    except NoBroker as e:
        print(f"{WHO}: {e}", file=sys.stderr)
        return 1
    print(f"{WHO}: {applied} commands applied", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
