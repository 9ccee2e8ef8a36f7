"""The shape of `ssekd/`'s imports: no circle among its modules, and outside `ssekd/bindings/`
nothing imports a binding type's module, only the contract (`api`) and the `registry`; a binding
is known by its `KindSpec`, never by name.

Read from the source with `ast`, so the test sees imports inside functions too. Imports under
`if TYPE_CHECKING:` are left out: they never run."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "ssekd"
#: What modules outside ssekd/bindings/ may import from it.
CONTRACT = {"ssekd.bindings", "ssekd.bindings.api", "ssekd.bindings.registry"}


def modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node, except what sits under `if TYPE_CHECKING:`."""
    out: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


def imports(known: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the ssekd modules it imports (a name imported from a package counts as its
    submodule when there is one)."""
    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        deps: set[str | None] = set()
        for node in _runtime_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                deps |= {resolve(a.name) for a in node.names if a.name.startswith("ssekd")}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ssekd"):
                deps |= {resolve(f"{node.module}.{a.name}") for a in node.names}
        graph[module] = {d for d in deps if d is not None and d != module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


GRAPH = imports(modules())


def test_the_scan_sees_the_imports() -> None:
    assert "ssekd.bindings.registry" in GRAPH["ssekd.engine"]
    assert "ssekd.engine" in GRAPH["ssekd.cli"], "an import inside a function counts"
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle() -> None:
    assert circles(GRAPH) == []


def test_only_the_contract_is_imported_from_outside_the_bindings() -> None:
    outside = {m: sorted(d for d in deps if d.startswith("ssekd.bindings") and d not in CONTRACT)
               for m, deps in GRAPH.items() if not m.startswith("ssekd.bindings")}
    assert {m: d for m, d in outside.items() if d} == {}
