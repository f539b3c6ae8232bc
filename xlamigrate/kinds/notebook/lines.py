"""Where a notebook cell's lines sit in the `.ipynb` file itself.

Findings count lines within a cell; GitHub annotations and SARIF regions point into the raw
file, where Jupyter writes each source line as one JSON string. A regex tokenizer (strings, the
bulk of a notebook with outputs, are matched in C) walks the JSON and notes the file line of
every `cells[i].source` string.
"""

from __future__ import annotations

import bisect
import json
import re
from typing import Any

_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]|[^\s{}\[\]:,"]+')


def source_file_lines(text: str) -> dict[int, dict[int, int]]:
    """cell index -> {line within the cell (1-based) -> line of the file (1-based)}."""
    newlines = [match.start() for match in re.finditer("\n", text)]
    elements: dict[int, list[tuple[int, str]]] = {}
    # Each frame: [is_object, key or index]; an object's key is None until its string is read.
    stack: list[list[Any]] = []
    for token in _TOKEN.finditer(text):
        value = token.group()
        if value in ("{", "["):
            stack.append([value == "{", None if value == "{" else 0])
        elif value in ("}", "]"):
            if stack:
                stack.pop()
        elif value == ",":
            if stack:
                frame = stack[-1]
                frame[1] = None if frame[0] else frame[1] + 1
        elif value == ":":
            continue
        elif stack and stack[-1][0] and stack[-1][1] is None:
            stack[-1][1] = _string(value)  # an object key
        elif value.startswith('"'):
            cell = _source_cell([frame[1] for frame in stack])
            if cell is not None:
                line = bisect.bisect_left(newlines, token.start()) + 1
                elements.setdefault(cell, []).append((line, _string(value) or ""))
    return {cell: _line_starts(parts) for cell, parts in elements.items()}


def _string(token: str) -> str | None:
    try:
        value = json.loads(token)
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def _source_cell(path: list[object]) -> int | None:
    """The cell index when `path` is cells[i].source or cells[i].source[k]."""
    if len(path) in (3, 4) and path[0] == "cells" and path[2] == "source":
        cell = path[1]
        return cell if isinstance(cell, int) else None
    return None


def _line_starts(elements: list[tuple[int, str]]) -> dict[int, int]:
    starts: dict[int, int] = {}
    line = 1
    for file_line, text in elements:
        starts.setdefault(line, file_line)
        parts = text.split("\n")
        for later in range(1, len(parts)):
            line += 1
            if later < len(parts) - 1 or parts[-1]:  # this line starts inside the same string
                starts.setdefault(line, file_line)
    return starts
