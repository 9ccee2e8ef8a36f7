"""The todo demo's command service decides as the demo's page expects: create with etag 1 and a
`201` with a location, an update or delete only when `if-match` is the task's etag (else `412`
and nothing written), a tombstone on delete, `404` and `400` for what cannot apply, and a
command seen before (same correlation id) is not applied again. Without a broker it says so in
a line and stops, as the demo producer does, instead of librdkafka's lines twenty times a
second and a traceback."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

from ssekd.dev.broker import free_port
from ssekd.todo_service import CORRELATION, Output, Tasks


def command(tasks: Tasks, key: bytes, operation: str, body: dict[str, object] | None,
            correlation: str, if_match: str | None = None) -> list[Output]:
    headers = [(":method", b"POST"), (":path", b"/tasks"),
               ("todo-command:operation", operation.encode()),
               ("zilla:reply-to", b"task-replies"), (CORRELATION, correlation.encode())]
    if if_match is not None:
        headers.append(("if-match", if_match.encode()))
    return tasks.apply(key, None if body is None else json.dumps(body).encode(), headers)


def status(out: Output) -> bytes:
    return dict(out.headers)[":status"]


def test_create_update_stale_delete() -> None:
    tasks = Tasks("task-snapshots", "task-replies")
    snap, reply = command(tasks, b"t1", "CreateTaskCommand", {"title": "milk"}, "c1")
    assert (snap.topic, snap.key, json.loads(snap.value or b"")) == \
        ("task-snapshots", b"t1", {"id": "t1", "title": "milk", "completed": False})
    assert dict(snap.headers)["etag"] == b"1"
    assert (reply.topic, status(reply), dict(reply.headers)["location"]) == \
        ("task-replies", b"201", b"/tasks/t1")
    assert dict(reply.headers)[CORRELATION] == b"c1"
    snap, reply = command(tasks, b"t1", "UpdateTaskCommand", {"completed": True}, "c2", "1")
    assert dict(snap.headers)["etag"] == b"2" and status(reply) == b"204"
    assert json.loads(snap.value or b"")["completed"] is True
    (stale,) = command(tasks, b"t1", "UpdateTaskCommand", {"title": "x"}, "c3", "1")
    assert status(stale) == b"412" and stale.topic == "task-replies"
    assert command(tasks, b"t1", "UpdateTaskCommand", {"title": "x"}, "c3", "2") == [], \
        "a correlation id answered before is not applied again"
    tombstone, reply = command(tasks, b"t1", "DeleteTaskCommand", None, "c4", "2")
    assert (tombstone.topic, tombstone.key, tombstone.value) == ("task-snapshots", b"t1", None)
    assert status(reply) == b"204"
    (missing,) = command(tasks, b"t1", "DeleteTaskCommand", None, "c5")
    assert status(missing) == b"404"
    (bad,) = command(tasks, b"t2", "CreateTaskCommand", {"name": "no title"}, "c6")
    assert status(bad) == b"400"


def test_state_is_rebuilt_from_the_topics() -> None:
    tasks = Tasks("task-snapshots", "task-replies")
    tasks.load_snapshot(b"t1", b'{"id": "t1", "title": "a", "completed": false}',
                        [("etag", b"4")])
    tasks.load_reply([(CORRELATION, b"old")])
    assert command(tasks, b"t1", "UpdateTaskCommand", {"title": "b"}, "old", "4") == []
    (stale,) = command(tasks, b"t1", "UpdateTaskCommand", {"title": "b"}, "new", "3")
    assert status(stale) == b"412"
    snap, _ = command(tasks, b"t1", "UpdateTaskCommand", {"title": "b"}, "newer", "4")
    assert dict(snap.headers)["etag"] == b"5"


def test_without_a_broker_one_line_and_exit_1_after_the_wait() -> None:
    port = free_port()  # nothing listens there
    done = subprocess.run([sys.executable, "-m", "ssekd.todo_service", "--bootstrap",
                           f"127.0.0.1:{port}", "--wait", "2"], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines[-1].startswith(f"todo service: no Kafka broker answered at 127.0.0.1:{port} "
                                "within 2 s ("), done.stderr
    assert len(lines) == len(set(lines)) <= 3, "librdkafka's lines once each"
    assert "Traceback" not in done.stderr and "%3|" not in done.stderr


def test_sigterm_while_waiting_for_a_broker_stops_it_at_once() -> None:
    service = subprocess.Popen([sys.executable, "-m", "ssekd.todo_service", "--bootstrap",
                                f"127.0.0.1:{free_port()}"], stderr=subprocess.PIPE, text=True)
    try:
        _, err = service.communicate(timeout=3)
        raise AssertionError(f"exited early: {err}")
    except subprocess.TimeoutExpired:
        pass
    service.send_signal(signal.SIGTERM)
    _, err = service.communicate(timeout=5)
    assert service.returncode == 0
    assert err.splitlines()[-1] == "todo service: 0 commands applied", err
    assert "Traceback" not in err and "%3|" not in err
