"""The `ssekd` command: `check` a config and print its graph, `run` the daemon in the foreground.

`twistd ssekd --config FILE` is the daemon's entry point (twistd's own options: --pidfile,
--logfile, -n); `ssekd run` is a shortcut for `twistd -n ssekd`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Sequence

from ssekd.config import ConfigError, binding_types, load_config
from ssekd.config.model import Binding, Config
from ssekd.config.schema import full_schema


def describe_when(when: object) -> str:
    if isinstance(when, dict):
        parts: list[str] = []
        for k, v in when.items():
            if isinstance(v, dict):
                parts.extend(f"{hk}={hv}" for hk, hv in v.items())
            else:
                parts.append(f"{k}={v}")
        return " ".join(parts)
    return str(when)


def graph_lines(config: Config) -> list[str]:
    """The binding graph as an indented tree, from each listener down to the last exit."""
    types = binding_types()
    lines: list[str] = []

    def walk(binding: Binding, indent: str, seen: tuple[str, ...]) -> None:
        for route in binding.routes:
            cond = " | ".join(describe_when(w) for w in route.when) or "any"
            if route.exit:
                lines.append(f"{indent}when {cond} ->")
                visit(route.exit, indent + "    ", seen)
        if binding.exit:
            lines.append(f"{indent}otherwise ->" if binding.routes else f"{indent}->")
            visit(binding.exit, indent + "    ", seen)

    def visit(name: str, indent: str, seen: tuple[str, ...]) -> None:
        b = config.bindings[name]
        extra = ""
        if b.type == "tcp" and b.kind == "server":
            extra = f" {b.options.get('host', '0.0.0.0')} port {b.options.get('port')}"
        lines.append(f"{indent}{name} ({b.type} {b.kind}){extra}")
        if name in seen:
            lines.append(f"{indent}    (cycle)")
            return
        walk(b, indent + "    ", seen + (name,))

    roots = [n for n, b in config.bindings.items()
             if types[b.type].kinds[b.kind].role == "listener"]
    reached: set[str] = set()
    for root in roots:
        visit(root, "", ())
    reached = {line.strip().split(" ")[0] for line in lines}
    for name in config.bindings:
        if name not in reached:
            lines.append(f"{name} ({config.bindings[name].type} "
                         f"{config.bindings[name].kind}) (not reached from a listener)")
    return lines


def check(args: argparse.Namespace) -> int:
    if args.print_schema:
        print(json.dumps(full_schema(binding_types()), indent=2))
        return 0
    try:
        config = load_config(Path(args.config))
        from ssekd.engine import Engine  # build too: vault stores, ports, paths

        if not args.schema_only:
            Engine(Path(args.config), reactor=_NoReactor())
    except ConfigError as e:
        for issue in e.issues:
            print(issue, file=sys.stderr)
        return 1
    print(f"{args.config}: ok (namespace {config.namespace}, {len(config.bindings)} bindings)")
    for line in graph_lines(config):
        print(line)
    return 0


class _NoReactor:
    """`check` builds the graph without a running reactor; nothing may be scheduled."""

    def callLater(self, *a: object, **k: object) -> None:
        raise RuntimeError("check must not schedule work")


def run(args: argparse.Namespace) -> int:
    argv = ["twistd", "-n", "ssekd", "--config", args.config] + \
        (["--watch"] if args.watch else [])
    os.execvp(argv[0], argv)
    return 1  # pragma: no cover


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ssekd", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("check", help="validate a zilla.yaml and print its binding graph")
    p.add_argument("--config", "-c", default="etc/zilla.yaml")
    p.add_argument("--schema-only", action="store_true",
                   help="check schema and references only; do not open vault stores")
    p.add_argument("--print-schema", action="store_true",
                   help="print the JSON Schema ssekd validates against")
    p.set_defaults(func=check)
    p = sub.add_parser("run", help="run the daemon in the foreground (twistd -n ssekd)")
    p.add_argument("--config", "-c", default="etc/zilla.yaml")
    p.add_argument("--watch", action="store_true")
    p.set_defaults(func=run)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
