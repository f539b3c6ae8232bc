"""A rewrite plan's edits on libcst's tree (keyed by the original nodes they change: apply.py
pairs them from the plan made on `ast`) and the transformer making them.

Statement-level edits are made by the block that holds the statement, so a removal never shifts
what the other edits point at.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from xlamigrate.kinds.python.imports import add_imports
from xlamigrate.kinds.python.markers import TOOL_MARKER

_Block = cst.Module | cst.IndentedBlock


@dataclass
class CstEdits:
    """A plan's edits (plan.py) on libcst's nodes, as apply.py pairs them."""

    # A small statement removed from its line; a line left empty disappears (or becomes `pass`).
    removed: set[cst.BaseSmallStatement] = field(default_factory=set)
    # Statements put in place of a small statement's line (the first removed one on the line).
    replacements: dict[cst.BaseSmallStatement, list[cst.BaseStatement]] = field(
        default_factory=dict
    )
    # Statements put before or after a statement of a block (compound ones too).
    before: dict[cst.BaseStatement, list[cst.BaseStatement]] = field(default_factory=dict)
    after: dict[cst.BaseStatement, list[cst.BaseStatement]] = field(default_factory=dict)
    # Runs of consecutive statements (first, last) of one block, wrapped in `with <item>:`.
    wraps: list[tuple[cst.BaseStatement, cst.BaseStatement, cst.BaseExpression]] = field(
        default_factory=list
    )
    removed_elements: set[cst.DictElement | cst.Arg] = field(default_factory=set)
    # An `if` that goes, leaving its body (True) or its else's (False) in its place.
    collapsed: dict[cst.If, bool] = field(default_factory=dict)
    swapped: dict[cst.CSTNode, cst.CSTNode] = field(default_factory=dict)
    imports: set[tuple[str, str | None]] = field(default_factory=set)
    aliased: set[tuple[str, str]] = field(default_factory=set)  # `import module as alias`


def apply_edits(
    module: cst.Module, plan: CstEdits, focus: set[cst.CSTNode] | None = None
) -> cst.Module:
    """The module with the plan's edits made. `focus`: every statement that holds an edit (or
    is one); the others are not descended into, so the cost follows the edits, not the file."""
    updated = module.visit(_Applier(plan, focus))
    assert isinstance(updated, cst.Module)
    return add_imports(updated, plan.imports, plan.aliased)


class _Applier(cst.CSTTransformer):
    def __init__(self, plan: CstEdits, focus: set[cst.CSTNode] | None = None) -> None:
        super().__init__()
        self.plan = plan
        self.focus = focus

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.focus is not None and isinstance(node, (cst.BaseStatement, cst.BaseSmallStatement)):
            return node in self.focus
        return True

    def on_leave(  # type: ignore[override]
        self, original_node: cst.CSTNode, updated_node: cst.CSTNode
    ) -> cst.CSTNode:
        swapped = self.plan.swapped.get(original_node)
        if swapped is not None:
            return swapped
        if isinstance(original_node, (cst.Call, cst.Dict)):
            return self._drop_elements(original_node, updated_node)
        if isinstance(original_node, (cst.Module, cst.IndentedBlock)):
            assert isinstance(updated_node, (cst.Module, cst.IndentedBlock))
            return self._block(original_node, updated_node)
        if isinstance(original_node, cst.SimpleStatementSuite):
            assert isinstance(updated_node, cst.SimpleStatementSuite)
            return self._suite(original_node, updated_node)
        return updated_node

    def _drop_elements(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:
        removed = self.plan.removed_elements
        if isinstance(original, cst.Call) and isinstance(updated, cst.Call):
            kept_args = [
                u for o, u in zip(original.args, updated.args, strict=True) if o not in removed
            ]
            if len(kept_args) == len(updated.args):
                return updated
            return updated.with_changes(args=_last_without_comma(kept_args, original.args))
        if isinstance(original, cst.Dict) and isinstance(updated, cst.Dict):
            kept = [
                u
                for o, u in zip(original.elements, updated.elements, strict=True)
                if o not in removed
            ]
            if len(kept) == len(updated.elements):
                return updated
            return updated.with_changes(elements=_last_without_comma(kept, original.elements))
        return updated

    def _block(self, original: _Block, updated: _Block) -> _Block:
        plan = self.plan
        body: list[cst.BaseStatement] = []
        carried: list[cst.EmptyLine] = []  # comments above a removed line move down
        spans: dict[cst.BaseStatement, tuple[int, int]] = {}  # where each statement's code went
        for before, after in zip(original.body, updated.body, strict=True):
            inserted = plan.before.get(before, [])
            new = self._statement(before, after)
            if carried and (inserted or new):
                first = (inserted or new)[0]
                merged = _with_leading(first, _merge_leading(carried, _leading(first)))
                if inserted:
                    inserted = [merged, *inserted[1:]]
                else:
                    new = [merged, *new[1:]]
                carried = []
            if not new and isinstance(after, cst.SimpleStatementLine):
                carried.extend(after.leading_lines)
                comment = _own_comment(after.trailing_whitespace)
                if comment is not None:  # it stays, on a line of its own
                    carried.append(cst.EmptyLine(comment=comment))
            body.extend(inserted)
            spans[before] = (len(body), len(body) + len(new))
            body.extend(new)
            body.extend(plan.after.get(before, []))
        body = self._wrap(body, spans)
        if not body:
            body = [cst.SimpleStatementLine([cst.Pass()], leading_lines=carried)]
            carried = []
        if isinstance(updated, cst.Module):
            footer = [*carried, *updated.footer]
            return updated.with_changes(body=body, footer=footer)
        footer = [*carried, *updated.footer]
        return updated.with_changes(body=body, footer=footer)

    def _suite(
        self, original: cst.SimpleStatementSuite, updated: cst.SimpleStatementSuite
    ) -> cst.BaseSuite:
        """`if c: x = 1` with a statement removed or replaced becomes an indented block, edited
        as any block is (a replacement may be compound, and what is left empty gets `pass`)."""
        plan = self.plan
        if not any(s in plan.removed or s in plan.replacements for s in original.body):
            return updated
        block = self._block(
            cst.IndentedBlock(body=[cst.SimpleStatementLine(body=original.body)]),
            cst.IndentedBlock(
                header=updated.trailing_whitespace,
                body=[cst.SimpleStatementLine(body=updated.body)],
            ),
        )
        assert isinstance(block, cst.IndentedBlock)
        return block

    def _statement(
        self, original: cst.BaseStatement, updated: cst.BaseStatement
    ) -> list[cst.BaseStatement]:
        plan = self.plan
        if isinstance(original, cst.If) and original in plan.collapsed:
            assert isinstance(updated, cst.If)
            return _collapsed(updated, plan.collapsed[original])
        if not isinstance(original, cst.SimpleStatementLine):
            return [updated]
        assert isinstance(updated, cst.SimpleStatementLine)
        replacement: list[cst.BaseStatement] = []
        kept: list[cst.BaseSmallStatement] = []
        for small_original, small_updated in zip(original.body, updated.body, strict=True):
            if small_original in plan.replacements:
                replacement.extend(plan.replacements[small_original])
            elif small_original not in plan.removed:
                kept.append(small_updated)
        if len(kept) == len(updated.body) and not replacement:
            return [updated]
        result: list[cst.BaseStatement] = []
        if kept:
            kept[-1] = kept[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
            result.append(updated.with_changes(body=kept))
            replacement = [_with_leading(s, []) for s in replacement]
        elif replacement:
            replacement[0] = _with_leading(replacement[0], list(updated.leading_lines))
            replacement = _with_trailing_comment(replacement, updated.trailing_whitespace)
        return result + replacement

    def _wrap(
        self, body: list[cst.BaseStatement], spans: dict[cst.BaseStatement, tuple[int, int]]
    ) -> list[cst.BaseStatement]:
        """Wraps the runs planned in this block, each from what its first statement became
        through what its last one became (edits of their own included)."""
        runs = [
            (spans[first][0], spans[last][1], item)
            for first, last, item in self.plan.wraps
            if first in spans and last in spans
        ]
        free_until = len(body)  # runs are wrapped from the last one up; overlaps are left alone
        for start, end, item in sorted(runs, key=lambda run: run[0], reverse=True):
            if start >= end or end > free_until:
                continue
            inner = [_with_leading(body[start], []), *body[start + 1 : end]]
            wrapped = cst.With(
                items=[cst.WithItem(item)],
                body=cst.IndentedBlock(body=inner),
                leading_lines=_leading(body[start]),
            )
            body = [*body[:start], wrapped, *body[end:]]
            free_until = start
        return body


def _collapsed(statement: cst.If, keep_body: bool) -> list[cst.BaseStatement]:
    """What is left of an `if` that goes: its body's or its else's statements, dedented."""
    orelse = statement.orelse
    suite = statement.body if keep_body else orelse.body if isinstance(orelse, cst.Else) else None
    kept: list[cst.BaseStatement] = []
    if isinstance(suite, cst.SimpleStatementSuite):
        kept.append(cst.SimpleStatementLine(body=suite.body))
    elif isinstance(suite, cst.IndentedBlock):
        kept.extend(suite.body)
    if not kept:
        return []
    kept[0] = _with_leading(kept[0], [*statement.leading_lines, *_leading(kept[0])])
    return kept


def _merge_leading(carried: list[cst.EmptyLine], own: list[cst.EmptyLine]) -> list[cst.EmptyLine]:
    """Comments above a removed statement move down; its blank lines only where none are."""
    if any(line.comment is not None for line in carried):
        return carried + own
    return own or carried


def _own_comment(trailing: cst.TrailingWhitespace) -> cst.Comment | None:
    comment = trailing.comment
    if comment is None or comment.value.startswith(TOOL_MARKER):
        return None
    return comment


def _with_trailing_comment(
    statements: list[cst.BaseStatement], trailing: cst.TrailingWhitespace
) -> list[cst.BaseStatement]:
    """A replaced line's own comment goes on the line that replaces it (above it, where that is a
    compound statement)."""
    if _own_comment(trailing) is None or not statements:
        return statements
    last = statements[-1]
    if isinstance(last, cst.SimpleStatementLine) and last.trailing_whitespace.comment is None:
        return [*statements[:-1], last.with_changes(trailing_whitespace=trailing)]
    first = statements[0]
    comment = cst.EmptyLine(comment=trailing.comment)
    return [_with_leading(first, [*_leading(first), comment]), *statements[1:]]


def _leading(statement: cst.BaseStatement) -> list[cst.EmptyLine]:
    return list(getattr(statement, "leading_lines", ()))


def _with_leading(statement: cst.BaseStatement, lines: list[cst.EmptyLine]) -> cst.BaseStatement:
    if hasattr(statement, "leading_lines"):
        return statement.with_changes(leading_lines=lines)
    return statement


def _last_without_comma(kept: list[Any], originals: Sequence[Any]) -> list[Any]:
    """After removing elements, the new last one keeps the original last one's comma (or none)."""
    if kept and originals:
        kept[-1] = kept[-1].with_changes(comma=originals[-1].comma)
    return kept
