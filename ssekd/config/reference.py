"""The config reference (`docs/config-reference.md`), generated from the schemas the config is
checked against, so the page cannot say something the checker does not.

    python -m ssekd.config.reference                 # print the page
    python -m ssekd.config.reference --write PATH    # write it (`make docs`)
    python -m ssekd.config.reference --check PATH    # exit 1 when PATH differs from the page

The schemas carry the words: `description` and `default` (JSON Schema's own annotations), and
ssekd's `x-ssekd-default` (a default that is a rule, not a value), `x-ssekd-addition` (a key
Zilla does not have) and `x-ssekd-not-built` (accepted, and what happens instead). A binding
kind's `options` schema describes the kind itself. The output depends only on the schemas and
the installed ssekd binding types, in a fixed order, so regenerating an unchanged tree gives the
same bytes.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ssekd.config.schema import NAME as NAME_SCHEMA
from ssekd.config.schema import binding_schema, schema_files
from ssekd.spi.binding import BindingType, Exit, KindSpec, plays, role_name
from ssekd.spi.plugins import Registry, discover

Schema = Mapping[str, Any]

#: Stands for the name of an entry in a map of named entries (`vaults.<name>`).
NAME = "<name>"


# -- reading the schemas --------------------------------------------------------------------------


def resolve(schema: Schema, document: Schema) -> Schema:
    """`schema` with its `$ref` replaced by the target, the referring keywords winning."""
    ref = schema.get("$ref")
    if not isinstance(ref, str):
        return schema
    if ref.startswith("#/"):
        target: Any = document
        for part in ref[2:].split("/"):
            target = target[part]
    else:
        target = schema_files()[ref]
    merged = {**resolve(target, document), **schema}
    del merged["$ref"]
    return merged


@dataclass(frozen=True)
class Row:
    """One key of a schema: its path below the table's root, and what the schema says of it."""

    path: str
    schema: Schema
    required: bool
    #: When the key applies only to one `type` of its parent (telemetry exporters).
    only_for: str | None = None


def rows(schema: Schema, document: Schema, path: str = "",
         only_for: str | None = None) -> Iterator[Row]:
    """Every key below `schema`, depth first in the schema's own order."""
    schema = resolve(schema, document)
    required = set(schema.get("required", ()))
    for name, sub in (schema.get("properties") or {}).items():
        key = f"{path}.{name}" if path else name
        sub = resolve(sub, document)
        yield Row(key, sub, name in required, only_for)
        yield from _below(sub, document, key, only_for)
    for branch in schema.get("allOf", ()):
        # `if: {properties: {type: {const: T}}}, then: {...}`: keys of one type of entry
        condition = branch.get("if", {}).get("properties", {}).get("type", {}).get("const")
        then = branch.get("then")
        if isinstance(condition, str) and isinstance(then, Mapping):
            yield from rows(then, document, path, condition)


def _below(schema: Schema, document: Schema, key: str, only_for: str | None) -> Iterator[Row]:
    if "properties" in schema or "allOf" in schema:
        yield from rows(schema, document, key, only_for)
        return
    items = schema.get("items")
    kinds = schema.get("type")
    if (kinds == "array" or isinstance(kinds, list) and "array" in kinds) and \
            isinstance(items, Mapping):
        items = resolve(items, document)
        if "properties" in items:
            yield from rows(items, document, f"{key}[]", only_for)
        return
    entries = schema.get("additionalProperties")
    if isinstance(entries, Mapping):
        entries = resolve(entries, document)
        if "properties" in entries or "allOf" in entries:
            yield from rows(entries, document, f"{key}.{NAME}", only_for)


# -- rendering cells ------------------------------------------------------------------------------


def _value(value: Any) -> str:
    """A default as it would be written in the YAML file."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def _code(text: str) -> str:
    return f"`{text}`"


def type_of(schema: Schema) -> str:
    """What the value must be, in a few words."""
    expected = schema.get("x-expected")
    if "anyOf" in schema and expected:
        return str(expected)
    if "const" in schema:
        return _code(_value(schema["const"]))
    if "enum" in schema:
        return "one of " + ", ".join(_code(_value(v)) for v in schema["enum"])
    kind = schema.get("type")
    if isinstance(kind, list):
        names = [str(k) for k in kind]
        return ", ".join(names[:-1]) + " or " + names[-1]
    if kind in ("integer", "number"):
        return f"{kind}{_bounds(schema)}"
    if kind == "string":
        if schema.get("pattern") == NAME_SCHEMA["pattern"]:
            return "name"
        if expected:
            return f"string: {expected}"
        return "non-empty string" if schema.get("minLength") == 1 else "string"
    if kind == "array":
        items = schema.get("items")
        if isinstance(items, Mapping):
            return f"list of {_plural(items)}"
        return "list"
    if kind == "object":
        if expected:
            return str(expected)
        entries = schema.get("additionalProperties")
        if isinstance(entries, Mapping) and "properties" not in entries \
                and "allOf" not in entries:
            return f"map of {_plural(entries)}"
        return "mapping"
    if kind == "boolean":
        return "boolean"
    return "any"


def _plural(schema: Schema) -> str:
    """What a `list of …` or `map of …` holds: `strings`, `string or number values`, `a`, `b`."""
    if "enum" in schema:
        return ", ".join(_code(_value(v)) for v in schema["enum"])
    if isinstance(schema.get("type"), list):
        return f"{type_of(schema)} values"
    return re.sub(r"\b(string|mapping|list|map|integer|number|boolean|name)\b", r"\1s",
                  type_of(schema), count=1)


def _bounds(schema: Schema) -> str:
    lo, hi = schema.get("minimum"), schema.get("maximum")
    if lo is not None and hi is not None:
        return f" {lo}–{hi}"
    if lo is not None:
        return f" ≥ {lo}"
    if "exclusiveMinimum" in schema:
        return f" > {schema['exclusiveMinimum']}"
    return ""


def default_of(row: Row) -> str:
    s = row.schema
    if "default" in s:
        return _code(_value(s["default"]))
    if "x-ssekd-default" in s:
        return f"*{s['x-ssekd-default']}*"
    return "**required**" if row.required else "—"


def description_of(schema: Schema) -> str:
    text = str(schema.get("description", ""))
    not_built = schema.get("x-ssekd-not-built")
    if not_built:
        text = f"{text} **Not built:** {not_built}".strip()
    return text


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _key(row: Row) -> str:
    key = _code(row.path)
    return f"{key} (type {_code(row.only_for)})" if row.only_for else key


def table(found: Sequence[Row]) -> list[str]:
    out = ["| key | type | default | ssekd | description |", "|---|---|---|---|---|"]
    for row in found:
        addition = "yes" if row.schema.get("x-ssekd-addition") else ""
        cells = (_key(row), type_of(row.schema), default_of(row), addition,
                 description_of(row.schema))
        out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return out


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as `-`."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def _link(heading: str) -> str:
    return f"[{heading}](#{anchor(heading)})"


# -- the page -------------------------------------------------------------------------------------


def role_depths(registry: Registry) -> dict[type, int]:
    """How far from the outside each role is: 0 for one that is no binding's exit (a listener),
    else one more than the farthest role whose exit it may be (a kind's own role as its exit, a
    tls server in front of an http server, adds nothing)."""
    exits = {(k.role, r) for t in registry.types.values() for k in t.kinds.values()
             for r in k.exit_roles if r is not k.role}
    roles = {k.role for t in registry.types.values() for k in t.kinds.values()}
    depth = dict.fromkeys(roles, 0)
    for _ in roles:  # longest paths; a circle of roles stops growing after len(roles) passes
        for outer, inner in exits:
            depth[inner] = max(depth.get(inner, 0), min(depth[outer] + 1, len(roles)))
    for role in roles:  # a role that extends others (the echo server's) sits as deep as they do
        played = [depth[r] for r in roles if r is not role and plays(role, r)]
        if played:
            depth[role] = max(depth[role], *played)
    return depth


def ssekd_types(registry: Registry) -> list[BindingType]:
    """The binding types this package ships, outermost role first (then by name)."""
    depth = role_depths(registry)

    def rank(t: BindingType) -> tuple[int, str]:
        return (min(depth[k.role] for k in t.kinds.values()), t.name)

    own = [t for t in registry.types.values()
           if all(k.build.__module__.startswith("ssekd.") for k in t.kinds.values())]
    return sorted(own, key=rank)


#: The schema files of the guard types, in the order the guards section shows them.
GUARD_FILES = ("ssekd:guard/jwt", "ssekd:guard/x509", "ssekd:guard/inline")


def _kind_heading(type_name: str, kind_name: str) -> str:
    return f"{type_name} {kind_name}"


def render(registry: Registry | None = None) -> str:
    """The whole page, as markdown."""
    registry = registry or discover()
    files = schema_files()
    types = ssekd_types(registry)
    lines: list[str] = [
        "# Config reference",
        "",
        "<!-- Generated by `python -m ssekd.config.reference` (`make docs`) from the schemas "
        "ssekd checks a config against. Do not edit by hand: change the schemas, then run "
        "`make docs`. -->",
        "",
        "Every key ssekd reads in a `zilla.yaml`, with its type and default, generated from the "
        "JSON Schemas the config is checked against (`ssekd check --print-schema` prints them). "
        "In the tables, **ssekd** marks a key Zilla does not have, **required** a key that must "
        "be given, and **Not built** a key that is accepted and checked but does not do what "
        "Zilla does with it yet (it says what happens instead). Keys are written from the part "
        "of the file the table is about; `<name>` stands for a name you choose and `[]` for "
        "each item of a list.",
        "",
        "How ssekd reads the file: `${{ env.NAME }}` is replaced before parsing, and an unset "
        "variable is an error (Zilla substitutes an empty string); names match "
        "`^[a-zA-Z]+[a-zA-Z0-9._-]*$`; relative paths (vault stores, filesystem `location`) "
        "resolve from the config file's folder.",
        "",
    ]
    binding_sections = [(t, name, kind) for t in types for name, kind in t.kinds.items()]
    lines += ["## Contents", "",
              "- " + _link("ssekd's additions"),
              "- " + _link("Not built yet"),
              "- " + _link("Top level"),
              "- " + _link("Every binding")]
    for t in types:
        kinds = ", ".join(_link(_kind_heading(t.name, k)) for k in t.kinds)
        lines.append(f"- {t.name}: {kinds}")
    lines += ["- " + _link("vaults"), "- " + _link("guards"), "- " + _link("telemetry"),
              "- " + _link("catalogs"), ""]

    # Every schema of the page, with the heading of the section that lists it.
    everywhere: list[tuple[str, str, Schema, Schema]] = []  # (section, prefix, schema, document)
    for t, name, kind in binding_sections:
        heading = _kind_heading(t.name, name)
        everywhere.append((heading, "options.", kind.options, kind.options))
        if kind.when is not None:
            everywhere.append((heading, "routes[].when[].", kind.when, kind.when))
        if kind.with_ is not None:
            everywhere.append((heading, "routes[].with.", kind.with_, kind.with_))
    for heading, prefix, uri in (("vaults", "vaults.<name>.", "ssekd:vault/filesystem"),
                                 *(("guards", "guards.<name>.", g) for g in GUARD_FILES),
                                 ("telemetry", "telemetry.", "ssekd:telemetry"),
                                 ("catalogs", "catalogs.<name>.", "ssekd:catalog")):
        everywhere.append((heading, prefix, files[uri], files[uri]))

    lines += _additions(everywhere)
    lines += _not_built(everywhere, files, registry)
    lines += _top_level(files)
    lines += _every_binding(types)
    for t, name, kind in binding_sections:
        lines += _kind_section(t, name, kind, registry)
    lines += _file_section("vaults", "Each entry of `vaults` (`vaults.<name>`).",
                           files["ssekd:vault/filesystem"], "vault filesystem")
    lines += _file_section("guards", "Each entry of `guards` (`guards.<name>`), by its `type`.",
                           files[GUARD_FILES[0]], "guard jwt")
    for uri in GUARD_FILES[1:]:
        document = files[uri]
        label = "guard " + uri.rsplit("/", 1)[1]
        lines += [f"**{label}**: {description_of(document)}".rstrip(), ""]
        lines += table(list(rows(document, document))) + [""]
    lines += _file_section("telemetry", "The `telemetry` section.", files["ssekd:telemetry"])
    lines += _file_section("catalogs", "Each entry of `catalogs` (`catalogs.<name>`).",
                           files["ssekd:catalog"])
    return "\n".join(lines).rstrip("\n") + "\n"


def _additions(everywhere: Sequence[tuple[str, str, Schema, Schema]]) -> list[str]:
    out = ["## ssekd's additions", "",
           "Keys Zilla does not have: a config that sets them is for ssekd only. Left out, "
           "they take the default.", "",
           "| where | key | default | what it does |", "|---|---|---|---|"]
    for heading, prefix, schema, document in everywhere:
        for row in rows(schema, document):
            if row.schema.get("x-ssekd-addition"):
                cells = (_link(heading), _code(prefix + row.path), default_of(row),
                         description_of(row.schema))
                out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return out + [""]


def _not_built(everywhere: Sequence[tuple[str, str, Schema, Schema]], files: Mapping[str, Any],
               registry: Registry) -> list[str]:
    out = ["## Not built yet", "",
           "Zilla's keys that ssekd accepts and checks but does not act on yet, and what "
           "happens instead.", "",
           "| where | key | what happens |", "|---|---|---|"]
    found: list[tuple[str, str, str]] = []
    top = files["ssekd:zilla"]
    for name, sub in top["properties"].items():  # the sections below list their own keys
        if "x-ssekd-not-built" in sub:
            found.append((_link("Top level"), _code(name), sub["x-ssekd-not-built"]))
    generic = _generic_binding(ssekd_types(registry))
    for row in rows(generic, generic):
        if "x-ssekd-not-built" in row.schema:
            found.append((_link("Every binding"), _code(f"bindings.{NAME}.{row.path}"),
                          row.schema["x-ssekd-not-built"]))
    for heading, prefix, schema, document in everywhere:
        if "x-ssekd-not-built" in schema:
            found.append((_link(heading), _code(prefix.rstrip(".")), schema["x-ssekd-not-built"]))
        for row in rows(schema, document):
            if "x-ssekd-not-built" in row.schema:
                found.append((_link(heading), _key(Row(prefix + row.path, row.schema, False,
                                                       row.only_for)),
                              row.schema["x-ssekd-not-built"]))
    out += ["| " + " | ".join(_cell(c) for c in cells) + " |" for cells in found]
    return out + [""]


def _top_level(files: Mapping[str, Any]) -> list[str]:
    top = files["ssekd:zilla"]
    out = ["## Top level", "", str(top.get("title", "")), "",
           "| key | type | default | ssekd | description |", "|---|---|---|---|---|"]
    sections = {"vaults": "vaults", "guards": "guards", "catalogs": "catalogs",
                "telemetry": "telemetry", "bindings": "Every binding"}
    required = set(top.get("required", ()))
    for name, sub in top["properties"].items():
        sub = resolve(sub, top)
        row = Row(name, sub, name in required)
        kind = "mapping" if name in sections else type_of(sub)
        text = description_of(sub)
        if name in sections:
            text += f" See {_link(sections[name])}."
        cells = (_key(row), kind, default_of(row), "yes" if sub.get("x-ssekd-addition") else "",
                 text)
        out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return out + [""]


def _generic_binding(types: Sequence[BindingType]) -> dict[str, Any]:
    """The keys every binding may have, from the schema of a kind that takes all of them."""
    spec = KindSpec(role=object, build=lambda ctx, b: None, exit=Exit.OPTIONAL,
                    vault=True,
                    options={"type": "object", "description": "Depends on the type and kind: "
                                                              "see its section."},
                    when={"type": "object", "description": "Depends on the type and kind."},
                    with_={"type": "object", "description": "Depends on the type and kind."})
    schema = binding_schema(spec, "", "")
    props = schema["properties"]
    props["type"] = {**props["type"], "enum": sorted(t.name for t in types)}
    del props["type"]["const"]
    props["kind"] = {**props["kind"], "type": "string"}
    del props["kind"]["const"]
    return schema


def _every_binding(types: Sequence[BindingType]) -> list[str]:
    generic = _generic_binding(types)
    out = ["## Every binding", "",
           "The keys of `bindings.<name>`. Which of `exit`, `vault` and `routes` a binding "
           "takes, and the shape of its `options`, `when` and `with`, depend on its type and "
           "kind (below). An `exit` must name a binding of a kind that can play the role the "
           "binding needs; `ssekd check` says which when it does not.", ""]
    return out + table(list(rows(generic, generic))) + [""]


def _players(registry: Registry, roles: Sequence[type]) -> str:
    names = [_link(_kind_heading(t.name, k)) for t in ssekd_types(registry)
             for k, spec in t.kinds.items() if any(plays(spec.role, r) for r in roles)]
    return ", ".join(names) or "none"


def _kind_section(t: BindingType, name: str, kind: KindSpec, registry: Registry) -> list[str]:
    heading = _kind_heading(t.name, name)
    out = [f"## {heading}", "", description_of(kind.options), "",
           f"- `type: {t.name}`, `kind: {name}`; plays the role *{role_name(kind.role)}*."]
    if kind.exit is Exit.NONE:
        out.append("- No `exit`.")
    else:
        need = "optional" if kind.exit is Exit.OPTIONAL else \
            "required" if kind.when is None else "required (a default `exit`, or routes with exits)"
        roles = " or ".join(f"*{role_name(r)}*" for r in kind.exit_roles)
        out.append(f"- `exit`: {need}; it must play {roles}: {_players(registry, kind.exit_roles)}.")
    out.append("- Takes a `vault`." if kind.vault else "- No `vault`.")
    out.append("- Takes `routes`." if kind.when is not None else "- No `routes`.")
    out.append("")
    option_rows = list(rows(kind.options, kind.options))
    if option_rows:
        out += [f"**`options`** of {heading}:", ""] + table(option_rows) + [""]
    elif kind.options.get("additionalProperties") is False:
        out += ["No `options`.", ""]
    if kind.when is not None:
        out += [f"**`routes[].when[]`** of {heading}:", ""] + table(list(rows(kind.when, kind.when)))
        out.append("")
    if kind.with_ is not None:
        with_ = kind.with_
        text = description_of(with_)
        if "default" in with_:
            text += f" Without `with`: {_code(_value(with_['default']))}."
        out += [f"**`routes[].with`** of {heading}: {text}".rstrip(), ""]
        out += table(list(rows(with_, with_))) + [""]
    return out


def _file_section(heading: str, intro: str, document: Schema,
                  label: str | None = None) -> list[str]:
    """A section for one schema file; `label` names the one type it describes (`vault
    filesystem`), when the section is about entries of a type."""
    out = [f"## {heading}", "", intro]
    text = description_of(document)
    if label is not None:
        out += ["", f"**{label}**: {text}".rstrip()]
    elif text:
        out += ["", text]
    return out + [""] + table(list(rows(document, document))) + [""]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ssekd.config.reference",
                                     description="Print the config reference (markdown).")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", metavar="PATH", help="write it to PATH")
    group.add_argument("--check", metavar="PATH",
                       help="exit 1 when PATH is not what would be written")
    args = parser.parse_args(argv)
    page = render()
    if args.write:
        Path(args.write).write_text(page, encoding="utf-8")
        return 0
    if args.check:
        try:
            current = Path(args.check).read_text(encoding="utf-8")
        except OSError as e:
            print(f"{args.check}: {e.strerror or e}; run make docs", file=sys.stderr)
            return 1
        if current != page:
            print(f"{args.check} is not what the schemas say: run make docs", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
