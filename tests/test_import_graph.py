"""No import circle among ssekd's modules, so every module can be read (and imported) after the
ones it names. The check is static: it reads each module's imports with `ast`, so an import
circle that only `if TYPE_CHECKING:` closes counts too (it is a circle in the design all the
same), and so does one through a package's `__init__`, which Python runs before any module of
the package.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import ssekd

ROOT = Path(ssekd.__file__).resolve().parent


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Every module of the package at `root`, by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join([package, *parts])] = path
    return found


def imports_of(name: str, path: Path, modules: Mapping[str, Path]) -> set[str]:
    """The package's modules that importing `name` runs: those it imports, plus the packages
    around them that are not already around `name`."""
    is_package = path.name == "__init__.py"
    here = name if is_package else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:  # `from pkg import mod` imports the module pkg.mod
                full = f"{base}.{a.name}"
                targets.add(full if full in modules else base)
    edges: set[str] = set()
    ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    for t in targets:
        parts = t.split(".")
        for i in range(1, len(parts) + 1):
            m = ".".join(parts[:i])
            if m in modules and m != name and (m == t or m not in ancestors):
                edges.add(m)
    return edges


def circles(graph: Mapping[str, set[str]]) -> Iterator[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    yield from out


def graph_of(root: Path, package: str) -> dict[str, set[str]]:
    modules = module_names(root, package)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def test_ssekd_has_no_import_circle() -> None:
    graph = graph_of(ROOT, "ssekd")
    assert len(graph) > 40, "the scan found too few modules to mean anything"
    found = list(circles(graph))
    assert found == [], "import circles (break them with a Protocol or a leaf module):\n" + \
        "\n".join(" <-> ".join(c) for c in found)


def closure(graph: Mapping[str, set[str]], start: str) -> set[str]:
    """Every module that importing `start` runs, directly or not."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for m in graph.get(todo.pop(), ()):
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return seen


def test_the_contract_is_a_leaf() -> None:
    """`ssekd.spi` may import the config model, its errors, the event log, the metrics, the
    health state and the catalog protocol: nothing that imports a binding, a guard or the
    engine. The telemetry modules it names and `ssekd.health` are leaves (the event log may use
    the leaf that hides tokens; the metrics hold the delivery-latency batch, itself a leaf, and
    count it with the hot path's loop, another)."""
    graph = graph_of(ROOT, "ssekd")
    telemetry = {"ssekd.telemetry.events", "ssekd.telemetry.metrics"}
    spi = {m for m in graph if m == "ssekd.spi" or m.startswith("ssekd.spi.")}
    assert {"ssekd.spi.binding", "ssekd.spi.guard", "ssekd.spi.plugins"} <= spi
    for module in spi:
        assert graph[module] - spi <= {"ssekd.config.errors", "ssekd.config.model",
                                       "ssekd.config", "ssekd.telemetry", "ssekd.health",
                                       "ssekd.catalogs", "ssekd.catalogs.catalog",
                                       *telemetry}, module
        above = {m for m in closure(graph, module)
                 if m.split(".")[1] in {"bindings", "guards", "engine", "graph"}}
        assert above == set(), module
    for module in telemetry:
        assert graph[module] <= {"ssekd.telemetry", "ssekd.telemetry.redact",
                                 "ssekd.telemetry.delivery", "ssekd.hotpath"}, module
    # the hot path's loops (the delivery-latency one among them) use the contract's event
    # block and nothing else of ssekd's
    hot = {m for m in graph if m == "ssekd.hotpath" or m.startswith("ssekd.hotpath.")}
    assert closure(graph, "ssekd.hotpath") - hot - spi <= {"ssekd", *telemetry,
                                                           "ssekd.telemetry.redact",
                                                           "ssekd.telemetry.delivery",
                                                           "ssekd.config.errors",
                                                           "ssekd.config.model", "ssekd.config",
                                                           "ssekd.telemetry", "ssekd.health",
                                                           "ssekd.catalogs",
                                                           "ssekd.catalogs.catalog"}
    assert graph["ssekd.telemetry.redact"] <= {"ssekd.telemetry"}
    assert graph["ssekd.telemetry.delivery"] == set()
    assert graph["ssekd.health"] == set()


def test_the_config_imports_no_binding() -> None:
    """The config loader knows the binding types only through the contract (`ssekd.spi`): no
    import arrow, direct or through another module, runs from `ssekd.config` up into
    `ssekd.bindings` (the layers go config <- spi <- bindings)."""
    graph = graph_of(ROOT, "ssekd")
    config = [m for m in graph if m == "ssekd.config" or m.startswith("ssekd.config.")]
    assert "ssekd.config.load" in config
    found = {m: sorted(d for d in closure(graph, m) if d.startswith("ssekd.bindings"))
             for m in config}
    assert {m: d for m, d in found.items() if d} == {}


def test_the_check_sees_an_arrow_from_config_into_bindings(tmp_path: Path) -> None:
    """The check above would see such an arrow, also one through a module in between."""
    _write(tmp_path, {
        "__init__.py": "", "config/__init__.py": "", "bindings/__init__.py": "",
        "config/load.py": "from pkg.spi import x\n",
        "spi.py": "from pkg.bindings.api import y\n",
        "bindings/api.py": "",
    })
    graph = graph_of(tmp_path, "pkg")
    assert "pkg.bindings.api" in closure(graph, "pkg.config.load")


def _write(root: Path, files: Mapping[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def test_the_check_sees_circles_through_type_checking_and_packages(tmp_path: Path) -> None:
    _write(tmp_path, {
        "__init__.py": "",
        "a.py": "from pkg import b\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import X\n",
        "sub/__init__.py": "from pkg.c import Y\n",
        "sub/leaf.py": "",
        "c.py": "from pkg.sub.leaf import Z\n",  # runs sub/__init__, which imports c
        "d.py": "from . import e\n",
        "e.py": "from .d import W\n",
        "ok.py": "import pkg.a\n",
    })
    found = list(circles(graph_of(tmp_path, "pkg")))
    assert found == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.sub"], ["pkg.d", "pkg.e"]]


def test_nothing_outside_the_bindings_imports_them() -> None:
    """A binding is known by its `KindSpec` through the plugin registry (`ssekd.spi.plugins`),
    never by its type's name or module: no module outside ssekd/bindings/ (the engine, the
    config loader, the guards...) imports one."""
    graph = graph_of(ROOT, "ssekd")
    assert "ssekd.engine" in graph["ssekd.cli"], "an import inside a function counts"
    outside = {m: sorted(d for d in deps if d.startswith("ssekd.bindings"))
               for m, deps in graph.items() if not m.startswith("ssekd.bindings")}
    assert {m: d for m, d in outside.items() if d} == {}
