"""What http-kafka reads from request headers and writes as Kafka headers (docs/write-path.md).

- `Prefer`: `respond-async` and `wait=N` (RFC 7240), the way Zilla reads them: tokens split at
  `;` or `,`, whitespace around them ignored.
- `If-Match`: `<progress64>/<etag>`, the second half of an sse-kafka key-form event id. Only the
  etag goes to Kafka (as the header `if-match`). Zilla silently drops a value without `/` or
  one in quotes; ssekd refuses it (`IfMatchRefused` -> `400`), since a write its client believes
  conditional must not go out unconditional.
- The Kafka headers of a write (`HeaderCopy`): what Zilla copies - on a route with `reply-to`
  the request's pseudo-headers (`:method`, `:scheme`, `:authority`, `:path`) then its headers in
  the order they came, but `content-length` and `prefer`; on a route without one only
  `content-type` - unless the route's `request-headers.copy` lists the names to copy. Whatever a
  route lists, these are never copied: the headers HTTP/1.1 uses for the connection
  (`connection`, `keep-alive`, `transfer-encoding`, `te`, `upgrade`, `expect`,
  `proxy-connection`, `host` - it is `:authority` already); credentials (`authorization`,
  `proxy-authorization`, `cookie`, every header the http binding's `authorization` reads a token
  from, and in `:path` the query parameters it reads tokens from): a token must not be copied
  into a topic every consumer reads; the names the record carries from elsewhere - the route's
  `overrides` (an identity a client must not pre-empt with a header of the same name), the
  reply-to and correlation-id headers, and any `zilla:` name; and the route's
  `request-headers.never`. Copying every header, a route also leaves out names that say they
  carry a secret (`x-api-key`, `x-auth-token`, `x-session-id`, ...: `CREDENTIAL_HINT`) unless
  its `copy` list names them. `if-match` carries only its etag, on every route: a condition is
  never dropped.
- The correlation id: `<idempotency key>-<md5 hex>` of the key, each forwarded header's name and
  value, the reply-to and override headers, and the body, in that order (Zilla's derivation,
  checked against its protocol scripts in tests/data/http-kafka-correlation.json): a client that
  sends the same request again with the same idempotency key makes the same correlation id.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import unquote_plus

from twisted.web.server import Request

#: Request headers never copied to Kafka, whatever a route lists (see the module docstring).
NEVER_COPIED = frozenset({
    "content-length", "prefer",
    "connection", "keep-alive", "transfer-encoding", "te", "upgrade", "expect",
    "proxy-connection", "host", "http2-settings",
    "authorization", "proxy-authorization", "cookie",
})
#: The pseudo-headers a route with a reply copies first, in this order (Zilla's).
PSEUDO_HEADERS = (":method", ":scheme", ":authority", ":path")
#: What in a header's name says it carries a secret: left out when a route copies every header.
CREDENTIAL_HINT = re.compile(
    r"auth|token|secret|passw|api-?key|cookie|session|credential|signature|csrf|xsrf")
#: The prefix of the headers Zilla's bindings write themselves (`zilla:correlation-id`, ...).
RESERVED_PREFIX = "zilla:"

_PREFER_WAIT = re.compile(r"^wait\s*=\s*([0-9]{1,9})$", re.IGNORECASE)
_IF_MATCH = re.compile(r"^(?P<progress>[A-Za-z0-9\-_=]+)(?:/(?P<etag>.*))?$", re.DOTALL)
#: A header field name (RFC 9110 token).
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


@dataclass(frozen=True)
class Prefer:
    """What a `Prefer` header asks: `respond-async`, and `wait=N` seconds (None: not asked)."""

    respond_async: bool = False
    wait: float | None = None


def parse_prefer(values: Sequence[bytes] | None) -> Prefer:
    """The preferences of every `Prefer` header of a request (unknown ones are ignored)."""
    respond_async = False
    wait: float | None = None
    for raw in values or ():
        for token in re.split(r"[;,]", raw.decode("latin-1")):
            token = token.strip()
            if token.lower() == "respond-async":
                respond_async = True
                continue
            m = _PREFER_WAIT.match(token)
            if m:
                wait = float(m.group(1))
    return Prefer(respond_async, wait)


class IfMatchRefused(ValueError):
    """An `If-Match` value ssekd cannot forward as a condition; the message says why."""


def parse_if_match(value: str) -> str:
    """The etag half of an `If-Match: <progress64>/<etag>` value, for the Kafka header
    `if-match`. Raises `IfMatchRefused` for anything else."""
    if '"' in value:
        raise IfMatchRefused("If-Match must be <progress>/<etag> as in an event id, without "
                             "quotes")
    m = _IF_MATCH.match(value.strip())
    if m is None:
        raise IfMatchRefused("If-Match must be <progress>/<etag>: the progress is base64url")
    etag = m.group("etag")
    if not etag:
        raise IfMatchRefused("If-Match has no etag after the progress (<progress>/<etag>): "
                             "the record it names carried no etag header, so there is "
                             "nothing to check the write against")
    return etag


def progress_of(value: str) -> str | None:
    """The progress half of an `If-None-Match` value (the whole value when it has no `/`),
    or None when it is not one ssekd could have sent."""
    m = _IF_MATCH.match(value.strip())
    return None if m is None else m.group("progress")


@dataclass(frozen=True)
class HeaderCopy:
    """Which request headers a produce route copies into its record (module docstring)."""

    #: The names copied (pseudo-headers included), or None: every one (a route with a reply).
    copy: frozenset[str] | None
    #: Names never copied besides `NEVER_COPIED`: the route's overrides, the reply-to and
    #: correlation-id headers, and its `request-headers.never`.
    never: frozenset[str] = frozenset()

    @classmethod
    def for_route(cls, reply: bool, copy: Iterable[str] | None, never: Iterable[str],
                  written: Iterable[str]) -> HeaderCopy:
        """A route's rule: Zilla's default (every header with a reply, `content-type`
        without), or the names its `copy` lists; never `never`, nor the names the record gets
        from elsewhere (`written`: overrides, reply-to, correlation id)."""
        listed = None if copy is None else frozenset(n.lower() for n in copy)
        default = None if reply else frozenset({"content-type"})
        return cls(default if listed is None else listed,
                   frozenset(n.lower() for n in (*never, *written)))

    def takes(self, name: str, credential_headers: Collection[str] = ()) -> bool:
        """Whether the request header `name` (lower case) is copied."""
        if (name in NEVER_COPIED or name in self.never or name in credential_headers
                or name.startswith(RESERVED_PREFIX)):
            return False
        if self.copy is None:
            return not CREDENTIAL_HINT.search(name)
        return name in self.copy


def forwarded(request: Request, pseudo: Sequence[tuple[str, str]], if_match: str | None,
              rule: HeaderCopy, credential_headers: Collection[str] = ()
              ) -> list[tuple[str, bytes]]:
    """The Kafka headers a request's own headers make under `rule`: the pseudo-headers it
    takes (`:method` ... `:path`), then each header and each of its values in the order they
    came, with `if-match` (always) carrying only its etag. `credential_headers`: the headers
    the http binding reads tokens from."""
    out = [(name, value.encode("latin-1")) for name, value in pseudo
           if rule.copy is None or name in rule.copy]
    for raw_name, values in request.requestHeaders.getAllRawHeaders():
        name = raw_name.decode("latin-1").lower()
        if name.startswith(":"):
            continue
        if name == "if-match":
            if if_match is not None:
                out.append((name, if_match.encode("utf-8")))
            continue
        if rule.takes(name, credential_headers):
            out.extend((name, v) for v in values)
    return out


def without_credentials(path: str, names: Collection[str]) -> str:
    """`:path` as Kafka gets it: without the query parameters the http binding's `authorization`
    reads tokens from (`HttpContext.credential_query`), the others as they came."""
    base, sep, query = path.partition("?")
    if not sep or not names:
        return path
    kept = [pair for pair in query.split("&") if unquote_plus(pair.partition("=")[0]) not in names]
    return f"{base}?{'&'.join(kept)}" if kept else base


def correlation_id(idempotency_key: str, key: bytes | None,
                   headers: Iterable[tuple[str, bytes]], body: bytes) -> str:
    """`<idempotency key>-<md5 hex>` of what the write carries (see the module docstring)."""
    digest = hashlib.md5(usedforsecurity=False)
    if key is not None:
        digest.update(key)
    for name, value in headers:
        digest.update(name.encode("utf-8"))
        digest.update(value)
    digest.update(body)
    return f"{idempotency_key}-{digest.hexdigest()}"


def response_header(name: str, value: bytes) -> bool:
    """Whether a reply's Kafka header may become a response header: a field name, not a
    pseudo-header nor one the HTTP layer sets itself, and a value without CR, LF or NUL."""
    return (bool(_TOKEN.match(name)) and name.lower() not in _RESPONSE_OWN
            and not any(c in value for c in b"\r\n\0"))


#: Response headers the http binding writes itself.
_RESPONSE_OWN = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive",
                           "te", "upgrade", "trailer", "date", "server"})
