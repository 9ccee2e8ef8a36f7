"""Topics and records on the test broker (the session's tansu), with confluent-kafka."""

from __future__ import annotations

import itertools
import subprocess
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from ssekd.dev.broker import broker_binary, port_open, stop_process
from tests.support.wait import wait_until

_names = itertools.count()
_markers = itertools.count()


@dataclass
class Kafka:
    """Topic creation and production against the session broker."""

    bootstrap: str
    producer: Producer = field(init=False)

    def __post_init__(self) -> None:
        self.producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 1})
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})

    def topic(self, partitions: int = 3, compact: bool = False, prefix: str = "t") -> str:
        name = f"{prefix}-{next(_names)}-{uuid.uuid4().hex[:6]}"
        config = {"cleanup.policy": "compact"} if compact else {}
        futures = self.admin.create_topics([NewTopic(name, partitions, 1, config=config)])
        for f in futures.values():
            f.result(10)
        return name

    def produce(self, topic: str, value: bytes | None, key: bytes | None = None,
                partition: int | None = None,
                headers: list[tuple[str, bytes]] | None = None,
                timestamp: int | None = None) -> None:
        kw: dict[str, Any] = {"key": key, "value": value}
        if partition is not None:
            kw["partition"] = partition
        if headers:
            kw["headers"] = headers
        if timestamp is not None:
            kw["timestamp"] = timestamp
        self.producer.produce(topic, **kw)

    def flush(self) -> None:
        assert self.producer.flush(10) == 0

    def send(self, topic: str, values: list[bytes]) -> None:
        """Produce `values` without keys, in order, and wait until the broker has them all."""
        for v in values:
            self.produce(topic, v)
        self.flush()

    def mark(self, topic: str, partitions: Iterable[int] = (0,), key: bytes | None = None,
             headers: list[tuple[str, bytes]] | None = None) -> list[str]:
        """Produce one marker record into each of `partitions`; return their values.

        A partition is delivered in order, so a stream that has delivered a partition's marker
        has delivered everything before it there: "nothing else arrives" is checked by reading
        up to the markers (`SseClient.until`) instead of waiting for a quiet while.
        """
        values = []
        for p in partitions:
            value = f"marker-{next(_markers)}"
            self.produce(topic, value.encode(), key=key, partition=p, headers=headers)
            values.append(value)
        self.flush()
        return values


def start_tansu(folder: Path, port: int, advertised_port: int) -> tuple[subprocess.Popen[bytes], Path]:
    """A memory-only tansu listening on `port` that tells its clients to reach it at
    `advertised_port`, where a test's proxy stands (to cut, switch or rewrite what they say);
    (process, its log in `folder`)."""
    log = folder / "tansu.log"
    out = open(log, "wb")  # noqa: SIM115 - handed to the child, closed just below
    process = subprocess.Popen(
        [broker_binary(), "broker", "--listener-url", f"tcp://127.0.0.1:{port}",
         "--advertised-listener-url", f"tcp://127.0.0.1:{advertised_port}",
         "--storage-engine", "memory://tansu/", "--cluster-id", "dev"],
        stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    out.close()
    wait_until(lambda: port_open("127.0.0.1", port), 10,
               what=lambda: f"tansu did not start:\n{log.read_text()}")
    return process, log


def stop_tansu(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()  # memory only: nothing to lose, and SIGTERM takes it seconds
    stop_process(process, 5)
