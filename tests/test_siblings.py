"""The channel between the workers of one daemon, with its transport faked and its clock
injected: a worker asks the other `worker-*.sock` of its folder, a sibling that does not answer
(in time) renewed nothing, and a worker's socket answers renewals and key-set news from its
siblings with its current graph, beside the metrics page its parent scrapes. (The real sockets:
tests/e2e/test_jwt_guard.py with SSEKD_TEST_WORKERS=2.)"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from typing import Any

from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock
from twisted.web.server import NOT_DONE_YET
from twisted.web.test.requesthelper import DummyRequest

from ssekd.spi.guard import Refusal, Renewal
from ssekd.telemetry.metrics import Metrics
from ssekd.telemetry.prometheus import MetricsPage
from ssekd.workers.siblings import (
    KEYS,
    RENEW,
    TIMEOUT,
    SiblingPage,
    UnixSiblings,
    renewals_body,
    renewals_of,
)


class Posts:
    """The siblings' transport: every request recorded, answered by the test."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, Any]] = []
        self.pending: dict[str, defer.Deferred[bytes]] = {}

    def __call__(self, socket: str, path: bytes, body: bytes) -> defer.Deferred[bytes]:
        d: defer.Deferred[bytes] = defer.Deferred()
        self.sent.append((Path(socket).name, path, json.loads(body)))
        self.pending[Path(socket).name] = d
        return d


def _siblings(tmp_path: Path, *names: str) -> tuple[UnixSiblings, Posts, MemoryReactorClock]:
    for name in names:
        (tmp_path / name).touch()
    clock, posts = MemoryReactorClock(), Posts()
    return UnixSiblings(clock, str(tmp_path / "worker-2.sock"), posts), posts, clock


def _result(d: defer.Deferred[Any]) -> Any:
    out: list[Any] = []
    d.addBoth(out.append)
    assert out, "still waiting"
    return out[0]


def test_the_siblings_are_the_other_worker_sockets_of_the_folder(tmp_path: Path) -> None:
    siblings, _, _ = _siblings(tmp_path, "worker-1.sock", "worker-2.sock", "worker-3.sock",
                               "other.sock")
    assert [Path(p).name for p in siblings.sockets()] == ["worker-1.sock", "worker-3.sock"]
    (tmp_path / "worker-4.sock").touch()  # listed at each use
    assert len(siblings.sockets()) == 3


def test_a_renewal_asks_every_sibling_and_leaves_out_those_that_do_not_answer(
        tmp_path: Path) -> None:
    siblings, posts, clock = _siblings(tmp_path, "worker-1.sock", "worker-3.sock",
                                       "worker-4.sock")
    done = siblings.renew("http0", "10.0.0.1", {"jwt0": "t0k3n"})
    assert posts.sent == [(f"worker-{i}.sock", RENEW,
                           {"binding": "http0", "host": "10.0.0.1", "tokens": {"jwt0": "t0k3n"}})
                          for i in (1, 3, 4)]
    posts.pending["worker-1.sock"].callback(renewals_body({"jwt0": Renewal(2)}))
    posts.pending["worker-3.sock"].errback(ConnectionRefusedError())  # dead: renewed nothing
    clock.advance(TIMEOUT - 0.01)
    assert not done.called, "waits for the one still answering"
    clock.advance(0.01)  # ... not longer than TIMEOUT
    assert _result(done) == [{"jwt0": Renewal(2)}]


def test_no_siblings_no_wait(tmp_path: Path) -> None:
    siblings, posts, _ = _siblings(tmp_path)
    assert _result(siblings.renew("http0", "10.0.0.1", {"jwt0": "t"})) == []
    siblings.keys_changed("jwt0", {"k2"})
    assert posts.sent == []


def test_an_unreadable_answer_renewed_nothing(tmp_path: Path) -> None:
    siblings, posts, _ = _siblings(tmp_path, "worker-1.sock")
    done = siblings.renew("http0", "10.0.0.1", {"jwt0": "t"})
    posts.pending["worker-1.sock"].callback(b"<html>")
    assert _result(done) == []


def test_a_changed_key_set_is_told_to_every_sibling(tmp_path: Path) -> None:
    siblings, posts, clock = _siblings(tmp_path, "worker-1.sock", "worker-3.sock")
    siblings.keys_changed("jwt0", {"k2", "k1"})
    assert posts.sent == [(f"worker-{i}.sock", KEYS, {"guard": "jwt0", "kids": ["k1", "k2"]})
                          for i in (1, 3)]
    clock.advance(TIMEOUT)
    assert clock.getDelayedCalls() == [], "a sibling that does not answer is given up on"


def test_renewals_travel_with_their_refusals() -> None:
    sent = {"a": Renewal(0, Refusal(403, "renewal for x drops role(s) y"), reach=2),
            "b": Renewal(3)}
    assert renewals_of(renewals_body(sent)) == sent


# -- the answering side -------------------------------------------------------------------------


class HttpRuntime:
    def __init__(self) -> None:
        self.asked: list[tuple[str, dict[str, str]]] = []
        self.answer: defer.Deferred[dict[str, Renewal]] = defer.Deferred()

    def renew_for_sibling(self, host: str, tokens: Mapping[str, str]
                          ) -> defer.Deferred[dict[str, Renewal]]:
        self.asked.append((host, dict(tokens)))
        return self.answer


class Guard:
    def __init__(self) -> None:
        self.told: list[list[str]] = []

    def sibling_loaded(self, kids: Collection[str]) -> None:
        self.told.append(list(kids))


@dataclass
class Graph:
    runtimes: dict[str, object] = field(default_factory=dict)
    guards: dict[str, object] = field(default_factory=dict)


class ThisWorker:
    def __init__(self, graph: Graph | None) -> None:
        self.graph = graph


def _request(path: bytes, body: Any = None, method: bytes = b"POST") -> Any:
    req: Any = DummyRequest(path.strip(b"/").split(b"/"))
    req.method, req.path, req.uri = method, path, path
    req.content = BytesIO(json.dumps(body).encode() if body is not None else b"{")
    return req


def _page(graph: Graph | None) -> SiblingPage:
    metrics = Metrics()
    metrics.configure("ns", None, {}, {}, [])
    return SiblingPage(MetricsPage(metrics, "/metrics"), ThisWorker(graph))  # type: ignore[arg-type]


def test_a_sibling_renewal_goes_to_the_http_binding_of_that_name() -> None:
    http0 = HttpRuntime()
    page = _page(Graph({"http0": http0, "tcp0": object()}))
    req = _request(RENEW, {"binding": "http0", "host": "10.0.0.1", "tokens": {"jwt0": "t"}})
    assert page.render(req) is NOT_DONE_YET
    assert http0.asked == [("10.0.0.1", {"jwt0": "t"})]
    http0.answer.callback({"jwt0": Renewal(1)})
    assert req.finished and renewals_of(b"".join(req.written)) == {"jwt0": Renewal(1)}
    for binding in ("tcp0", "gone"):  # not an http server (any more): nothing to renew
        req = _request(RENEW, {"binding": binding, "host": "10.0.0.1", "tokens": {}})
        assert page.render(req) == b"{}"
    assert _page(None).render(_request(RENEW, {"binding": "http0", "host": "h",
                                               "tokens": {}})) == b"{}"


def test_key_set_news_goes_to_the_guard_of_that_name() -> None:
    guard = Guard()
    page = _page(Graph(guards={"jwt0": guard, "other": object()}))
    assert page.render(_request(KEYS, {"guard": "jwt0", "kids": ["k2"]})) == b""
    assert page.render(_request(KEYS, {"guard": "other", "kids": ["k2"]})) == b""
    assert guard.told == [["k2"]]


def test_the_metrics_page_is_served_beside_and_bad_requests_are_refused() -> None:
    page = _page(Graph())
    req = _request(b"/metrics", method=b"GET")
    body = page.render(req)
    assert isinstance(body, bytes) and b"# HELP" in body
    req = _request(b"/other", method=b"GET")
    page.render(req)
    assert req.responseCode == 404
    req = _request(RENEW, method=b"GET")
    page.render(req)
    assert req.responseCode == 405
    bad: list[tuple[bytes, Any]] = [(RENEW, None), (RENEW, []), (RENEW, {"binding": "http0"}),
                                    (KEYS, {"guard": 1, "kids": 2})]
    for path, asked in bad:
        req = _request(path, asked)
        page.render(req)
        assert req.responseCode == 400, asked
