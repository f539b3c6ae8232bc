"""A plan's edits made by libcst on the top-level statements they touch, not the whole file.

libcst's parse is most of a large file's rewrite (a 200,000-line file: 15 of its 30 s, and 4 s
more making its code), yet a plan's edits lie in a few top-level statements. Those are parsed
alone (their text, one small module), edited as the whole module would be, and their code goes
in the place of their text: every other byte is the file's own. The imports the edits left
unused go the same way: the rewritten file is read with `ast` whole (that pass's scopes are the
file's), and libcst parses the statements holding the imports that go.

What the edits of the module's block read beyond the statements they touch comes along, so the
bytes are the whole module's rewrite's:
- the statement before and the one after each run of edited ones (a removed statement's comments
  move down to what follows it; what goes at a block's start keeps the blank lines it had);
- the first statement (its text from the file's first byte: the encoding cookie, the first
  line break, the module's header), and where imports are added the leading import block, the
  statement after it and every top-level import line (where they go, and whether one is there);
- the first statement holding an indented block (its indentation is libcst's default, which the
  code the edits write uses).

None (the whole module is parsed then) where a line break is not `\\n`, the file holds a form
feed or opens with a BOM, libcst does not reproduce the slice or the trees do not pair.
"""

from __future__ import annotations

import ast
import bisect
import codecs
import io
import tokenize
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import partial

import libcst as cst

from xlamigrate.kinds.python.apply import UnpairedTree, applied
from xlamigrate.kinds.python.astscopes import Scopes
from xlamigrate.kinds.python.cstcode import ModuleCode
from xlamigrate.kinds.python.plan import Plan
from xlamigrate.kinds.python.source import decoded
from xlamigrate.kinds.python.training import COMPOUND, Block, Line, TrainingScript
from xlamigrate.kinds.python.unusedimports import (
    dropped_in_rounds,
    may_leave_unused,
    without_imports,
)

Group = tuple[ast.stmt, ...]  # a top-level statement: a line's simple statements, or a compound one
LineSpan = tuple[int, int]  # its first and last line (1-based, inclusive)
_LIBCST_DEFAULT_INDENT = "    "  # what libcst takes where no block is indented


def sliced_applied(
    data: bytes, script: TrainingScript, plan: Plan, drop_unused: bool = True
) -> tuple[bytes, bool] | None:
    """The file's bytes with the plan applied (and, `drop_unused`, without the imports the
    edits left unused), and whether those bytes were parsed on the way; None where the whole
    module must be parsed (see the module docstring)."""
    if b"\r" in data or b"\f" in data or data.startswith(codecs.BOM_UTF8):
        return None
    statements = script.top.body
    edited = _edited(script, plan)
    if not statements or edited is None:
        return None
    groups = [s.body if isinstance(s, Line) else (s,) for s in statements]
    needed = _needed(groups, edited, imports=bool(plan.imports or plan.aliased))
    piece = _Slice.parsed(data, script.source, groups, needed)
    if piece is None:
        return None
    top = Block(script.module, "body", [], suite=False, body=[statements[i] for i in piece.kept])
    try:
        module = applied(script, piece.module, plan, top)
    except UnpairedTree:
        return None
    rewritten = piece.spliced(module)
    if rewritten is None:
        return None
    if not drop_unused:
        return rewritten, False
    kept = set(piece.kept)
    elsewhere = [span for i, span in enumerate(piece.spans) if i not in kept]
    sliced_spans = [piece.spans[i] for i in piece.kept]
    code_for = partial(piece.made.statement, module)  # (the code the splice made)
    if not may_leave_unused(script.scopes, piece.module, module, sliced_spans, code_for, elsewhere):
        return rewritten, False
    return _unused_dropped(rewritten, script.scopes)


def _unused_dropped(data: bytes, old: Scopes) -> tuple[bytes, bool] | None:
    """unusedimports.unused_imports_dropped on the rewritten bytes, round for round."""
    dropped = dropped_in_rounds(old, data, lambda code: code, _without)
    if dropped is None:
        return None
    return dropped[0], dropped[1] is not None


def _without(
    data: bytes, rewritten: ast.Module, scopes: Scopes, dropped: dict[int, set[int]]
) -> bytes | None:
    """The bytes without the import names `dropped` (by the id of their statements in
    `rewritten`); `data` itself where nothing went."""
    groups = _groups(rewritten.body)
    firsts = [group[0].lineno for group in groups]
    holding = {
        bisect.bisect_right(firsts, node.lineno) - 1  # type: ignore[attr-defined]
        for node, _, _ in scopes.of(ast.Import, ast.ImportFrom)
        if id(node) in dropped
    }
    needed = _needed(groups, holding, imports=False)
    piece = _Slice.parsed(data, decoded(data), groups, needed)
    if piece is None:
        return None
    held = ast.Module(body=[s for i in piece.kept for s in groups[i]], type_ignores=[])
    module = without_imports(piece.module, held, scopes, dropped)
    if module is piece.module:
        return data
    return piece.spliced(module)


def _groups(body: Sequence[ast.stmt]) -> list[Group]:
    """A module's statements as libcst's: the simple statements of one line together."""
    groups: list[list[ast.stmt]] = []
    for statement in body:
        previous = groups[-1][-1] if groups else None
        if (
            previous is not None
            and not isinstance(statement, COMPOUND)
            and not isinstance(previous, COMPOUND)
            and statement.lineno == previous.end_lineno
        ):
            groups[-1].append(statement)
        else:
            groups.append([statement])
    return [tuple(group) for group in groups]


def _edited(script: TrainingScript, plan: Plan) -> set[int] | None:
    """The indexes of the top-level statements holding an edit of the plan (None: one is in
    none)."""
    index = {id(statement): i for i, statement in enumerate(script.top.body)}

    def top(node: object) -> int | None:
        for held in (node, *script.ancestors(node)):  # type: ignore[arg-type]
            found = index.get(id(held))
            if found is not None:
                return found
        return None

    edited: set[int] = set()
    nodes: list[object] = [
        *plan.removed,
        *plan.replacements,
        *plan.before,
        *plan.after,
        *plan.removed_elements,
        *plan.collapsed,
        *plan.swapped,
    ]
    for node in nodes:
        found = top(node)
        if found is None:
            return None
        edited.add(found)
    for first, last, _ in plan.wraps:
        start, end = top(first), top(last)
        if start is None or end is None:
            return None
        edited.update(range(min(start, end), max(start, end) + 1))
    return edited


def _needed(groups: Sequence[Group], edited: Collection[int], imports: bool) -> set[int]:
    """The top-level statements to parse: the edited ones, the one before and after each,
    the first one, and where `imports` are added those that say where and whether."""
    count = len(groups)
    needed = {0, *edited}
    needed |= {i - 1 for i in edited if i > 0} | {i + 1 for i in edited if i + 1 < count}
    if imports:
        end = 1
        while end < count and (end in edited or _is_import_line(groups[end])):
            end += 1
        needed |= set(range(min(end + 1, count)))
        needed |= {i for i, group in enumerate(groups) if _imports(group)}
    return needed


def _is_import_line(group: Group) -> bool:
    return len(group) == 1 and isinstance(group[0], (ast.Import, ast.ImportFrom))


def _imports(group: Group) -> bool:
    return not isinstance(group[0], COMPOUND) and any(
        isinstance(small, (ast.Import, ast.ImportFrom)) for small in group
    )


@dataclass(frozen=True)
class _Slice:
    """Some top-level statements of a file (`kept`, in order), parsed by libcst as one module
    of their text; `regions`: each run of consecutive ones' bytes in the file."""

    data: bytes
    spans: list[LineSpan]  # every top-level statement's
    kept: list[int]
    regions: list[tuple[int, int]]
    firsts: list[int]  # where each run starts in the module's body
    module: cst.Module
    made: ModuleCode  # (each statement's code made once: a module edited keeps most of them)

    @classmethod
    def parsed(
        cls, data: bytes, source: str, groups: Sequence[Group], needed: set[int]
    ) -> _Slice | None:
        spans = [_lines(group) for group in groups]
        starts = _line_starts(data)
        indent = _first_indented(source, groups, spans)
        kept = sorted(needed | ({indent[0]} if indent is not None else set()))
        runs = _runs(kept)
        regions = [_region(run, spans, starts, len(data)) for run in runs]
        sliced = b"".join(data[start:end] for start, end in regions)
        try:
            module = cst.parse_module(sliced)
        except Exception:  # (libcst's own failure: the whole module's path says it)
            return None
        default_indent = indent[1] if indent is not None else _LIBCST_DEFAULT_INDENT
        made = ModuleCode()
        if (
            len(module.body) != len(kept)
            or module.default_indent != default_indent
            or made.code(module).encode(module.encoding) != sliced
        ):
            return None
        firsts = [kept.index(first) for first, _ in runs]
        return cls(data, spans, kept, regions, firsts, module, made)

    def spliced(self, edited: cst.Module) -> bytes | None:
        """The file's bytes with each run's text replaced by its code in `edited` (this
        module edited: a run after the first starts with a statement no edit changed, the
        same object there)."""
        codes = self._run_codes(edited)
        if codes is None:
            return None
        out: list[bytes] = []
        previous = 0
        for (start, end), code in zip(self.regions, codes, strict=True):
            out += [self.data[previous:start], code.encode(edited.encoding)]
            previous = end
        out.append(self.data[previous:])
        return b"".join(out)

    def _run_codes(self, edited: cst.Module) -> list[str] | None:
        body = list(edited.body)
        where = {id(statement): i for i, statement in enumerate(body)}
        bounds = [0]
        for first in self.firsts[1:]:
            found = where.get(id(self.module.body[first]))
            if found is None or found <= bounds[-1]:
                return None
            bounds.append(found)
        if not body:
            return [edited.code] if len(self.firsts) == 1 else None
        parts = [self.made.statement(edited, statement) for statement in body[:-1]]
        parts.append(edited.with_changes(header=(), body=body[-1:]).code)
        parts[0] = "".join(edited.code_for_node(line) for line in edited.header) + parts[0]
        bounds.append(len(body))
        return ["".join(parts[bounds[i] : bounds[i + 1]]) for i in range(len(self.firsts))]


def _lines(group: Group) -> LineSpan:
    """A top-level statement's lines: from its first decorator's (or its own) first line
    through its last one."""
    first = group[0].lineno
    decorators: list[ast.expr] = getattr(group[0], "decorator_list", [])
    if decorators:
        first = min(first, *(decorator.lineno for decorator in decorators))
    return first, group[-1].end_lineno or group[-1].lineno


def _first_indented(
    source: str, groups: Sequence[Group], spans: Sequence[LineSpan]
) -> tuple[int, str] | None:
    """The first top-level statement holding an indented block, and its indentation: libcst's
    default indentation is the file's first one (None: no block is indented)."""
    lines: list[str] | None = None
    for index, group in enumerate(groups):
        if not isinstance(group[0], COMPOUND):
            continue
        lines = lines if lines is not None else source.split("\n")
        first, last = spans[index]
        text = "\n".join(lines[first - 1 : last]) + "\n"
        try:
            for token in tokenize.generate_tokens(io.StringIO(text).readline):
                if token.type == tokenize.INDENT:
                    return index, token.string
        except (tokenize.TokenError, SyntaxError):
            return index, ""  # (an indentation libcst cannot match: the whole module's path)
    return None


def _line_starts(data: bytes) -> list[int]:
    """The offset of each line's first byte (1-based line n at [n - 1])."""
    starts = [0]
    at = data.find(b"\n")
    while at != -1:
        starts.append(at + 1)
        at = data.find(b"\n", at + 1)
    return starts


def _runs(indexes: list[int]) -> list[tuple[int, int]]:
    """The sorted indexes as runs of consecutive ones (first, last)."""
    runs: list[tuple[int, int]] = []
    for i in indexes:
        if runs and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


def _region(
    run: tuple[int, int], spans: Sequence[LineSpan], starts: list[int], size: int
) -> tuple[int, int]:
    """A run's bytes: from its first statement's first line (the file's start for the first
    statement) through its last one's last line (the file's end for the last statement)."""
    first, last = run
    start = 0 if first == 0 else starts[spans[first][0] - 1]
    end_line = spans[last][1]
    end = size if last == len(spans) - 1 or end_line >= len(starts) else starts[end_line]
    return start, end
