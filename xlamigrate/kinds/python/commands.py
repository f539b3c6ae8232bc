"""Shell command lines in Python strings (`os.system("export XLA_USE_BF16=1 && python t.py")`,
`subprocess.run(..., shell=True)`, `["bash", "-c", "..."]`), read by the one shell engine. Each
string's value is mapped character by character back to the file, so findings land inside the
string; the commands run in child processes, so their fixes are manual, never edits."""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

import libcst as cst
from libcst.metadata import CodePosition, MetadataWrapper, PositionProvider

from xlamigrate.catalogue import Catalogue
from xlamigrate.findings import MENTION_RULE, access_findings, mention_finding
from xlamigrate.kinds.embedded import Embedded
from xlamigrate.kinds.textaccess import LineIndex, hash_comments
from xlamigrate.model import Finding
from xlamigrate.suppression import is_suppressed, parse_suppressions

_WHERE = "in a shell command string xlamigrate cannot follow (review what it runs)"
_ESCAPE = re.compile(
    r"\\(?:\n|[\\'\"abfnrtv]|[0-7]{1,3}|x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|N\{[^}]*\})"
)


def command_findings(
    path: str,
    wrapper: MetadataWrapper,
    commands: Sequence[cst.BaseExpression],
    catalogue: Catalogue,
    enabled: frozenset[str],
) -> list[Finding]:
    """The findings of the shell command lines `commands` (string literals of the module)."""
    if not commands:
        return []
    from xlamigrate.kinds.shell.analysis import analyse_source  # tree-sitter, only when needed

    code = wrapper.module.code
    index = LineIndex(code)
    positions = wrapper.resolve(PositionProvider)
    names = frozenset(catalogue.flags)
    found: list[Finding] = []
    for node in commands:
        source = _mapped(code, node, lambda leaf: _offset(index, positions[leaf].start))
        if source is None:  # an f-string, a bytes literal: its flags are named, for review
            start = _offset(index, positions[node].start)
            text = code[start : _offset(index, positions[node].end)]
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
        if MENTION_RULE in enabled:
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


def _offset(index: LineIndex, position: CodePosition) -> int:
    return index.starts[position.line - 1] + position.column


def _mapped(
    code: str, node: cst.BaseExpression, offset_of: Callable[[cst.SimpleString], int]
) -> Embedded | None:
    """The value of a string literal, each character mapped to where it is written in `code`;
    None when it cannot be mapped exactly (f-strings, bytes, what does not read back)."""
    leaves = list(_leaves(node))
    if not all(isinstance(leaf, cst.SimpleString) for leaf in leaves):
        return None  # an f-string part: its value is not known
    pieces = []
    for leaf in leaves:
        assert isinstance(leaf, cst.SimpleString)
        mapped = _literal_pieces(code, offset_of(leaf), leaf)
        if mapped is None:
            return None
        pieces.extend(mapped)
    try:
        value = node.evaluated_value  # type: ignore[attr-defined]
    except Exception:  # a malformed escape: nothing to map
        return None
    if not pieces or not isinstance(value, str) or "".join(c for c, _, _ in pieces) != value:
        return None
    return Embedded.mapped(code, pieces, editable=False)


def _leaves(node: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    """The literals a (concatenated) string is made of, in order."""
    if isinstance(node, cst.ConcatenatedString):
        yield from _leaves(node.left)
        yield from _leaves(node.right)
    else:
        yield node


def _literal_pieces(
    code: str, start: int, node: cst.SimpleString
) -> list[tuple[str, int, int]] | None:
    text = node.value
    prefix = node.prefix.lower()
    if "b" in prefix or "f" in prefix or code[start : start + len(text)] != text:
        return None
    quote = node.quote
    body_start = len(node.prefix) + len(quote)
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
