"""The tail consumer's hand-over to the reactor (`Inbox` in ssekd/bindings/kafka/inbox.py):
batches that arrive while the reactor is busy reach it as one, in the order of every other call
of the topic's sink, and a reactor that does not keep up holds the thread back."""

from __future__ import annotations

import threading
from typing import Any

from ssekd.bindings.kafka.inbox import MAX_PENDING, Inbox
from ssekd.bindings.kafka.message import OFFSET, Message, new_message


class Reactor:
    def __init__(self) -> None:
        self.pending: list[Any] = []

    def callFromThread(self, f: Any, *args: Any) -> None:  # noqa: N802 - Twisted's name
        self.pending.append((f, args))


class Sink:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def on_metadata(self, partitions: int, compacted: bool | None) -> None:
        self.calls.append(("metadata", partitions))

    def on_records(self, records: list[Message]) -> None:
        self.calls.append(("records", [m[OFFSET] for m in records]))

    def on_end(self, partition: int, next_offset: int) -> None:
        self.calls.append(("end", next_offset))

    def on_rewind(self, partition: int, origin: int) -> None:
        self.calls.append(("rewind", origin))

    def on_missing(self) -> None:
        self.calls.append(("missing", None))


def _records(*offsets: int, partition: int = 0) -> list[Message]:
    return [new_message(partition, o, None, b"v") for o in offsets]


def test_batches_queued_while_the_reactor_is_busy_arrive_as_one_in_order() -> None:
    reactor, sink = Reactor(), Sink()
    inbox = Inbox(sink)
    inbox.put(reactor, sink.on_metadata, 1, False)
    inbox.put_records(reactor, _records(0, 1))
    inbox.put_records(reactor, _records(2))
    inbox.put(reactor, sink.on_end, 0, 3)
    inbox.put_records(reactor, _records(3))
    assert len(reactor.pending) == 1, "one hand-over scheduled, however many batches"
    f, args = reactor.pending.pop()
    f(*args)
    assert sink.calls == [("metadata", 1), ("records", [0, 1, 2]), ("end", 3),
                          ("records", [3])]
    inbox.put_records(reactor, _records(4))
    assert len(reactor.pending) == 1, "taken: the next batch is scheduled at once"


def test_batches_at_the_tail_join_across_the_ends_between_them() -> None:
    """At the tail every fetch ends with the ends of its partitions: the batches a busy reactor
    takes in one turn are one write per stream, the ends after them."""
    reactor, sink = Reactor(), Sink()
    inbox = Inbox(sink)
    inbox.put_records(reactor, _records(0))
    inbox.put(reactor, sink.on_end, 0, 1)
    inbox.put(reactor, sink.on_end, 1, 0)
    inbox.take()  # the first ends of both partitions: live streams start there
    inbox.put_records(reactor, _records(1))
    inbox.put(reactor, sink.on_end, 0, 2)
    inbox.put_records(reactor, _records(0, partition=1))
    inbox.put(reactor, sink.on_end, 1, 1)
    inbox.put_records(reactor, _records(2))
    inbox.take()
    assert sink.calls[3:] == [("records", [1, 0, 2]), ("end", 2), ("end", 1)]


def test_a_batch_does_not_join_records_before_the_first_end_of_its_partition() -> None:
    """The first end of a partition fixes where its live streams start: records after it stay
    after it (and so after a rewind, which starts the partition over)."""
    reactor, sink = Reactor(), Sink()
    inbox = Inbox(sink)
    inbox.put_records(reactor, _records(0, partition=1))
    inbox.put(reactor, sink.on_end, 0, 0)
    inbox.put_records(reactor, _records(1, partition=1))  # another partition: joins
    inbox.put_records(reactor, _records(0))
    inbox.put(reactor, sink.on_end, 0, 1)
    inbox.put(reactor, sink.on_rewind, 0, 0)
    inbox.put_records(reactor, _records(0))
    inbox.put(reactor, sink.on_end, 0, 1)
    inbox.put_records(reactor, _records(1))
    inbox.take()
    assert sink.calls == [("records", [0, 1]), ("end", 0), ("records", [0]), ("end", 1),
                          ("rewind", 0), ("records", [0]), ("end", 1), ("records", [1])]


def test_the_thread_waits_while_the_reactor_holds_max_pending_records() -> None:
    reactor, sink = Reactor(), Sink()
    inbox = Inbox(sink)
    stopping = threading.Event()
    inbox.put_records(reactor, _records(*range(MAX_PENDING - 1)))
    inbox.wait_room(stopping)  # below the bound: returns at once
    inbox.put_records(reactor, _records(MAX_PENDING))
    waiter = threading.Thread(target=inbox.wait_room, args=(stopping,))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive(), "full: the tail thread must wait for the reactor"
    inbox.take()
    waiter.join(5)
    assert not waiter.is_alive()
    assert sink.calls == [("records", list(range(MAX_PENDING - 1)) + [MAX_PENDING])]
