"""What `make run` started beside the daemon (the development broker, the demo producer, the
token service, the todo command service), watched while the daemon runs.

A helper that stops is said in one line and started again: a development broker that died
(killed, out of memory) would otherwise leave the daemon retrying a dead address and the page
empty, with nothing on the terminal to say why. A helper that keeps dying (`MAX_RESTARTS` times
within `WINDOW` seconds) is not started again: everything stops, and `make run` exits non-zero
with one line saying which helper and how it ended.

The clock and the pause between looks are injected, so the rules are tested without processes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

#: Restarts of one helper within `WINDOW` seconds before `make run` gives up.
MAX_RESTARTS = 3
WINDOW = 60.0
#: Seconds between looks at the helpers.
INTERVAL = 0.5


class Process(Protocol):
    """What is watched: `poll()` is None while it runs, else its exit status."""

    def poll(self) -> int | None: ...


@dataclass
class Helper:
    """One helper: how to start it (again), and how to reach the process it runs."""

    #: What it is called on the terminal ("the development broker on 127.0.0.1:9092").
    name: str
    start: Callable[[], Any]
    #: The running process of what `start` returned (a Popen, or a `Broker`'s process).
    process_of: Callable[[Any], Process] = lambda started: started  # noqa: E731
    running: Any = None
    restarts: list[float] = field(default_factory=list)

    def launch(self) -> Any:
        self.running = self.start()
        return self.running


def broker_process(broker: Any) -> Process:
    """The process of a development broker (`ssekd.dev.broker.Broker`)."""
    process: Process = broker.process
    return process


def stopped_how(status: int) -> str:
    """An exit status in words (a negative one is the signal that ended it)."""
    return f"killed by signal {-status}" if status < 0 else f"exit status {status}"


class Watch:
    """Looks at the helpers until the daemon ends or one of them keeps dying."""

    def __init__(self, helpers: Sequence[Helper], say: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.helpers = list(helpers)
        self.say = say
        self.clock = clock
        self.sleep = sleep
        #: The helper that made everything stop, when one did.
        self.gave_up: Helper | None = None

    def look(self) -> bool:
        """One look: start again what stopped; False when a helper kept dying (give up)."""
        for helper in self.helpers:
            status = helper.process_of(helper.running).poll()
            if status is None:
                continue
            now = self.clock()
            helper.restarts = [t for t in helper.restarts if now - t < WINDOW]
            if len(helper.restarts) >= MAX_RESTARTS:
                self.say(f"{helper.name} stopped again ({stopped_how(status)}), after "
                         f"{len(helper.restarts)} restarts within {WINDOW:g} s: stopping "
                         f"everything")
                self.gave_up = helper
                return False
            self.say(f"{helper.name} stopped ({stopped_how(status)}); starting it again")
            helper.restarts.append(now)
            try:
                helper.launch()
            except Exception as e:  # noqa: BLE001 - any failure to start is the same news
                self.say(f"{helper.name} could not be started again ({e}): stopping everything")
                self.gave_up = helper
                return False
        return True

    def until(self, done: Callable[[], bool]) -> bool:
        """Look every `INTERVAL` seconds until `done()`; False when a helper kept dying."""
        while not done():
            if not self.look():
                return False
            self.sleep(INTERVAL)
        return True
