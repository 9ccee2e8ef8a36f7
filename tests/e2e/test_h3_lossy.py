"""SSE over HTTP/3 on a lossy link: the streams of one connection stay complete and in order.

Between the client and the real daemon sits a UDP relay (`tests.support.udp_relay`) that drops
and reorders a few percent of the datagrams each way, handshake included, with a seeded RNG so a
failure replays. Several SSE streams of a one-partition topic share one QUIC connection while a
producer writes to the real broker; QUIC's loss recovery must retransmit what was lost and each
stream put its bytes back in order, so every stream ends with every record once, in order, and
the connection is the one it started as (no reconnect, no resume).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ssekd.dev.broker import Broker
from tests.support.broker import Kafka
from tests.support.h3stack import H3Daemon, Producer, start_h3_daemon
from tests.support.pki import Pki
from tests.support.udp_relay import UdpRelay
from tests.support.wait import wait_until

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

STREAMS = 8
RECORDS = 600
DROP, REORDER = 0.03, 0.03


@pytest.fixture(scope="module")
def h3d(kafka_broker: Broker, pki: Pki,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[H3Daemon]:
    daemon = start_h3_daemon(tmp_path_factory.mktemp("h3lossy"), pki, kafka_broker.bootstrap)
    yield daemon
    daemon.stop()


@pytest.mark.parametrize("seed", [7, 1042])
def test_every_stream_gets_every_record_in_order_through_loss_and_reordering(
        h3d: H3Daemon, kafka: Kafka, seed: int) -> None:
    topic = kafka.topic(1)
    relay = UdpRelay(("127.0.0.1", h3d.quic_port), drop=DROP, reorder=REORDER, seed=seed)
    with relay, h3d.client(port=relay.port) as client:
        ids = client.open_many([f"/{topic}"] * STREAMS)
        assert client.wait(lambda: all(client.streams[i].status for i in ids), 20)
        assert {client.streams[i].status for i in ids} == {200}
        # values of a few hundred bytes: several events per datagram, some spanning two
        producer = Producer(kafka, topic, interval=0.002, size=300).start()
        try:
            wait_until(lambda: producer.count() >= RECORDS, 30)
        finally:
            produced = producer.stop()
        complete = client.wait(
            lambda: all(client.streams[i].count >= len(produced) for i in ids), 60)
        counts = [client.streams[i].count for i in ids]
        assert complete, (counts, len(produced), relay.summary())
        assert client.same_connection, (client.stats, client.terminated)

    assert client.stats.handshakes == 1
    # the link was as bad as it says, both ways (else this test proves nothing)
    for direction in ("up", "down"):
        assert relay.dropped[direction] > 0, relay.summary()
        assert relay.reordered[direction] > 0, relay.summary()
    for i in ids:
        stream = client.streams[i]
        assert stream.data == produced, relay.summary()  # all there, once, in order
        assert stream.reset is None and not stream.ended
