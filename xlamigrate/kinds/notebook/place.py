"""Where a notebook finding is: a finding of a part (the joined module, a cell's body, a cell's
shell text) as a line of its cell, and the line of the `.ipynb` file that line is written on."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from xlamigrate.kinds.notebook.lines import source_file_lines
from xlamigrate.results import Finding, Span

Where = Callable[[int], tuple[int, int] | None]  # a line of a part -> (cell, line in the cell)

# A read's message names the line of the write it depends on (findings._subject).
_LINE_REFERENCE = re.compile(r"; line (\d+) sets it to ")


def placed(finding: Finding, where: Where) -> Finding:
    """`finding` of a part as a notebook finding: its cell, its line within the cell."""
    start = where(finding.span.line)
    if start is None:
        return finding
    cell, line = start
    end = where(finding.span.end_line)
    end_line = end[1] if end is not None and end[0] == cell else line
    span = Span(line, finding.span.column, end_line, finding.span.end_column)
    message = _LINE_REFERENCE.sub(lambda match: _reference(match, where), finding.message)
    return replace(finding, span=span, cell=cell, message=message)


def _reference(match: re.Match[str], where: Where) -> str:
    at = where(int(match.group(1)))
    if at is None:
        return match.group(0)
    return f"; cell {at[0]} line {at[1]} sets it to "


def in_file(data: bytes, findings: list[Finding]) -> tuple[Finding, ...]:
    """Sorted, each with the line of the .ipynb file its cell line is written on."""
    if not findings:
        return ()
    lines = source_file_lines(data.decode("utf-8"))
    placed = [
        replace(f, file_line=lines.get(f.cell, {}).get(f.span.line)) if f.cell is not None else f
        for f in findings
    ]
    return tuple(sorted(placed, key=lambda f: f.sort_key))
