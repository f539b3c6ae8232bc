"""What a shell word means: its value after quote removal, and the text a quoted string holds
(the script of `bash -c '...'`), mapped back to where each character was written."""

from __future__ import annotations

import re

from xlamigrate.kinds.embedded import Embedded
from xlamigrate.kinds.shell.syntax import Node, Parsed

_DOUBLE_ESCAPES = frozenset('$`"\\\n')
_QUOTING = re.compile(r"['\"\\$`]")


def literal(raw: str) -> str | None:
    """A shell word's value after quote removal; None when it expands anything."""
    if _QUOTING.search(raw) is None and not raw.startswith("~"):
        return raw  # (most words: nothing quoted, escaped or expanded)
    out: list[str] = []
    i = 0
    while i < len(raw):
        char = raw[i]
        if char == "'":
            end = raw.find("'", i + 1)
            if end == -1:
                return None
            out.append(raw[i + 1 : end])
            i = end + 1
        elif char == '"':
            i += 1
            while i < len(raw) and raw[i] != '"':
                if raw[i] == "\\" and i + 1 < len(raw) and raw[i + 1] in _DOUBLE_ESCAPES:
                    out.append(raw[i + 1])
                    i += 2
                elif raw[i] in "$`":
                    return None
                else:
                    out.append(raw[i])
                    i += 1
            if i >= len(raw):
                return None
            i += 1
        elif char == "\\":
            out.append(raw[i + 1 : i + 2])
            i += 2
        elif char in "$`" or (char == "~" and i == 0):
            return None
        else:
            out.append(char)
            i += 1
    return "".join(out)


def string_text(parsed: Parsed, node: Node) -> Embedded | None:
    """The text a shell string holds, as another shell would read it (`bash -c STRING`), mapped
    into the parsed text: a '...' string as it is, a "..." string with its escapes removed.
    None for words of another shape (unquoted, $'...', concatenations)."""
    start, end = parsed.start(node), parsed.end(node)
    text = parsed.text
    if node.type == "raw_string" and end - start >= 2:
        return Embedded.slice(text, start + 1, end - 1, ("shell-single",))
    if node.type != "string" or end - start < 2:
        return None
    pieces: list[tuple[str, int, int]] = []
    i = start + 1
    while i < end - 1:
        if text[i] == "\\" and i + 1 < end - 1 and text[i + 1] in _DOUBLE_ESCAPES:
            if text[i + 1] != "\n":  # a line continuation is no character at all
                pieces.append((text[i + 1], i, i + 2))
            i += 2
            continue
        pieces.append((text[i], i, i + 1))
        i += 1
    return Embedded.mapped(text, pieces, ("shell-double",))
