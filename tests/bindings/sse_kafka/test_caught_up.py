"""The catch-up signal (`with.event.caught-up`, an ssekd addition): one `caught-up` event right
after the records the cache held, only on routes that ask for it.

Unit tests of the proxy and the cache on a `MemoryReactorClock`, the Kafka client a fake that
the test feeds by hand (records, ends of partitions); the wire with curl and the real broker
is in tests/e2e/client/test_caught_up_curl.py.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.kafka.cache import CacheServer
from ssekd.bindings.kafka.message import Message, new_message
from ssekd.bindings.sse.roles import StreamRequest
from ssekd.bindings.sse_kafka.proxy import (
    CAUGHT_UP_EVENT,
    RouteSubscription,
    SseKafkaProxy,
    SseKafkaRoute,
)
from ssekd.patterns import Pattern
from ssekd.telemetry.events import EventLog

KEYED = '["${base64(key)}","${etag}"]'


class Client:
    """A kafka client that consumes nothing by itself: the test feeds the caches."""

    tails: dict[str, Any] = {}

    def consume(self, *a: Any, **kw: Any) -> None:
        pass

    def unconsume(self, owner: str, topic: str) -> None:
        pass


class Sink:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def end(self) -> None:
        pass

    def blocks(self) -> list[str]:
        """Each event, as its text without the blank line."""
        text = b"".join(self.writes).decode()
        return [b for b in text.split("\n\n") if b]

    def data(self) -> list[str]:
        """The data of each event, `CAUGHT-UP` for the signal."""
        out = []
        for block in self.blocks():
            if block == CAUGHT_UP_EVENT.decode().strip("\n"):
                out.append("CAUGHT-UP")
                continue
            out += [line[5:] for line in block.split("\n") if line.startswith("data:")]
        return out


def _setup() -> tuple[MemoryReactorClock, CacheServer, SseKafkaProxy]:
    clock = MemoryReactorClock()
    server = CacheServer(clock, Client(), "cache", EventLog("t"))  # type: ignore[arg-type]
    server.startService()
    signal = {"event": {"caught-up": True}}
    routes = (
        SseKafkaRoute((Pattern.compile("/plain/{topic}"),), "cache", None),
        SseKafkaRoute((Pattern.compile("/keyed/{topic}"),), "cache",
                      {"topic": "${params.topic}", "event": {"id": KEYED, "caught-up": True}}),
        SseKafkaRoute((Pattern.compile("/by/{topic}/{key}"),), "cache",
                      {"topic": "${params.topic}", "filters": [{"key": "${params.key}"}],
                       **signal}),
        SseKafkaRoute((Pattern.compile("/many/{topics}"),), "cache",
                      {"topic": ["${params.topics}"], **signal}),
        SseKafkaRoute((Pattern.compile("/off/{topic}"),), "cache",
                      {"topic": "${params.topic}", "event": {"caught-up": False}}),
    )
    proxy = SseKafkaProxy("sse_kafka", routes, {"cache": server},  # type: ignore[dict-item]
                          EventLog("t"))
    return clock, server, proxy


def _open(proxy: SseKafkaProxy, clock: MemoryReactorClock, path: str,
          last_id: str | None = None) -> tuple[RouteSubscription, Sink]:
    sink = Sink()
    s = proxy.open(StreamRequest(path, last_id, describe=f"GET {path}"), sink)
    assert isinstance(s, RouteSubscription), s
    _run(clock)
    return s, sink


def _run(clock: MemoryReactorClock) -> None:
    """Every step due now (a catch-up step schedules the next on a later turn)."""
    while any(c.getTime() <= clock.seconds() for c in clock.getDelayedCalls()):
        clock.advance(0)


def _records(p: int, start: int, values: list[bytes | None],
             keys: list[bytes] | None = None) -> list[Message]:
    return [new_message(p, start + i, (keys or [b"k%d" % i] * len(values))[i], v, (), 0)
            for i, v in enumerate(values)]


def _loaded(server: CacheServer, topic: str, records: list[Message], partitions: int = 1,
            compacted: bool = False) -> None:
    cache = server.topic(topic)
    cache.on_metadata(partitions, compacted)
    cache.on_records(records)
    for p in range(partitions):
        cache.on_end(p, max([m[1] + 1 for m in records if m[0] == p], default=0))


def test_the_signal_follows_the_records_the_cache_held_once_and_live_records_follow_it() -> None:
    clock, server, proxy = _setup()
    _loaded(server, "t", _records(0, 0, [b"a", b"b", b"c"]))
    _, sink = _open(proxy, clock, "/keyed/t")
    assert sink.data() == ["a", "b", "c", "CAUGHT-UP"]
    assert "id:" not in sink.blocks()[-1], "the signal leaves the last event id alone"
    server.topic("t").on_records(_records(0, 3, [b"d"]))
    server.topic("t").on_end(0, 4)
    _run(clock)
    assert sink.data() == ["a", "b", "c", "CAUGHT-UP", "d"], "once only"


def test_routes_that_do_not_ask_never_get_it() -> None:
    clock, server, proxy = _setup()
    _loaded(server, "t", _records(0, 0, [b"a", b"b"]))
    for path in ("/plain/t", "/off/t"):
        _, sink = _open(proxy, clock, path)
        assert sink.data() == ["a", "b"]
        assert b"caught-up" not in b"".join(sink.writes)


def test_an_empty_topic_gets_the_signal_at_once() -> None:
    clock, server, proxy = _setup()
    _loaded(server, "t", [])
    _, sink = _open(proxy, clock, "/keyed/t")
    assert sink.data() == ["CAUGHT-UP"]


def test_while_the_cache_is_still_loading_the_signal_waits_for_the_end_of_every_partition(
) -> None:
    clock, server, proxy = _setup()
    cache = server.topic("t")
    cache.on_metadata(2, False)
    cache.on_records(_records(0, 0, [b"a"]) + _records(1, 0, [b"x"]))
    _, sink = _open(proxy, clock, "/keyed/t")
    assert sorted(sink.data()) == ["a", "x"], "at the cache's tail, but Kafka holds more"
    cache.on_records(_records(0, 1, [b"b"]))
    cache.on_end(0, 2)
    _run(clock)
    assert "CAUGHT-UP" not in sink.data(), "partition 1 is not read to its end yet"
    cache.on_records(_records(1, 1, [b"y"]))
    cache.on_end(1, 2)
    _run(clock)
    assert sink.data()[-1] == "CAUGHT-UP"
    assert sorted(sink.data()[:-1]) == ["a", "b", "x", "y"]


def test_a_resume_gets_the_signal_after_the_records_from_its_id() -> None:
    clock, server, proxy = _setup()
    _loaded(server, "t", _records(0, 0, [b"a", b"b", b"c"]))
    _, first = _open(proxy, clock, "/keyed/t")
    ids = [line[3:] for b in first.blocks() for line in b.split("\n") if line.startswith("id:")]
    _, sink = _open(proxy, clock, "/keyed/t", last_id=ids[0])
    assert sink.data() == ["b", "c", "CAUGHT-UP"]
    _, sink = _open(proxy, clock, "/keyed/t", last_id=ids[-1])
    assert sink.data() == ["CAUGHT-UP"]


def test_a_filter_that_takes_nothing_still_catches_up() -> None:
    clock, server, proxy = _setup()
    _loaded(server, "t", _records(0, 0, [b"a", b"b", b"c"], [b"x", b"y", b"x"]))
    _, sink = _open(proxy, clock, "/by/t/x")
    assert sink.data() == ["a", "c", "CAUGHT-UP"]
    _, sink = _open(proxy, clock, "/by/t/none")
    assert sink.data() == ["CAUGHT-UP"]


def test_several_topics_signal_once_after_every_topic_caught_up() -> None:
    clock, server, proxy = _setup()
    _loaded(server, "a", _records(0, 0, [b"a1", b"a2"]))
    b = server.topic("b")
    b.on_metadata(1, False)
    b.on_records(_records(0, 0, [b"b1"]))
    _, sink = _open(proxy, clock, "/many/a,b")
    assert "CAUGHT-UP" not in sink.data(), "topic b is still loading"
    server.topic("a").on_records(_records(0, 2, [b"a3"]))  # live on a, before b caught up
    b.on_end(0, 1)
    _run(clock)
    assert sink.data()[-1] == "CAUGHT-UP" and sink.data().count("CAUGHT-UP") == 1
    assert sorted(sink.data()[:-1]) == ["a1", "a2", "a3", "b1"]
    signal = sink.blocks()[-1]
    assert signal == "event:caught-up\ndata:", "not rewritten as one topic's event"
    b.on_records(_records(0, 1, [b"b2"]))
    _run(clock)
    assert sink.data()[-1] == "b2" and sink.data().count("CAUGHT-UP") == 1


def test_a_stream_paused_before_the_cache_was_loaded_gets_it_when_back_at_the_tail() -> None:
    clock, server, proxy = _setup()
    cache = server.topic("t")
    cache.on_metadata(1, False)
    cache.on_records(_records(0, 0, [b"a"]))
    s, sink = _open(proxy, clock, "/keyed/t")
    s.pause()
    cache.on_records(_records(0, 1, [b"b"]))
    cache.on_end(0, 2)
    _run(clock)
    assert sink.data() == ["a"], "paused: nothing written, not even the signal"
    s.resume()
    _run(clock)
    assert sink.data() == ["a", "b", "CAUGHT-UP"]


def test_a_closed_stream_is_not_told() -> None:
    clock, server, proxy = _setup()
    cache = server.topic("t")
    cache.on_metadata(1, False)
    s, sink = _open(proxy, clock, "/keyed/t")
    s.close()
    cache.on_end(0, 0)
    _run(clock)
    assert sink.data() == []
