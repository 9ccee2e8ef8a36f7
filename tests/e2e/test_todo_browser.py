"""Two headless Chromium pages on the todo demo (etc/zilla-todo.yaml, the demo's command service,
a broker of its own). What one page does through its form and buttons - add, edit, tick,
delete - the other sees over its SSE stream within 100 ms of the click (the median of twelve
changes: the machine the tests share has two cores, and one change in a dozen may wait for
them; none may take a second, which a reconnect or a poll would); an edit begun before the
other page changed the same task is refused with 412 and the page says so; a delete reaches the
other page as a `delete` event."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import Browser
from tests.support.todo import todo_demo
from tests.support.wait import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.daemon, pytest.mark.timeout(240)]

#: The issue's bound: a change made on one page shows on the other within this many ms...
SEEN_WITHIN_MS = 100
#: ... and what no change may take even on a loaded machine.
SEEN_AT_WORST_MS = 1000


def state(page: Browser) -> dict[str, Any]:
    return dict(json.loads(page.evaluate(
        "JSON.stringify({events: todo.events, answers: todo.answers, opens: todo.opens,"
        " tasks: Object.fromEntries([...todo.tasks].map(([k, v]) => [k, v.task])),"
        " status: document.getElementById('status').textContent,"
        " items: [...document.querySelectorAll('#tasks li')].map(li => li.dataset.id)})")))


def task_titled(page: Browser, title: str) -> str | None:
    for task_id, task in state(page)["tasks"].items():
        if task["title"] == title:
            return str(task_id)
    return None


def lag_ms(writer: Browser, reader: Browser, task_id: str, kind: str = "message") -> float:
    """From the writer's last request to the reader's event for `task_id`."""
    sent = state(writer)["answers"][-1]["sentAt"]
    seen = [e["at"] for e in state(reader)["events"] if e["id"] == task_id and e["type"] == kind
            and e["at"] >= sent]
    assert seen, f"{kind} of {task_id} not seen after {sent}"
    return float(seen[0] - sent)


def test_two_pages_write_and_see_each_other(tmp_path: Path) -> None:
    with todo_demo(tmp_path) as demo:
        a, b = Browser(f"{demo.url}/"), Browser(f"{demo.url}/")
        try:
            for page in (a, b):
                wait_until(lambda p=page: p.evaluate("window.todo && todo.opens") == 1, 20)
            lags: list[float] = []
            ids = []
            for n in range(3):
                # add, on a's form
                a.evaluate(f"document.getElementById('title').value = 'task {n}';"
                           "document.getElementById('add').requestSubmit()")
                task_id = wait_until(lambda n=n: task_titled(b, f"task {n}"), 10)
                assert task_titled(a, f"task {n}") == task_id
                lags.append(lag_ms(a, b, task_id))
                ids.append(task_id)
            for n, task_id in enumerate(ids):
                # edit the title, on a: double-click, type, Enter
                a.evaluate(f"todo.startEdit({json.dumps(task_id)});"
                           f"todo.editing.input.value = 'task {n} edited';"
                           "todo.editing.input.dispatchEvent(new KeyboardEvent('keydown', "
                           "{key: 'Enter'}))")
                wait_until(lambda t=task_id, n=n: state(b)["tasks"][t]["title"] ==
                           f"task {n} edited", 10)
                lags.append(lag_ms(a, b, task_id))
                # tick it, on a
                a.evaluate(f"document.querySelector('li[data-id={json.dumps(task_id)}] "
                           "input[type=checkbox]').click()")
                wait_until(lambda t=task_id: state(b)["tasks"][t]["completed"] is True, 10)
                lags.append(lag_ms(a, b, task_id))
            task_id = ids[0]

            # a begins an edit; b changes the task meanwhile; a's edit carries a stale etag
            a.evaluate(f"todo.startEdit({json.dumps(task_id)})")
            b.evaluate(f"todo.edit({json.dumps(task_id)}, {{title: 'buy soy milk'}})")
            wait_until(lambda: state(a)["tasks"][task_id]["title"] == "buy soy milk", 10)
            a.evaluate("todo.editing.input.value = 'buy rice milk';"
                       "todo.editing.input.dispatchEvent(new KeyboardEvent('keydown', "
                       "{key: 'Enter'}))")
            wait_until(lambda: state(a)["answers"][-1]["status"] == 412, 10)
            assert state(a)["status"].startswith("412")
            assert a.evaluate("document.getElementById('status').className") == "problem"
            assert state(b)["tasks"][task_id]["title"] == "buy soy milk", "nothing overwritten"

            # delete, on a: b gets a `delete` event
            for task_id in ids:
                a.evaluate(f"document.querySelector('li[data-id={json.dumps(task_id)}] "
                           "button').click()")
                wait_until(lambda t=task_id: t not in state(b)["items"], 10)
                lags.append(lag_ms(a, b, task_id, kind="delete"))
                assert task_id not in state(a)["tasks"]
            print(f"seen on the other page after {lags} ms")
            assert statistics.median(lags) <= SEEN_WITHIN_MS, f"seen after {lags} ms"
            assert max(lags) <= SEEN_AT_WORST_MS, f"seen after {lags} ms"
            assert state(a)["opens"] == state(b)["opens"] == 1  # never reconnected
        finally:
            a.close()
            b.close()
