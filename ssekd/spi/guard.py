"""Authorization: what a guard's runtime offers the bindings that name it, and the values a
check or a renewal answers with (`Session`, `Refusal`, `Renewal`, the `Lease` a long-lived
response runs under). A guard type registers a `ssekd.spi.binding.GuardType`.

A guard's runtime plays one of two roles: a `Guard` checks the credentials requests carry (jwt);
a `CredentialSource` holds credentials a client binding presents on everyone's behalf (inline,
for a kafka client's SASL `authorization`). A binding asks for the role it needs, and a guard of
the other role is a config error naming both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from cryptography import x509
from twisted.internet.defer import Deferred


class Session(Protocol):
    """What a guard's authenticated session offers the bindings behind it."""

    @property
    def identity(self) -> str | None:
        """Who the credentials name (the guard's identity claim), for
        `${guarded['guard'].identity}` in a route's `with`; None when they name no one."""

    @property
    def roles(self) -> frozenset[str]:
        """The roles the credentials grant, for a route's `guarded: {guard: [roles]}`."""

    @property
    def expires_at(self) -> float | None:
        """When the credentials stop being valid (epoch seconds, the reactor's clock), or None
        when they never do: a stream they authorize ends then unless it is renewed."""


@dataclass(frozen=True)
class Refusal:
    """Why a request's credentials for one guard do not let it through.

    `status` is what the client is answered: `401` (no credentials), `403` (invalid, or not
    enough), `503` (temporary: the guard cannot check tokens now; try again in `retry_after`
    seconds). `reason` goes into the guard's failure event, never the token itself.
    """

    status: int
    reason: str
    retry_after: float | None = None
    #: Whether the guard already reported it (it reports every token it refuses as it checks).
    reported: bool = False


@dataclass(frozen=True)
class Renewal:
    """What a renewal request did with one guard's session on one worker: the leases it renewed,
    else why none (unreported: the worker that answers the client reports the one it answers)."""

    renewed: int
    refusal: Refusal | None = None
    #: How far matching got before it stopped, to answer the most telling refusal when several
    #: workers tried: 0 no stream of that guard, 1 only another identity's, 2 the identity's
    #: streams but a role dropped; -1 the token itself was refused.
    reach: int = 0


@runtime_checkable
class Guard(Protocol):
    """The runtime of a guard (e.g. `jwt`): checks tokens, reports refusals."""

    @property
    def challenge(self) -> float:
        """Seconds before a session expires at which its streams are asked for fresh
        credentials (0: never asked)."""

    def verify(self, token: str) -> Session | Refusal | Deferred[Session | Refusal]:
        """Check `token`: a session, a refusal, or - while the guard fetches keys a token names
        and it does not have yet - a Deferred firing with one of them. Never raises; a refusal
        is reported (event) before it is returned."""

    def report(self, reason: str) -> None:
        """Report a refusal decided outside the guard (a missing role, a renewal that reaches no
        stream) as this guard's authorization failure event."""


@runtime_checkable
class CertificateGuard(Guard, Protocol):
    """A guard whose credentials are the certificate chain a client presented in a TLS handshake
    and the tls server verified (the `x509` guard). Only a tls server's `options.authorization`
    hands it one; it takes no token from a request (its `verify` refuses every one), so an http
    binding's `authorization` may not name it: a chain a client merely sent is no proof."""

    def verify_chain(self, chain: Sequence[x509.Certificate]) -> Session | Refusal:
        """The session of a verified chain (leaf first), or a refusal (an empty chain). Never
        raises; a refusal is reported (event) before it is returned."""


class Lease(Protocol):
    """The authorization a long-lived response runs under: the sessions it was opened with, until
    a renewal replaces them. The http binding keeps the leases of a connection (and, on HTTP/1.1,
    of a client) so that one renewal request reaches every stream it may renew."""

    @property
    def expires_at(self) -> float | None:
        """The earliest expiry of its sessions (epoch seconds), or None: never."""

    @property
    def challenge(self) -> float:
        """Seconds before `expires_at` at which the client is asked for fresh credentials."""

    def hold(self, renewed: Callable[[], None]) -> None:
        """Keep this lease renewable while the response is open; `renewed` is called after each
        renewal (the expiry moved)."""

    def release(self) -> None:
        """The response ended: no renewal reaches it any more."""


@runtime_checkable
class CredentialSource(Protocol):
    """The runtime of a guard that checks nothing and holds credentials instead, which a client
    binding presents to its upstream for every client (`${{env...}}` in the config, usually):
    what a kafka client's `authorization` puts for `{identity}` and `{credentials}`."""

    @property
    def identity(self) -> str | None:
        """Who (a SASL user name), or None when the guard names no one."""

    @property
    def credentials(self) -> str | None:
        """The secret (a SASL password), or None when the guard has none. Never logged."""


#: What a guard type's `build` returns: a runtime of one of the two roles.
GuardRuntime = Guard | CredentialSource
