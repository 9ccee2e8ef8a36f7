"""ssekd-client's writer (www/ssekd-client/writes.js) in headless Chromium against the todo demo's
config (etc/zilla-todo.yaml: http-kafka routes with reply-to, key-form ids, an async location), a
real broker, the demo's command service and the daemon, with a TCP relay between the page and
the daemon that can lose an answer.

- A write whose first answer is lost (the daemon wrote it, the connection was reset before the
  answer) is retried by the writer with the same Idempotency-Key and is on Kafka once; the same
  loss with a new key per attempt, as a hand-written retry does, writes it twice. The token of
  the writer's provider goes as `Authorization: Bearer` with every send, and not into Kafka.
- A write carrying the etag of a version another writer has replaced is a `Conflict` (412) that
  carries the value there now and its ETag.
- An async write (`Prefer: respond-async`) answered 202 is followed to its location, whose GET
  waits for the service's reply: the answer is that reply.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ssekd.dev.broker import Broker, free_port, start_broker
from ssekd.todo_service import serve
from tests.support.browser import Browser
from tests.support.cutting_relay import CuttingRelay
from tests.support.daemon import Daemon, start_daemon
from tests.support.kafka_records import read_topic
from tests.support.todo import TODO_CONFIG, TODO_PAGE, adapt
from tests.support.wait import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.daemon, pytest.mark.timeout(240)]

CLIENT = Path(__file__).resolve().parents[3] / "www" / "ssekd-client"

PAGE = """<!doctype html><meta charset="utf-8"><title>writes</title>
<script type="module">
import * as writes from "/ssekd-client/writes.js";
window.writes = writes;
window.w = writes.writer("/", {retry: {min: 100, max: 1000}});
</script>
"""


@dataclass
class Service:
    """The demo's command service in a thread, stoppable and started again."""

    bootstrap: str
    stop_event: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.stop_event, ready = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=serve, daemon=True, args=(
            self.bootstrap, "task", self.stop_event, ready.set))
        self.thread.start()
        assert ready.wait(30), "the todo service did not start"

    def stop(self) -> None:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(15)


@dataclass
class Setup:
    broker: Broker
    service: Service
    daemon: Daemon
    relay: CuttingRelay
    page: Browser


@contextmanager
def writes_demo(folder: Path) -> Iterator[Setup]:
    """Broker, command service, daemon on the todo config serving a page that loads the
    writer, the relay in front of the daemon, and Chromium on the page through the relay."""
    www = folder / "www"
    shutil.copytree(CLIENT, www / "ssekd-client")
    (www / "index.html").write_text(PAGE)
    broker = start_broker(port=free_port(), log_path=folder / "tansu.log")
    service = Service(broker.bootstrap)
    daemon: Daemon | None = None
    relay: CuttingRelay | None = None
    page: Browser | None = None
    try:
        service.start()
        port = free_port()
        config = folder / "zilla.yaml"
        config.write_text(adapt(TODO_CONFIG.read_text(), port, broker.bootstrap)
                          .replace(f"{TODO_PAGE}/", f"{www}/"))
        daemon = start_daemon(config, wait_ports=[port])
        relay = CuttingRelay(port).start()
        page = Browser(f"http://127.0.0.1:{relay.port}/")
        wait_until(lambda: page.evaluate("typeof window.w") == "object", 20)
        yield Setup(broker, service, daemon, relay, page)
    finally:
        if page is not None:
            page.close()
        if relay is not None:
            relay.stop()
        if daemon is not None:
            daemon.stop()
        service.stop()
        broker.stop()


def run(page: Browser, script: str, timeout: float = 60) -> Any:
    """The value of an async function body run in the page (exceptions as {error, ...})."""
    page.evaluate("1")  # attaches the session
    wrapped = f"""(async () => {{
      try {{ return await (async () => {{ {script} }})(); }}
      catch (e) {{ return {{error: e.name, message: e.message, status: e.status,
                           current: e.current, etag: e.etag}}; }}
    }})()"""
    result = page.send("Runtime.evaluate", {"expression": wrapped, "awaitPromise": True,
                                            "returnByValue": True}, page.session, timeout)
    return result.get("result", {}).get("value")


def commands_with_key(broker: Broker, key: str) -> int:
    return sum(1 for r in read_topic(broker.bootstrap, "task-commands") if r.key == key.encode())


def test_a_write_whose_answer_is_lost_is_written_once(tmp_path: Path) -> None:
    with writes_demo(tmp_path) as s:
        # Three answers lost. Chromium itself sends a request again when a connection it
        # reused is reset before any answer (it takes that for a server closing an idle
        # connection), up to twice when it finds another pooled connection to reuse: so it may
        # absorb two losses, and the third then reaches the page as a network error, which the
        # writer must send again with the same key.
        s.relay.cut(b"lost answer one", times=3)
        answer = run(s.page, """
          const t = writes.writer("/", {retry: {min: 100, max: 1000},
                                        token: async () => "token-of-the-page"});
          const a = await t.post("/tasks", {title: "lost answer one"});
          return {status: a.status, attempts: a.attempts, key: a.idempotencyKey,
                  location: a.location};""")
        assert answer["status"] == 201, answer
        assert answer["attempts"] >= 2, f"the writer sent it again: {answer}"
        assert s.relay.cuts >= 1, "the relay lost an answer"
        key = answer["key"]
        # Every send, the page's and Chromium's, carried the same key: the three that lost
        # their answer and the one answered.
        assert s.relay.doomed == 3
        assert s.relay.sent.lower().count(f"idempotency-key: {key}".encode()) == \
            s.relay.doomed + 1, "every send (the page's and Chromium's) carried the same key"
        assert answer["location"].endswith(f"/tasks/{key}")
        assert s.relay.sent.lower().count(b"authorization: bearer token-of-the-page") == \
            s.relay.doomed + 1, "the token went with every send"
        assert commands_with_key(s.broker, key) == 1, "written once"
        assert [r.value for r in read_topic(s.broker.bootstrap, "task-commands")] == \
            [b'{"title":"lost answer one"}'], "and no other record"
        assert not [h for r in read_topic(s.broker.bootstrap, "task-commands")
                    for h in r.headers if b"token-of-the-page" in (h[1] or b"")], \
            "the token is not copied into Kafka"
        snapshots = [json.loads(r.value) for r in read_topic(s.broker.bootstrap, "task-snapshots")
                     if r.value and json.loads(r.value)["title"] == "lost answer one"]
        assert len(snapshots) == 1, snapshots

        # The control: the same loss, retried with a new key per attempt, is written twice,
        # so the count above would see a duplicate.
        s.relay.cut(b"lost answer two", times=3)
        keys = run(s.page, """
          const keys = [];
          for (;;) {
            const key = crypto.randomUUID();
            keys.push(key);
            try {
              await fetch("/tasks", {method: "POST", body: JSON.stringify({title: "lost answer two"}),
                headers: {"idempotency-key": key, "content-type": "application/json"}});
              return keys;
            } catch (e) { /* a network error: send it again */ }
          }""")
        assert len(keys) >= 2, keys  # at least one loss reached the page (see above)
        assert sum(commands_with_key(s.broker, k) for k in keys) == len(keys), \
            "each key written once, so the one write is in Kafka once per attempt"


def test_a_stale_etag_is_a_conflict_with_the_current_value(tmp_path: Path) -> None:
    with writes_demo(tmp_path) as s:
        got = run(s.page, """
          const made = await w.post("/tasks", {title: "milk"});
          const path = made.location;
          let read;
          for (let n = 0; n < 50; n++) {  // the snapshot reaches the cache after the reply
            try { read = await w.get(path); break; }
            catch (e) { await new Promise((r) => setTimeout(r, 100)); }
          }
          // another writer replaces that version
          const other = writes.writer("/");
          other.seen(path, read.etag);
          await other.put(path, {title: "soy milk"});
          for (let n = 0; n < 50; n++) {
            const now = await other.get(path);
            if (now.value.title === "soy milk") break;
            await new Promise((r) => setTimeout(r, 100));
          }
          // w still holds the etag it read: its write is conditional on the replaced version
          const stale = w.etag(path);
          try {
            await w.put(path, {title: "rice milk"});
            return {wrote: true};
          } catch (e) {
            return {error: e.name, status: e.status, current: e.current, etag: e.etag,
                    stale, read: read.etag, conflict: e instanceof writes.Conflict,
                    remembered: w.etag(path), message: e.message};
          }""")
        assert got.get("error") == "Conflict" and got["conflict"], got
        assert got["status"] == 412
        assert got["stale"] == got["read"], "the write carried the etag it read"
        assert got["current"]["title"] == "soy milk", "the value there now"
        assert got["etag"] != got["read"] and got["etag"].endswith("/2"), got
        assert got["remembered"] == got["etag"], "a retry after merging uses the current etag"
        commands = read_topic(s.broker.bootstrap, "task-commands")
        assert [r.value for r in commands][-1] == b'{"title":"rice milk"}'
        assert ("if-match", got["read"].split("/")[1].encode()) in commands[-1].headers


def test_an_async_write_is_followed_to_its_location(tmp_path: Path) -> None:
    with writes_demo(tmp_path) as s:
        path = run(s.page, """
          const made = await w.post("/tasks", {title: "tea"});
          return made.location;""")
        s.service.stop()  # no reply until it is back: the write is answered 202
        run(s.page, f"""
          window.pending = w.put({json.dumps(path)}, {{title: "green tea"}}, {{async: true}})
            .then((a) => ({{status: a.status, accepted: a.accepted, location: a.location,
                            polls: a.polls}}), (e) => ({{error: e.name, status: e.status}}));
          return true;""")
        # the 202 came and its location is being polled
        wait_until(lambda: f"GET {path};".encode() in s.relay.sent.split(b"respond-async")[-1],
                   20)
        s.service.start()
        answer = run(s.page, "return await window.pending;")
        assert answer.get("status") == 204 and answer["accepted"], answer
        assert f"{path};" in answer["location"]
        polled = s.relay.sent.split(b"respond-async")[-1]
        assert f"GET {path};".encode() in polled and b"prefer: wait=20" in polled.lower()
        titles = [json.loads(r.value)["title"] for r in read_topic(s.broker.bootstrap,
                                                                   "task-snapshots") if r.value]
        assert titles[-1] == "green tea"
