"""The `ssekd` command: `check` a config and print its graph, `run` the daemon in the foreground,
print its AsyncAPI document (`asyncapi`), `produce` demo records.

`twistd ssekd --config FILE` is the daemon's entry point (twistd's own options: --pidfile,
--logfile, -n); `ssekd run` is a shortcut for `twistd -n ssekd`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from ssekd import __version__
from ssekd.config import ConfigError
from ssekd.config.load import load_config
from ssekd.config.model import Config
from ssekd.config.schema import full_schema
from ssekd.spi.connection import DatagramListenerBinding, ListenerBinding
from ssekd.spi.plugins import Registry, discover


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


def graph_lines(config: Config, registry: Registry) -> list[str]:
    """The binding graph, from each listener down to the last exit.

    A binding with a single way out continues on the same line (`a -> b -> c`); routes branch
    onto indented lines; a binding already shown is named again but not expanded.
    """
    lines: list[str] = []
    shown: set[str] = set()

    def label(name: str) -> str:
        b = config.bindings[name]
        summary = registry.kind(b).summary
        said = summary(b.options) if summary is not None else ""
        extra = f" {said}" if said else ""
        return f"{name} ({b.type} {b.kind}{extra})"

    def chain(name: str, prefix: str, indent: str) -> None:
        text = prefix + label(name)
        while True:
            b = config.bindings[name]
            if name in shown:
                lines.append(text + " (see above)" if b.exits else text)
                return
            shown.add(name)
            if not b.routes and b.exit:
                name = b.exit
                text += " -> " + label(name)
                continue
            lines.append(text)
            for route in b.routes:
                cond = " | ".join(describe_when(w) for w in route.when) or "any"
                if route.exit:
                    chain(route.exit, f"{indent}  when {cond} -> ", indent + "    ")
            if b.exit and b.routes:
                chain(b.exit, f"{indent}  otherwise -> ", indent + "    ")
            return

    for name, b in config.bindings.items():
        if registry.kind(b).role in (ListenerBinding, DatagramListenerBinding):
            chain(name, "", "")
    for name in config.bindings:
        if name not in shown:
            lines.append(f"{label(name)} (not reached from a listener)")
    return lines


def check(args: argparse.Namespace) -> int:
    if args.print_schema:
        print(json.dumps(full_schema(discover()), indent=2))
        return 0
    try:
        config = load_config(Path(args.config), discover())
    except ConfigError as e:
        for issue in e.issues:
            print(issue, file=sys.stderr)
        return 1
    said = [f"{args.config}: schema and references ok (namespace {config.namespace}, "
            f"{len(config.bindings)} bindings)",
            *(f"composed {summary}" for summary in config.composites.values())]
    if args.print_composed:  # a zilla.yaml on stdout: what check says goes in comments
        print("".join(f"# {line}\n" for line in said) + composed_yaml(config), end="")
        return 0
    for line in said:
        print(line)
    for line in graph_lines(config, discover()):
        print(line)
    if args.schema_only:
        return 0
    # Build the graph as the daemon would (vault stores, port ranges, folders), listening nowhere.
    from ssekd.engine import Engine
    from ssekd.telemetry.events import EventLog, format_time, severity

    # What the build reports, each event once and in order: a `note:`, or a `warning:` on
    # stderr when the event warns (its severity in JSON lines is not INFO), such as a
    # proxy-protocol.from that believes any peer. The config is valid either way: exit 0.
    heard: list[tuple[bool, str]] = []
    events = EventLog(config.namespace, max_per_second=sys.maxsize)
    events.sinks.append(lambda now, namespace, binding, name, detail: heard.append(
        (severity(name) != "INFO",
         f"{namespace}:{binding} [{format_time(now)}] {name} {detail}")))
    try:
        Engine(Path(args.config), reactor=_NoReactor(), events=events, print_events=False)
        issues = []
    except ConfigError as e:
        issues = e.issues
    for warns, line in heard:
        print(f"{'warning' if warns else 'note'}: {line}",
              file=sys.stderr if warns else sys.stdout)
    errors = [i for i in issues if not i.environment or args.strict]
    for issue in issues:
        print(f"{'error' if issue in errors else 'warning'}: {issue}", file=sys.stderr)
    if errors:
        return 1
    if issues:
        print("the config is valid, but the daemon cannot start on this machine until the "
              "warnings above are fixed (--strict makes them errors)", file=sys.stderr)
    return 0


def composed_yaml(config: Config) -> str:
    """The config as the daemon runs it: what asyncapi bindings composed, written out as a
    zilla.yaml (a starting point for a config written by hand)."""
    from ssekd.asyncapi import to_yaml

    return to_yaml(config.document.data)


def asyncapi(args: argparse.Namespace) -> int:
    """Print the config's AsyncAPI 3.0 document; schemas in a registry are fetched (this is a
    command, not the reactor). A registry that cannot answer leaves that payload out, with a
    warning on stderr."""
    import time

    from ssekd import asyncapi as api_doc
    from ssekd.catalogs import build_catalogs
    from ssekd.catalogs.catalog import Catalog, CatalogUnavailable, Schema, SchemaNotFound
    from ssekd.catalogs.models import ModelConfig

    try:
        config = load_config(Path(args.config), discover())
        catalogs = build_catalogs(config, _WallClock(time.time))
    except ConfigError as e:
        for issue in e.issues:
            print(issue, file=sys.stderr)
        return 1

    def schema_of(catalog: Catalog, model: ModelConfig) -> Schema | None:
        try:
            return api_doc.fetched_schema(catalog, model)
        except (SchemaNotFound, CatalogUnavailable) as e:
            print(f"warning: {e}; its payload is left out", file=sys.stderr)
            return None

    doc = api_doc.document(config, catalogs, schema_of)
    print(api_doc.to_json(doc) if args.json else api_doc.to_yaml(doc), end="")
    return 0


class _WallClock:
    """The clock a catalog reads (`seconds()`), outside a reactor."""

    def __init__(self, now: Callable[[], float]) -> None:
        self.seconds = now


class _NoReactor:
    """`check` builds the graph without a running reactor; nothing may be scheduled."""

    def callLater(self, *a: object, **k: object) -> None:
        raise RuntimeError("check must not schedule work")


def run(args: argparse.Namespace) -> int:
    # The twistd beside this Python, so `.venv/bin/ssekd run` works without an activated venv.
    twistd = str(Path(sys.executable).with_name("twistd"))
    argv = [twistd, "-n", "ssekd", "--config", args.config] + \
        (["--watch"] if args.watch else []) + \
        (["--workers", args.workers] if args.workers else [])
    os.execv(twistd, argv)
    return 1  # pragma: no cover


#: What `ssekd --help` says above the commands.
DESCRIPTION = ("Serve Kafka topics to browsers as Server-Sent Events, configured by a Zilla "
               "zilla.yaml. The daemon itself is `twistd ssekd --config FILE`; these commands "
               "check a config, run the daemon in the foreground, print a config's AsyncAPI "
               "document and write demo records.")
CONFIG_HELP = "the zilla.yaml to read (default: etc/zilla.yaml)"


def parser() -> argparse.ArgumentParser:
    """The `ssekd` command line, every command and option with its help."""
    top = argparse.ArgumentParser(prog="ssekd", description=DESCRIPTION)
    top.add_argument("--version", action="version", version=f"ssekd {__version__}",
                     help="print the installed version and exit")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND",
                             help="one of these (each has its own --help):")
    p = sub.add_parser("check", help="validate a zilla.yaml and print its binding graph",
                       description="Validate a zilla.yaml against its schema and references, "
                                   "build every binding as the daemon would (listening "
                                   "nowhere) and print the binding graph. Exits 1 when the "
                                   "config cannot be used, with file, line and path.")
    p.add_argument("--config", "-c", default="etc/zilla.yaml", help=CONFIG_HELP)
    p.add_argument("--schema-only", action="store_true",
                   help="check schema and references only; do not open vault stores")
    p.add_argument("--strict", action="store_true",
                   help="also fail when a file the config names is missing on this machine")
    p.add_argument("--print-schema", action="store_true",
                   help="print the JSON Schema ssekd validates against")
    p.add_argument("--print-composed", action="store_true",
                   help="print the config with its asyncapi bindings composed, as a zilla.yaml "
                        "(what check says in comments)")
    p.set_defaults(func=check)
    p = sub.add_parser("asyncapi", help="print the config's AsyncAPI 3.0 document",
                       description="Print the AsyncAPI 3.0 document of a config's event "
                                   "streams: a channel for each path that reaches one, its "
                                   "payload schema, security and servers.")
    p.add_argument("--config", "-c", default="etc/zilla.yaml", help=CONFIG_HELP)
    p.add_argument("--json", action="store_true", help="JSON instead of YAML")
    p.set_defaults(func=asyncapi)
    p = sub.add_parser("produce", help="write demo records to a topic (for the demo page)",
                       add_help=False)
    p.set_defaults(func=None)
    p = sub.add_parser("run", help="run the daemon in the foreground (twistd -n ssekd)",
                       description="Run the daemon in the foreground: the same as "
                                   "`twistd -n ssekd` with these options. Ctrl-C stops it.")
    p.add_argument("--config", "-c", default="etc/zilla.yaml", help=CONFIG_HELP)
    p.add_argument("--watch", action="store_true",
                   help="reload when the config file, or a file it reads (AsyncAPI specs, "
                        "schema files), changes (SIGHUP always reloads)")
    p.add_argument("--workers", help="processes serving the same sockets: a number or auto")
    p.set_defaults(func=run)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["produce"]:  # its options belong to ssekd.dev.demo_producer
        from ssekd.dev.demo_producer import main as produce_main

        return produce_main(argv[1:], prog="ssekd produce")
    args = parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
