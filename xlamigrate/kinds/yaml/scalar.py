"""A YAML scalar's string as an `Embedded` text: each character mapped to where it is written in
the file (quotes, escapes, block indentation and line folds undone), with the encodings a
replacement must go through there. The decoding is checked against ruamel.yaml's own reading of
the scalar; where the two differ (a form not modelled here), the text is for findings only, so
no edit is ever built on a wrong map."""

from __future__ import annotations

import re

from xlamigrate.kinds.embedded import Embedded
from xlamigrate.kinds.yaml.nodes import Node, compose, fields, text

Piece = tuple[str, int, int]  # a character of the string, and the host text it comes from

_HEADER = re.compile(r"[|>](?:([1-9])([-+])?|([-+])([1-9])?)?[ \t]*(?:#[^\r\n]*)?(?:\r?\n)")
_ESCAPES = {
    "0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v", "f": "\f",
    "r": "\r", "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", "N": "\x85",
    "_": "\xa0", "L": "\u2028", "P": "\u2029",
}  # fmt: skip
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
_HEX = frozenset("0123456789abcdefABCDEF")


def scalar_source(host: str, node: Node, *, flow: bool) -> Embedded:
    """The string of scalar `node` of `host`; `flow`: the scalar sits in a flow collection (so a
    plain one cannot take `,[]{}`)."""
    value = text(node)
    start: int = node.start_mark.index
    end: int = node.end_mark.index
    style = node.style
    found: tuple[list[Piece] | None, tuple[str, ...]]
    if style in ("|", ">"):
        found = _block(host, start, end, value)
    elif style == "'":
        found = _flow(host, start + 1, end - 1, "'"), ("yaml-single",)
    elif style == '"':
        found = _flow(host, start + 1, end - 1, '"'), ("yaml-double",)
    else:
        found = _flow(host, start, end, ""), ("yaml-flow-plain" if flow else "yaml-plain",)
    pieces, encodings = found
    if pieces is not None and "".join(char for char, _, _ in pieces) == value:
        return Embedded.mapped(host, pieces, encodings)
    # A form this module does not read: every character points at the scalar, and no edit.
    return Embedded.mapped(host, [(char, start, end) for char in value], (), editable=False)


def read_alone(written: str, source: Embedded, *, flow: bool) -> str | None:
    """The string a scalar written `written` (the text of `source`'s scalar after an edit)
    holds, read by ruamel.yaml in a document of its own where it sits as in the file: in a flow
    sequence, or under a key at the indentation its block's indicator counts from. None where it
    is no longer one scalar."""
    header = _HEADER.match(written)
    explicit = header and (header.group(1) or header.group(4))
    indent = next((e for e in source.encodings if e.startswith("indent:")), "indent:0")
    base = int(indent.removeprefix("indent:")) - int(explicit) if explicit else 0
    head, tail = ("k: [", "]") if flow else (" " * max(base, 0) + "k: ", "")
    documents = compose(head + written + tail)
    if isinstance(documents, tuple) or len(documents) != 1 or documents[0].id != "mapping":
        return None
    node = fields(documents[0]).get("k")
    if node is not None and flow:
        node = node.value[0] if node.id == "sequence" and len(node.value) == 1 else None
    return text(node) if node is not None and node.id == "scalar" else None


def _break_end(host: str, index: int) -> int:
    """The end of the line break at `index` ("\\n" or "\\r\\n"); `index` when there is none."""
    if host.startswith("\r\n", index):
        return index + 2
    return index + 1 if host.startswith("\n", index) else index


# Flow scalars: plain, '...' and "..." --------------------------------------------------------


def _flow(host: str, index: int, stop: int, quote: str) -> list[Piece] | None:
    """A flow scalar's characters between `index` and `stop` (inside the quotes). Lines are
    folded: blanks around a line break go, one break reads as a space, n + 1 breaks as n
    newlines. A fold's space takes the next line's indentation with it, so removing up to the
    first character of a line takes that line's indentation too."""
    pieces: list[Piece] = []
    blanks = 0  # how many of the last pieces are blanks written as they are (a fold strips them)
    while index < stop:
        char = host[index]
        if char in "\r\n":
            fold_start = pieces[-blanks][1] if blanks else index
            del pieces[len(pieces) - blanks :]
            index = _fold(host, index, stop, fold_start, pieces, escaped=False)
            blanks = 0
            continue
        if quote == "'" and char == "'":
            if not host.startswith("''", index):
                return None
            pieces.append(("'", index, index + 2))
            index += 2
            blanks = 0
            continue
        if quote == '"' and char == "\\":
            after = _escape(host, index, stop, pieces)
            if after is None:
                return None
            index = after
            blanks = 0
            continue
        pieces.append((char, index, index + 1))
        blanks = blanks + 1 if char in " \t" else 0
        index += 1
    return pieces


def _fold(
    host: str, index: int, stop: int, fold_start: int, pieces: list[Piece], escaped: bool
) -> int:
    """Reads the line break at `index` and the empty lines after it; returns where the next
    line's text starts. An escaped break (`\\` at the end of a line) leaves no space."""
    position = _break_end(host, index)
    ends: list[int] = []  # the end of each empty line's break
    while True:
        content = position
        while content < stop and host[content] in " \t":
            content += 1
        if content < stop and host[content] in "\r\n":
            position = _break_end(host, content)
            ends.append(position)
            continue
        break
    if not ends and not escaped:
        pieces.append((" ", fold_start, content))
    start = fold_start
    for end in ends:
        pieces.append(("\n", start, end))
        start = end
    return content


def _escape(host: str, index: int, stop: int, pieces: list[Piece]) -> int | None:
    """Reads the escape at `index` of a double-quoted scalar; where the text goes on."""
    following = host[index + 1] if index + 1 < stop else ""
    if following in ("\r", "\n"):
        return _fold(host, index + 1, stop, index, pieces, escaped=True)
    if following in _ESCAPES:
        pieces.append((_ESCAPES[following], index, index + 2))
        return index + 2
    width = _HEX_ESCAPES.get(following)
    digits = host[index + 2 : index + 2 + width] if width else ""
    if not width or len(digits) != width or not set(digits) <= _HEX:
        return None
    pieces.append((chr(int(digits, 16)), index, index + 2 + width))
    return index + 2 + width


# Block scalars: | and > -----------------------------------------------------------------------


def _block(
    host: str, start: int, end: int, value: str
) -> tuple[list[Piece] | None, tuple[str, ...]]:
    """A block scalar's characters, with its content indentation as the encoding (a replacement's
    new lines keep it). An explicit indentation indicator counts from the parent's indentation,
    which the node does not tell: each possible indentation is tried against ruamel's value."""
    header = _HEADER.match(host, start)
    if header is None:
        return None, ()
    explicit = header.group(1) or header.group(4)
    chomp = header.group(2) or header.group(3) or ""
    lines = _lines(host, header.end(), end)
    first = next((line for line in lines if host[line[0] : line[1]].strip(" ")), None)
    if first is None:
        return None, ()
    width = len(host[first[0] : first[1]]) - len(host[first[0] : first[1]].lstrip(" "))
    candidates = range(int(explicit), width + 1) if explicit else (width,)
    folded = host[start] == ">"
    for indent in candidates:
        pieces = _block_lines(host, lines, indent, chomp, folded)
        if pieces is not None and "".join(char for char, _, _ in pieces) == value:
            encodings = ("line", f"indent:{indent}") if folded else (f"indent:{indent}",)
            return pieces, encodings
    return None, ()


def _lines(host: str, start: int, end: int) -> list[tuple[int, int, int]]:
    """(start, end of text, end of break) of each line from `start` to `end`."""
    lines = []
    position = start
    while position < end:
        newline = host.find("\n", position, end)
        if newline == -1:
            lines.append((position, end, end))
            break
        text_end = newline - 1 if newline > position and host[newline - 1] == "\r" else newline
        lines.append((position, text_end, newline + 1))
        position = newline + 1
    return lines


def _block_lines(
    host: str, lines: list[tuple[int, int, int]], indent: int, chomp: str, folded: bool
) -> list[Piece] | None:
    """The characters of a block scalar indented by `indent`. A newline maps to its line break
    alone, so removing whole lines of the text removes whole lines of the file; in a folded
    scalar, a fold's space takes the next line's indentation with it."""
    pieces: list[Piece] = []
    own: tuple[int, int] | None = None  # the break after the last text line
    empty: list[tuple[int, int]] = []  # the breaks of the empty lines since
    previous: str | None = None  # "text" or "spaced" (a more indented line, never folded)
    for line_start, text_end, break_end in lines:
        line = host[line_start:text_end]
        if not line.strip(" ") and len(line) <= indent:
            empty.append((text_end, break_end))
            continue
        if not line.startswith(" " * indent):
            break  # less indented: the scalar ended (a comment or the next key follows)
        content = line_start + indent
        kind = "spaced" if host[content] in " \t" else "text"
        if previous is None:
            pieces.extend(("\n", s, e) for s, e in empty)
        elif own is not None:
            if folded and previous == kind == "text":
                if not empty:
                    pieces.append((" ", own[0], content))
                else:
                    pieces.append(("\n", own[0], empty[0][1]))
                    pieces.extend(("\n", s, e) for s, e in empty[1:])
            else:
                pieces.append(("\n", *own))
                pieces.extend(("\n", s, e) for s, e in empty)
        pieces.extend((host[i], i, i + 1) for i in range(content, text_end))
        own = (text_end, break_end) if break_end > text_end else None
        empty = []
        previous = kind
    if previous is None:
        return None
    if chomp != "-" and own is not None:
        pieces.append(("\n", *own))
    if chomp == "+":
        pieces.extend(("\n", s, e) for s, e in empty)
    return pieces
