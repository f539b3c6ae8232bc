"""Imports a rewrite left unused: `import os` whose only use was the legacy flag's write,
`import torch_xla.core.xla_model as xm` whose calls all became `torch_xla.*`. The file was clean
before; it stays clean (ruff's F401 would flag what the rewrite left).

Only what the rewrite made unused goes: a name some code used before and none uses after.
Imports that were unused already stay (not the rewrite's business), as do imports inside `try`
or `if` blocks (an availability probe: `try: import torch_xla` decides what runs) and names
listed in `__all__` (a re-export).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

import libcst as cst


def without_unused_imports(before: ast.Module, after: cst.Module) -> cst.Module:
    """`after` without the import names the rewrite left unused (see the module docstring)."""
    try:
        rewritten = ast.parse(after.code)
    except (SyntaxError, ValueError):
        return after
    dropped = (_loaded(before) - _loaded(rewritten)) & _bound_at_block_level(rewritten)
    dropped -= _exported(rewritten)
    if not dropped:
        return after
    return after.visit(_Dropper(frozenset(dropped)))


def _loaded(module: ast.Module) -> set[str]:
    return {node.id for node in ast.walk(module) if isinstance(node, ast.Name)}


def _bound_at_block_level(module: ast.Module) -> set[str]:
    """Names bound by imports that are statements of the module or of a function's body."""
    bodies: list[list[ast.stmt]] = [module.body]
    bodies += [
        n.body for n in ast.walk(module) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    return {
        _bound(alias, isinstance(statement, ast.ImportFrom))
        for body in bodies
        for statement in body
        if isinstance(statement, ast.Import | ast.ImportFrom)
        and not (isinstance(statement, ast.ImportFrom) and statement.module == "__future__")
        for alias in statement.names
        if alias.name != "*"
    }


def _bound(alias: ast.alias, from_import: bool) -> str:
    if alias.asname:
        return alias.asname
    return alias.name if from_import else alias.name.split(".", 1)[0]


def _exported(module: ast.Module) -> set[str]:
    for statement in module.body:
        if (
            isinstance(statement, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in statement.targets)
            and isinstance(statement.value, ast.List | ast.Tuple)
        ):
            return {
                e.value
                for e in statement.value.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            }
    return set()


class _Dropper(cst.CSTTransformer):
    def __init__(self, names: frozenset[str]) -> None:
        super().__init__()
        self.names = names

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        return updated.with_changes(body=self._kept(updated.body))

    def leave_FunctionDef(
        self, original: cst.FunctionDef, updated: cst.FunctionDef
    ) -> cst.FunctionDef:
        body = updated.body
        if not isinstance(body, cst.IndentedBlock):
            return updated
        kept = self._kept(body.body)
        if not kept:  # a function of imports only: left as it is
            return updated
        return updated.with_changes(body=body.with_changes(body=kept))

    def _kept(self, body: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
        kept: list[cst.BaseStatement] = []
        carried: Sequence[cst.EmptyLine] = ()  # the comments above a line that went
        for statement in body:
            if isinstance(statement, cst.SimpleStatementLine):
                smalls = [s for s in map(self._small, statement.body) if s is not None]
                if not smalls:
                    carried = [*carried, *statement.leading_lines]
                    continue
                last = smalls[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
                statement = statement.with_changes(body=[*smalls[:-1], last])
            if carried and isinstance(
                statement, cst.SimpleStatementLine | cst.BaseCompoundStatement
            ):
                leading = _joined(carried, statement.leading_lines)
                statement = statement.with_changes(leading_lines=leading)
                carried = ()
            kept.append(statement)
        return kept

    def _small(self, small: cst.BaseSmallStatement) -> cst.BaseSmallStatement | None:
        if not isinstance(small, cst.Import | cst.ImportFrom) or isinstance(
            small.names, cst.ImportStar
        ):
            return small
        aliases = [a for a in small.names if self._name(a, small) not in self.names]
        if len(aliases) == len(small.names):
            return small
        if not aliases:
            return None
        last = aliases[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return small.with_changes(names=[*aliases[:-1], last])

    @staticmethod
    def _name(alias: cst.ImportAlias, small: cst.Import | cst.ImportFrom) -> str:
        if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
            return alias.asname.name.value
        dotted = cst.Module(body=()).code_for_node(alias.name)
        return dotted if isinstance(small, cst.ImportFrom) else dotted.split(".", 1)[0]


def _joined(carried: Sequence[cst.EmptyLine], own: Sequence[cst.EmptyLine]) -> list[cst.EmptyLine]:
    """The lines above a statement whose previous line went: its own blank lines where it has
    some (they separate it as the author wanted), else the removed line's; comments kept."""
    comments = [line for line in carried if line.comment is not None]
    return [*comments, *own] if own else list(carried)
