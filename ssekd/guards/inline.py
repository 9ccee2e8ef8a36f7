"""The `inline` guard: an identity and credentials written in the config, for a client binding
to present on everyone's behalf - in ssekd, the SASL user name and password a kafka client's
`authorization` sends as `{identity}` and `{credentials}` (Zilla's http.kafka.oneway example).

It checks nothing, so it is a `CredentialSource`, not a `Guard`: a route `guarded` by it, or an
http server's `authorization` naming it, is a config error at that line
(`GraphBuilder.guard`), never a route that lets every request through.

Zilla's `format` (`{identity}:{credentials}`) reads them out of each request's own credentials,
so that each client reaches Kafka as itself. ssekd's kafka client serves every client over the
same connections, so no request's credentials ever reach the guard: `format` is refused with
that reason rather than accepted and ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ssekd.config.errors import ConfigError
from ssekd.config.model import Guard as GuardConfig
from ssekd.spi.binding import BuildContext, GuardType


@dataclass(frozen=True)
class InlineGuard:
    """The runtime: what `{identity}` and `{credentials}` stand for (a `CredentialSource`)."""

    name: str
    identity: str | None
    #: Kept out of `repr`, so that no log line or traceback shows it.
    credentials: str | None = field(default=None, repr=False)


def _build(ctx: BuildContext, guard: GuardConfig) -> InlineGuard:
    options = guard.options
    if "format" in options:
        raise ConfigError([ctx.issue(("guards", guard.name, "options", "format"),
                                     "`format` reads identity and credentials out of each "
                                     "request's credentials, and none reach an inline guard in "
                                     "ssekd (its kafka client serves every client on the same "
                                     "connections); give `identity` and `credentials`")])
    identity, credentials = options.get("identity"), options.get("credentials")
    return InlineGuard(guard.name, None if identity is None else str(identity),
                       None if credentials is None else str(credentials))


GUARD = GuardType("inline", _build)
