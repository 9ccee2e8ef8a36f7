"""Each test runs one of Zilla's examples on ssekd (`tests.support.zilla_examples`), with a
broker of its own when the example has Kafka: the examples name the same topics
(`items-requests`, `events`) and must not see each other's records."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from ssekd.dev.broker import Broker, start_broker
from tests.support.zilla_examples import Example, prepare

RunExample = Callable[..., Example]


@pytest.fixture
def run_example(tmp_path: Path) -> Iterator[RunExample]:
    """`run_example(name, kafka=True, hosts=None, env=None, start=True)`: the example adapted,
    its topics made on a new broker, the daemon started."""
    brokers: list[Broker] = []
    examples: list[Example] = []

    def run(name: str, kafka: bool = True, hosts: Mapping[str, str] | None = None,
            env: Mapping[str, str] | None = None, start: bool = True) -> Example:
        bootstrap = None
        if kafka:
            broker = start_broker(log_path=tmp_path / f"{name}-tansu.log")
            brokers.append(broker)
            bootstrap = broker.bootstrap
        example = prepare(name, tmp_path / name, bootstrap, hosts)
        examples.append(example)
        example.create_topics()
        if start:
            example.start(env)
        return example

    yield run
    for example in examples:
        example.stop()
    for broker in brokers:
        broker.stop()
