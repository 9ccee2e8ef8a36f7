"""ssekd-client's `collection` (www/ssekd-client/collection.js) in headless Chromium against a real
daemon and broker, as a property test: for random puts and deletes (Hypothesis) on a compacted,
keyed topic of two partitions, the page's map equals a compacted consumer's view of the topic
(the latest value of each key, deleted keys absent; read by a Kafka consumer from the start)
at the moment the catch-up signal arrives, and again after more changes made live; and what
`onChange` reported, replayed, gives the same map. The signal coming after every record the
topic held is what makes the first comparison exact: the map is taken inside the signal's
handler, before anything else is read. Then a cut connection: the stream resumes from its id,
the changes made meanwhile arrive once, and the signal comes again.
"""

from __future__ import annotations

import json
import uuid
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.broker import Kafka
from tests.support.browser import Browser
from tests.support.streamd import Streamd
from tests.support.wait import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.daemon, pytest.mark.broker]

PARTITIONS = 2
#: Keys of the markers that say how far a reader has read (never a key of KEYS).
MARK = "mark:"
#: Few keys, so that puts replace and deletes hit; text beyond ASCII and a `/`.
KEYS = ["a", "b", "c", "k/1", "ключ", "é 2"]
#: A value: JSON (an object or a number), or text that is not JSON; None is a tombstone.
VALUES = st.one_of(
    st.none(),
    st.builds(lambda n, s: json.dumps({"n": n, "s": s}), st.integers(-99, 99),
              st.text("xyzé\"\\", max_size=4)),
    st.integers(0, 10**6).map(str),
    st.text("abcdefg ", min_size=1, max_size=6).map(lambda t: "t:" + t),
)
OPS = st.lists(st.tuples(st.sampled_from(KEYS), VALUES), max_size=25)

# The page: a collection of the route with key-form ids and the catch-up signal, the map taken
# in the signal's handler, and every change reported, in order.
OPEN = """(() => {
    window.snap = null; window.changes = []; window.signals = 0;
    window.c = client.collection(%(url)s);
    c.onCaughtUp(() => { window.signals++; if (window.snap === null) window.snap = [...c.map]; });
    c.onChange((k, v) => window.changes.push([k, v === undefined ? null : v]));
    return true;
})()"""


def _partition(key: str) -> int:
    return zlib.crc32(key.encode()) % PARTITIONS


def _parsed(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value


def _produce(kafka: Kafka, topic: str, ops: list[tuple[str, str | None]]) -> None:
    # one key, one partition: its order is Kafka's
    for key, value in ops:
        kafka.produce(topic, None if value is None else value.encode(), key=key.encode(),
                      partition=_partition(key))
    kafka.flush()


def _compacted_view(kafka: Kafka, topic: str) -> tuple[dict[str, Any], list[str]]:
    """What a compacted consumer holds: every record read from the start, the latest value of
    each key kept, a tombstone's key dropped. It reads up to a marker it puts in each partition
    (the broker's high watermark can lag behind what it acknowledged), and leaves the markers
    out; returns the markers' keys too, for the page to wait for."""
    marks = [f"{MARK}{p}:{uuid.uuid4().hex[:8]}" for p in range(PARTITIONS)]
    for p, key in enumerate(marks):
        kafka.produce(topic, b'"mark"', key=key.encode(), partition=p)
    kafka.flush()
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"view-{topic}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        view: dict[str, Any] = {}
        waiting = set(marks)
        while waiting:
            m = consumer.poll(5)
            assert m is not None, f"the consumer did not reach the markers {waiting}"
            if m.error():
                continue
            key = (m.key() or b"").decode()
            waiting.discard(key)
            value = m.value()
            if value is None:
                view.pop(key, None)
            else:
                view[key] = _parsed(value.decode())
        return _unmarked(view), marks
    finally:
        consumer.close()


def _unmarked(view: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in view.items() if not k.startswith(MARK)}


def _model(ops: list[tuple[str, str | None]]) -> dict[str, Any]:
    view: dict[str, Any] = {}
    for key, value in ops:
        if value is None:
            view.pop(key, None)
        else:
            view[key] = _parsed(value)
    return view


@pytest.fixture(scope="module")
def browser(streamd: Streamd) -> Iterator[Browser]:
    b = Browser(streamd.url("/www/style.css"))
    try:
        # the page of the daemon's origin, not the blank page before it
        wait_until(lambda: b.evaluate("location.protocol + document.readyState")
                   == "http:complete", 20, interval=0.1)
        b.evaluate("import('/www/ssekd-client/collection.js').then(m => { window.client = m; }, "
                   "e => { window.loadError = String(e); })")
        wait_until(lambda: b.evaluate("Boolean(window.client || window.loadError)"), 20,
                   interval=0.05)
        assert b.evaluate("window.loadError || null") is None
        yield b
    finally:
        b.close()


def _map(browser: Browser, expr: str) -> dict[str, Any] | None:
    pairs = browser.evaluate(f"JSON.stringify({expr})")
    return None if pairs in (None, "null") else dict(json.loads(pairs))


@pytest.mark.timeout(120)
@settings(max_examples=25, deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=OPS, live=OPS)
def test_the_collection_is_the_compacted_view_when_caught_up_and_after_live_changes(
        streamd: Streamd, kafka: Kafka, browser: Browser,
        history: list[tuple[str, str | None]], live: list[tuple[str, str | None]]) -> None:
    topic = kafka.topic(PARTITIONS, compact=True)
    _produce(kafka, topic, history)
    browser.evaluate("window.c && window.c.close()")
    browser.evaluate(OPEN % {"url": json.dumps(f"/caughtup/{topic}")})
    wait_until(lambda: browser.evaluate("window.signals") >= 1, 20, interval=0.05,
               what=lambda: f"no catch-up signal; map {_map(browser, '[...c.map]')}")
    at_signal = _map(browser, "window.snap")
    view, _ = _compacted_view(kafka, topic)
    assert view == _model(history)
    assert at_signal == view, "the map when the signal came is the whole compacted view"

    # more changes, live; then the consumer's markers, last in each partition: once the page
    # has them, it has read everything before them (a partition is delivered in order)
    _produce(kafka, topic, live)
    view, marks = _compacted_view(kafka, topic)
    assert view == _model(history + live)
    wait_until(lambda: all(k in (_map(browser, "[...c.map]") or {}) for k in marks), 20,
               interval=0.05, what=lambda: f"markers not read; map {_map(browser, '[...c.map]')}")
    final = _map(browser, "[...c.map]")
    assert final is not None
    assert _unmarked(final) == view
    replayed: dict[str, Any] = {}
    for key, value in browser.evaluate("window.changes"):
        if value is None:
            replayed.pop(key, None)
        else:
            replayed[key] = value
    assert replayed == final, "onChange told every change, in order"
    assert browser.evaluate("window.signals") == 1, "one signal per connection"
    assert browser.evaluate("c.isCaughtUp") is True


# A collection over a stream whose connection the test can cut (`window.cut()`), as a network
# drop would: the stream reconnects with its last id (in memory: storage null).
OPEN_CUTTABLE = """(() => {
    window.snaps = []; window.changes = []; window.urls = []; window.flags = [];
    return import('/www/ssekd-client/stream.js').then(m => {
        const s = m.openStream(%(url)s, {storage: null, retry: {min: 50, max: 200},
            transport: (u, init) => {
                const ac = new AbortController();
                init.signal.addEventListener('abort', () => ac.abort());
                window.cut = () => ac.abort();
                window.urls.push(new URL(u, location.href).searchParams.get('lastEventId'));
                return fetch(u, {...init, signal: ac.signal});
            }});
        window.c = client.collection(s);
        c.onCaughtUp(() => window.snaps.push([...c.map]));
        c.onChange((k, v) => window.changes.push([k, v === undefined ? null : v]));
        s.onState(st => window.flags.push([st, c.isCaughtUp]));
        return true;
    });
})()"""


@pytest.mark.timeout(60)
def test_a_dropped_connection_resumes_and_signals_again(streamd: Streamd, kafka: Kafka,
                                                        browser: Browser) -> None:
    """After a cut the stream resumes from its id (not from the start): the changes made while
    it was away arrive once, nothing before the cut comes again, `isCaughtUp` is false until the
    second signal, and the map ends as the compacted view."""
    topic = kafka.topic(PARTITIONS, compact=True)
    _produce(kafka, topic, [(f"k{i}", str(i)) for i in range(10)])
    browser.evaluate("window.c && window.c.close()")
    browser.evaluate(OPEN_CUTTABLE % {"url": json.dumps(f"/caughtup/{topic}")})
    wait_until(lambda: browser.evaluate("window.snaps.length") == 1, 20, interval=0.05)
    assert dict(browser.evaluate("window.snaps[0]")) == {f"k{i}": i for i in range(10)}
    assert browser.evaluate("c.isCaughtUp") is True
    browser.evaluate("window.cut()")
    wait_until(lambda: browser.evaluate("c.isCaughtUp") is False or
               browser.evaluate("window.snaps.length") == 2, 10, interval=0.01)
    _produce(kafka, topic, [("k0", None), ("k1", None), ("k10", "10"), ("k11", "11"),
                            ("k12", "12")])
    view, marks = _compacted_view(kafka, topic)
    wait_until(lambda: all(k in (_map(browser, "[...c.map]") or {}) for k in marks), 20,
               interval=0.05, what=lambda: f"markers not read; {browser.evaluate('window.urls')}")
    assert _unmarked(_map(browser, "[...c.map]") or {}) == view
    urls = browser.evaluate("window.urls")
    assert len(urls) == 2 and urls[0] is None and urls[1], "the second connection resumed"
    snaps = browser.evaluate("window.snaps")
    assert len(snaps) == 2, "a signal per connection"
    flags = browser.evaluate("window.flags")
    assert ["waiting", False] in flags, "not caught up while away"
    changes = [k for k, _ in browser.evaluate("window.changes") if not k.startswith(MARK)]
    assert len(changes) == 15, f"each change once, nothing again after the resume: {changes}"
