"""Every private Twisted name ssekd uses, in one table, checked against the installed Twisted.

Twisted promises nothing about a name that starts with `_` or lives in a `_` module (and the
public-looking names of a class in such a module are no more stable): any release may rename or
remove it, and our code would then fail at run time, often only on one connection path. So
pyproject.toml bounds Twisted to the versions tested, and this test is how a new release is
judged: it fails naming the name, where we use it, why, and the Twisted version.

The table must be complete: the project's source is scanned for private Twisted names, and a use
the table lacks fails here, so a new one cannot slip in unwatched. The scan finds

* imports from a private Twisted module, and imports of a `_` name from any Twisted module;
* `x._name` and `getattr(x, "_name")` where `_name` is not one of ours (we never define it) and
  Twisted's source uses it; `f(_name=...)` and `def f(_name=...)` where Twisted has such a
  private parameter;
* in a class of ours that subclasses a Twisted class: every `_name` it defines, overrides or
  reads on `self` that the Twisted classes above it define (an attribute of ours that happens to
  share a private Twisted name is caught as well: that is a collision to rename), and, below a
  private class, the public-looking names it uses that only that private class defines.

Calls on objects whose type the scan cannot see (`stream.windowUpdated()` on an `H2Stream`) are
listed by hand; every entry's files must still mention the name, so the table cannot go stale.
"""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from twisted.copyright import version as twisted_version
from twisted.internet.testing import MemoryReactorClock, StringTransport
from zope.interface import implementedBy

ROOT = Path(__file__).resolve().parents[1]
#: Folders of the project whose Python files are scanned (`twisted/` holds the twistd plugin).
SCANNED = ("ssekd", "bench", "tests", "twisted")
TWISTED = f"Twisted {twisted_version}"
#: The installed Twisted's package folder.
TWISTED_DIR = Path(inspect.getfile(importlib.import_module("twisted"))).parent


class Kind(enum.Enum):
    MODULE = "module"          # importable
    CLASS = "class"            # a class of the module
    VALUE = "value"            # any other module-level object
    ATTRIBUTE = "attribute"    # on the class, or on a fresh instance (SAMPLES)
    METHOD = "method"          # a method we call: callable, same parameter names
    OVERRIDE = "override"      # a method we replace: the base defines it and still calls it
    PARAMETER = "parameter"    # a parameter of the method named by the target's owner part


@dataclass(frozen=True)
class Use:
    """One private name: `target` is `module` or `module:Owner.name`."""

    target: str
    kind: Kind
    where: tuple[str, ...]
    why: str
    #: Parameter names (with `self`) of a METHOD or OVERRIDE, as Twisted defines them.
    params: tuple[str, ...] | None = None
    #: Twisted modules that must still refer to the name: where Twisted calls our override of
    #: it, or reads what we set. An OVERRIDE (but `__init__`) defaults to its own module.
    read_by: tuple[str, ...] = ()

    @property
    def readers(self) -> tuple[str, ...]:
        if not self.read_by and self.kind is Kind.OVERRIDE and self.name != "__init__":
            return (self.module,)
        return self.read_by

    @property
    def module(self) -> str:
        return self.target.partition(":")[0]

    @property
    def path(self) -> list[str]:
        """Attribute path below the module: ["H2Connection", "_reactor"]."""
        rest = self.target.partition(":")[2]
        return rest.split(".") if rest else []

    @property
    def name(self) -> str:
        """The name as it appears in our source."""
        return self.path[-1] if self.path else self.module

    def __str__(self) -> str:
        return f"{self.target} ({self.kind.value}; used in {', '.join(self.where)}: {self.why})"


H2 = "twisted.web._http2"
HTTP = "twisted.web.http"
H2SEND = "ssekd/bindings/http/h2_sending.py"
H2LIMITS = "ssekd/bindings/http/h2_limits.py"
H2CPY = "ssekd/bindings/http/h2c.py"
H2C_TESTS = "tests/bindings/http/test_h2c.py"
H2_SEND = "tests/bindings/http/test_h2_send.py"
SWITCH = "SwitchingChannelProtocol repeats Twisted's ALPN switch with our HTTP/2 class"
LIMITS = "request limits (body size, header count, rapid reset) applied where bytes arrive"
WRITER = "ssekd/bindings/http/stream_writer.py"
HAPROXY = "twisted.protocols.haproxy"
PROXY = "ssekd/bindings/proxy_protocol.py"
PARSERS = ("the PROXY protocol header parsers, fed the bytes of a trusted balancer's connection "
           "before anything else is built for it")
BATCH = "BatchingH2Connection replaces H2Connection's data path (one write per reactor turn)"
CHANNEL = "ssekd/bindings/http/channel.py"
UNSENT_TESTS = "tests/bindings/http/test_unsent.py"
UNSENT = ("answers written whole that wait in a full socket count for the process "
          "(limits.process-unsent-bytes)")

PRIVATE_NAMES: tuple[Use, ...] = (
    # -- twisted.web._http2: the whole module is private ---------------------------------------
    Use(H2, Kind.MODULE, (H2SEND, H2C_TESTS),
        "HTTP/2 exists only here; we subclass its connection, tests check what was built"),
    Use(f"{H2}:H2Connection", Kind.CLASS, (H2SEND, H2C_TESTS), BATCH),
    Use(f"{H2}:H2Connection.__init__", Kind.OVERRIDE, (H2SEND, H2LIMITS,),
        "we construct it with the site's reactor", ("self", "reactor")),
    Use(f"{H2}:_END_STREAM_SENTINEL", Kind.VALUE, (H2SEND,),
        "marks END_STREAM in a stream's outbound queue, which Twisted's methods also fill"),
    Use(f"{H2}:H2Connection.conn", Kind.ATTRIBUTE, (H2SEND, H2LIMITS,),
        "the h2 state machine: we frame DATA, read windows and collect the bytes to send"),
    Use(f"{H2}:H2Connection.streams", Kind.ATTRIBUTE, (H2SEND, H2LIMITS,),
        "stream objects by id, to tell them their window opened or closed"),
    Use(f"{H2}:H2Connection._outboundStreamQueues", Kind.ATTRIBUTE, (H2SEND,),
        "our queues are Twisted's, so RST_STREAM and connection loss clear them as before"),
    Use(f"{H2}:H2Connection._consumerBlocked", Kind.ATTRIBUTE, (H2SEND,),
        "set while the transport has paused the connection: no sending until it resumes"),
    Use(f"{H2}:H2Connection._stillProducing", Kind.ATTRIBUTE, (H2SEND, H2LIMITS,),
        "false once the connection is lost: the send loop must stop"),
    Use(f"{H2}:H2Connection._reactor", Kind.ATTRIBUTE, (H2SEND, H2LIMITS, H2_SEND),
        "the send loop is scheduled on the connection's reactor (a test clock in tests)"),
    Use(f"{H2}:H2Connection._bufferedControlFrames", Kind.ATTRIBUTE, (H2SEND,),
        "control frames held while paused must leave before our DATA frames"),
    Use(f"{H2}:H2Connection._flushBufferedControlData", Kind.METHOD, (H2SEND,),
        "sends those held control frames", ("self", "args")),
    Use(f"{H2}:H2Connection._sendPrioritisedData", Kind.OVERRIDE, (H2SEND,),
        "Twisted's send loop, which __init__ schedules: replaced by our batching loop",
        ("self", "args")),
    Use(f"{H2}:H2Connection._handleWindowUpdate", Kind.OVERRIDE, (H2SEND,),
        "WINDOW_UPDATE puts a window-blocked stream back into our rotation",
        ("self", "event")),
    Use(f"{H2}:H2Connection._requestDone", Kind.OVERRIDE, (H2SEND, H2LIMITS,),
        "a finished or reset stream leaves our bookkeeping too", ("self", "streamID")),
    Use(f"{H2}:H2Connection.writeDataToStream", Kind.OVERRIDE, (H2SEND, H2LIMITS),
        "H2Stream.write calls it: we queue instead of sending", ("self", "streamID", "data")),
    Use(f"{H2}:H2Connection.endRequest", Kind.OVERRIDE, (H2SEND,),
        "H2Stream.finish calls it: END_STREAM after the queued data", ("self", "streamID")),
    Use(f"{H2}:H2Connection.remainingOutboundWindow", Kind.OVERRIDE, (H2SEND,),
        "H2Stream pauses its producer at <= 0: we also count our queue and its limit",
        ("self", "streamID")),
    Use(f"{H2}:H2Connection.connectionLost._cancelTimeouts", Kind.PARAMETER, (H2SEND, H2LIMITS,),
        "our connectionLost override passes it through to Twisted's"),
    Use(f"{H2}:H2Connection.writeHeaders", Kind.OVERRIDE, (H2SEND, H2LIMITS),
        "headers for a stream the client already reset are dropped, not a traceback; a "
        "response that would pass a bound on unsent bytes goes out as a 503",
        ("self", "version", "code", "reason", "headers", "streamID"), read_by=(H2,)),
    Use(f"{H2}:H2Connection._requestReceived", Kind.OVERRIDE, (H2LIMITS,),
        f"{LIMITS}: header count, reset-before-render, and whether the route takes a body",
        ("self", "event")),
    Use(f"{H2}:H2Connection._requestDataReceived", Kind.OVERRIDE, (H2LIMITS,),
        f"{LIMITS}: DATA frames counted against `body-bytes` before Twisted stores them",
        ("self", "event")),
    Use(f"{H2}:H2Connection._requestEnded", Kind.OVERRIDE, (H2LIMITS,),
        f"{LIMITS}: a stream refused early is not handed on a second time", ("self", "event")),
    Use(f"{H2}:H2Connection._requestAborted", Kind.OVERRIDE, (H2LIMITS,),
        f"{LIMITS}: client resets are counted (rapid reset) before Twisted forgets the stream",
        ("self", "event")),
    Use(f"{H2}:H2Connection._handlePriorityUpdate", Kind.OVERRIDE, (H2SEND,),
        "PRIORITY frames are ignored: Twisted's priority tree raised on a flood of them",
        ("self", "event")),
    Use(f"{H2}:H2Stream._request", Kind.ATTRIBUTE, (H2LIMITS,),
        f"{LIMITS}: the request being built, routed by its head to see if it takes a body"),
    Use(f"{H2}:H2Stream.windowUpdated", Kind.METHOD, (H2SEND,),
        "resumes a stream's producer when its window (or our queue) has room again",
        ("self",)),
    Use(f"{H2}:H2Stream.flowControlBlocked", Kind.METHOD, (H2SEND,),
        "pauses a stream's producer when its window is used up", ("self",)),
    Use(f"{H2}:H2Stream.producer", Kind.ATTRIBUTE, (H2SEND,),
        "the stream's producer, stopped if it is a pull producer still running when the stream "
        "is done (Twisted leaves it running)"),
    Use(f"{H2}:H2Stream.hasStreamingProducer", Kind.ATTRIBUTE, (H2SEND,),
        "tells a pull producer (wrapped by Twisted, which never stops it) from a push one"),
    Use(f"{H2}:H2Stream._conn", Kind.ATTRIBUTE, (H2CPY,),
        "a request's HTTP/2 connection, which holds the sessions its TLS connection opened (a "
        "client certificate's) for the request's routes"),
    Use(f"{H2}:H2Stream.abortConnection", Kind.METHOD, (WRITER,),
        "resets one HTTP/2 stream (RST_STREAM) whose client read nothing for limits.max-lag",
        ("self",)),
    # -- twisted.web.http: the HTTP/1.1-or-HTTP/2 proxy protocol -------------------------------
    Use(f"{HTTP}:_GenericHTTPChannelProtocol", Kind.CLASS, (H2CPY, H2C_TESTS),
        "the Site's protocol, which we subclass to switch to our HTTP/2 class"),
    Use(f"{HTTP}:_GenericHTTPChannelProtocol._negotiatedProtocol", Kind.ATTRIBUTE, (H2CPY,),
        f"{SWITCH}: None until decided, then set so Twisted's own switch is skipped",
        read_by=(HTTP,)),
    Use(f"{HTTP}:_GenericHTTPChannelProtocol._channel", Kind.ATTRIBUTE,
        (H2CPY, H2_SEND, UNSENT_TESTS),
        f"{SWITCH}: the HTTP/1.1 channel, replaced by the HTTP/2 connection"),
    Use(f"{HTTP}:_GenericHTTPChannelProtocol._site", Kind.ATTRIBUTE, (H2CPY,),
        f"{SWITCH}: the new connection serves the same Site"),
    Use(f"{HTTP}:_GenericHTTPChannelProtocol._requestFactory", Kind.ATTRIBUTE, (H2CPY,),
        f"{SWITCH}: and builds the same request class"),
    Use(f"{HTTP}:_GenericHTTPChannelProtocol._factory", Kind.ATTRIBUTE, (H2CPY,),
        f"{SWITCH}: and has the same factory"),
    Use(f"{HTTP}:_GenericHTTPChannelProtocol._timeOut", Kind.ATTRIBUTE, (H2CPY,),
        f"{SWITCH}: and the same idle timeout"),
    Use(f"{HTTP}:_GenericHTTPChannelProtocol._callLater", Kind.ATTRIBUTE, (H2CPY,),
        f"{SWITCH}: and the same clock, when one was set"),
    Use(f"{HTTP}:HTTPChannel._command", Kind.ATTRIBUTE, ("ssekd/bindings/http/channel.py",),
        f"{LIMITS}: the method of the request whose head just ended, to route it before its body"),
    Use(f"{HTTP}:HTTPChannel._path", Kind.ATTRIBUTE, ("ssekd/bindings/http/channel.py",),
        f"{LIMITS}: and its path"),
    Use(f"{HTTP}:HTTPChannel._version", Kind.ATTRIBUTE, (CHANNEL,),
        f"{LIMITS}: and its HTTP version, for the access event of a request refused at its "
        f"head (413, 408)"),
    Use(f"{HTTP}:HTTPChannel._networkProducer", Kind.ATTRIBUTE, (H2CPY, CHANNEL),
        f"{SWITCH}: the transport's producer slot, handed from HTTP/1.1 to HTTP/2; "
        f"{UNSENT}: reading paused while an answer waits for the socket"),
    Use(f"{HTTP}:HTTPChannel._requestProducer", Kind.ATTRIBUTE, (CHANNEL,),
        f"{UNSENT}: None while the response being written has no producer (written whole)"),
    Use(f"{HTTP}:HTTPChannel._waitingForTransport", Kind.ATTRIBUTE, (CHANNEL,),
        f"{UNSENT}: true while the socket's buffer is full, so what is written then waits"),
    # -- twisted.internet.abstract: a TCP connection's write buffer ---------------------------
    Use("twisted.internet.abstract:FileDescriptor._tempDataLen", Kind.ATTRIBUTE, (WRITER,),
        "bytes written but not yet moved to the send buffer: a stream sends at once only when "
        "this and the buffer are empty, so its bytes never overtake queued ones",
        read_by=("twisted.internet.abstract",)),
    Use("twisted.internet.abstract:FileDescriptor._writeDisconnected", Kind.ATTRIBUTE, (WRITER,),
        "true once the write side is closed: nothing may be sent past Twisted then",
        read_by=("twisted.internet.abstract",)),
    # -- twisted.protocols.haproxy: the PROXY protocol's parsers (only `proxyEndpoint` is
    # public, and it takes every connection of a port as a balancer's) -----------------------
    Use(f"{HAPROXY}._v1parser", Kind.MODULE, (PROXY,), PARSERS),
    Use(f"{HAPROXY}._v2parser", Kind.MODULE, (PROXY,), PARSERS),
    Use(f"{HAPROXY}._exceptions", Kind.MODULE, (PROXY,), PARSERS),
    Use(f"{HAPROXY}._v1parser:V1Parser", Kind.CLASS, (PROXY,), PARSERS),
    Use(f"{HAPROXY}._v2parser:V2Parser", Kind.CLASS, (PROXY,), PARSERS),
    Use(f"{HAPROXY}._exceptions:InvalidProxyHeader", Kind.CLASS, (PROXY,),
        "what both parsers raise for a header that is not one: the connection is refused"),
    Use(f"{HAPROXY}._v1parser:V1Parser.feed", Kind.METHOD, (PROXY,),
        "buffers bytes until the header line is complete: (info, rest) or (None, None)",
        params=("self", "data")),
    Use(f"{HAPROXY}._v2parser:V2Parser.feed", Kind.METHOD, (PROXY,),
        "buffers bytes until the binary header is complete: (info, rest) or (None, None)",
        params=("self", "data")),
    Use(f"{HAPROXY}._v1parser:V1Parser.PROXYSTR", Kind.ATTRIBUTE, (PROXY,),
        "the first word of a version 1 header, to tell one from other first bytes"),
    Use(f"{HAPROXY}._v2parser:V2Parser.PREFIX", Kind.ATTRIBUTE, (PROXY,),
        "the 12 bytes a version 2 header starts with, to tell one from other first bytes"),
    Use(f"{HAPROXY}._info:ProxyInfo.source", Kind.ATTRIBUTE, (PROXY,),
        "the client's address the header names (None for LOCAL and UNKNOWN)"),
    Use(f"{HAPROXY}._info:ProxyInfo.destination", Kind.ATTRIBUTE, (PROXY,),
        "the address the client connected to, as the balancer saw it"),
    # -- twisted.internet.base: what twistd reads to re-raise the stopping signal -------------
    Use("twisted.internet.base:ReactorBase._exitSignal", Kind.ATTRIBUTE, ("ssekd/tap.py",),
        "cleared after an orderly SIGTERM stop so that twistd exits 0, not -15",
        read_by=("twisted.application.app",)),
)


def _h2_connection() -> Any:
    from twisted.web._http2 import H2Connection
    return H2Connection(MemoryReactorClock())


def _http_channel() -> Any:
    from twisted.web.http import HTTPChannel
    channel: Any = HTTPChannel()
    channel.callLater = MemoryReactorClock().callLater
    channel.makeConnection(StringTransport())  # `_networkProducer` is set on connecting
    return channel


def _generic_channel() -> Any:
    from twisted.web.http import HTTPChannel, _GenericHTTPChannelProtocol
    return _GenericHTTPChannelProtocol(HTTPChannel())


#: A fresh instance of an owner class, for attributes Twisted sets per instance (on a clock).
def _file_descriptor() -> Any:
    from twisted.internet.abstract import FileDescriptor
    return FileDescriptor(MemoryReactorClock())


SAMPLES: dict[str, Callable[[], Any]] = {
    "twisted.internet.abstract:FileDescriptor": _file_descriptor,
    f"{H2}:H2Connection": _h2_connection,
    f"{HTTP}:HTTPChannel": _http_channel,
    f"{HTTP}:_GenericHTTPChannelProtocol": _generic_channel,
}


# -- checking one entry against the installed Twisted -------------------------------------------


def _resolve(use: Use, path: list[str]) -> Any:
    obj: Any = importlib.import_module(use.module)
    for part in path:
        obj = getattr(obj, part)
    return obj


def _param_names(func: Any) -> tuple[str, ...]:
    return tuple(inspect.signature(func).parameters)


def _refers_to(module: str, name: str) -> bool:
    """Twisted's module still uses `.name` (a call or a read, not the `def`)."""
    source = inspect.getsource(importlib.import_module(module))
    return re.search(rf"\.{re.escape(name)}\b", source) is not None


def _problem(use: Use) -> str | None:
    """What is wrong with `use` on the installed Twisted, or None."""
    problem = _missing(use)
    if problem is None:
        unread = [module for module in use.readers if not _refers_to(module, use.name)]
        if unread:
            problem = (f"is no longer used by {', '.join(unread)}, so what we do with it has no "
                       f"effect")
    return problem


def _missing(use: Use) -> str | None:
    """Whether `use` is there, of the kind and with the parameters we expect, or why not."""
    try:
        if use.kind is Kind.MODULE:
            importlib.import_module(use.module)
            return None
        if use.kind is Kind.PARAMETER:
            method = _resolve(use, use.path[:-1])
            if use.name not in _param_names(method):
                return f"has no parameter {use.name!r} (has {_param_names(method)})"
            return None
        owner_path, name = use.path[:-1], use.name
        owner = _resolve(use, owner_path)
    except (ImportError, AttributeError) as e:
        return f"is gone ({e})"
    if use.kind is Kind.CLASS:
        obj = getattr(owner, name, None)
        return None if inspect.isclass(obj) else f"is not a class any more ({obj!r})"
    if use.kind is Kind.VALUE:
        return None if hasattr(owner, name) else "is gone"
    if use.kind is Kind.ATTRIBUTE:
        if hasattr(owner, name):
            return None
        make = SAMPLES.get(f"{use.module}:{'.'.join(owner_path)}")
        if make is not None and hasattr(make(), name):
            return None
        if re.search(rf"\bself\.{re.escape(name)}\s*=", inspect.getsource(owner)):
            return None  # set while a request is handled (e.g. HTTPChannel._command)
        return "is neither a class attribute, set on a fresh instance, nor assigned by the class"
    # METHOD and OVERRIDE
    func = inspect.getattr_static(owner, name, None)
    if not callable(func):
        return "is not a method of the class any more"
    if use.params is not None and _param_names(func) != use.params:
        return f"has parameters {_param_names(func)}, expected {use.params}"
    return None


@pytest.mark.parametrize("use", PRIVATE_NAMES, ids=lambda use: use.target)
def test_private_name_is_still_there(use: Use) -> None:
    problem = _problem(use)
    assert problem is None, f"{TWISTED}: {use.target} {problem}.\n  {use}"


def test_the_table_has_no_duplicates() -> None:
    targets = [use.target for use in PRIVATE_NAMES]
    assert sorted({t for t in targets if targets.count(t) > 1}) == []


@pytest.mark.parametrize("use", PRIVATE_NAMES, ids=lambda use: use.target)
def test_entry_is_still_used_where_it_says(use: Use) -> None:
    """No stale entries: each named file exists and mentions the name."""
    for where in use.where:
        path = ROOT / where
        assert path.is_file(), f"{use.target}: {where} does not exist"
        assert re.search(rf"\b{re.escape(use.name)}\b", path.read_text()), \
            f"{use.target}: {where} no longer mentions {use.name!r}"


# -- the scan -----------------------------------------------------------------------------------


def _is_private_module(module: str) -> bool:
    return any(part.startswith("_") for part in module.split("."))


def _is_private_class(cls: type) -> bool:
    return _is_private_module(cls.__module__) or cls.__name__.startswith("_")


@cache
def _twisted_names() -> tuple[frozenset[str], frozenset[str]]:
    """Every `_name` in Twisted's source (what a `x._name` of ours may be reaching for), and
    those among them passed as keywords or declared as parameters with a default."""
    names: set[str] = set()
    keywords: set[str] = set()
    for path in TWISTED_DIR.rglob("*.py"):
        source = path.read_text(errors="replace")
        names.update(re.findall(r"\b_[A-Za-z]\w*", source))
        keywords.update(re.findall(r"[(,]\s*(_[A-Za-z]\w*)\s*(?::\s*[^,=()]+)?=(?!=)", source))
    return frozenset(names), frozenset(keywords)


@cache
def _class_source(cls: type) -> str:
    try:
        return inspect.getsource(cls)
    except (OSError, TypeError):  # classes made at run time (proxyForInterface) have none
        return ""


def _twisted_defines(classes: list[type], name: str) -> bool:
    return any(name in vars(c) or re.search(rf"\bself\.{re.escape(name)}\b", _class_source(c))
               for c in classes)


def _interface_names(classes: list[type]) -> set[str]:
    names: set[str] = set()
    for cls in classes:
        for iface in implementedBy(cls).flattened():
            names.update(iface.names(all=True))
    return names


def _is_private_twisted_name(bases: list[type], name: str) -> bool:
    """Does `name`, used on `self` in a subclass of `bases`, belong to Twisted's private side?"""
    mro = [c for base in bases for c in base.__mro__ if c.__module__.split(".")[0] == "twisted"]
    if name.startswith("_"):
        return _twisted_defines(mro, name)
    private = [c for c in mro if _is_private_class(c)]
    public = [c for c in mro if not _is_private_class(c)]
    return (_twisted_defines(private, name) and not _twisted_defines(public, name)
            and name not in _interface_names(mro))


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_object(dotted: str) -> Any:
    """The object named `a.b.C`, if it is Twisted's or ours (other packages are not imported)."""
    if dotted.split(".")[0] not in ("twisted", "ssekd"):
        return None
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for part in parts[i:]:
                obj = getattr(obj, part)
        except AttributeError:
            return None
        return obj
    return None


class _File:
    """One scanned file: its tree, what its imported names stand for, and its classes."""

    def __init__(self, path: Path, root: Path) -> None:
        self.rel = path.relative_to(root).as_posix()
        self.tree = ast.parse(path.read_text(), str(path))
        self.imports: dict[str, str] = {}
        package = _module_name(path, root).split(".")
        if path.name != "__init__.py":
            package = package[:-1]
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.imports[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        self.imports[top] = top
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[:len(package) - node.level + 1] + [base]).strip(".")
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = f"{base}.{alias.name}"
        self.classes = {node.name: node for node in ast.walk(self.tree)
                        if isinstance(node, ast.ClassDef)}

    def dotted(self, expr: ast.expr) -> str | None:
        if isinstance(expr, ast.Name):
            return self.imports.get(expr.id)
        if isinstance(expr, ast.Attribute):
            head = self.dotted(expr.value)
            return f"{head}.{expr.attr}" if head else None
        return None

    def twisted_bases(self, node: ast.ClassDef, seen: frozenset[str] = frozenset()) -> list[type]:
        """The Twisted classes `node` derives from, through our classes as well."""
        found: list[type] = []
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id in self.classes and base.id not in seen:
                found += self.twisted_bases(self.classes[base.id], seen | {node.name})
                continue
            dotted = self.dotted(base)
            obj = _import_object(dotted) if dotted else None
            if inspect.isclass(obj):
                found += [c for c in obj.__mro__ if c.__module__.split(".")[0] == "twisted"][:1]
        return found


def project_files() -> Iterator[Path]:
    """The scanned files, this one aside (its table and checks name every private name)."""
    me = Path(__file__).resolve()
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            if path.resolve() != me:
                yield path


def _own_names(files: list[_File]) -> set[str]:
    """Names the project defines: functions, classes, class attributes, `self.x = ...`."""
    names: set[str] = set()
    for f in files:
        for node in ast.walk(f.tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                    and isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _names_on_self(node: ast.ClassDef) -> set[str]:
    """What a class defines, overrides or reads on `self` (dunders aside)."""
    names = set()
    for item in node.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(item.name)
        elif isinstance(item, ast.Assign):
            names.update(t.id for t in item.targets if isinstance(t, ast.Name))
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            names.add(item.target.id)
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) \
                and sub.value.id == "self":
            names.add(sub.attr)
    return {n for n in names if not (n.startswith("__") and n.endswith("__"))}


def scan(paths: Iterator[Path], root: Path) -> dict[str, set[str]]:
    """Private Twisted names used in `paths`: name -> files (relative to `root`)."""
    files = [_File(path, root) for path in paths]
    found: dict[str, set[str]] = {}
    twisted_self_names: set[tuple[str, str]] = set()

    def note(name: str, f: _File) -> None:
        found.setdefault(name, set()).add(f.rel)

    for f in files:
        for node in ast.walk(f.tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("twisted"):
                module = node.module or ""
                if _is_private_module(module):
                    note(module, f)
                for alias in node.names:
                    if alias.name.startswith("_") or _is_private_module(module):
                        note(alias.name, f)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("twisted") and _is_private_module(alias.name):
                        note(alias.name, f)
            elif isinstance(node, ast.ClassDef):
                bases = f.twisted_bases(node)
                if bases:
                    for name in _names_on_self(node):
                        if _is_private_twisted_name(bases, name):
                            note(name, f)
                            twisted_self_names.add((name, f.rel))
    own = _own_names(files) - {name for name, _ in twisted_self_names}
    attributes, keywords = _twisted_names()

    def reaching(name: str, among: frozenset[str]) -> bool:
        return (name.startswith("_") and not name.startswith("__") and name not in own
                and name in among)

    for f in files:
        for node in ast.walk(f.tree):
            names: list[str] = []
            params: list[str] = []
            if isinstance(node, ast.Attribute) and not (
                    isinstance(node.value, ast.Name) and node.value.id == "self"):
                names.append(node.attr)
            elif isinstance(node, ast.Call):
                params += [k.arg for k in node.keywords if k.arg]
                if isinstance(node.func, ast.Name) and node.func.id in (
                        "getattr", "hasattr", "setattr") and len(node.args) > 1 \
                        and isinstance(node.args[1], ast.Constant) \
                        and isinstance(node.args[1].value, str):
                    names.append(node.args[1].value)
            elif isinstance(node, ast.arg):
                params.append(node.arg)
            for name in names:
                if reaching(name, attributes):
                    note(name, f)
            for name in params:
                if reaching(name, keywords):
                    note(name, f)
    return found


def test_every_private_twisted_name_used_is_in_the_table() -> None:
    listed: dict[str, set[str]] = {}
    for use in PRIVATE_NAMES:
        listed.setdefault(use.name, set()).update(use.where)
    missing = sorted(f"{name} in {where}" for name, files in scan(project_files(), ROOT).items()
                     for where in sorted(files - listed.get(name, set())))
    assert missing == [], (
        "private Twisted names used but not in PRIVATE_NAMES (add each with where and why, or "
        "rename an attribute of ours that collides with one of Twisted's):\n  "
        + "\n  ".join(missing))


PROBE = """\
from twisted.internet.protocol import Protocol
from twisted.web import http
from twisted.web._http2 import H2Connection

class Plain(Protocol):
    def _sendPrioritisedData(self) -> None:   # not a name Protocol has: ours
        self._mine = 1                         # ours
        self._path(_scheme="x")                # ours; not a private Twisted keyword

class Batching(H2Connection):
    def go(self) -> None:
        self._stillProducing                   # Twisted's, read
        self._reactor = None                   # Twisted's, overwritten (a collision)
        self.streams                           # public-looking, but only H2Connection has it
        self.transport                         # public: Protocol has it
        self.connectionLost(None, _cancelTimeouts=False)   # a private keyword

def reach(x: object) -> None:
    x._mine                                    # ours
    x._tlsConnection                           # Twisted's
    getattr(x, "_exitSignal")                  # Twisted's
    http._GenericHTTPChannelProtocol           # Twisted's
"""


def test_the_scan_finds_what_it_is_meant_to(tmp_path: Path) -> None:
    """The scan on a made-up file: each shape of use is found, our own names are not."""
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    assert scan(iter([probe]), tmp_path) == {name: {"probe.py"} for name in (
        "twisted.web._http2", "H2Connection", "_stillProducing", "_reactor", "streams",
        "_cancelTimeouts", "_tlsConnection", "_exitSignal", "_GenericHTTPChannelProtocol")}
