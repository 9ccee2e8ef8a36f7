"""Connection migration over HTTP/3: a client that changes its local address mid-stream keeps
receiving on the same connection, with nothing lost or twice.

What a phone does when it leaves Wi-Fi for mobile data: its packets suddenly come from another
address, and the old one is gone. The client here (`tests.support.h3client`) holds several SSE
streams of a one-partition topic on one QUIC connection to the real daemon, while a producer
writes to the real broker all along; mid-stream it moves to a new UDP socket and closes the old
one at once, twice: once switching to a fresh connection id as RFC 9000 asks of a migrating
client, once keeping it (what a NAT rebinding looks like to the server). The streams must go on
without a new handshake, a new request or a Last-Event-ID resume, and end up with every
produced record exactly once, in order. With two workers the datagrams from the new address
must still reach the worker that holds the connection (the daemon steers by connection id).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from ssekd.dev.broker import Broker
from tests.support.broker import Kafka
from tests.support.h3client import H3SseClient
from tests.support.h3stack import H3Daemon, Producer, start_h3_daemon
from tests.support.pki import Pki
from tests.support.udp_relay import UdpRelay
from tests.support.wait import wait_until

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

STREAMS = 6
#: Events each stream must receive after a move before the next: the connection carries on.
AFTER_MOVE = 40


@pytest.fixture(scope="module", params=[None, 2], ids=["one-process", "two-workers"])
def h3d(request: pytest.FixtureRequest, kafka_broker: Broker, pki: Pki,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[H3Daemon]:
    daemon = start_h3_daemon(tmp_path_factory.mktemp("h3migration"), pki,
                             kafka_broker.bootstrap, workers=request.param)
    yield daemon
    daemon.stop()


def _all_have(client: H3SseClient, ids: list[int], n: int) -> Callable[[], bool]:
    return lambda: all(client.streams[i].count >= n for i in ids)


def _counts(client: H3SseClient, ids: list[int]) -> list[int]:
    return [client.streams[i].count for i in ids]


def test_streams_survive_two_address_changes_on_the_same_connection(
        h3d: H3Daemon, kafka: Kafka) -> None:
    topic = kafka.topic(1)

    def migrations() -> float:
        return h3d.metric("quic_migrations_total")

    def handshakes() -> float:
        return h3d.metric("tls_handshakes_total", outcome="ok", protocol="h3")

    migrations_before, handshakes_before = migrations(), handshakes()
    with h3d.client() as client:
        ids = client.open_many([f"/{topic}"] * STREAMS)
        assert client.wait(lambda: all(client.streams[i].status for i in ids), 10)
        for i in ids:
            assert client.streams[i].status == 200, client.streams[i].headers
            assert client.streams[i].headers["content-type"] == "text/event-stream"
        first_address = client.local_address
        producer = Producer(kafka, topic).start()
        try:
            assert client.wait(_all_have(client, ids, AFTER_MOVE), 20), _counts(client, ids)
            moves = []
            for change_connection_id in (True, False):
                cids_before = list(client.stats.peer_cids)
                produced_before = producer.count()
                old, new = client.migrate(change_connection_id=change_connection_id)
                moves.append((old, new))
                assert new != old
                # records produced after the move arrive, and on the new socket only
                assert client.wait(_all_have(client, ids, produced_before + AFTER_MOVE), 20), \
                    (_counts(client, ids), produced_before, client.stats)
                assert client.stats.received_on[new] > 0
                # the daemon validated the new path before moving its side over (no
                # amplification towards an address it has not heard back from)
                assert client.stats.path_challenges[new] >= 1, client.stats
                if change_connection_id:
                    assert client.stats.peer_cids[-1] not in cids_before, client.stats.peer_cids
                else:
                    assert client.stats.peer_cids[-1] == cids_before[-1]
        finally:
            produced = producer.stop()
        assert client.wait(_all_have(client, ids, len(produced)), 20), \
            (_counts(client, ids), len(produced))
        received_on = dict(client.stats.received_on)
        assert client.same_connection, (client.stats, client.terminated)
        # the daemon saw both moves, as its metric and its events say
        wait_until(lambda: migrations() - migrations_before >= 2, 5,
                   what=lambda: f"quic_migrations_total from {migrations_before} to "
                                f"{migrations()}")
        assert migrations() - migrations_before == 2
        assert handshakes() - handshakes_before == 1  # this client's, and no other
        for old, new in moves:
            h3d.daemon.wait_output(
                f"BINDING_QUIC_MIGRATED {old[0]}:{old[1]} -> {new[0]}:{new[1]}")

    assert client.stats.handshakes == 1
    assert client.stats.retries == 1  # the daemon's Retry (its default) came first
    assert client.stats.local_addresses == [first_address, moves[0][1], moves[1][1]]
    assert all(received_on.get(address, 0) > 0 for address in client.stats.local_addresses)
    assert len(client.streams) == STREAMS  # no request was made again
    for i in ids:
        stream = client.streams[i]
        assert stream.data == produced  # every record once, in order, on every stream
        assert len(set(stream.ids)) == len(produced)
        assert stream.reset is None and not stream.ended


def test_streams_survive_a_nat_rebinding_the_client_does_not_see(
        h3d: H3Daemon, kafka: Kafka) -> None:
    """The client keeps its socket and connection id; a relay in front of it (a NAT) starts
    sending its packets from another port, while what the daemon still sends to the old one
    gets through for a while (the old mapping lingers): the client's next ACK comes from the
    new address. The daemon must take that as a migration too, validate the address before it
    sends more there than the anti-amplification limit allows, and carry on there once the old
    mapping is gone."""
    topic = kafka.topic(1)
    migrations_before = h3d.metric("quic_migrations_total")
    with UdpRelay(("127.0.0.1", h3d.quic_port)) as nat, h3d.client(port=nat.port) as client:
        ids = client.open_many([f"/{topic}"] * 3)
        assert client.wait(lambda: all(client.streams[i].status == 200 for i in ids), 10)
        producer = Producer(kafka, topic).start()
        try:
            assert client.wait(_all_have(client, ids, AFTER_MOVE), 20), _counts(client, ids)
            [before] = nat.upstream_addresses()
            produced_before = producer.count()
            nat.rebind()
            [after] = nat.upstream_addresses()
            assert client.wait(_all_have(client, ids, produced_before + AFTER_MOVE), 20), \
                (_counts(client, ids), produced_before)
            # the old mapping expires: what follows can only come by the new one
            assert nat.expire_old() == 1
            produced_before = producer.count()
            assert client.wait(_all_have(client, ids, produced_before + AFTER_MOVE), 20), \
                (_counts(client, ids), produced_before)
        finally:
            produced = producer.stop()
        assert client.wait(_all_have(client, ids, len(produced)), 20)
        assert client.same_connection and client.stats.migrations == 0
        assert sum(client.stats.path_challenges.values()) >= 1  # the daemon's, relayed
        wait_until(lambda: h3d.metric("quic_migrations_total") - migrations_before >= 1, 5)
        h3d.daemon.wait_output(
            f"BINDING_QUIC_MIGRATED {before[0]}:{before[1]} -> {after[0]}:{after[1]}")
    for i in ids:
        assert client.streams[i].data == produced
