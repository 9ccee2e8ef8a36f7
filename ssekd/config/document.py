"""Read zilla.yaml: YAML with line numbers, duplicate-key errors and `${{ env.X }}` values.

The result is plain Python data plus a map from each path to the line it came from, so that the
schema and reference checks can say *where* a problem is, not only what it is.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
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
    #: Parts that were not written in `file` but composed from other files (the bindings an
    #: asyncapi binding stands for): path -> (file, line) of what each came from.
    origins: Mapping[Path_, tuple[Path, int | None]] = field(default_factory=dict)

    def line_of(self, path: Path_) -> int | None:
        """The line of `path`, or of its closest ancestor that has one."""
        return self.where(path)[1]

    def where(self, path: Path_) -> tuple[Path, int | None]:
        """The file and line of `path`, or of its closest ancestor that has one."""
        for end in range(len(path), -1, -1):
            origin = self.origins.get(path[:end])
            if origin is not None:
                return origin
            line = self.lines.get(path[:end])
            if line is not None:
                return self.file, line
        return self.file, None

    def issue(self, path: Path_, message: str) -> ConfigIssue:
        file, line = self.where(path)
        return ConfigIssue(file, line, format_path(path), message)


class _Env:
    """`${{ env.NAME }}` without letting a value change the file's structure.

    Zilla replaces the expressions in the text before parsing, so `port: ${{ env.PORT }}` is a
    number; but then a value holding a line break (or `, x: y` inside braces) adds keys. Here
    each expression becomes a plain-word marker before parsing, and the builder puts the value
    into the one scalar holding the marker, re-typing an unquoted scalar as YAML would have
    (`7114` an int, `true` a bool). Unlike Zilla, an unset variable is an error.
    """

    def __init__(self, text: str, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.names: list[str] = []
        self.prefix = f"__ssekd_env_{secrets.token_hex(4)}_"
        self.marker = re.compile(re.escape(self.prefix) + r"([0-9]+)__")

        def mark(m: re.Match[str]) -> str:
            self.names.append(m.group(1))
            return f"{self.prefix}{len(self.names) - 1}__"

        self.text = ENV_EXPRESSION.sub(mark, text)

    @classmethod
    def verbatim(cls, text: str) -> _Env:
        """No expressions: the text as it is (its random marker prefix never occurs in it)."""
        env = cls("", {})
        env.text = text
        return env

    def substitute(self, value: str, unset: list[str]) -> str:
        def value_of(m: re.Match[str]) -> str:
            name = self.names[int(m.group(1))]
            if name not in self.environ:
                unset.append(name)
                return ""
            return self.environ[name]

        return self.marker.sub(value_of, value)


#: How deep values may nest, and how many a file may expand to once aliases are followed: far
#: beyond any real config, low enough that a hostile file (a recursive alias, "billion laughs")
#: is refused with a line number instead of exhausting the stack or the memory.
MAX_DEPTH = 64
MAX_VALUES = 100_000
#: A config file larger than this is refused before it is read (a real one is a few KiB).
MAX_FILE_BYTES = 16 * 1024 * 1024


class _Refused(Exception):
    def __init__(self, issue: ConfigIssue) -> None:
        self.issue = issue


class _Builder:
    """Turns a composed YAML node tree into data, recording lines and refusing duplicate keys."""

    def __init__(self, file: Path, env: _Env) -> None:
        self.file = file
        self.env = env
        self.lines: dict[Path_, int] = {}
        self.issues: list[ConfigIssue] = []
        self._scalars = yaml.SafeLoader("")
        self._open: set[int] = set()  # ids of the nodes being built: an alias back is a loop
        self._values = 0

    def build(self, node: yaml.Node, path: Path_) -> Any:
        line = node.start_mark.line + 1
        self._values += 1
        if id(node) in self._open:
            raise _Refused(ConfigIssue(self.file, line, format_path(path),
                                       "an alias that contains itself"))
        if len(path) > MAX_DEPTH:
            raise _Refused(ConfigIssue(self.file, line, format_path(path[:3]),
                                       f"values nested more than {MAX_DEPTH} deep"))
        if self._values > MAX_VALUES:
            raise _Refused(ConfigIssue(self.file, line, format_path(path),
                                       f"more than {MAX_VALUES} values once aliases are "
                                       f"expanded"))
        if isinstance(node, yaml.CollectionNode):
            self._open.add(id(node))
            try:
                return self._collection(node, path, line)
            finally:
                self._open.discard(id(node))
        self.lines[path] = line
        if isinstance(node, yaml.ScalarNode) and self.env.prefix in node.value:
            node = self._substituted(node, path, line)
        try:
            return self._scalars.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, OverflowError) as e:
            # a tag such as !!python/object, or a value its tag cannot hold (2001-13-45, !!int x)
            problem = getattr(e, "problem", None) or str(e)
            raise _Refused(ConfigIssue(self.file, line, format_path(path), f"YAML: {problem}")) \
                from None

    def _substituted(self, node: yaml.ScalarNode, path: Path_, line: int) -> yaml.ScalarNode:
        unset: list[str] = []
        value = self.env.substitute(node.value, unset)
        for name in unset:
            self.issues.append(ConfigIssue(self.file, line, format_path(path),
                                           f"environment variable {name} is not set"))
        # an unquoted scalar gets the type its text now says, as if the value had been typed in
        tag = self._scalars.resolve(yaml.ScalarNode, value, (True, False)) \
            if node.style is None else node.tag
        return yaml.ScalarNode(tag, value, node.start_mark, node.end_mark, node.style)

    def _collection(self, node: yaml.CollectionNode, path: Path_, line: int) -> Any:
        self.lines[path] = line
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
        return [self.build(item, path + (i,)) for i, item in enumerate(node.value)]


def in_words(error: yaml.MarkedYAMLError) -> str:
    """What PyYAML's message means for the person who wrote the file, for the mistakes people
    make (its own text otherwise): "expected <block end>, but found '<block mapping start>'"
    says that a line is indented wrongly."""
    problem = str(error.problem or error)
    context = str(error.context or "")
    line = error.problem_mark.line + 1 if error.problem_mark else None
    opened = error.context_mark.line + 1 if error.context_mark else None
    since = f" (the block from line {opened})" if opened and opened != line else ""
    found = re.match(r"found character '(.+)' that cannot start any token", problem)
    if problem.startswith("expected <block end>"):
        return (f"this line is indented differently from the lines of the block it is in"
                f"{since}: indent it as far as the keys or items beside it, with spaces")
    if problem == "mapping values are not allowed here":
        return ("a `key:` where no key can start: a second `key:` on one line, a line indented "
                "deeper than the key above it, or a value with `: ` in it that needs quotes")
    if found and found.group(1) == "\\t":
        return "a tab: YAML indents with spaces only"
    if found:
        return (f"a value cannot start with {found.group(1)!r} unless it is quoted: put it in "
                f"quotes")
    if problem == "could not find expected ':'":
        return "this line is neither `key: value` nor `- item` (a `:` missing after the key?)"
    if problem.startswith(("expected ',' or ']'", "expected ',' or '}'")):
        kind = "[ list ]" if "']'" in problem else "{ mapping }"
        where = f" opened at line {opened}" if opened else ""
        return (f"the {kind}{where} is not closed on its line (a missing "
                f"`{kind[-1]}`, or an unquoted `:` inside it)")
    if problem.startswith("found undefined alias"):
        name = problem.rsplit(" ", 1)[-1].strip("'")
        return f"`*{name}` refers to an anchor `&{name}` that is not defined above it"
    if "quoted scalar" in context and "end of stream" in problem:
        return f"the quote opened at line {opened} is never closed"
    if context.startswith("found duplicate anchor"):
        return f"{context.split(';')[0].removeprefix('found ')}, first at line {opened}"
    return f"{problem}" + (f" ({context} at line {opened})" if context and opened else "")


def parse_text(text: str, file: Path, environ: Mapping[str, str] | None = None,
               expressions: bool = True) -> Document:
    """Parse config text, with `${{ env.NAME }}` from `environ` (default: the process's).
    Raises ConfigError with file and line. With `expressions=False` (an AsyncAPI spec read
    through a catalog), `${{ ... }}` is text like any other."""
    env = _Env(text, os.environ if environ is None else environ) if expressions \
        else _Env.verbatim(text)
    try:
        nodes = list(yaml.compose_all(env.text, Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        if e.problem == "could not find expected ':'" and e.context_mark is not None:
            mark = e.context_mark  # the key without its `:` is where to look
        line = mark.line + 1 if mark else None
        raise ConfigError([ConfigIssue(file, line, "", f"YAML syntax: {in_words(e)}")]) from e
    except yaml.YAMLError as e:
        raise ConfigError([ConfigIssue(file, None, "", f"YAML: {e}")]) from e
    except RecursionError:  # PyYAML's composer recurses once per level of nesting
        raise ConfigError([ConfigIssue(file, None, "", f"values nested more than {MAX_DEPTH} "
                                                       f"deep")]) from None
    nodes = [n for n in nodes if n is not None]
    if len(nodes) != 1:
        raise ConfigError([ConfigIssue(file, None, "",
                                       f"expected one YAML document, found {len(nodes)}")])
    builder = _Builder(file, env)
    try:
        data = builder.build(nodes[0], ())
    except _Refused as e:
        raise ConfigError([e.issue]) from None
    if builder.issues:
        raise ConfigError(builder.issues)
    return Document(file, data, builder.lines)


def read_document(file: Path, environ: Mapping[str, str] | None = None) -> Document:
    """Read and parse a config file."""
    try:
        size = file.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ConfigError([ConfigIssue(file, None, "", f"cannot read config: {size} bytes; "
                                           f"expected at most {MAX_FILE_BYTES}")])
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError([ConfigIssue(file, None, "", f"cannot read config: {e}")]) from e
    return parse_text(text, file, environ)
