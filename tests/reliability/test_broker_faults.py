"""The broker fails under a running daemon: down at start, frozen (SIGSTOP) and thawed, killed
and restarted empty on the same port. Streams recover by themselves, the daemon never exits or
prints a traceback, and every client checks per event (by the sequence number in the payload)
that nothing was lost, repeated or reordered.

`RELIABILITY_SECONDS` makes the outages as long as the issue asks (30 s frozen).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ssekd.dev.broker import Broker, free_port, port_open, start_broker
from tests.support.daemon import Daemon
from tests.support.faults import (
    SeqProducer,
    StreamPool,
    create_topic,
    run_daemon,
    seconds,
    sized,
    time_limit,
    tracebacks,
    wait_for,
)

pytestmark = pytest.mark.timeout(time_limit())

PARTITIONS = 2


@pytest.fixture
def broker_port() -> int:
    return free_port()


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[list[Broker]]:
    """Brokers a test starts (each restart is a new one), stopped afterwards."""
    started: list[Broker] = []
    yield started
    for b in started:
        if b.process.poll() is None:
            b.process.kill()  # memory-only: nothing to lose, and SIGTERM takes it seconds
        b.stop()


def start(brokers: list[Broker], port: int, tmp_path: Path) -> Broker:
    b = start_broker(port=port, log_path=tmp_path / "tansu.log")
    brokers.append(b)
    return b


@pytest.mark.daemon
def test_broker_down_at_start(daemons: list[Daemon], tmp_path: Path, broker_port: int,
                              brokers: list[Broker]) -> None:
    """Streams opened while no broker listens wait, then get everything once it comes up."""
    bootstrap = f"127.0.0.1:{broker_port}"
    daemon, port = run_daemon(daemons, tmp_path, bootstrap)
    pool = StreamPool(port)
    try:
        streams = pool.open(["/events/early"] * sized(20, 200), PARTITIONS)
        daemon.wait_output("BINDING_KAFKA_BROKER_UNAVAILABLE", timeout=15)
        time.sleep(seconds(2, 30))  # the outage itself: the daemon must just wait it out
        assert daemon.alive()
        # the streams are open (200, headers sent) and waiting, not refused or hanging
        wait_for(lambda: all(s.status == 200 for s in streams), 10, "200 for every stream")
        start(brokers, broker_port, tmp_path)
        create_topic(bootstrap, "early", PARTITIONS)
        producer = SeqProducer(bootstrap, "early", PARTITIONS)
        producer.produce(sized(400, 4000))
        producer.flush()
        pool.wait_complete(lambda: producer.next, timeout=30)
        assert all(s.status == 200 for s in streams)
    finally:
        pool.close()
    assert not pool.problems()
    assert daemon.alive()
    output = daemon.output()
    assert "BINDING_KAFKA_BROKER_CONNECTED" in output
    assert not tracebacks(output), output


@pytest.mark.daemon
def test_broker_frozen_then_thawed(daemons: list[Daemon], tmp_path: Path, broker_port: int,
                                   brokers: list[Broker]) -> None:
    """SIGSTOP the broker mid-stream (30 s in the long run), SIGCONT it: the daemon keeps
    answering meanwhile, and every stream then gets every record once, in order."""
    broker = start(brokers, broker_port, tmp_path)
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "frozen", PARTITIONS)
    daemon, port = run_daemon(daemons, tmp_path, bootstrap)
    producer = SeqProducer(bootstrap, "frozen", PARTITIONS)
    pool = StreamPool(port)
    stop = threading.Event()
    frozen_for = seconds(5, 30)
    writer = threading.Thread(target=producer.produce_at,
                              args=(200, frozen_for + 6, stop), daemon=True)
    try:
        pool.open(["/events/frozen"] * sized(30, 300), PARTITIONS)
        writer.start()
        wait_for(lambda: all(s.received > 0 for s in pool.streams), 15, "the first events")
        broker.process.send_signal(signal.SIGSTOP)
        frozen_at = time.monotonic()
        # while the broker is frozen a new stream still opens at once (from the cache)
        late = pool.open(["/events/frozen"], PARTITIONS)
        wait_for(lambda: late[0].status == 200, 5, "a stream opened during the freeze")
        while time.monotonic() - frozen_at < frozen_for:
            assert daemon.alive()
            time.sleep(0.2)
        broker.process.send_signal(signal.SIGCONT)
        writer.join(frozen_for + 30)
        producer.flush(60)
        pool.wait_complete(lambda: producer.next, timeout=60)
    finally:
        stop.set()
        pool.close()
    assert not pool.problems(), daemon.output()[-6000:]
    assert all(s.connects == 1 for s in pool.streams), "a stream was ended during the freeze"
    print(f"\nfrozen {frozen_for:.0f} s: {len(pool.streams)} streams got all "
          f"{producer.total} records each, in order")
    assert daemon.alive()
    assert not tracebacks(daemon.output()), daemon.output()


@pytest.mark.daemon
def test_broker_killed_and_restarted_reconnects(daemons: list[Daemon], tmp_path: Path,
                                               broker_port: int, brokers: list[Broker]) -> None:
    """SIGKILL the broker mid-stream and start an empty one on the same port: the daemon stays
    up, says it lost and found the broker, and streams of topics the new broker holds work."""
    broker = start(brokers, broker_port, tmp_path)
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "before", PARTITIONS)
    daemon, port = run_daemon(daemons, tmp_path, bootstrap)
    before = SeqProducer(bootstrap, "before", PARTITIONS)
    before.produce(200)
    before.flush()
    pool = StreamPool(port)
    try:
        pool.open(["/events/before"] * sized(20, 200), PARTITIONS)
        pool.wait_complete(lambda: before.next, timeout=20)
        broker.process.send_signal(signal.SIGKILL)
        broker.process.wait(5)
        daemon.wait_output("BINDING_KAFKA_BROKER_UNAVAILABLE", timeout=15)
        wait_for(lambda: not port_open("127.0.0.1", broker_port), 5, "the port to close")
        time.sleep(seconds(1, 10))
        start(brokers, broker_port, tmp_path)
        create_topic(bootstrap, "after", PARTITIONS)
        after = SeqProducer(bootstrap, "after", PARTITIONS)
        after.produce(200)
        after.flush()
        fresh = StreamPool(port)
        try:
            fresh.open(["/events/after"] * 5, PARTITIONS)
            fresh.wait_complete(lambda: after.next, timeout=30)
        finally:
            fresh.close()
        assert not fresh.problems()
    finally:
        pool.close()
    assert not pool.problems()
    assert daemon.alive()
    output = daemon.output()
    assert output.count("BINDING_KAFKA_BROKER_CONNECTED") >= 2, output
    assert not tracebacks(output), output


@pytest.mark.daemon
def test_broker_restarted_empty_streams_continue(daemons: list[Daemon], tmp_path: Path, broker_port: int,
                                                 brokers: list[Broker]) -> None:
    """The dev broker forgets everything on restart. A topic created again with the same name
    and written again must reach the streams that were open (nothing lost), and a client whose
    last id is past the new end falls back to the start with an event."""
    broker = start(brokers, broker_port, tmp_path)
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "reborn", PARTITIONS)
    daemon, port = run_daemon(daemons, tmp_path, bootstrap)
    producer = SeqProducer(bootstrap, "reborn", PARTITIONS)
    producer.produce(200)
    producer.flush()
    pool = StreamPool(port)
    try:
        pool.open(["/events/reborn"] * 5, PARTITIONS)
        pool.wait_complete(lambda: producer.next, timeout=20)
        old_id = pool.streams[0].last_id  # offsets 100 and 100: past the new end below
        broker.process.send_signal(signal.SIGKILL)
        broker.process.wait(5)
        daemon.wait_output("BINDING_KAFKA_BROKER_UNAVAILABLE", timeout=15)
        start(brokers, broker_port, tmp_path)
        create_topic(bootstrap, "reborn", PARTITIONS)
        # the same producer goes on counting: the new offsets 0..49 carry seq 100..149
        producer = SeqProducer(bootstrap, "reborn", PARTITIONS)
        producer.next = [100] * PARTITIONS
        producer.produce(100)
        producer.flush()
        pool.wait_complete(lambda: producer.next, timeout=10)
        late = pool.open(["/events/reborn"], PARTITIONS, last_id=old_id, expect=[100, 100])
        wait_for(lambda: late[0].expect == producer.next, 10, "the late client's events")
    finally:
        pool.close()
    assert not pool.problems()
    after = daemon.output().split("BINDING_KAFKA_BROKER_UNAVAILABLE", 1)[-1]
    # each process whose cache held the topic (each worker of a daemon has its own) resets
    # every partition once
    resets = after.count("BINDING_KAFKA_PARTITION_RESET")
    processes = len(daemon.worker_pids()) or 1
    assert resets % PARTITIONS == 0 and 1 <= resets // PARTITIONS <= processes, after
    assert "BINDING_KAFKA_LAST_EVENT_ID_PAST_END" in after, after
    assert daemon.alive()
    assert not tracebacks(daemon.output())
