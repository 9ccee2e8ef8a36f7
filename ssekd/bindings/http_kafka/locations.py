"""Async locations: where a client polls for the reply to its write, bound to what issued it.

A produce route with `async` answers `Prefer: respond-async` with `202` and a location such as
`/items/${params.id};cid=${correlationId}`; a GET of it answers the reply once it is there.
Zilla puts the bare correlation id there. That made the location a bearer capability good for
any path and anyone: `GET /items/other;cid=<id>` served the reply to the write of item `a1`,
and whoever read the id in a log read the reply. ssekd binds it instead:

- `${correlationId}` in a location stands for `<correlation id>.<tag>`, the id percent-encoded
  (an idempotency key is any visible ASCII: `/`, `;` or `%` must not change the path) and the
  tag a MAC (HMAC-SHA256, 128 bits, base64url) over the binding, the correlation id, the values
  of the `${params.x}` the location names and, on a guarded route, the identity of each of the
  route's guards. A GET whose path names other params, whose requester is another identity, or
  whose tag was made up is `404`, as for a location never issued.
- The key is the binding's `location-secret`, else the daemon's secret (`ssekd.daemon_secret`),
  shared by its workers: any worker of the daemon accepts what another issued.
- Logs never show the correlation part of a location (`LocationTemplate.redact`): the http
  binding's access event and http-kafka's own events print `…` in its place.

The record and the reply carry the plain correlation id, as Zilla's do: the tag exists only in
the location.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote

from ssekd.patterns import Pattern
from ssekd.telemetry.redact import MASK

#: The placeholder of an `async` value that the location token replaces.
CORRELATION = "${correlationId}"
#: The capture the token is matched as in a GET's path.
_CAPTURE = "correlationId"
_PARAM = re.compile(r"\$\{params\.([A-Za-z_][A-Za-z0-9_]*)\}")
#: Bytes of the MAC a location carries.
TAG_BYTES = 16


@dataclass(frozen=True)
class LocationTemplate:
    """One `async` value with `${correlationId}`, as a pattern a GET's path is matched with."""

    pattern: Pattern
    #: The `${params.x}` names the value uses, sorted: what the tag binds.
    names: tuple[str, ...]

    @classmethod
    def compile(cls, template: str) -> LocationTemplate:
        text = template.replace(CORRELATION, "{" + _CAPTURE + "}")
        text = _PARAM.sub(r"{\1}", text)
        return cls(Pattern.compile(text), param_names(template))

    def match(self, path: str) -> tuple[str, dict[str, str]] | None:
        """(the raw token, the location's params decoded) when `path` is this location."""
        found = self.pattern.match(path)
        if found is None or not found.get(_CAPTURE):
            return None
        token = found.pop(_CAPTURE)
        return token, {k: unquote(v) for k, v in found.items()}

    def redact(self, uri: str) -> str:
        """`uri` with the token of this location (if it is one) shown as `…`."""
        base, sep, query = uri.partition("?")
        found = self.pattern.match(base)
        token = None if found is None else found.get(_CAPTURE)
        if not token:
            return uri
        at = base.rfind(token)
        return base[:at] + MASK + base[at + len(token):] + sep + query


def param_names(template: str) -> tuple[str, ...]:
    """The `${params.x}` names an `async` value uses, sorted: what its tag binds."""
    return tuple(sorted(set(_PARAM.findall(template))))


class LocationSigner:
    """Makes and checks the tokens of one binding's locations (module docstring)."""

    def __init__(self, binding: str, secret: bytes) -> None:
        self.binding = binding
        self._secret = secret

    def token(self, correlation: str, names: tuple[str, ...], params: Mapping[str, str],
              identities: Mapping[str, str]) -> str:
        """What `${correlationId}` becomes in a location for these params and identities."""
        return f"{quote(correlation, safe='')}.{self._tag(correlation, names, params, identities)}"

    def correlation(self, token: str, names: tuple[str, ...], params: Mapping[str, str],
                    identities: Mapping[str, str]) -> str | None:
        """The correlation id a GET's token names, or None when the token was not issued for
        these params and identities (or not by this key)."""
        correlation, dot, tag = unquote(token).rpartition(".")
        if not dot or not correlation:
            return None
        expected = self._tag(correlation, names, params, identities)
        return correlation if hmac.compare_digest(tag, expected) else None

    def _tag(self, correlation: str, names: tuple[str, ...], params: Mapping[str, str],
             identities: Mapping[str, str]) -> str:
        # JSON: each part keeps its bounds whatever its characters (a value may hold `\0`)
        parts = [self.binding, correlation, [[n, params.get(n, "")] for n in names],
                 [[g, identities[g]] for g in sorted(identities)]]
        mac = hmac.new(self._secret, json.dumps(parts).encode("utf-8"), hashlib.sha256)
        return base64.urlsafe_b64encode(mac.digest()[:TAG_BYTES]).rstrip(b"=").decode("ascii")
