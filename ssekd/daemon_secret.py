"""A secret the processes of one daemon share, for what one process signs and another checks.

http-kafka's async locations carry a MAC (`ssekd.bindings.http_kafka.locations`): the worker
that answers a location's GET is not always the one that issued it, so every worker must hold
the same key. The first process to ask makes 32 random bytes and puts them in its environment
(`SSEKD_DAEMON_SECRET`, hex), which the workers it starts inherit; a process that finds the
variable set uses it. Setting it yourself (the same value on every daemon behind a balancer, from
a secret store) makes every daemon accept what another signed; otherwise a daemon's secret lives
as long as the daemon does. A binding's own option (`location-secret`) overrides it.
"""

from __future__ import annotations

import os

#: The environment variable holding the secret, hex.
ENV = "SSEKD_DAEMON_SECRET"
#: Bytes of a secret made here; one given in the environment must have at least `MIN_BYTES`.
SECRET_BYTES = 32
MIN_BYTES = 16


def daemon_secret() -> bytes:
    """This daemon's secret: from the environment, else made now and put there."""
    given = os.environ.get(ENV, "")
    try:
        secret = bytes.fromhex(given)
    except ValueError:
        secret = b""
    if len(secret) >= MIN_BYTES:
        return secret
    secret = os.urandom(SECRET_BYTES)
    os.environ[ENV] = secret.hex()
    return secret
