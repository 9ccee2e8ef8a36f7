"""The one rule of the topics a request may lead to, which sse-kafka and http-kafka share: a
whole Kafka name, and - when the request supplied it - not one of the cluster's own topics."""

from __future__ import annotations

import pytest

from ssekd.bindings.http_kafka.produce import Settings, topic_refused
from ssekd.bindings.kafka.topic_names import InternalTopics, is_topic_name, refusal

INTERNAL = InternalTopics.of(["audit-log", "*-changelog", "mm2-*.internal"])


@pytest.mark.parametrize("name", ["items", "a", "A.b_c-9", "x" * 249, "..a", "a.."])
def test_kafka_names_pass(name: str) -> None:
    assert is_topic_name(name)
    assert refusal(name, True, INTERNAL) is None


@pytest.mark.parametrize("name", [".", "..", "", "x" * 250, "a/b", "items\n", "a b", "é",
                                  "a\x00", "a,b", "a*"])
def test_what_kafka_refuses_is_not_a_topic_name_even_in_a_route(name: str) -> None:
    assert not is_topic_name(name)
    assert refusal(name, True, INTERNAL) == "not a topic name"
    assert refusal(name, False, INTERNAL) == "not a topic name"


@pytest.mark.parametrize("name", ["__consumer_offsets", "__transaction_state", "_schemas",
                                  "_confluent-metrics", "connect-configs", "connect-offsets",
                                  "connect-status", "audit-log", "orders-changelog",
                                  "mm2-offset-syncs.b.internal"])
def test_internal_topics_are_refused_from_a_request_and_served_when_a_route_names_them(
        name: str) -> None:
    assert name in INTERNAL
    assert refusal(name, True, INTERNAL) == f"{name} is an internal topic"
    assert refusal(name, False, INTERNAL) is None


@pytest.mark.parametrize("name", ["connect-configs2", "my-connect-configs", "audit-logs",
                                  "changelog", "orders-changelog-v2", "mm2-offsets"])
def test_names_near_internal_ones_are_not_internal(name: str) -> None:
    assert name not in INTERNAL


def test_http_kafka_applies_the_same_rule_with_its_own_option() -> None:
    settings = Settings(internal_topics=INTERNAL)
    assert topic_refused("items", "items", settings) is None
    assert topic_refused("alice-items", "${params.who}-items", settings) is None
    assert topic_refused("connect-configs", "${params.topic}", settings) is not None
    assert topic_refused("audit-log", "${params.topic}", settings) is not None
    assert topic_refused("x-changelog", "${params.t}-changelog", settings) is not None
    assert topic_refused("..", "${params.topic}", settings) == "not a topic name"
    assert topic_refused("_schemas", "_schemas", settings) is None  # named by the route
    assert topic_refused("connect-configs", "${params.topic}", Settings()) is not None
