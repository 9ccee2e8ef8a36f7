"""Where an http client checks an upstream's response before relaying it (the place response
validation, `options.requests[].responses`, plugs in).

Zilla aborts a response whose body fails its model in the middle of the answer; ssekd holds such
a response instead: when `ResponseCheck.wants` says so for a response head, the relay keeps the
status, headers and body (at most `max_body` bytes) and calls `check` once the body is whole.
Nothing of that response has reached the client yet, so `Relay` says what happens:

- `None`: the response is relayed as it came (head, then the held body);
- `Abort(reason)`: the client gets the status and headers, then the answer is cut off (the
  HTTP/1.1 connection closed short, the HTTP/2 stream reset) as Zilla's is, and the http client
  reports `BINDING_HTTP_RESPONSE_ABORTED` with `reason`; `Abort(reason, instead=503)`: the
  client gets that status instead, with `Retry-After: 0` and no body. A body over `max_body` is aborted the
  same way (reason `body over N bytes`), without a `check` call: it cannot be checked whole.

Responses `wants` declines stream through as they arrive, with flow control.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class UpstreamAnswer:
    """An upstream response to check: the request it answers (method, path with query) and
    the response's status, end-to-end headers (lower-case names) and whole body."""

    method: str
    path: str
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def header(self, name: str) -> str | None:
        """The first value of header `name` (lower case), or None."""
        for n, v in self.headers:
            if n == name:
                return v
        return None


@dataclass(frozen=True)
class Abort:
    """`check`'s verdict that the response must not be relayed whole: why, for the event.
    With `instead`, the client gets that status (no body, `Retry-After: 0`) in place of the
    response, as Zilla answers a response whose headers its model refuses."""

    reason: str
    instead: int | None = None


@runtime_checkable
class ResponseCheck(Protocol):
    """Checks responses of one http client (see the module docstring)."""

    @property
    def max_body(self) -> int:
        """The most body bytes held for one check."""

    def wants(self, method: str, path: str, status: int,
              headers: tuple[tuple[str, str], ...]) -> bool:
        """Whether this response (its head just arrived) is to be held and checked."""

    def check(self, answer: UpstreamAnswer) -> Abort | None:
        """None to relay the response, or why it is aborted. Runs on the reactor: it must be
        quick (a compiled schema, not a fetch)."""
