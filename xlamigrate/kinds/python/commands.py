"""Shell command lines in Python strings (`os.system("export XLA_USE_BF16=1 && python t.py")`,
`subprocess.run(..., shell=True)`, `["bash", "-c", "..."]`), read by the one shell engine. Each
string's value is mapped character by character back to the file, so findings land inside the
string; the commands run in child processes, so their fixes are manual, never edits."""

from __future__ import annotations

import ast
import codecs
import io
import re
import tokenize
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from xlamigrate.catalogue import Catalogue
from xlamigrate.findings import LEGACY_FLAG_NAMED, access_findings, mention_finding
from xlamigrate.kinds.embedded import Embedded
from xlamigrate.kinds.textaccess import LineIndex, hash_comments
from xlamigrate.results import Finding
from xlamigrate.suppression import is_suppressed, parse_suppressions

if TYPE_CHECKING:
    from xlamigrate.kinds.python.astpositions import SourceLines

# A command's string: its value mapped to the file (None where it cannot be: an f-string, bytes),
# and where the literal starts and ends in the file.
_Command = tuple[Embedded | None, int, int]

_WHERE = "in a shell command string xlamigrate cannot follow (review what it runs)"
_ESCAPE = re.compile(
    r"\\(?:\n|[\\'\"abfnrtv]|[0-7]{1,3}|x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|N\{[^}]*\})"
)


def command_findings(
    path: str,
    source: str,
    lines: SourceLines,
    commands: Sequence[ast.expr],
    catalogue: Catalogue,
    enabled: frozenset[str],
) -> list[Finding]:
    """The findings of the shell command lines `commands` (string literals of the ast tree of
    `source`): each literal's string tokens are read from its text (ast keeps an implicit
    concatenation as one node), so each character of its value maps to where it is written."""
    if not commands:
        return []
    literals = []
    for node in commands:
        end_line = node.end_lineno or node.lineno
        end_column = node.end_col_offset if node.end_col_offset is not None else node.col_offset
        start = lines.offset(node.lineno, lines.column(node.lineno, node.col_offset))
        end = lines.offset(end_line, lines.column(end_line, end_column))
        value = node.value if isinstance(node, ast.Constant) else None
        literals.append((_mapped_tokens(source, start, end, value), start, end))
    return _findings(path, source, LineIndex(source), literals, catalogue, enabled)


def _findings(
    path: str,
    code: str,
    index: LineIndex,
    commands: Sequence[_Command],
    catalogue: Catalogue,
    enabled: frozenset[str],
) -> list[Finding]:
    from xlamigrate.kinds.shell.analysis import analyse_source  # tree-sitter, only when needed

    names = frozenset(catalogue.flags)
    found: list[Finding] = []
    for source, start, end in commands:
        if source is None:  # an f-string, a bytes literal: its flags are named, for review
            text = code[start:end]
            found.extend(
                mention_finding(
                    catalogue,
                    path,
                    index.span(start + match.start(), start + match.end()),
                    match.group(),
                    _WHERE,
                )
                for match in _flag_names(names).finditer(text)
            )
            continue
        analysis = analyse_source(source, names)
        accesses = [
            replace(a, target="child") if a.kind != "read" else a for a in analysis.accesses
        ]
        found.extend(
            finding
            for _, finding in access_findings(
                path, accesses, lambda a: index.span(a.start, a.end), catalogue
            )
        )
        if LEGACY_FLAG_NAMED in enabled:
            found.extend(
                mention_finding(
                    catalogue, path, index.span(m.start, m.end), m.variable, m.note or _WHERE
                )
                for m in analysis.mentions
            )
    found = [f for f in found if f.code in enabled]  # (mentions were only made if XM301 is)
    table = parse_suppressions(hash_comments(code)) if found else {}
    return [f for f in found if not is_suppressed(f.code, {f.span.line}, table)]


def _flag_names(names: frozenset[str]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(name) for name in sorted(names, key=len, reverse=True))
    return re.compile(rf"(?<![A-Za-z0-9_])(?:{alternatives})(?![A-Za-z0-9_])")


def _mapped_tokens(code: str, start: int, end: int, value: object) -> Embedded | None:
    """The value of the string literal written at code[start:end], each character mapped to
    where it is written (read token by token); None when it cannot be mapped exactly
    (f-strings, bytes, what does not read back)."""
    if not isinstance(value, str):
        return None  # bytes, or an f-string (no value)
    segment = code[start:end]
    starts = [0, *(m.end() for m in re.finditer(r"\r\n|\r|\n", segment))]
    pieces: list[tuple[str, int, int]] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(segment).readline):
            if token.type == tokenize.STRING:
                row, column = token.start
                mapped = _literal_pieces(code, start + starts[row - 1] + column, token.string)
                if mapped is None:
                    return None
                pieces.extend(mapped)
            elif token.type not in _BETWEEN_STRINGS:
                return None  # an f-string's own tokens (Python 3.12), or anything unexpected
    except (tokenize.TokenError, SyntaxError):
        return None
    if not pieces or "".join(c for c, _, _ in pieces) != value:
        return None
    return Embedded.mapped(code, pieces, editable=False)


_BETWEEN_STRINGS = frozenset(
    {
        tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.ENDMARKER, tokenize.INDENT,
        tokenize.DEDENT,
    }
)  # fmt: skip


def _literal_pieces(code: str, start: int, text: str) -> list[tuple[str, int, int]] | None:
    """The characters of the string literal `text`, written at code[start:], each with where it
    is written (an escape's value with its escape's span)."""
    written_prefix = text[: len(text) - len(text.lstrip("rRbBuUfF"))]
    prefix = written_prefix.lower()
    if "b" in prefix or "f" in prefix or code[start : start + len(text)] != text:
        return None
    rest = text[len(written_prefix) :]
    quote = rest[:3] if rest[:3] in ('"""', "'''") else rest[:1]
    body_start = len(written_prefix) + len(quote)
    body = text[body_start : len(text) - len(quote)]
    offset = start + body_start
    pieces = []
    i = 0
    while i < len(body):
        escape = None if "r" in prefix else _ESCAPE.match(body, i)
        if escape is not None:
            decoded = _decode(escape.group())
            if decoded is None:
                return None
            if decoded:  # a backslash-newline is no character
                pieces.append((decoded, offset + i, offset + escape.end()))
            i = escape.end()
            continue
        pieces.append((body[i], offset + i, offset + i + 1))
        i += 1
    return pieces


def _decode(escape: str) -> str | None:
    if escape == "\\\n":
        return ""
    try:
        decoded = codecs.decode(escape, "unicode_escape")
    except UnicodeDecodeError:
        return None
    return decoded if len(decoded) == 1 else None
