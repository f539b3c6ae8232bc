"""Exec form, `CMD ["bash", "-c", "export X=1 && python t.py"]`: the instruction's JSON array,
each string as its value mapped back through its JSON escapes to the Dockerfile, so the shell
engine can read the `bash -c` string and edit it in place. A JSON string's escapes are those of a
YAML double-quoted one, so a replacement goes through the `yaml-double` encoding."""

from __future__ import annotations

import json
import re

from xlamigrate.kinds.embedded import Embedded

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_JSON_STRING = ("yaml-double",)


def exec_words(args: Embedded) -> tuple[Embedded, ...] | None:
    """The strings of an exec-form instruction, each mapped to the file; None when its text is
    not a JSON array of strings (Docker then runs it as a shell command)."""
    text = args.text
    if not text.lstrip().startswith("["):
        return None
    try:
        values = json.loads(text)
    except ValueError:
        return None
    if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
        return None
    words = tuple(
        args.inner(_string_body(text, match.start() + 1, match.end() - 1))
        for match in _STRING.finditer(text)
    )
    return words if [word.text for word in words] == values else None


def _string_body(text: str, start: int, end: int) -> Embedded:
    """text[start:end], a JSON string's body, as its value: each character with the escape that
    wrote it (`\\"`, `\\n`, `\\u00e9`, a surrogate pair)."""
    if start == end:
        return Embedded.slice(text, start, end, _JSON_STRING)
    pieces: list[tuple[str, int, int]] = []
    index = start
    while index < end:
        char = text[index]
        if char != "\\":
            pieces.append((char, index, index + 1))
            index += 1
        elif text[index + 1] != "u":
            pieces.append((_ESCAPES[text[index + 1]], index, index + 2))
            index += 2
        else:
            unit, stop = int(text[index + 2 : index + 6], 16), index + 6
            if 0xD800 <= unit < 0xDC00 and text.startswith("\\u", stop):
                low = int(text[stop + 2 : stop + 6], 16)
                if 0xDC00 <= low < 0xE000:
                    unit, stop = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00), stop + 6
            pieces.append((chr(unit), index, stop))
            index = stop
    return Embedded.mapped(text, pieces, _JSON_STRING)
