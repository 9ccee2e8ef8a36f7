"""Reading the specs a binding names (`<label>: {catalog: {<name>: {subject, version}}}`) through
their catalogs, whatever the spec format: a spec that cannot be read or parsed, or is not a
document of the format's version 3, is an error at its line (of the config, for an inline one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from ssekd.config.document import Document, parse_text
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.spi.compose import ComposeContext, Source

Path_ = tuple[str | int, ...]

#: How a message names each spec format.
FORMATS = {"openapi": "OpenAPI", "asyncapi": "AsyncAPI"}


class ReadSpec(Protocol):
    """What reading needs of the spec it makes: its data, and issues at its lines."""

    @property
    def data(self) -> Mapping[str, Any]: ...

    def issue(self, path: Path_, message: str) -> ConfigIssue: ...


S = TypeVar("S", bound=ReadSpec)


def read_specs(ctx: ComposeContext, entries: Mapping[str, Any], base: Path_, family: str,
               make: Callable[[str, Source, Document, Path_], S],
               version_example: str = "3.x.y") -> dict[str, S]:
    """The specs of `entries` (`<label>: {catalog: ...}` at `base` of the config), read through
    their catalogs, parsed and made by `make(label, source, document, option_path)`; each must
    be a document of `family` 3 (`openapi` or `asyncapi`; `version_example` is what the message
    shows as the version expected)."""
    issues: list[ConfigIssue] = []
    specs: dict[str, S] = {}
    for label, entry in entries.items():
        at: Path_ = base + (label,)
        [(catalog, ref)] = entry["catalog"].items()
        try:
            source = ctx.read(catalog, str(ref["subject"]), ref.get("version", "latest"),
                              at + ("catalog", catalog))
        except ConfigError as e:
            issues.extend(e.issues)
            continue
        try:
            document = parse_text(source.text, source.file, expressions=False)
        except ConfigError as e:  # YAML that does not parse: at its line
            issues.extend(_shifted(e.issues, source))
            continue
        spec = make(str(label), source, document, at)
        version = spec.data.get(family)
        if not (isinstance(version, str) and version.startswith("3.")):
            issues.append(spec.issue((family,), f"expected an {FORMATS[family]} 3 document "
                                                f"({family}: {version_example}), got "
                                                f"{version!r}"))
            continue
        specs[str(label)] = spec
    if issues:
        raise ConfigError(issues)
    return specs


def _shifted(issues: list[ConfigIssue], source: Source) -> list[ConfigIssue]:
    """A YAML problem in an inline spec, at its line of the config."""
    return [ConfigIssue(i.file, None if i.line is None else source.first_line - 1 + i.line,
                        i.path, i.message) for i in issues]
