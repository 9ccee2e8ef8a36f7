"""The todo demo under test: a broker of its own (the demo's topic names are fixed), the demo's
command service (`ssekd.todo_service`) in a thread, and a daemon on a config adapted only where
it names hosts, ports, the broker and files."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ssekd.dev.broker import Broker, free_port, start_broker
from ssekd.todo_service import serve
from tests.support.daemon import Daemon, start_daemon

ROOT = Path(__file__).resolve().parents[2]
TODO_CONFIG = ROOT / "etc" / "zilla-todo.yaml"
TODO_PAGE = ROOT / "www" / "todo"


def adapt(text: str, port: int, bootstrap: str) -> str:
    """A demo config on this machine: loopback instead of every interface, a free port instead
    of 7114, the test's broker, the page's folders (the page, the client library) by their
    absolute paths."""
    return (text.replace("host: 0.0.0.0", "host: 127.0.0.1")
            .replace("7114", str(port))
            .replace("localhost:9092", bootstrap)
            .replace("../www/todo/", f"{TODO_PAGE}/")
            .replace("../www/ssekd-client/", f"{TODO_PAGE.parent / 'ssekd-client'}/"))


@dataclass
class TodoDemo:
    broker: Broker
    daemon: Daemon
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextmanager
def todo_demo(folder: Path, source: Path = TODO_CONFIG) -> Iterator[TodoDemo]:
    """Broker, command service and daemon on `source` (adapted); all stopped afterwards."""
    broker = start_broker(port=free_port(), log_path=folder / "tansu.log")
    stop, ready = threading.Event(), threading.Event()
    service = threading.Thread(target=serve, args=(broker.bootstrap, "task", stop, ready.set),
                               daemon=True)
    daemon: Daemon | None = None
    try:
        service.start()
        assert ready.wait(30), "the todo service did not start"
        port = free_port()
        config = folder / "zilla.yaml"
        config.write_text(adapt(source.read_text(), port, broker.bootstrap))
        daemon = start_daemon(config, env={"KAFKA_BOOTSTRAP_SERVER": broker.bootstrap},
                              wait_ports=[port])
        yield TodoDemo(broker, daemon, port)
    finally:
        if daemon is not None:
            daemon.stop()
        stop.set()
        service.join(15)
        broker.stop()
