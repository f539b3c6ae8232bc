"""The modules of xlamigrate/ import one another without a cycle, function-level imports
included (issue 38): a module that needs another's function at run time cannot be needed by it
in turn. Imports under `if TYPE_CHECKING:` are left out (they never run: annotations only)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "xlamigrate"


def modules() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its own name)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _run_time_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement of the module, at any depth, but those under TYPE_CHECKING."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        children = list(ast.iter_child_nodes(node))
        if _type_checking(node):
            children = list(node.orelse) if isinstance(node, ast.If) else []
        stack.extend(children)


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules `name` imports when it runs (a module's parent packages, which
    importing it runs first, are not counted: they are where it lives, not what it uses)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _run_time_imports(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        found.update(t for t in targets if t in known and not name.startswith(f"{t}."))
    found.discard(name)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_package_imports_without_a_cycle() -> None:
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    assert sum(map(len, graph.values())) > 300  # (the walk sees the package's imports)
    assert cycles(graph) == []


def test_a_cycle_through_a_function_level_import_is_found() -> None:
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    scan, rewrite = "xlamigrate.kinds.python.scan", "xlamigrate.kinds.python.rewrite"
    assert rewrite in graph[scan]  # (scan asks the rewrite whether a recipe goes in whole)
    assert cycles({**graph, rewrite: graph[rewrite] | {scan}}) == [[rewrite, scan]]
