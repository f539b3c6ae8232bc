"""A rewrite plan's edits on libcst's tree (keyed by the original nodes they change: apply.py
pairs them from the plan made on `ast`) and the transformer making them.

Statement-level edits are made by the block that holds the statement, so a removal never shifts
what the other edits point at. What a removal empties goes too, as if never written: an `if`
left with nothing to guard (its test pure: puretests.py), an `else` left empty; a block that
must hold a statement gets `pass`. The lines above what went move down to what takes its place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from xlamigrate.kinds.python.imports import add_imports
from xlamigrate.kinds.python.markers import TOOL_MARKER
from xlamigrate.kinds.python.puretests import is_pure

_Block = cst.Module | cst.IndentedBlock


@dataclass
class CstEdits:
    """A plan's edits (plan.py) on libcst's nodes, as apply.py pairs them."""

    # A small statement removed from its line; a line left empty disappears, and so does what
    # it leaves empty (an `if` whose test is pure, an `else`); a block left empty gets `pass`.
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
    # An `if` (or `elif`) that stays, under `pass`, where the edits empty its body: its test
    # reads a local variable for the last time (lastreads.py).
    kept_ifs: set[cst.If] = field(default_factory=set)
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
        # the blocks the edits left empty (each holds a `pass` that stands for nothing)
        self.emptied: set[cst.IndentedBlock] = set()

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
        # the lines above what went (None: nothing went since the last statement kept), which
        # move down to what comes next; `opening`: they began at the block's start
        carried: list[cst.EmptyLine] | None = None
        opening = False
        spans: dict[cst.BaseStatement, tuple[int, int]] = {}  # where each statement's code went
        for before, after in zip(original.body, updated.body, strict=True):
            inserted = plan.before.get(before, [])
            new, gone = self._statement(before, after)
            appended = plan.after.get(before, [])
            if carried is not None and (inserted or new):
                if inserted:
                    inserted = _taking_place(inserted, carried, opening)
                else:
                    new = _taking_place(new, carried, opening)
                carried = None
            if gone is not None:
                if carried is None:
                    opening = not (body or inserted or new)
                carried = _joined(carried or [], gone)
            if carried is not None and appended:
                appended = _taking_place(appended, carried, opening)
                carried = None
            body.extend(inserted)
            spans[before] = (len(body), len(body) + len(new))
            body.extend(new)
            body.extend(appended)
        body = self._wrap(body, spans)
        footer = list(updated.footer)
        if not body and isinstance(updated, cst.IndentedBlock):
            body = [cst.SimpleStatementLine([cst.Pass()], leading_lines=carried or [])]
            emptied = updated.with_changes(body=body, footer=footer)
            self.emptied.add(emptied)
            return emptied
        if carried is not None:  # what went last in the block: its comments stay, at its end
            footer = [*_through_last_comment(carried), *footer]
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
    ) -> tuple[list[cst.BaseStatement], list[cst.EmptyLine] | None]:
        """What the statement becomes, and the lines to move down to what follows (None where
        nothing of it went)."""
        plan = self.plan
        if isinstance(original, cst.If):
            assert isinstance(updated, cst.If)
            if original in plan.collapsed:
                return self._collapsed(updated, plan.collapsed[original])
            pruned, gone = self._pruned(original, updated)
            return ([pruned] if pruned is not None else []), gone
        if not isinstance(original, cst.SimpleStatementLine):
            return [updated], None
        assert isinstance(updated, cst.SimpleStatementLine)
        replacement: list[cst.BaseStatement] = []
        kept: list[cst.BaseSmallStatement] = []
        for small_original, small_updated in zip(original.body, updated.body, strict=True):
            if small_original in plan.replacements:
                replacement.extend(plan.replacements[small_original])
            elif small_original not in plan.removed:
                kept.append(small_updated)
        if len(kept) == len(updated.body) and not replacement:
            return [updated], None
        result: list[cst.BaseStatement] = []
        if kept:
            kept[-1] = kept[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
            result.append(updated.with_changes(body=kept))
            replacement = [_with_leading(s, []) for s in replacement]
        elif replacement:
            replacement[0] = _with_leading(replacement[0], list(updated.leading_lines))
            replacement = _with_trailing_comment(replacement, updated.trailing_whitespace)
        else:  # the line went: its comments stay (its own one on a line of its own)
            gone = list(updated.leading_lines)
            comment = _own_comment(updated.trailing_whitespace)
            if comment is not None:
                gone.append(cst.EmptyLine(comment=comment))
            return [], gone
        return result + replacement, None

    def _pruned(
        self, original: cst.If, statement: cst.If
    ) -> tuple[cst.If | None, list[cst.EmptyLine] | None]:
        """The `if` (or `elif`) without the clauses the edits emptied: an empty `else` goes, and
        the whole `if` where its body is empty too and its test pure (None; then the lines to
        move down are its own and the comments that were in it). A body that stays empty keeps
        its `pass` (an `else` follows, the test may act, or it reads a variable's last time)."""
        orelse = statement.orelse
        dropped: list[cst.EmptyLine] | None = None  # the comments of an else or elif that went
        if isinstance(orelse, cst.Else) and orelse.body in self.emptied:
            dropped = _comments(orelse)
            orelse = None
        elif isinstance(orelse, cst.If) and isinstance(original.orelse, cst.If):
            orelse, dropped = self._pruned(original.orelse, orelse)
        if (
            statement.body in self.emptied
            and orelse is None
            and is_pure(statement.test)
            and original not in self.plan.kept_ifs
        ):
            inner = [*_comments(statement.body), *(dropped or [])]
            return None, [*statement.leading_lines, *inner]
        if orelse is statement.orelse:
            return statement, None
        body = statement.body
        if dropped and isinstance(body, cst.IndentedBlock):  # at the end of the clause before
            body = body.with_changes(footer=[*body.footer, *dropped])
            dropped = None
        return statement.with_changes(body=body, orelse=orelse), dropped

    def _collapsed(
        self, statement: cst.If, keep_body: bool
    ) -> tuple[list[cst.BaseStatement], list[cst.EmptyLine] | None]:
        """What is left of an `if` that goes: its body's or its else's statements, dedented
        (none where that clause is absent or the edits emptied it)."""
        orelse = statement.orelse
        suite = (
            statement.body if keep_body else orelse.body if isinstance(orelse, cst.Else) else None
        )
        kept: list[cst.BaseStatement] = []
        if isinstance(suite, cst.SimpleStatementSuite):
            kept.append(cst.SimpleStatementLine(body=suite.body))
        elif isinstance(suite, cst.IndentedBlock) and suite not in self.emptied:
            kept.extend(suite.body)
        if not kept:
            inner = _comments(suite) if suite is not None else []
            return [], [*statement.leading_lines, *inner]
        kept[0] = _with_leading(kept[0], [*statement.leading_lines, *_leading(kept[0])])
        return kept, None

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


def _taking_place(
    statements: list[cst.BaseStatement], carried: list[cst.EmptyLine], opening: bool
) -> list[cst.BaseStatement]:
    """The statements with the first one in the place of what went before it: the lines above
    that move down (`_merge_leading`); at the block's start, the blank lines there were (none:
    a block does not open with a blank line the removed statement did not have)."""
    first = statements[0]
    lines = _merge_leading(carried, _leading(first))
    if opening:
        blank = _blank_prefix(carried)
        lines = blank + lines[len(_blank_prefix(lines)) :]
    return [_with_leading(first, lines), *statements[1:]]


def _blank_prefix(lines: list[cst.EmptyLine]) -> list[cst.EmptyLine]:
    count = next((i for i, line in enumerate(lines) if line.comment is not None), len(lines))
    return lines[:count]


def _blank_suffix(lines: list[cst.EmptyLine]) -> list[cst.EmptyLine]:
    return _blank_prefix(lines[::-1])[::-1]


def _through_last_comment(lines: list[cst.EmptyLine]) -> list[cst.EmptyLine]:
    """The lines up to the last comment: blank lines after it would pile up at a block's end."""
    last = max((i for i, line in enumerate(lines) if line.comment is not None), default=-1)
    return lines[: last + 1]


def _comments(node: cst.CSTNode) -> list[cst.EmptyLine]:
    """The comments of a clause that goes, each on a line of its own: above it, on its header,
    in its body (its blank lines go with it)."""
    found: list[cst.EmptyLine] = []

    def own(trailing: cst.TrailingWhitespace) -> None:
        comment = _own_comment(trailing)
        if comment is not None:
            found.append(cst.EmptyLine(comment=comment))

    found += [line for line in getattr(node, "leading_lines", ()) if line.comment is not None]
    suite = node.body if isinstance(node, (cst.If, cst.Else)) else node
    if isinstance(suite, cst.SimpleStatementSuite):
        own(suite.trailing_whitespace)
    elif isinstance(suite, cst.IndentedBlock):
        own(suite.header)
        for statement in suite.body:
            found += _comments(statement)
            if isinstance(statement, cst.SimpleStatementLine):
                own(statement.trailing_whitespace)
        found += [line for line in suite.footer if line.comment is not None]
    if isinstance(node, cst.If) and node.orelse is not None:
        found += _comments(node.orelse)
    return found


def _merge_leading(carried: list[cst.EmptyLine], own: list[cst.EmptyLine]) -> list[cst.EmptyLine]:
    """Comments above a removed statement move down; its blank lines only where none are."""
    if any(line.comment is not None for line in carried):
        return _joined(carried, own)
    return own or carried


def _joined(first: list[cst.EmptyLine], then: list[cst.EmptyLine]) -> list[cst.EmptyLine]:
    """Two runs of lines one after the other, the blank lines where they meet not piling up:
    the longer of the two runs of blank lines there stays."""
    tail, head = _blank_suffix(first), _blank_prefix(then)
    blank = tail if len(tail) >= len(head) else head
    return [*first[: len(first) - len(tail)], *blank, *then[len(head) :]]


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
