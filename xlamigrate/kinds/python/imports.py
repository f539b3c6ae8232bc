"""Adds the imports a rewrite needs at the top of a module.

The placement is libcst's `AddImportsVisitor`'s (the rewrite's outputs were made with it, and
users know its style): a name from a module the leading import block already imports from is
added to that `from` statement; the rest go after the leading import block (after a docstring
or `__strict__` line), `import x` lines first, then `from x import a, b`, sorted, with an empty
line before the code that follows. Only the top-level statements are looked at: the visitor
walked the whole tree twice for that, half the time of a rewrite.
"""

from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

Needed = tuple[str, str | None]  # (module, name): `import module`, or `from module import name`
Aliased = tuple[str, str]  # (module, alias): `import module as alias`


def add_imports(
    module: cst.Module, needed: Iterable[Needed], aliased: Iterable[Aliased] = ()
) -> cst.Module:
    """The module with each needed import that no top-level statement already makes."""
    missing = {entry for entry in needed if not is_imported(module, *entry)}
    as_aliases = {entry for entry in aliased if not _is_imported_as(module, *entry)}
    if not missing and not as_aliases:
        return module
    body = list(module.body)
    start = 1 if _skip_first(module) else 0
    end = start
    while end < len(body) and _is_import_line(body[end]):
        end += 1
    modules = sorted(
        [name for name, obj in missing if obj is None]
        + [f"{name} as {alias}" for name, alias in as_aliases]
    )
    names: dict[str, set[str]] = {}
    for name, obj in missing:
        if obj is not None:
            names.setdefault(name, set()).add(obj)
    for index in range(start, end):  # the leading block's `from m import ...` take their names
        line = body[index]
        assert isinstance(line, cst.SimpleStatementLine)
        small = line.body[0]
        if not isinstance(small, cst.ImportFrom) or isinstance(small.names, cst.ImportStar):
            continue
        source = _absolute_module(small)
        if source is None or source not in names:
            continue
        added = [cst.ImportAlias(name=cst.Name(obj)) for obj in sorted(names.pop(source))]
        body[index] = line.with_changes(body=[small.with_changes(names=[*added, *small.names])])
    if not modules and not names:
        return module.with_changes(body=body)
    config = module.config_for_parsing
    new = [cst.parse_statement(f"import {name}", config=config) for name in modules]
    new += [
        cst.parse_statement(f"from {name} import {', '.join(sorted(objs))}", config=config)
        for name, objs in sorted(names.items())
    ]
    after = body[end:]
    if after:
        first = after[0]
        if not first.leading_lines:
            after[0] = first.with_changes(leading_lines=[cst.EmptyLine()])
        elif first.leading_lines[0].comment is not None:
            after[0] = first.with_changes(leading_lines=[cst.EmptyLine(), *first.leading_lines])
    return module.with_changes(body=[*body[:end], *new, *after])


def is_imported(module: cst.Module, name: str, obj: str | None) -> bool:
    """Whether a top-level statement anywhere in the module already imports it (not only the
    leading block: scripts import below an env write, say)."""
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if obj is None and isinstance(small, cst.Import):
                for alias in small.names:
                    dotted = _code(alias.name)
                    if alias.asname is None and (dotted + ".").startswith(name + "."):
                        return True
            elif obj is not None and isinstance(small, cst.ImportFrom) and small.module:
                if small.relative or _code(small.module) != name:
                    continue
                if isinstance(small.names, cst.ImportStar):
                    return True
                if any(a.asname is None and _code(a.name) == obj for a in small.names):
                    return True
    return False


def _is_imported_as(module: cst.Module, name: str, alias: str) -> bool:
    """Whether a top-level `import name as alias` is already there."""
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.Import):
                for imported in small.names:
                    asname = imported.asname
                    if (
                        asname is not None
                        and isinstance(asname.name, cst.Name)
                        and asname.name.value == alias
                        and _code(imported.name) == name
                    ):
                        return True
    return False


def _is_import_line(statement: cst.BaseStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], (cst.Import, cst.ImportFrom))
    )


def _skip_first(module: cst.Module) -> bool:
    """A docstring or `__strict__ = ...` line first: imports never go above it."""
    if not module.body:
        return False
    first = module.body[0]
    if not isinstance(first, cst.SimpleStatementLine) or len(first.body) != 1:
        return False
    small = first.body[0]
    if isinstance(small, cst.Expr):
        return isinstance(small.value, cst.SimpleString)
    return (
        isinstance(small, cst.Assign)
        and len(small.targets) == 1
        and isinstance(small.targets[0].target, cst.Name)
        and small.targets[0].target.value == "__strict__"
    )


def _absolute_module(statement: cst.ImportFrom) -> str | None:
    """The module a `from` import names; None for a relative one (its package is unknown)."""
    if statement.relative or statement.module is None:
        return None
    return _code(statement.module)


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)
