"""What a kafka client's exit says about its connections: plain, or TLS with what to trust.

librdkafka makes the kafka client's connections, to its `servers` and to the brokers they
name, so the exit is not a connector the client uses; it only says how to connect, in Zilla's
shape: a tcp client without options (plaintext), or a tls client in front of one (TLS, trusting
the tls client's `trust` entries of its vault, or the system's CAs with `trustcacerts`). What
the tls client trusts reaches librdkafka as `ssl.ca.pem`, in memory: no PEM file of the daemon's
is written (`settings.TlsTrust`).

What librdkafka cannot do as written is refused at the line that says it, never ignored:

- an address on the way (a tcp client's `host` and `port`): the `servers` say where;
- an `sni` other than the host of every server: librdkafka sends each broker's own host name
  and checks the broker's certificate against it, and cannot send or check another;
- `properties` that contradict the tls client: a `security.protocol` without TLS, or a CA of
  their own (`ssl.ca.*`), which would replace what the vault trusts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from ssekd.bindings.kafka.settings import TlsTrust
from ssekd.config.errors import ConfigError
from ssekd.config.model import Binding
from ssekd.spi.binding import BuildContext
from ssekd.spi.connection import Connector

#: `properties` that would replace the trust of a tls client on the way out.
CA_PROPERTIES = ("ssl.ca.location", "ssl.ca.pem", "ssl.ca.certificate.stores")


@runtime_checkable
class TlsWayOut(Protocol):
    """What the kafka client reads of a tls client on its way out (the tls client's runtime
    offers it; see `ssekd.bindings.tls_client`)."""

    @property
    def name(self) -> str: ...

    @property
    def secure(self) -> bool: ...

    @property
    def trusted(self) -> tuple[x509.Certificate, ...] | None:
        """The certificates a server's must chain to; None: the system's CA certificates."""

    @property
    def server_name(self) -> str | None:
        """The `sni` the config gives, or None."""


def tls_trust(ctx: BuildContext, binding: Binding, servers: Sequence[str],
              properties: Mapping[str, Any]) -> TlsTrust | None:
    """TLS to the brokers when the exit of kafka client `binding` is a tls client, None when it
    is a tcp client (or there is none). Raises ConfigError (module docstring)."""
    if binding.exit is None:
        return None
    out = ctx.exit(binding.exit, Connector)
    if out.address is not None:
        tcp = ctx.config.bindings[binding.exit].exit if out.secure else binding.exit
        raise ConfigError([ctx.issue(("bindings", tcp or binding.exit, "options"),
                                     f"options.host and port on the exit of kafka client "
                                     f"{binding.name!r} would be ignored: the kafka client "
                                     f"connects to its `servers` itself; give its tcp client "
                                     f"no options")])
    if not out.secure:
        return None
    if not isinstance(out, TlsWayOut):
        raise ConfigError([ctx.issue(("bindings", binding.name, "exit"),
                                     f"expected a tcp client or a tls client as the exit of "
                                     f"kafka client {binding.name!r}")])
    issues = []
    tls_options: tuple[str | int, ...] = ("bindings", out.name, "options")
    hosts = sorted({s.rpartition(":")[0].lower() for s in servers})
    if out.server_name is not None and hosts != [out.server_name.lower()]:
        issues.append(ctx.issue(tls_options + ("sni", 0),
                                f"expected sni to be the host of the servers of kafka client "
                                f"{binding.name!r} ({', '.join(hosts)}), or no sni: "
                                f"librdkafka sends each broker's own host name and checks its "
                                f"certificate against it"))
    options: tuple[str | int, ...] = ("bindings", binding.name, "options", "properties")
    protocol = properties.get("security.protocol")
    if protocol is not None and str(protocol).lower() not in ("ssl", "sasl_ssl"):
        issues.append(ctx.issue(options + ("security.protocol",),
                                f"expected SSL or SASL_SSL, or no security.protocol: the exit "
                                f"{out.name!r} is a tls client"))
    issues += [ctx.issue(options + (key,),
                         f"expected no {key}: what the brokers' certificates must chain to is "
                         f"what tls client {out.name!r} trusts")
               for key in CA_PROPERTIES if key in properties]
    if issues:
        raise ConfigError(issues)
    pem = None if out.trusted is None else \
        "".join(c.public_bytes(Encoding.PEM).decode("ascii") for c in out.trusted)
    return TlsTrust(pem, out.name)
