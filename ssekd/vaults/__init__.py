"""Vaults: where bindings get keys and trusted certificates by alias (docs/config-reference.md).

Only `filesystem` exists (PKCS#12 and JKS stores); `open_vault` is what a binding that takes a `vault`
calls while it is built.
"""

from __future__ import annotations

from ssekd.config.errors import ConfigError
from ssekd.config.model import Config
from ssekd.vaults.filesystem import FilesystemVault, load_filesystem_vault
from ssekd.vaults.pkcs12 import StoreEntry

__all__ = ["FilesystemVault", "StoreEntry", "open_vault"]


def open_vault(config: Config, name: str) -> FilesystemVault:
    """Load vault `name` of `config`. Raises ConfigError (naming vault and store) on failure."""
    vault = config.vaults[name]  # the reference was checked when the config was loaded
    if vault.type != "filesystem":
        raise ConfigError([config.issue(("vaults", name, "type"),
                                        f"vault type {vault.type!r} is not supported; "
                                        f"expected filesystem")])
    return load_filesystem_vault(config, vault)
