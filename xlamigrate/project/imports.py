"""The in-tree modules a launched script imports: what `python script.py` finds on sys.path[0]
(the script's own folder), followed through those modules' own imports.

Only the script's folder counts: a package installed from elsewhere in the tree (`pip install
-e .`, a library under src/) serves other scripts too, and is not the launch's to change.
"""

from __future__ import annotations

import ast
import posixpath
from collections import deque
from collections.abc import Callable, Collection, Iterator

# An import statement of a file, in its order: `import a.b` is (-1, "a.b", ()), `from ..a
# import b, c` (2, "a", ("b", "c")); plain values, so a cache keeps them for the file's bytes.
Reference = tuple[int, str, tuple[str, ...]]


def imported_modules(
    script: str,
    read: Callable[[str], bytes | None],
    python: Collection[str],
    references: Callable[[str], tuple[Reference, ...]] | None = None,
) -> list[str]:
    """The display paths of the project's Python files `script` imports, directly or not
    (`references`: a file's import statements, where they are known without reading it)."""
    root = posixpath.dirname(script)
    found: list[str] = []
    seen = {script}
    pending = [script]
    while pending:
        current = pending.pop()
        held = references(current) if references is not None else references_in(read(current))
        for module in _imports(held, root, current, python):
            if module not in seen:
                seen.add(module)
                found.append(module)
                pending.append(module)
    return found


def references_in(data: bytes | None) -> tuple[Reference, ...]:
    """The import statements of a Python file's bytes (none where it does not parse)."""
    if data is None:
        return ()
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return ()
    held: list[Reference] = []
    for node in _statements(tree):
        if isinstance(node, ast.Import):
            held.extend((-1, alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names = tuple(alias.name for alias in node.names)
            held.append((node.level, node.module or "", names))
    return tuple(held)


def _imports(
    held: tuple[Reference, ...], root: str, current: str, python: Collection[str]
) -> Iterator[str]:
    for level, module, names in held:
        if level < 0:
            yield from _candidates(root, module.split("."), python)
            continue
        if level:
            base = posixpath.dirname(current)
            for _ in range(level - 1):
                base = posixpath.dirname(base)
        else:
            base = root
        parts = module.split(".") if module else []
        yield from _candidates(base, parts, python)
        for name in names:  # `from package import module`
            yield from _candidates(base, [*parts, name], python, packages=False)


def _candidates(
    base: str, parts: list[str], python: Collection[str], packages: bool = True
) -> Iterator[str]:
    """The files `import a.b` loads from `base`: a/__init__.py, a/b.py or a/b/__init__.py."""
    if not parts:
        return
    for depth in range(1, len(parts) + 1):
        stem = posixpath.join(base, *parts[:depth]) if base else posixpath.join(*parts[:depth])
        last = depth == len(parts)
        if last and f"{stem}.py" in python:
            yield f"{stem}.py"
        elif (packages or last) and f"{stem}/__init__.py" in python:
            yield f"{stem}/__init__.py"


# The fields that hold statements (or the handlers and cases that do), in each node's own order.
_BODIES = ("body", "handlers", "cases", "orelse", "finalbody")


def _statements(tree: ast.Module) -> Iterator[ast.AST]:
    """The statements (and except handlers, match cases) of the tree, in ast.walk's order,
    without visiting expressions: an import is a statement."""
    pending = deque([tree])
    while pending:
        node = pending.popleft()
        for name in node._fields:
            if name in _BODIES:
                children = getattr(node, name)
                if isinstance(children, list):
                    pending.extend(children)
        yield node
