"""Where a finding left by a rewrite is in the file as written (ruff reports positions after
its fixes, so an editor jumps to the right line)."""

from __future__ import annotations

import difflib
from dataclasses import replace

from xlamigrate.results import Finding, RewriteOutcome, Span


def as_written(outcome: RewriteOutcome) -> tuple[Finding, ...]:
    """The outcome's remaining findings, their lines moved by the lines the rewrite inserted or
    removed above them (a line the rewrite changed keeps its number; notebook findings count
    within their cell and are left as they are)."""
    if not outcome.changed or outcome.rewritten is None:
        return outcome.remaining
    moved = _line_map(outcome.original, outcome.rewritten)
    return tuple(_moved(finding, moved) for finding in outcome.remaining)


def _line_map(before: bytes, after: bytes) -> dict[int, int]:
    """1-based line before -> line after, for the lines the rewrite left as they were."""
    old = before.decode("utf-8", "replace").splitlines()
    new = after.decode("utf-8", "replace").splitlines()
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    lines: dict[int, int] = {}
    for tag, a_start, a_end, b_start, _ in matcher.get_opcodes():
        if tag == "equal":
            for offset in range(a_end - a_start):
                lines[a_start + offset + 1] = b_start + offset + 1
    return lines


def _moved(finding: Finding, lines: dict[int, int]) -> Finding:
    if finding.cell is not None:
        return finding
    span = finding.span
    line = lines.get(span.line)
    if line is None or line == span.line:
        return finding
    shift = line - span.line
    moved = Span(line, span.column, span.end_line + shift, span.end_column)
    return replace(finding, span=moved)
