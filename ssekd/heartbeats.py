"""The parent's check that every worker's reactor still turns, and what it does with a stuck one.

Probes from a balancer or an orchestrator reach whichever worker the kernel picks, so a worker
whose reactor is blocked (a bug, a disk that does not answer, SIGSTOP) would be found only by
chance. The parent asks each worker `GET /heartbeat` on the worker's private Unix socket every
`INTERVAL` seconds; the answer is written by the worker's reactor, so it shows that it turns. A
worker that has not answered for `engine.heartbeat-timeout` seconds (one that is starting, for
at least `STARTUP_GRACE`: it imports, reads its config, builds its graph) is stuck: the parent
kills it with SIGKILL (a blocked reactor handles no SIGTERM) and starts it again as it does a
worker that died.

A worker silent past the timeout whose reactor thread kept using the CPU meanwhile (at least
`BUSY_SHARE` of the silence: `Heartbeats.reactor_cpu`) is busy, not stuck: its reactor turns,
only each turn is long, as when one event goes to 12,500 streams in a turn on a machine whose
cores are shared by more processes than it has (measured: turns of 1 to 8 s, with 8 workers and
their load on 2 cores). Killing it would end every stream it holds, whose clients reconnect to
the other workers, as loaded. It gets more time, up to `BUSY_LIMIT` timeouts: a reactor thread
that spins that long without answering (a loop that never ends) is stuck all the same. A
blocked reactor (a lock, a disk that does not answer, SIGSTOP) uses no CPU and is killed after
the timeout as before.

The worker notes each check in turn (`Health.supervised`): one whose parent has not checked on
it for the timeout answers liveness `503`, so an orchestrator restarts a daemon whose supervisor
is stuck. The same checks tell the parent when every worker serves, which is when it tells
systemd `READY=1`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.internet.protocol import ClientFactory, Protocol, connectionDone
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

log = Logger()

#: The path a worker answers its parent's heartbeat on (its private Unix socket only).
HEARTBEAT_PATH = b"/heartbeat"
#: Seconds between two heartbeats of the parent to each worker.
INTERVAL = 1.0
#: Seconds a worker that never answered yet has, whatever the timeout, before it is stuck.
STARTUP_GRACE = 30.0
#: Seconds without an answer after which a worker is stuck, unless the config says otherwise.
DEFAULT_TIMEOUT = 10.0

#: The share of the silence a worker's reactor thread must have spent on the CPU to be busy.
BUSY_SHARE = 0.02
#: Timeouts a busy worker may stay silent before it is stuck all the same.
BUSY_LIMIT = 6

#: CPU seconds a worker's reactor thread has used so far, or None when it cannot be read.
ReactorCpu = Callable[[int], "float | None"]

#: Ask the worker listening on a Unix socket path for a heartbeat: fires True when it answered.
Ask = Callable[[str], "defer.Deferred[bool]"]


def main_thread_cpu(pid: int) -> float | None:
    """CPU seconds the main thread of process `pid` (a worker's reactor thread: the thread
    whose id is the process's) has used, from Linux's /proc; None elsewhere or when it is gone.
    Only the main thread: a worker's Kafka threads keep running while its reactor is stuck."""
    try:
        with open(f"/proc/{pid}/task/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # the fields after the command name (in parentheses, which may hold spaces): utime and
    # stime are the 12th and 13th
    fields = stat[stat.rfind(b")") + 2:].split()
    try:
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError):
        return None


class _Heartbeat(Protocol):
    """One heartbeat: `GET /heartbeat` on a connection of its own; the answer's status line is
    all it reads (HTTP/1.0, so the worker closes when it has answered)."""

    def __init__(self, answered: defer.Deferred[bool]) -> None:
        self.answered = answered
        self.received = b""

    def connectionMade(self) -> None:  # noqa: N802 - Twisted's name
        assert self.transport is not None
        self.transport.write(b"GET " + HEARTBEAT_PATH + b" HTTP/1.0\r\nHost: worker\r\n\r\n")

    def dataReceived(self, data: bytes) -> None:  # noqa: N802 - Twisted's name
        self.received += data
        if b"\r\n" in self.received:
            status = self.received.split(b"\r\n", 1)[0].split(b" ")
            self._answer(len(status) > 1 and status[1] == b"200")
            assert self.transport is not None
            self.transport.loseConnection()

    def connectionLost(self, reason: Failure = connectionDone) -> None:  # noqa: N802
        self._answer(False)

    def _answer(self, ok: bool) -> None:
        if not self.answered.called:
            self.answered.callback(ok)


class _HeartbeatFactory(ClientFactory):
    noisy = False  # one connection a second per worker: not worth a log line each

    def __init__(self, answered: defer.Deferred[bool]) -> None:
        self.answered = answered

    def buildProtocol(self, addr: Any) -> _Heartbeat:  # noqa: N802 - Twisted's name
        return _Heartbeat(self.answered)

    def clientConnectionFailed(self, connector: Any, reason: Failure) -> None:  # noqa: N802
        if not self.answered.called:
            self.answered.callback(False)


def unix_ask(reactor: Any, timeout: float) -> Ask:
    """`Ask` over the worker's Unix socket with a connection of its own (never blocks the
    reactor); cancelling it (its timeout) closes the connection."""

    def ask(path: str) -> defer.Deferred[bool]:
        connector: list[Any] = []

        def cancel(d: defer.Deferred[bool]) -> None:
            if connector:
                connector[0].disconnect()
        answered: defer.Deferred[bool] = defer.Deferred(cancel)
        connector.append(reactor.connectUNIX(path, _HeartbeatFactory(answered),
                                             timeout=timeout))
        return answered
    return ask


class Heartbeats:
    """The parent's heartbeat of its workers, by worker number (see the module docstring)."""

    def __init__(self, reactor: Any, socket_of: Callable[[int], str], timeout: float,
                 stuck: Callable[[int, float], None], answered: Callable[[int], None],
                 ask: Ask | None = None, interval: float = INTERVAL,
                 reactor_cpu: ReactorCpu | None = None) -> None:
        self.reactor = reactor
        self.socket_of = socket_of
        self.timeout = timeout
        #: Called with (worker, seconds silent) once a worker is found stuck; it is forgotten.
        self.stuck = stuck
        #: Called each time a worker answers.
        self.answered = answered
        self.interval = interval
        #: How long the newest heartbeat goes unanswered before another is sent beside it:
        #: well within the timeout, so that one lost on the way leaves time for the next. The
        #: earlier one stays open until the timeout all the same: a worker answers in its
        #: reactor's third turn after the ask (accept, read, write), and a busy worker on a busy
        #: machine takes seconds per turn (measured: one event to 12,500 streams is one turn of
        #: 1 to 8 s with 8 workers on 2 cores). A heartbeat given up after this wait and asked
        #: again from the start was never answered, so a worker that turned was killed as
        #: stuck, with all its streams.
        self.wait = min(timeout / 2.0, 5.0)
        self.ask = ask or unix_ask(reactor, self.wait)
        #: Per worker, the CPU seconds its reactor thread had used when it last answered (or
        #: started), to tell a busy worker from a stuck one.
        self.reactor_cpu = reactor_cpu or (lambda index: None)
        self._cpu_then: dict[int, tuple[float, float] | None] = {}
        #: Per watched worker: when it was started, and when it last answered (None: never).
        self.started: dict[int, float] = {}
        self.last: dict[int, float | None] = {}
        #: Per worker, when its newest unanswered heartbeat was sent.
        self._asked: dict[int, float] = {}
        #: When the last check ran (to notice this reactor did not run for a while).
        self._ticked = 0.0
        self._loop = LoopingCall(self._tick)
        self._loop.clock = reactor

    def watch(self, index: int) -> None:
        """Worker `index` was (re)started: check on it from now on."""
        self.started[index] = self.reactor.seconds()
        self.last[index] = None
        self._cpu_then[index] = None  # the process may not be running yet

    def forget(self, index: int) -> None:
        self.started.pop(index, None)
        self.last.pop(index, None)
        self._asked.pop(index, None)
        self._cpu_then.pop(index, None)

    def start(self) -> None:
        if not self._loop.running:
            self._ticked = self.reactor.seconds()
            self._loop.start(self.interval, now=False).addErrback(self._failed)

    def stop(self) -> None:
        if self._loop.running:
            self._loop.stop()

    def _failed(self, failure: Failure) -> None:
        log.failure("checking the workers' heartbeats", failure)

    def _tick(self) -> None:
        now = self.reactor.seconds()
        if now - self._ticked > max(2 * self.interval, self.timeout / 2):
            # this reactor itself did not run meanwhile (the parent was stopped, or busy): the
            # workers' silence says nothing about them, so each gets its time again from now
            for index in self.started:
                if self.last[index] is not None:
                    self.last[index] = now
                else:
                    self.started[index] = now
        self._ticked = now
        for index in list(self.started):
            last = self.last.get(index)
            limit = self.timeout if last is not None else max(self.timeout, STARTUP_GRACE)
            silent = now - (last if last is not None else self.started[index])
            if silent > limit and not (silent <= BUSY_LIMIT * limit and
                                       self._busy(index)):
                self.forget(index)
                self.stuck(index, silent)
            elif now - self._asked.get(index, float("-inf")) >= self.wait:
                self._ask(index)

    def _cpu_now(self, index: int) -> tuple[float, float] | None:
        cpu = self.reactor_cpu(index)
        return None if cpu is None else (cpu, self.reactor.seconds())

    def _busy(self, index: int) -> bool:
        """Whether the worker's reactor thread spent at least `BUSY_SHARE` of the time on the
        CPU since it last answered (or since it was first found silent)."""
        then, now = self._cpu_then.get(index), self._cpu_now(index)
        if now is None:
            return False
        if then is None:  # no figure from its last answer: measure from here
            self._cpu_then[index] = now
            return True
        return now[0] - then[0] >= BUSY_SHARE * (now[1] - then[1])

    def _ask(self, index: int) -> None:
        sent = self._asked[index] = self.reactor.seconds()
        started = self.started[index]
        d = self.ask(self.socket_of(index))
        d.addTimeout(self.timeout, self.reactor)

        def done(ok: object) -> None:
            # an answer of the worker it asked, not of a replacement started meanwhile
            if ok is True and self.started.get(index) == started:
                self._asked.pop(index, None)  # answered: the next tick asks again
                self._cpu_then[index] = self._cpu_now(index)
                self.last[index] = self.reactor.seconds()
                self.answered(index)
            elif self._asked.get(index) == sent:
                del self._asked[index]  # refused, or given up: the next tick asks again
        d.addBoth(done)
