"""The channel between the worker processes of one daemon, as bindings and guards see it."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Protocol

from twisted.internet.defer import Deferred

from ssekd.spi.guard import Renewal


class Siblings(Protocol):
    """The other worker processes of this daemon (`ssekd.workers.siblings`), for what one process would
    know by itself. A daemon without workers has none: `BuildContext.siblings` is None."""

    def renew(self, binding: str, host: str, tokens: Mapping[str, str]
              ) -> Deferred[list[Mapping[str, Renewal]]]:
        """Ask every sibling to renew, with `tokens` (guard -> token), the HTTP/1.1 leases that
        client `host` holds on its http binding `binding`: what each did, per guard. A sibling
        that does not answer in time renewed nothing (it is left out). Never fails."""

    def keys_changed(self, guard: str, kids: Collection[str]) -> None:
        """Tell every sibling that guard `guard` loaded a key set with other key ids: each
        fetches its own (a retired key must stop passing on every worker)."""
