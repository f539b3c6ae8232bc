"""Where an ast node is, as the findings say it: 1-based lines, 1-based columns counted in
characters (ast counts UTF-8 bytes), end column exclusive, lines split as Python's tokenizer
splits them (`\\r\\n`, `\\r`, `\\n`; not `str.splitlines`' form feeds and separators)."""

from __future__ import annotations

import re
from typing import Any

from xlamigrate.results import Span

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class SourceLines:
    def __init__(self, source: str) -> None:
        self.source = source
        self.lines = _LINE_BREAK.split(source)
        self._starts: list[int] | None = None
        self._ascii = [line.isascii() for line in self.lines]

    def column(self, line: int, byte_offset: int) -> int:
        """The 0-based character column of a byte offset in a 1-based line."""
        if line - 1 >= len(self.lines) or self._ascii[line - 1]:
            return byte_offset
        text = self.lines[line - 1]
        return len(text.encode("utf-8")[:byte_offset].decode("utf-8", errors="replace"))

    def span(self, node: Any) -> Span:
        """A node's region (anything with ast's four position attributes)."""
        end_line = node.end_lineno or node.lineno
        end = node.end_col_offset if node.end_col_offset is not None else node.col_offset
        return Span(
            line=node.lineno,
            column=self.column(node.lineno, node.col_offset) + 1,
            end_line=end_line,
            end_column=self.column(end_line, end) + 1,
        )

    def offset(self, line: int, column: int) -> int:
        """The character offset in the source of a 1-based line and 0-based column."""
        if self._starts is None:
            self._starts = [0, *(m.end() for m in _LINE_BREAK.finditer(self.source))]
        return self._starts[line - 1] + column

    def text(self, node: Any) -> str:
        """A node's source text, from its start to its end (no parentheses around it)."""
        span = self.span(node)
        start = self.offset(span.line, span.column - 1)
        return self.source[start : self.offset(span.end_line, span.end_column - 1)]
