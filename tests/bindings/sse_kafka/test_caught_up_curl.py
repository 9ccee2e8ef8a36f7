"""The catch-up signal on the wire (an ssekd addition): curl reading the real daemon and broker
sees one `caught-up` event right after the records the topic held, live records after it, and
on a route that does not ask, nothing new at all."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest

from tests.support.broker import Kafka
from tests.support.streamd import Streamd

pytestmark = [pytest.mark.daemon, pytest.mark.broker]


def _curl(streamd: Streamd, path: str, seconds: float,
          headers: tuple[str, ...] = ()) -> list[list[str]]:
    """The events curl read in `seconds`, each as its lines."""
    args = ["curl", "-sN", "--max-time", str(seconds)]
    for h in headers:
        args += ["-H", h]
    out = subprocess.run([*args, streamd.url(path)], capture_output=True,
                         timeout=seconds + 10).stdout.decode()
    return [block.split("\n") for block in out.split("\n\n")
            if block and not block.startswith(":") and not block.startswith("retry:")]


def _data(events: list[list[str]]) -> list[str]:
    out = []
    for lines in events:
        if "event:caught-up" in lines:
            out.append("CAUGHT-UP")
        else:
            out += [line[5:] for line in lines if line.startswith("data:")]
    return out


def test_curl_sees_the_signal_after_the_history_then_live_records(streamd: Streamd,
                                                                  kafka: Kafka) -> None:
    topic = kafka.topic(3)  # not compacted: a resume reads the replaced records too
    history = [f"h{i}" for i in range(20)]
    for i, v in enumerate(history):
        kafka.produce(topic, v.encode(), key=b"k%d" % i)
    kafka.flush()

    def later() -> None:  # live records, produced once the stream has caught up
        time.sleep(2.5)
        for v in ("live1", "live2"):
            kafka.produce(topic, v.encode(), key=b"k1")
        kafka.flush()

    thread = threading.Thread(target=later)
    thread.start()
    events = _curl(streamd, f"/caughtup/{topic}", 6)
    thread.join()
    got = _data(events)
    assert got.count("CAUGHT-UP") == 1
    i = got.index("CAUGHT-UP")
    assert sorted(got[:i]) == sorted(history), "every record the topic held came before it"
    assert got[i + 1:] == ["live1", "live2"]
    signal = events[i]
    assert signal == ["event:caught-up", "data:"], "no id: the last event id stays the record's"
    # a resume from the fifth event's id: the rest of the history, then the signal
    last_id = next(line[3:] for line in events[4] if line.startswith("id:"))
    resumed = _data(_curl(streamd, f"/caughtup/{topic}", 3, (f"Last-Event-ID: {last_id}",)))
    assert resumed[-1] == "CAUGHT-UP" and resumed.count("CAUGHT-UP") == 1
    assert sorted(resumed[:-1]) == sorted(got[5:i] + ["live1", "live2"])


def test_a_route_that_does_not_ask_sends_nothing_new(streamd: Streamd, kafka: Kafka) -> None:
    topic = kafka.topic(1)
    for i in range(5):
        kafka.produce(topic, b"v%d" % i, key=b"k%d" % i)
    kafka.flush()
    for path in (f"/keyed/{topic}", f"/events/{topic}"):
        out = subprocess.run(["curl", "-sN", "--max-time", "3", streamd.url(path)],
                             capture_output=True, timeout=15).stdout.decode()
        assert out.count("data:") == 5
        assert "caught-up" not in out


def test_several_filtered_topics_signal_once_after_both(streamd: Streamd, kafka: Kafka) -> None:
    a, b = kafka.topic(2), kafka.topic(1)
    for i in range(12):
        kafka.produce(a if i % 2 else b, b"%d" % i, key=b"x" if i % 3 else b"y")
    kafka.flush()
    got = _data(_curl(streamd, f"/manycaughtup/{a},{b}/x", 4))
    assert got[-1] == "CAUGHT-UP" and got.count("CAUGHT-UP") == 1
    assert sorted(got[:-1], key=int) == [str(i) for i in range(12) if i % 3]
