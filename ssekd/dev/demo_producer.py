"""A small demo producer, so `/events` shows live data after `make run`.

It writes JSON values for a handful of keys to a topic at a steady rate, now and then deleting a
key (a tombstone) so the demo page shows rows appearing, changing and disappearing. It creates
the topic (3 partitions) when it does not exist.

    python -m ssekd.dev.demo_producer --bootstrap localhost:9092 --topic events --rate 2
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from typing import Any

KEYS = ("sensor-a", "sensor-b", "sensor-c", "sensor-d", "sensor-e", "sensor-f")


class QuietLog:
    """librdkafka's log for the demo's programs (this producer, `ssekd.todo_service`): each
    distinct line once, on stderr after `who`, instead of `%3|...|FAIL|...` twenty times a
    second while the broker is away."""

    def __init__(self, who: str = "ssekd produce") -> None:
        self.who = who
        self.said: set[str] = set()

    def log(self, level: int, fmt: str, *args: object) -> None:
        message = str(args[-1]) if args else fmt
        text = message.split(" (after ", 1)[0]  # "(after 0ms in state CONNECT)" varies
        if text not in self.said and len(self.said) < 100:
            self.said.add(text)
            print(f"{self.who}: {text}", file=sys.stderr)


def ensure_topic(bootstrap: str, topic: str, partitions: int = 3, timeout: float = 30.0) -> None:
    """Create `topic` unless it exists; wait for the broker up to `timeout` seconds."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": QuietLog()}
    admin = AdminClient(conf)
    deadline = time.monotonic() + timeout
    while True:
        try:
            if topic in admin.list_topics(timeout=2).topics:
                return
            admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)
            return
        except KafkaException as e:
            if "TOPIC_ALREADY_EXISTS" in str(e):
                return
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def reading(rng: random.Random, key: str, seq: int) -> dict[str, object]:
    """One demo value; etc/schemas/events.json is its JSON Schema (etc/zilla.yaml checks it)."""
    return {"key": key, "temperature": round(rng.uniform(15, 30), 1), "seq": seq,
            "at": time.time()}


def produce(bootstrap: str, topic: str, rate: float = 2.0, count: int | None = None,
            delete_every: int = 25, seed: int | None = None) -> int:
    """Write `count` records (forever when None) at `rate` per second; return how many."""
    from confluent_kafka import Producer

    ensure_topic(bootstrap, topic)
    rng = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "logger": QuietLog()})
    interval = 1.0 / rate if rate > 0 else 0.0
    sent = 0
    next_at = time.monotonic()
    try:
        while count is None or sent < count:
            key = rng.choice(KEYS)
            if delete_every and sent and sent % delete_every == 0:
                producer.produce(topic, key=key.encode(), value=None)
            else:
                value = reading(rng, key, sent)
                producer.produce(topic, key=key.encode(), value=json.dumps(value).encode(),
                                 headers=[("etag", f"rev-{sent}".encode())])
            sent += 1
            producer.poll(0)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    except KeyboardInterrupt:
        pass
    finally:
        producer.flush(10)
    return sent


def main(argv: list[str] | None = None, prog: str = "python -m ssekd.dev.demo_producer") -> int:
    parser = argparse.ArgumentParser(
        prog=prog, description="Write demo records to a topic, for the demo page: a reading "
                               "of one of six sensors at a time, and every 25th record a "
                               "delete of its key (a tombstone). Creates the topic (3 "
                               "partitions) when it does not exist.")
    parser.add_argument("--bootstrap", default="localhost:9092",
                        help="Kafka bootstrap servers, host:port (default: localhost:9092)")
    parser.add_argument("--topic", default="events", help="the topic (default: events)")
    parser.add_argument("--rate", type=float, default=2.0, help="records per second")
    parser.add_argument("--count", type=int, default=None, help="stop after this many")
    args = parser.parse_args(argv)
    sent = produce(args.bootstrap, args.topic, args.rate, args.count)
    print(f"produced {sent} records to {args.topic}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
