"""The `filesystem` vault (docs/config-reference.md): PKCS#12 or JKS stores for `keys`, `trust`
and `signers`.

A vault is read once when a binding that names it is built, so a wrong password or a missing
file stops the daemon (or a reload) with a config error that names the vault and the store,
never at the first handshake. Bindings then ask for entries by alias; an alias that is not
there is reported by the binding, at the line that names it, with what the store does hold.

A store's first bytes say how it is read, whatever its `type` says, as Java reads them (its
JKS and PKCS#12 keystores each read the other format): `FEEDFEED` is a Java KeyStore
(`ssekd.vaults.jks`), anything else PKCS#12 (`ssekd.vaults.pkcs12`). So the `.jks` files keytool
has written as PKCS#12 since Java 9 (Zilla's examples have them) read under `type: jks`. A JCEKS
store is refused with the keytool command that converts it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ssekd.config.errors import ConfigError
from ssekd.config.model import Config, Vault
from ssekd.dev.certs import store_hint
from ssekd.vaults.jks import JCEKS_MAGIC, JKS_MAGIC, read_jks
from ssekd.vaults.pkcs12 import StoreEntry, StoreError, read_store

#: The three stores a filesystem vault may name, as in Zilla.
STORES = ("keys", "trust", "signers")


@dataclass(frozen=True)
class Store:
    """One loaded store: its entries by alias, and where it came from (for messages)."""

    role: str
    path: Path
    entries: Mapping[str, StoreEntry] = field(default_factory=dict)

    def describe(self) -> str:
        held = ", ".join(sorted(self.entries)) or "nothing"
        return f"{self.role} store {self.path} (holds: {held})"


@dataclass(frozen=True)
class FilesystemVault:
    """A loaded filesystem vault: `stores[role]` for each of keys, trust, signers configured."""

    name: str
    stores: Mapping[str, Store]

    def entry(self, role: str, alias: str) -> StoreEntry | None:
        store = self.stores.get(role)
        return store.entries.get(alias) if store else None

    def missing(self, role: str, alias: str) -> str:
        """Why `alias` cannot be used as a `role` entry, for a config error."""
        store = self.stores.get(role)
        if store is None:
            return f"vault {self.name!r} has no {role} store, so alias {alias!r} cannot be found"
        entry = store.entries.get(alias)
        if entry is not None and role == "keys" and entry.key is None:
            return (f"alias {alias!r} in vault {self.name!r} {store.role} store {store.path} "
                    f"is a certificate without a private key")
        return f"alias {alias!r} is not in vault {self.name!r}: {store.describe()}"


def load_filesystem_vault(config: Config, vault: Vault) -> FilesystemVault:
    """Read every store the vault names. Raises ConfigError naming the vault and the store."""
    issues = []
    stores: dict[str, Store] = {}
    for role in STORES:
        spec = vault.options.get(role)
        if not spec:
            continue
        where: tuple[str | int, ...] = ("vaults", vault.name, "options", role, "store")
        path = config.resolve_path(str(spec["store"]))
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            issues.append(config.issue(where, f"vault {vault.name!r} {role} store {path} "
                                              f"does not exist{store_hint(path, True)}",
                                       environment=True))
            continue
        except OSError as e:
            issues.append(config.issue(where, f"vault {vault.name!r} {role} store {path} "
                                              f"cannot be read: {e.strerror or e}"))
            continue
        try:
            entries = read_entries(data, spec.get("password"), role, path,
                                   str(spec.get("type", "pkcs12")))
        except StoreError as e:
            issues.append(config.issue(where, f"vault {vault.name!r} {role} store {path}: {e}"
                                              f"{store_hint(path, False)}"))
            continue
        by_alias: dict[str, StoreEntry] = {}
        for entry in entries:
            by_alias.setdefault(entry.alias, entry)  # first wins, as in the store's own order
        stores[role] = Store(role, path, by_alias)
    if issues:
        raise ConfigError(issues)
    return FilesystemVault(vault.name, stores)


def read_entries(data: bytes, password: str | None, role: str, path: Path,
                 declared: str = "pkcs12") -> list[StoreEntry]:
    """The entries of a store file, read by its first bytes (module docstring); private keys
    of a JKS store only for a `keys` store. Raises StoreError; `declared` (the `type` given)
    only changes its words."""
    if data.startswith(JKS_MAGIC):
        return read_jks(data, password, keys=role == "keys")
    if data.startswith(JCEKS_MAGIC):
        raise StoreError(f"a JCEKS store, which ssekd does not read: convert it with keytool "
                         f"-importkeystore -srckeystore {path} -srcstoretype jceks "
                         f"-destkeystore {path.with_suffix('.p12')} -deststoretype pkcs12")
    try:
        return read_store(data, password)
    except StoreError as e:
        if declared == "jks" and str(e).startswith("wrong password"):
            raise StoreError("wrong password, or neither a JKS nor a PKCS#12 store") from e
        raise
