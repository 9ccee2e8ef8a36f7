"""The SASL credentials a kafka client presents: its `sasl` as written, or Zilla's
`authorization`, which names one guard (an `inline` guard: `ssekd.guards.inline`) and says what
to send, with `{identity}` and `{credentials}` standing for what the guard holds.

As in Zilla, a user name that is exactly `{identity}` becomes the guard's identity and a password
that is exactly `{credentials}` its credentials; anything else is sent as written. A placeholder
the guard has nothing for is a config error at its line (Zilla would send the placeholder
itself). The result is the same mapping `sasl` gives (`settings.ClientSettings.sasl`), so both
reach librdkafka the same way (`sasl.mechanism`, `sasl.username`, `sasl.password`).
"""

from __future__ import annotations

from ssekd.config.errors import ConfigError
from ssekd.config.model import Binding
from ssekd.spi.binding import BuildContext

IDENTITY = "{identity}"
CREDENTIALS = "{credentials}"


def sasl_settings(ctx: BuildContext, binding: Binding) -> dict[str, str] | None:
    """The SASL mechanism, user name and password of kafka client `binding`, or None."""
    options = binding.options
    base: tuple[str | int, ...] = ("bindings", binding.name, "options")
    authorization = options.get("authorization")
    sasl = options.get("sasl")
    if not authorization:
        return {str(k): str(v) for k, v in sasl.items()} if sasl else None
    if sasl:
        raise ConfigError([ctx.issue(base + ("sasl",),
                                     "expected either `sasl` or `authorization`: both say what "
                                     "the client authenticates with")])
    [(guard, spec)] = authorization.items()  # the schema allows one
    source = ctx.credentials(guard)
    credentials = spec["credentials"]
    out = {"mechanism": str(credentials["mechanism"])}
    issues = []
    for field, placeholder, held, what in (("username", IDENTITY, source.identity, "identity"),
                                           ("password", CREDENTIALS, source.credentials,
                                            "credentials")):
        value = str(credentials[field])
        if value == placeholder:
            if held is None:
                issues.append(ctx.issue(base + ("authorization", guard, "credentials", field),
                                        f"guard {guard!r} has no `{what}` for {placeholder}"))
                continue
            value = held
        out[field] = value
    if issues:
        raise ConfigError(issues)
    return out
