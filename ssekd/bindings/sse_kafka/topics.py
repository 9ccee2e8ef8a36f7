"""Several topics on one stream (an ssekd addition; docs/protocol.md, "Several topics").

Each topic of the stream has its own ordinary `Subscription`, with the encoder a stream of that
topic alone would have: it reads, filters, encodes and joins the tail groups exactly as a
one-topic stream does, so streams of one topic pay nothing for this. What a topic's
subscription writes passes through its `TopicSink`, which rewrites each event on its way to
the response:

- the `id:` carries every topic's progress: this event's token for its own topic, and for the
  others where their subscriptions are now (`Subscription.positions`), each as a part tagged
  with the topic (`ssekd.event_ids.format_topics_token`);
- the event says which topic it is from: the event type is the topic's name (a tombstone's
  `<topic>:delete`), or (`event.topic: field`) a `topic:` field is added and the type kept.

The rewriting costs a split and a join per event, paid only by streams of several topics.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ssekd.event_ids import MAX_ID_LENGTH, TOPICS_SEPARATOR, ProgressId, topic_part, topic_tag
from ssekd.spi.stream import EventSink

#: `with.event.topic` values: the event type is the topic's name, or a `topic:` field says it.
TOPIC_AS_EVENT = "event"
TOPIC_AS_FIELD = "field"

_ID = b"id:"
_EVENT = b"event:"
_END = b"\n\n"
#: The last write rewritten: [what a topic wrote, where and how, the bytes made of it].
_LAST: list[Any] = [None, None, b""]


class TopicHandle(Protocol):
    """What the stream needs of each topic's subscription."""

    @property
    def closed(self) -> bool: ...

    def positions(self) -> dict[int, int]: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def close(self) -> None: ...


class TopicsSubscription:
    """One stream's subscriptions to its topics, paused, resumed and closed together."""

    def __init__(self, topics: Sequence[str], sink: EventSink,
                 topic_as: str = TOPIC_AS_EVENT) -> None:
        #: In the order of their names: the order of the parts of the id.
        self.topics = tuple(sorted(topics))
        self.sink = sink
        self.topic_as = topic_as
        self.subscriptions: dict[str, TopicHandle] = {}
        self.sinks = {t: TopicSink(self, t) for t in self.topics}
        self._ended = False

    def add(self, topic: str, subscription: TopicHandle) -> None:
        self.subscriptions[topic] = subscription

    # -- the stream's side ---------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return all(s.closed for s in self.subscriptions.values())

    def pause(self) -> None:
        for s in self.subscriptions.values():
            s.pause()

    def resume(self) -> None:
        for s in self.subscriptions.values():
            s.resume()

    def close(self) -> None:
        for s in self.subscriptions.values():
            s.close()

    # -- the topics' side ----------------------------------------------------------------------

    def part(self, topic: str) -> str:
        """`topic`'s part of the id as far as its subscription was written."""
        s = self.subscriptions.get(topic)
        return topic_part(topic, ProgressId.encode(s.positions() if s is not None else {}))

    def write(self, topic: str, data: bytes) -> None:
        """Write what `topic`'s subscription encoded, its ids made several-topic ones."""
        i = self.topics.index(topic)
        sep = TOPICS_SEPARATOR.encode()
        left = b"".join(self.part(t).encode("ascii") + sep for t in self.topics[:i])
        right = b"".join(sep + self.part(t).encode("ascii") for t in self.topics[i + 1:])
        tag = topic_tag(topic).encode("ascii")
        name = topic.encode("ascii")  # topic names are [A-Za-z0-9._-]
        # The tail writes one bytes object to every stream of a group in turn: streams of the
        # same topics at the same place make the same bytes of it, once.
        place = (left + tag, right, name, self.topic_as)
        if _LAST[0] is data and _LAST[1] == place:
            self.sink.write(_LAST[2])
            return
        out: list[bytes] = []
        for event in data.split(_END):
            if event:
                out.append(self._event(event, left + tag, right, name))
        written = b"".join(out)
        _LAST[:] = [data, place, written]
        self.sink.write(written)

    def _event(self, event: bytes, left: bytes, right: bytes, name: bytes) -> bytes:
        lines = event.split(b"\n")
        typed = any(line.startswith(_EVENT) for line in lines)
        out: list[bytes] = []
        for line in lines:
            if line.startswith(_ID):
                token, slash, etag = line[3:].partition(b"/")
                event_id = left + token.rstrip(b"=") + right
                if slash and len(event_id) + 1 + len(etag) <= MAX_ID_LENGTH:
                    event_id += b"/" + etag  # else left out, as for one topic: resumable
                if len(event_id) <= MAX_ID_LENGTH:
                    out.append(_ID + event_id)
                # else no id: one the client could not send back (400, and a browser gives
                # up) is worse than the last id that fitted, which resumes with repeats
                if self.topic_as == TOPIC_AS_FIELD:
                    out.append(b"topic:" + name)
                elif not typed:
                    out.append(_EVENT + name)
            elif line.startswith(_EVENT) and self.topic_as == TOPIC_AS_EVENT:
                out.append(_EVENT + name + b":" + line[len(_EVENT):])
            else:
                out.append(line)
        return b"\n".join(out) + _END

    def end(self) -> None:
        """A topic's cache ended its stream: the response ends (the browser comes back with its
        last id), and the other topics' subscriptions close."""
        if self._ended:
            return
        self._ended = True
        self.close()
        self.sink.end()


class TopicSink:
    """The sink one topic's subscription writes to."""

    __slots__ = ("stream", "topic")

    def __init__(self, stream: TopicsSubscription, topic: str) -> None:
        self.stream = stream
        self.topic = topic

    def write(self, data: bytes) -> None:
        self.stream.write(self.topic, data)

    def end(self) -> None:
        self.stream.end()
