"""GET a small document from a URL the config names (a JWKS, a schema registry), bounded.

The server at such a URL decides a lot: where a redirect leads, how fast its bytes come, how many
there are. A fetch therefore:

- follows redirects only to `http` and `https`, and never from `https` to `http` (a key set
  fetched over TLS must not be taken from a cleartext hop an attacker on the path can answer),
  five at most; `file:`, `ftp:`, `data:` and the rest are refused, as a first URL or as a
  redirect;
- ends at an overall `deadline` (seconds), whatever the server does: a per-read timeout alone
  lets a server that sends a byte every few seconds hold the fetch - and whatever waits on it -
  for ever. A watchdog shuts the connection's socket down when the deadline passes, which wakes
  the blocked read at once, in the TCP connect, the TLS handshake, the headers or the body;
- reads at most `max_bytes` of body.

It blocks: run it on a thread (the reactor's pool), never on the reactor thread. Proxies from
the environment (`https_proxy`, ...) are honoured as `urllib` honours them.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urljoin, urlsplit

#: Seconds one fetch may take in all: connect, TLS, redirects, headers and body.
DEFAULT_DEADLINE = 10.0
#: Redirects followed at most.
MAX_REDIRECTS = 5
SCHEMES = ("http", "https")


class FetchError(OSError):
    """The fetch was refused or given up; the message says why."""


class FetchTimeout(FetchError):
    """The deadline passed before the answer was complete."""


class Deadline:
    """An overall deadline for one fetch, and the sockets it shuts down when it passes."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, seconds), self.expire)
        self._timer.daemon = True

    def start(self) -> None:
        self._timer.start()

    def cancel(self) -> None:
        with self._lock:
            self._timer.cancel()
            self._sockets.clear()

    def remaining(self) -> float:
        """Seconds left; raises `FetchTimeout` when none are."""
        left = self.at - time.monotonic()
        if left <= 0 or self.expired:
            raise self.error()
        return left

    def error(self) -> FetchTimeout:
        return FetchTimeout(f"no complete answer within {self.seconds:g} s")

    def watch(self, sock: socket.socket) -> socket.socket:
        """Shut `sock` down when the deadline passes (at once if it has)."""
        with self._lock:
            if self.expired:
                _shutdown(sock)
            else:
                self._sockets.append(sock)
        return sock

    def expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                _shutdown(sock)


def _shutdown(sock: socket.socket) -> None:
    """Wake any thread blocked on `sock`: its read returns end-of-file. The plain socket's
    shutdown, also for a TLS socket (whose own would try to talk TLS from this thread)."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass  # not connected yet, or already closed


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Redirects to http(s) only, never from https to http, at most `MAX_REDIRECTS`."""

    max_redirections = MAX_REDIRECTS

    def http_error_302(self, req: urllib.request.Request, fp: Any, code: int, msg: str,
                       headers: Any) -> Any:
        location = headers.get("location") or headers.get("uri")
        if location is not None:
            scheme = urlsplit(urljoin(req.full_url, location)).scheme.lower()
            if scheme not in SCHEMES:
                raise FetchError(f"refused a redirect to a {scheme}: URL ({code})")
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str,
                         headers: Any, newurl: str) -> urllib.request.Request | None:
        scheme = urlsplit(newurl).scheme.lower()
        if scheme not in SCHEMES:
            raise FetchError(f"refused a redirect to a {scheme or 'relative'}: URL ({code})")
        if urlsplit(req.full_url).scheme.lower() == "https" and scheme != "https":
            raise FetchError(f"refused a redirect from https to {scheme} ({code})")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _connection(base: type[http.client.HTTPConnection], deadline: Deadline) -> Any:
    """`base` whose sockets the deadline watches, each step given only the time left."""

    class Connection(base):  # type: ignore[valid-type,misc]
        def connect(self) -> None:
            self.timeout = deadline.remaining()
            create: Any = self._create_connection  # type: ignore[has-type]
            self._create_connection = lambda *a, **kw: deadline.watch(create(*a, **kw))
            super().connect()

    return Connection


class _DeadlineContext(ssl.SSLContext):
    """A client TLS context whose sockets the deadline watches from before their handshake."""

    deadline: Deadline

    def wrap_socket(self, sock: socket.socket, *args: Any, **kw: Any) -> ssl.SSLSocket:
        kw["do_handshake_on_connect"] = False
        wrapped = super().wrap_socket(sock, *args, **kw)
        self.deadline.watch(wrapped)
        wrapped.settimeout(self.deadline.remaining())
        wrapped.do_handshake()
        return wrapped


def _tls_context(deadline: Deadline) -> ssl.SSLContext:
    """The system's CAs (`SSL_CERT_FILE` and `SSL_CERT_DIR` apply, as for `urllib`); the chain
    and the host name are verified."""
    context = _DeadlineContext(ssl.PROTOCOL_TLS_CLIENT)
    context.deadline = deadline
    context.load_default_certs()
    return context


class _Http(urllib.request.HTTPHandler):
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self.deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_connection(http.client.HTTPConnection, self.deadline), req)


class _Https(urllib.request.HTTPSHandler):
    def __init__(self, deadline: Deadline, context: ssl.SSLContext) -> None:
        super().__init__(context=context)
        self.deadline = deadline

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_connection(http.client.HTTPSConnection, self.deadline), req,
                            context=self._context)  # type: ignore[attr-defined]


def _opener(deadline: Deadline) -> urllib.request.OpenerDirector:
    """Only what a fetch needs: no `file:`, `ftp:` or `data:` handler, whatever the URL says."""
    opener = urllib.request.OpenerDirector()
    for handler in (urllib.request.ProxyHandler(), urllib.request.UnknownHandler(),
                    urllib.request.HTTPDefaultErrorHandler(), _Redirects(),
                    urllib.request.HTTPErrorProcessor(), _Http(deadline),
                    _Https(deadline, _tls_context(deadline))):
        opener.add_handler(handler)
    return opener


def _read(response: Any, max_bytes: int, deadline: Deadline) -> bytes:
    body = b""
    while len(body) <= max_bytes:
        deadline.remaining()
        chunk = response.read(min(65536, max_bytes + 1 - len(body)))
        if not chunk:
            break
        body += chunk
    return body


def fetch(url: str, accept: str, deadline: float = DEFAULT_DEADLINE,
          max_bytes: int = 1 << 20) -> tuple[int, bytes]:
    """GET `url`: the final status (any, after redirects) and up to `max_bytes + 1` bytes of
    body (so the caller can tell a body that was too large). Raises `FetchTimeout` past the
    deadline, `FetchError` for a refused URL or redirect, `OSError` when the server cannot be
    reached. Blocking (module docstring)."""
    scheme = urlsplit(url).scheme.lower()
    if scheme not in SCHEMES:
        raise FetchError(f"refused a {scheme or 'relative'}: URL")
    watch = Deadline(deadline)
    request = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "ssekd"})
    watch.start()
    try:
        try:
            with _opener(watch).open(request, timeout=watch.remaining()) as response:
                status, body = response.status, _read(response, max_bytes, watch)
        except urllib.error.HTTPError as e:
            with e:
                status, body = e.code, _read(e, max_bytes, watch)
        except FetchError:
            raise
        except (OSError, http.client.HTTPException, ValueError) as e:
            reason = getattr(e, "reason", None)
            if isinstance(reason, FetchError):  # urllib wraps what a handler raised
                raise reason from None
            if watch.expired:
                raise watch.error() from None
            if isinstance(e, OSError):
                raise
            raise FetchError(f"{type(e).__name__}: {e}") from None
        if watch.expired:  # the watchdog's shutdown reads as an end of body: not a whole one
            raise watch.error()
        return status, body
    finally:
        watch.cancel()

