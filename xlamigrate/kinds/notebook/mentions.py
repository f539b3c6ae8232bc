"""A flag named where xlamigrate does not read (a `%%html` cell, a `%time` line magic) is still
reported, as XM301 for review: a notebook never hides a flag silently."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from xlamigrate.catalogue import Catalogue
from xlamigrate.findings import LEGACY_FLAG_NAMED, mention_finding
from xlamigrate.kinds.notebook.escapes import escaped_spans
from xlamigrate.kinds.textaccess import LineIndex, hash_comments
from xlamigrate.results import Finding
from xlamigrate.suppression import is_suppressed, parse_suppressions

NOT_READ = "in a `{magic}` cell, which xlamigrate does not read"
_LINE_MAGIC = "in the line magic `{magic}`, which xlamigrate does not read"

Stretch = tuple[int, int, str]  # start, end in the cell, and what holds the text


def line_magics(source: str) -> list[Stretch]:
    """The line magics of a Python cell, which its module masks (not `%env`, not shell)."""
    return [
        (start, end, _LINE_MAGIC.format(magic=source[start:end].split()[0]))
        for start, end, escape in escaped_spans(source)
        if escape.role == "magic" and source[start:end].strip()
    ]


def mentions(
    path: str,
    cell: int,
    source: str,
    stretches: Sequence[Stretch],
    catalogue: Catalogue,
    enabled: frozenset[str],
) -> list[Finding]:
    """XM301 for each flag named in the stretches of the cell `source`."""
    if LEGACY_FLAG_NAMED not in enabled or not stretches:
        return []
    names = "|".join(re.escape(name) for name in sorted(catalogue.flags, key=len, reverse=True))
    pattern = re.compile(rf"(?<![A-Za-z0-9_])(?:{names})(?![A-Za-z0-9_])")
    index = LineIndex(source)
    found = []
    for start, end, where in stretches:
        for match in pattern.finditer(source, start, end):
            span = index.span(match.start(), match.end())
            finding = mention_finding(catalogue, path, span, match.group(), where)
            found.append(replace(finding, cell=cell))
    if not found:
        return found
    table = parse_suppressions(hash_comments(source))
    return [f for f in found if not is_suppressed(f.code, {f.span.line}, table)]
