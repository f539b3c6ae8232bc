"""Applies a plan made on `ast` (plan.py) to the file's libcst tree: libcst writes the edits,
keeping every byte the plan does not touch, as the rewrite always has.

Statements are paired by structure (a block's lines and compound statements are libcst's
statements one for one; a line's simple statements its small statements), with no metadata
pass. An expression the plan edits is found in its statement by position: only that statement
is laid out (a small module of it), not the file.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from xlamigrate.kinds.python.astwalk import DictItem
from xlamigrate.kinds.python.cstedits import CstEdits, apply_edits
from xlamigrate.kinds.python.lastreads import last_reads
from xlamigrate.kinds.python.plan import Plan
from xlamigrate.kinds.python.training import Block, Line, Statement, TrainingScript

_LINE_BREAK = re.compile(r"\r\n?")


class UnpairedTree(Exception):
    """The ast and libcst trees of the file do not pair up (never expected)."""


def applied(
    script: TrainingScript, module: cst.Module, plan: Plan, top: Block | None = None
) -> cst.Module:
    """The module with the plan's edits made. `top`: the script's top-level statements the
    module holds, where it holds only some (cstslices.py); all of them by default."""
    pairs = _Pairs(script, module, top)
    edits = CstEdits()
    edits.removed = {pairs.small(s) for s in plan.removed}
    edits.replacements = {
        pairs.small(s): [_statement(c) for c in code] for s, code in plan.replacements.items()
    }
    edits.before = {
        pairs.statement(s): [_statement(c) for c in code] for s, code in plan.before.items()
    }
    edits.after = {
        pairs.statement(s): [_statement(c) for c in code] for s, code in plan.after.items()
    }
    edits.wraps = [
        (pairs.statement(first), pairs.statement(last), _expression(item))
        for first, last, item in plan.wraps
    ]
    edits.removed_elements = {pairs.expression(e) for e in plan.removed_elements}  # type: ignore[misc]
    edits.collapsed = {pairs.statement(s): keep for s, keep in plan.collapsed.items()}  # type: ignore[misc]
    edits.kept_ifs = _kept_ifs(script, plan, pairs)
    edits.swapped = {pairs.expression(n): _expression(c) for n, c in plan.swapped.items()}
    edits.imports = set(plan.imports)
    edits.aliased = set(plan.aliased)
    return apply_edits(module, edits, pairs.focus(plan))


def _kept_ifs(script: TrainingScript, plan: Plan, pairs: _Pairs) -> set[cst.If]:
    """The `if`s around what the plan removes that stay where it empties them: their tests
    read a local variable for the last time (lastreads.py)."""
    removed: list[ast.AST] = [*plan.removed, *plan.collapsed]
    around = {id(a): a for s in removed for a in script.ancestors(s) if isinstance(a, ast.If)}
    if not around:
        return set()
    tests = [statement.test for statement in around.values()]
    last = last_reads(script.scopes, tests)
    kept = [pairs.statement(s) for s in around.values() if id(s.test) in last]
    return {statement for statement in kept if isinstance(statement, cst.If)}


def _statement(code: str) -> cst.BaseStatement:
    return cst.parse_statement(_unix(code))


def _expression(code: str) -> cst.BaseExpression:
    return cst.parse_expression(_unix(code))


def _unix(code: str) -> str:
    """The code with `\n` line breaks (what the file's own code it quotes may hold): libcst
    writes a parsed `\n` as the file's own line break."""
    return _LINE_BREAK.sub("\n", code)


class _Pairs:
    """The libcst node of each ast statement, line and edited expression."""

    def __init__(
        self, script: TrainingScript, module: cst.Module, top: Block | None = None
    ) -> None:
        self.script = script
        self.statements: dict[int, cst.CSTNode] = {}
        self.smalls: dict[int, cst.BaseSmallStatement] = {}
        self.indented: dict[int, cst.IndentedBlock] = {}  # by the id of training.py's Block
        self.module = module
        self._layouts: dict[int, tuple[cst.CSTNode, dict[cst.CSTNode, CodeRange]]] = {}
        self._pair_block(top if top is not None else script.top, list(module.body))

    # -- statements ------------------------------------------------------------------------------

    def statement(self, statement: Statement) -> cst.BaseStatement:
        found = self.statements.get(id(statement))
        if not isinstance(found, cst.BaseStatement):
            raise UnpairedTree(f"no libcst statement for line {self.script.span(statement).line}")
        return found

    def small(self, statement: ast.stmt) -> cst.BaseSmallStatement:
        found = self.smalls.get(id(statement))
        if found is None:
            raise UnpairedTree(f"no libcst statement for line {statement.lineno}")
        return found

    def _pair_block(self, block: Block, statements: list[cst.BaseStatement]) -> None:
        if len(block.body) != len(statements):
            raise UnpairedTree(f"the block at line {self.script.span(block).line} does not pair")
        for mine, theirs in zip(block.body, statements, strict=True):
            self.statements[id(mine)] = theirs
            if isinstance(mine, Line):
                if not isinstance(theirs, cst.SimpleStatementLine):
                    raise UnpairedTree(f"line {mine.body[0].lineno} does not pair")
                self._pair_smalls(mine.body, theirs.body)
            else:
                self._pair_compound(mine, theirs)

    def _pair_smalls(
        self, mine: Sequence[ast.stmt], theirs: Sequence[cst.BaseSmallStatement]
    ) -> None:
        if len(mine) != len(theirs):
            raise UnpairedTree(f"line {mine[0].lineno} does not pair")
        for small, other in zip(mine, theirs, strict=True):
            self.smalls[id(small)] = other

    def _pair_suite(self, block: Block | None, suite: cst.BaseSuite | None) -> None:
        if block is None or suite is None:
            if block is not None or suite is not None:
                raise UnpairedTree("a body does not pair")
            return
        if isinstance(suite, cst.SimpleStatementSuite):
            self._pair_smalls(block.statements, suite.body)
        else:
            assert isinstance(suite, cst.IndentedBlock)
            self.indented[id(block)] = suite
            self._pair_block(block, list(suite.body))

    def _pair_compound(self, mine: ast.stmt, theirs: cst.BaseStatement) -> None:
        block = self.script.block
        if type(theirs) is not _COMPOUNDS.get(type(mine)):
            raise UnpairedTree(f"the statement at line {mine.lineno} does not pair")
        body = getattr(theirs, "body", None)
        if isinstance(mine, ast.If):
            self._pair_suite(block(mine, "body"), body)
            self._pair_else(mine, theirs.orelse)  # type: ignore[attr-defined]
        elif isinstance(mine, ast.Match):
            cases = theirs.cases  # type: ignore[attr-defined]
            if len(mine.cases) != len(cases):
                raise UnpairedTree(f"the match at line {mine.lineno} does not pair")
            for case, other in zip(mine.cases, cases, strict=True):
                self._pair_suite(block(case, "body"), other.body)
        else:
            self._pair_suite(block(mine, "body"), body)
        handlers = getattr(theirs, "handlers", ())
        if len(getattr(mine, "handlers", ())) != len(handlers):
            raise UnpairedTree(f"the try at line {mine.lineno} does not pair")
        for handler, other in zip(getattr(mine, "handlers", ()), handlers, strict=True):
            self._pair_suite(block(handler, "body"), other.body)
        for name, theirs_name in (("orelse", "orelse"), ("finalbody", "finalbody")):
            if isinstance(mine, ast.If) or not hasattr(theirs, theirs_name):
                continue
            clause = getattr(theirs, theirs_name)
            self._pair_suite(block(mine, name), clause.body if clause is not None else None)

    def _pair_else(self, mine: ast.If, orelse: cst.If | cst.Else | None) -> None:
        block = self.script.block(mine, "orelse")
        if isinstance(orelse, cst.If):  # `elif`: the else block holds that one `if`
            if block is None or len(block.statements) != 1:
                raise UnpairedTree(f"the elif after line {mine.lineno} does not pair")
            inner = block.statements[0]
            self.statements[id(inner)] = orelse
            self._pair_compound(inner, orelse)
        else:
            self._pair_suite(block, orelse.body if orelse is not None else None)

    def focus(self, plan: Plan) -> set[cst.CSTNode]:
        """The libcst statements holding an edit of the plan (or edited themselves)."""
        edited: list[object] = [
            *plan.removed,
            *plan.replacements,
            *plan.before,
            *plan.after,
            *(first for first, _, _ in plan.wraps),
            *plan.removed_elements,
            *plan.collapsed,
            *plan.swapped,
        ]
        focus: set[cst.CSTNode] = set()
        for node in edited:
            for held in (node, *self.script.ancestors(node)):  # type: ignore[arg-type]
                theirs = self.statements.get(id(held)) or self.smalls.get(id(held))
                if theirs is not None:
                    focus.add(theirs)
        return focus

    # -- expressions -----------------------------------------------------------------------------

    def expression(self, node: ast.AST | DictItem) -> cst.CSTNode:
        """The libcst node at the ast node's place in its statement."""
        anchor, other = self._anchor(node)
        ranges = self._layout(anchor, other)
        place = self.script.span(node)
        origin = self.script.span(anchor)
        their_origin = ranges[other].start
        line = place.line - origin.line + their_origin.line
        end_line = place.end_line - origin.line + their_origin.line
        column = place.column - 1
        end_column = place.end_column - 1
        if place.line == origin.line:
            column += their_origin.column - (origin.column - 1)
        if place.end_line == origin.line:
            end_column += their_origin.column - (origin.column - 1)
        wanted = _KINDS.get(type(node), (cst.BaseExpression,))
        for candidate, where in ranges.items():
            if (
                isinstance(candidate, wanted)
                and (where.start.line, where.start.column) == (line, column)
                and (where.end.line, where.end.column) == (end_line, end_column)
            ):
                return candidate
        raise UnpairedTree(f"no libcst expression at line {place.line}, column {place.column}")

    def _anchor(self, node: ast.AST | DictItem) -> tuple[ast.AST, cst.CSTNode]:
        """The statement (or a compound statement's header expression) holding `node`, and its
        libcst node."""
        child: object = node
        for ancestor in self.script.ancestors(node):
            if isinstance(ancestor, (Line, Block)):
                break
            if isinstance(ancestor, ast.stmt):
                small = self.smalls.get(id(ancestor))
                if small is not None:
                    return ancestor, small
                header = self._header(ancestor, child)
                if header is not None:
                    return child, header  # type: ignore[return-value]
                compound = self.statements.get(id(ancestor))  # a default, a decorator...
                if compound is not None:
                    return ancestor, compound
                break
            child = ancestor
        raise UnpairedTree(f"no statement pairs with line {getattr(node, 'lineno', '?')}")

    def _header(self, statement: ast.stmt, child: object) -> cst.CSTNode | None:
        """The libcst node of a compound statement's test (or iterable, or item) `child`."""
        theirs = self.statements.get(id(statement))
        if isinstance(statement, (ast.If, ast.While)) and isinstance(theirs, (cst.If, cst.While)):
            return theirs.test if child is statement.test else None
        if isinstance(statement, (ast.For, ast.AsyncFor)) and isinstance(theirs, cst.For):
            return theirs.iter if child is statement.iter else None
        if isinstance(statement, (ast.With, ast.AsyncWith)) and isinstance(theirs, cst.With):
            for item, other in zip(statement.items, theirs.items, strict=False):
                if child is item.context_expr:
                    return other.item
        return None

    def _layout(self, anchor: ast.AST, other: cst.CSTNode) -> dict[cst.CSTNode, CodeRange]:
        """The positions of `other`'s nodes in a module of its own, indented as it is in the
        file (a continuation line inside brackets counts its block's indentation)."""
        cached = self._layouts.get(id(other))
        if cached is not None:
            return cached[1]
        statement: cst.BaseStatement
        if isinstance(other, cst.BaseSmallStatement):
            statement = cst.SimpleStatementLine(body=[other])
        elif isinstance(other, cst.BaseCompoundStatement):
            statement = other
        else:
            assert isinstance(other, cst.BaseExpression)
            statement = cst.SimpleStatementLine(body=[cst.Expr(value=other)])
        default = self.module.default_indent
        for held in self.script.ancestors(anchor):  # innermost first
            indented = self.indented.get(id(held))
            match = self.statements.get(id(held)) if isinstance(held, ast.Match) else None
            indent = indented.indent if indented is not None else getattr(match, "indent", "")
            if indented is not None or match is not None:  # (a match's cases are indented too)
                block = cst.IndentedBlock(body=[statement], indent=indent or default)
                statement = cst.If(test=cst.Name("_"), body=block)
        module = cst.Module(
            body=[statement], default_indent=default, default_newline=self.module.default_newline
        )
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        ranges = dict(wrapper.resolve(PositionProvider))
        self._layouts[id(other)] = (other, ranges)  # (the node kept alive: keyed by its id)
        return ranges


_COMPOUNDS: dict[type[ast.stmt], type[cst.BaseStatement]] = {
    ast.If: cst.If,
    ast.For: cst.For,
    ast.AsyncFor: cst.For,
    ast.While: cst.While,
    ast.With: cst.With,
    ast.AsyncWith: cst.With,
    ast.FunctionDef: cst.FunctionDef,
    ast.AsyncFunctionDef: cst.FunctionDef,
    ast.ClassDef: cst.ClassDef,
    ast.Try: cst.Try,
    ast.TryStar: cst.TryStar,
    ast.Match: cst.Match,
}
_KINDS: dict[type, tuple[type[cst.CSTNode], ...]] = {
    ast.Call: (cst.Call,),
    ast.Attribute: (cst.Attribute,),
    ast.Subscript: (cst.Subscript,),
    ast.Compare: (cst.Comparison,),
    ast.BoolOp: (cst.BooleanOperation,),
    ast.UnaryOp: (cst.UnaryOperation,),
    ast.BinOp: (cst.BinaryOperation,),
    ast.Name: (cst.Name,),
    ast.IfExp: (cst.IfExp,),
    ast.Constant: (cst.SimpleString, cst.ConcatenatedString, cst.Integer, cst.Float, cst.Name),
    ast.JoinedStr: (cst.FormattedString, cst.ConcatenatedString),
    ast.keyword: (cst.Arg,),
    DictItem: (cst.DictElement,),
    ast.Dict: (cst.Dict,),
}
