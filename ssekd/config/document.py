"""Read zilla.yaml: `${{ env.X }}` substitution, then YAML with line numbers and duplicate-key errors.

The result is plain Python data plus a map from each path to the line it came from, so that the
schema and reference checks can say *where* a problem is, not only what it is.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ssekd.config.errors import ConfigError, ConfigIssue, format_path

Path_ = tuple[str | int, ...]

#: Zilla's expression syntax; spaces inside the braces are allowed.
ENV_EXPRESSION = re.compile(r"\$\{\{\s*env\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


@dataclass(frozen=True)
class Document:
    """A parsed config file: its data and where each path in it came from."""

    file: Path
    data: Any
    lines: Mapping[Path_, int]

    def line_of(self, path: Path_) -> int | None:
        """The line of `path`, or of its closest ancestor that has one."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(path[:end])
            if line is not None:
                return line
        return None

    def issue(self, path: Path_, message: str) -> ConfigIssue:
        return ConfigIssue(self.file, self.line_of(path), format_path(path), message)


def substitute_env(text: str, file: Path, environ: Mapping[str, str]) -> str:
    """Replace `${{ env.NAME }}` textually. Unlike Zilla, an unset variable is an error."""
    issues: list[ConfigIssue] = []

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in environ:
            return environ[name]
        line = text.count("\n", 0, match.start()) + 1
        issues.append(ConfigIssue(file, line, "", f"environment variable {name} is not set"))
        return ""

    result = ENV_EXPRESSION.sub(replace, text)
    if issues:
        raise ConfigError(issues)
    return result


class _Builder:
    """Turns a composed YAML node tree into data, recording lines and refusing duplicate keys."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self.lines: dict[Path_, int] = {}
        self.issues: list[ConfigIssue] = []
        self._scalars = yaml.SafeLoader("")

    def build(self, node: yaml.Node, path: Path_) -> Any:
        self.lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            result: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key = self.build(key_node, path + ("<key>",))
                if not isinstance(key, (str, int)) or isinstance(key, bool):
                    self.issues.append(ConfigIssue(self.file, key_node.start_mark.line + 1,
                                                   format_path(path), f"unsupported key {key!r}"))
                    continue
                key = str(key)
                if key in result:
                    self.issues.append(ConfigIssue(
                        self.file, key_node.start_mark.line + 1, format_path(path + (key,)),
                        f"duplicate key '{key}' (first at line {self.lines[path + (key,)]})"))
                    continue
                self.lines[path + (key,)] = key_node.start_mark.line + 1
                result[key] = self.build(value_node, path + (key,))
                self.lines[path + (key,)] = key_node.start_mark.line + 1
            self.lines.pop(path + ("<key>",), None)
            return result
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, path + (i,)) for i, item in enumerate(node.value)]
        return self._scalars.construct_object(node, deep=True)


def parse_text(text: str, file: Path, environ: Mapping[str, str] | None = None) -> Document:
    """Parse config text (after env substitution). Raises ConfigError with file and line."""
    text = substitute_env(text, file, os.environ if environ is None else environ)
    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        raise ConfigError([ConfigIssue(file, line, "", f"YAML syntax: {e.problem or e}")]) from e
    except yaml.YAMLError as e:
        raise ConfigError([ConfigIssue(file, None, "", f"YAML: {e}")]) from e
    nodes = [n for n in nodes if n is not None]
    if len(nodes) != 1:
        raise ConfigError([ConfigIssue(file, None, "",
                                       f"expected one YAML document, found {len(nodes)}")])
    builder = _Builder(file)
    data = builder.build(nodes[0], ())
    if builder.issues:
        raise ConfigError(builder.issues)
    return Document(file, data, builder.lines)


def read_document(file: Path, environ: Mapping[str, str] | None = None) -> Document:
    """Read and parse a config file."""
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError([ConfigIssue(file, None, "", f"cannot read config: {e}")]) from e
    return parse_text(text, file, environ)
