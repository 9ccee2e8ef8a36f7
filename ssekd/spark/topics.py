"""Creating and checking topics with the Kafka admin API."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from .offsets import consumer_config, list_partitions
from .options import KafkaOptions, OptionError


def partition_count(kafka: KafkaOptions, topic: str) -> int | None:
    """How many partitions `topic` has, None when it does not exist."""
    consumer = Consumer(consumer_config(kafka))
    try:
        try:
            return len(list_partitions(consumer, topic))
        except OptionError:
            return None
    finally:
        consumer.close()


def ensure_compacted_topic(kafka: KafkaOptions, topic: str, partitions: int,
                           timeout_s: float = 30.0) -> bool:
    """Create `topic` with `cleanup.policy=compact` and `partitions` partitions unless it exists.

    A snapshot record goes to the same partition number as the change it comes from, so that a
    key stays in one partition however the snapshot topic's producer would have hashed it; an
    existing topic with another partition count is therefore an error, not something to work
    around. Returns True when the topic was created.
    """
    existing = partition_count(kafka, topic)
    if existing is not None:
        if existing != partitions:
            raise OptionError(f"topic {topic!r} has {existing} partitions, the source has "
                              f"{partitions}: they must match")
        return False
    admin = AdminClient(dict(kafka.config))
    future = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=-1,
                  config={"cleanup.policy": "compact"})],
        operation_timeout=timeout_s)[topic]
    try:
        future.result(timeout_s)
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    deadline = time.monotonic() + timeout_s
    while partition_count(kafka, topic) != partitions:  # metadata catches up a moment later
        if time.monotonic() > deadline:
            raise OptionError(f"topic {topic!r} was created but does not show {partitions} "
                              f"partitions after {timeout_s}s")
        time.sleep(0.1)
    return True
