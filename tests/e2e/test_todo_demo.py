"""Zilla's todo demo runs on ssekd: its zilla.yaml as published (tests/data/zilla-todo-demo.yaml,
adapted only where it names the host, the port and the broker), the demo's command service
behind it, and the requests its page makes - create, read the list as SSE with key-form ids,
edit with the etag of an event id as If-Match (a stale one gets 412), delete (a `delete` event).
The same holds for our own etc/zilla-todo.yaml, which adds the page and a fetch route."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path

import pytest

from ssekd.cli import main
from tests.support.data import ZILLA_TODO_DEMO
from tests.support.sse import Event, SseClient
from tests.support.todo import TODO_CONFIG, TodoDemo, adapt, todo_demo
from tests.support.writes import request

pytestmark = [pytest.mark.daemon, pytest.mark.timeout(120)]


def key_of(event: Event) -> str:
    key64, _ = json.loads(event.id or "")
    return base64.urlsafe_b64decode(key64).decode()


def etag_of(event: Event) -> str:
    _, etag = json.loads(event.id or "")
    return str(etag)


def walk_through(demo: TodoDemo) -> None:
    """What the demo's page does, request by request."""
    with SseClient(demo.port, "/tasks") as stream:
        assert stream.status == 200
        task_id = f"todoId-{uuid.uuid4()}"
        created = request(demo.port, "POST", "/tasks", {"Content-Type": "application/json",
                                                        "Idempotency-Key": task_id},
                          b'{"title": "write the demo"}')
        assert created.status == 201, created
        assert created.headers["location"] == f"/tasks/{task_id}"
        first = stream.next_event(10)
        assert first is not None and key_of(first) == task_id
        assert json.loads(first.data or "") == {"id": task_id, "title": "write the demo",
                                                "completed": False}
        assert etag_of(first).endswith("/1")
        edited = request(demo.port, "PUT", f"/tasks/{task_id}",
                         {"Content-Type": "application/json", "Idempotency-Key": task_id,
                          "If-Match": etag_of(first)},
                         json.dumps({"id": task_id, "title": "write the demo",
                                     "completed": True}).encode())
        assert edited.status == 204, edited
        second = stream.next_event(10)
        assert second is not None and json.loads(second.data or "")["completed"] is True
        assert etag_of(second).endswith("/2")
        stale = request(demo.port, "PUT", f"/tasks/{task_id}",
                        {"Content-Type": "application/json", "Idempotency-Key": task_id,
                         "If-Match": etag_of(first)}, b'{"title": "lost update"}')
        assert stale.status == 412, stale
        deleted = request(demo.port, "DELETE", f"/tasks/{task_id}",
                          {"Idempotency-Key": task_id, "If-Match": etag_of(second)})
        assert deleted.status == 204, deleted
        gone = stream.next_event(10)
        assert gone is not None and gone.event == "delete" and key_of(gone) == task_id


def test_zillas_todo_demo_config_runs_as_published(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    adapted = tmp_path / "check.yaml"
    adapted.write_text(adapt(ZILLA_TODO_DEMO.read_text(), 7114, "127.0.0.1:9092"))
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVER", "127.0.0.1:9092")
    assert main(["check", "--config", str(adapted)]) == 0
    with todo_demo(tmp_path, ZILLA_TODO_DEMO) as demo:
        walk_through(demo)


def test_our_todo_config_adds_the_page_and_a_fetch_of_one_task(tmp_path: Path) -> None:
    with todo_demo(tmp_path, TODO_CONFIG) as demo:
        walk_through(demo)
        page = request(demo.port, "GET", "/")
        assert page.status == 200 and b"todo.js" in page.body
        task_id = f"todoId-{uuid.uuid4()}"
        assert request(demo.port, "POST", "/tasks", {"Idempotency-Key": task_id},
                       b'{"title": "fetched"}').status == 201
        one = request(demo.port, "GET", f"/tasks/{task_id}", {"Prefer": "wait=5"})
        assert one.status == 200 and json.loads(one.body)["title"] == "fetched"
        assert one.headers["etag"].endswith("/1")
        assert request(demo.port, "GET", f"/tasks/{task_id}",
                       {"If-None-Match": one.headers["etag"]}).status == 304
        edit = request(demo.port, "PUT", f"/tasks/{task_id}",
                       {"Idempotency-Key": str(uuid.uuid4()), "Prefer": "respond-async",
                        "If-Match": one.headers["etag"]}, b'{"title": "async"}')
        assert edit.status in (202, 204), edit
        if edit.status == 202:
            done = request(demo.port, "GET", edit.headers["location"], {"Prefer": "wait=5"})
            assert done.status == 204, done
