"""The thread that owns one librdkafka consumer from creation to close (librdkafka objects are
not safe to share between threads, and their calls block), and what it needs of its client.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from ssekd.bindings.kafka.settings import ClientSettings


class ClientContext(Protocol):
    """What a consumer thread needs of the `KafkaClient` that owns it: the reactor it hands
    data to, the settings its consumer is made from, the binding's name (for the thread's
    name and the consumer's group), and the binding's events (callable on any thread)."""

    @property
    def reactor(self) -> Any: ...

    @property
    def settings(self) -> ClientSettings: ...

    @property
    def binding(self) -> str: ...

    def event(self, name: str, detail: str = "-") -> None: ...


class ConsumerThread(threading.Thread):
    """A daemon thread named after its binding and role (`ssekd-kafka-<binding>-<role>`, as
    `py-spy` shows it), started at most once, and told to stop by `stopping`."""

    def __init__(self, client: ClientContext, role: str) -> None:
        super().__init__(name=f"ssekd-kafka-{client.binding}-{role}", daemon=True)
        self.client = client
        self.stopping = threading.Event()
        self._started_lock = threading.Lock()

    def start(self) -> None:
        with self._started_lock:
            if not self.is_alive() and not self.stopping.is_set() and self.ident is None:
                super().start()

    def stop(self) -> None:
        self.stopping.set()

