"""`twistd ssekd --config etc/zilla.yaml`: options and the service tree.

`makeService` builds the whole binding graph before returning, so a bad config stops twistd
before it daemonizes or opens a port; the error names file, line, path and what was expected.
"""

from __future__ import annotations

import gc
import re
import signal
import sys
from pathlib import Path
from typing import Any

from twisted.application.internet import TimerService
from twisted.application.service import IService, MultiService, Service
from twisted.python import usage

from ssekd.config import ConfigError
from ssekd.config.model import DEFAULT_NAMESPACE
from ssekd.engine import ENGINE, Engine
from ssekd.telemetry.events import EventLog, stdout_stream

DEFAULT_CONFIG = "etc/zilla.yaml"

#: Allocations between CPython's young-generation collections (its default is 700). The kafka
#: cache keeps up to hundreds of thousands of records alive, each a GC-tracked object made on
#: the consumer thread; at the default, a collection every 700 of them made loading a topic
#: about half garbage-collector time (measured with confluent-kafka on the dev broker: 250k ->
#: 430k records/s kept). Only cycles wait longer to be freed; everything else goes by refcount.
GC_YOUNG_THRESHOLD = 20_000


def namespace_of(config_path: Path) -> str:
    """The config's `name` for events about a config that did not load: read from its top-level
    `name:` line when there is a plain one, else Zilla's default namespace."""
    try:
        text = config_path.read_text(encoding="utf-8", errors="replace")[:65536]
    except OSError:
        return DEFAULT_NAMESPACE
    m = re.search(r"^name:[ \t]*['\"]?([a-zA-Z]+[a-zA-Z0-9._-]*)['\"]?[ \t]*(#.*)?$", text,
                  re.MULTILINE)
    return m.group(1) if m else DEFAULT_NAMESPACE


class Options(usage.Options):
    synopsis = "[options]"
    longdesc = "Serve Kafka topics as Server-Sent Events, configured by a Zilla zilla.yaml."
    optParameters = [
        ["config", "c", DEFAULT_CONFIG, "the zilla.yaml to run"],
        ["watch-interval", None, "1.0", "seconds between checks of the config file (with --watch)"],
    ]
    optFlags = [
        ["watch", "w", "reload when the config file changes (SIGHUP always reloads)"],
    ]

    def postOptions(self) -> None:
        try:
            self["watch-interval"] = float(self["watch-interval"])
        except ValueError as e:
            raise usage.UsageError("--watch-interval must be a number of seconds") from e


class ReloadOnSignal(Service):
    """SIGHUP reloads the config. The handler only schedules; the reload runs in the reactor."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._previous: Any = None

    def startService(self) -> None:
        super().startService()
        reactor = self.engine.reactor
        self._previous = signal.signal(
            signal.SIGHUP, lambda signum, frame: reactor.callFromThread(self.engine.reload))

    def stopService(self) -> None:
        super().stopService()
        if self._previous is not None:
            signal.signal(signal.SIGHUP, self._previous)


class WatchConfig(TimerService):
    """Polls the config file's mtime and size; a change triggers the same reload as SIGHUP."""

    def __init__(self, engine: Engine, interval: float) -> None:
        self.engine = engine
        self._seen = self._stamp()
        super().__init__(interval, self._check)
        self.clock = engine.reactor

    def _stamp(self) -> tuple[int, int] | None:
        try:
            st = self.engine.config_path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def _check(self) -> None:
        stamp = self._stamp()
        if stamp is not None and stamp != self._seen:
            self._seen = stamp
            self.engine.reload()


class ExitCleanlyOnTerm(Service):
    """SIGTERM is how service managers ask a daemon to stop: after an orderly shutdown, exit 0.

    twistd re-raises the signal that stopped the reactor so the exit status shows it (-15); for
    SIGTERM that makes every planned stop look like a crash to scripts and tests. The reactor
    keeps that signal in `_exitSignal` (private, but the only hook twistd reads), which we clear.
    """

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor

    def stopService(self) -> None:
        super().stopService()
        if getattr(self.reactor, "_exitSignal", None) == signal.SIGTERM:
            self.reactor._exitSignal = None


def makeService(options: Options | dict[str, Any], reactor: Any = None,
                whole_process: bool = True) -> IService:
    """The service tree: the engine, SIGHUP handling, and the optional file watcher.

    `reactor` defaults to Twisted's global one. `whole_process` says the daemon owns this
    process (as under twistd): it then handles SIGHUP, exits 0 on SIGTERM and tunes the garbage
    collector. Tests that build the tree in their own process pass False (and a clock).
    """
    if reactor is None:
        from twisted.internet import reactor as global_reactor
        reactor = global_reactor
    config_path = Path(options["config"])
    try:
        engine = Engine(config_path, reactor=reactor)
    except ConfigError as e:
        print(f"ssekd: the config cannot be used ({len(e.issues)} problem(s)):", file=sys.stderr)
        for issue in e.issues:
            print(f"  {issue}", file=sys.stderr)
        # ...and as events on stdout, in the format a log pipeline already parses: whether the
        # config has a stdout exporter cannot be known when the config is what is broken.
        events = EventLog(namespace_of(config_path), stdout=stdout_stream())
        for issue in e.issues:
            events.emit(ENGINE, "CONFIG_INVALID", str(issue))
        raise SystemExit(1) from None
    top = MultiService()
    engine.setServiceParent(top)
    if whole_process:
        gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
        ReloadOnSignal(engine).setServiceParent(top)
        ExitCleanlyOnTerm(engine.reactor).setServiceParent(top)
    if options.get("watch"):
        WatchConfig(engine, float(options.get("watch-interval", 1.0))).setServiceParent(top)
    return top
