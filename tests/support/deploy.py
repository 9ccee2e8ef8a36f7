"""What the deploy/ files are checked against: the shipped config (etc/zilla.yaml), its
listening ports, and the health paths its http binding answers on."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.http.health import HealthPaths
from ssekd.config.load import load_config
from ssekd.config.model import Config
from ssekd.health import Health
from ssekd.spi.plugins import discover

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


@dataclass(frozen=True)
class Served:
    """A port of the config and what answers there."""

    port: int
    #: The http binding reached without TLS on this port, else None.
    cleartext_http: str | None


def shipped_config() -> Config:
    return load_config(ROOT / "etc" / "zilla.yaml", discover(),
                       environ={"KEYSTORE_PASSWORD": "x"})


def served_ports(config: Config) -> dict[int, Served]:
    """Every port the tcp server bindings listen on, with the http binding a cleartext
    request reaches there (following `routes` by port, or `exit`)."""
    found = {}
    for b in config.bindings.values():
        if (b.type, b.kind) != ("tcp", "server"):
            continue
        ports = b.options["port"]
        for port in ports if isinstance(ports, list) else [ports]:
            exit = b.exit
            for route in b.routes:
                if any(w.get("port") == port for w in route.when):
                    exit = route.exit
                    break
            target = config.bindings[exit] if exit else None
            http = target.name if target is not None and target.type == "http" else None
            found[int(port)] = Served(int(port), http)
    return found


def health_paths(config: Config, binding: str) -> HealthPaths | None:
    """The liveness and readiness paths of an http binding (None without `options.health`)."""
    return HealthPaths.from_options(config.bindings[binding].options.get("health"),
                                    Health(MemoryReactorClock()))
