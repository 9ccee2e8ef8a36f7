"""zilla.yaml: `document` reads it (env substitution, YAML with lines), `schema` validates it,
`model` is its typed form, `load.load_config` does all of that and checks references.

Only the errors are re-exported here: they are what most callers need, and keeping this package
free of heavier imports lets the contract (`ssekd.spi`) import the model
without an import circle.
"""

from ssekd.config.errors import ConfigError, ConfigIssue

__all__ = ["ConfigError", "ConfigIssue"]
