"""`# noqa: CODE` and `# xlamigrate: ignore[CODE]` comments: which codes each line suppresses."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from xlamigrate.results import Finding

# None: the comment suppresses every code on its line.
Suppressions = Mapping[int, frozenset[str] | None]

_NOQA = re.compile(
    r"#\s*noqa(?P<sep>\s*:\s*(?P<codes>[A-Za-z]+[0-9]*(?:\s*,?\s*[A-Za-z]+[0-9]+)*))?", re.I
)
_PRAGMA = re.compile(r"#\s*xlamigrate\s*:\s*ignore(?:\[(?P<codes>[^\]]*)\])?", re.I)


def parse_suppressions(comments: Iterable[tuple[int, str]]) -> Suppressions:
    """Takes (line, comment text) pairs and maps each line to the codes it suppresses."""
    table: dict[int, frozenset[str] | None] = {}
    for line, text in comments:
        for pattern in (_NOQA, _PRAGMA):
            for match in pattern.finditer(text):
                codes = match.group("codes")
                found = _split(codes) if codes else None
                table[line] = _merge(table.get(line, frozenset()), found)
    return table


def finding_suppressed(finding: Finding, table: Suppressions) -> bool:
    """A finding is suppressed by a comment on its first or last line naming its code."""
    return is_suppressed(finding.code, {finding.span.line, finding.span.end_line}, table)


def is_suppressed(code: str, lines: Iterable[int], table: Suppressions) -> bool:
    """A code is suppressed by a comment on any of the given lines naming it (or a prefix of it)."""
    for line in lines:
        if line not in table:
            continue
        codes = table[line]
        if codes is None or any(code.startswith(prefix) for prefix in codes):
            return True
    return False


def _split(codes: str) -> frozenset[str]:
    return frozenset(code.upper() for code in re.split(r"[\s,]+", codes.strip()) if code)


def _merge(old: frozenset[str] | None, new: frozenset[str] | None) -> frozenset[str] | None:
    if old is None or new is None:
        return None
    return old | new
