"""Text of one language inside a file of another: a RUN instruction's shell command, a YAML
`run: |` block, the string of `bash -c '...'`, a notebook's `%%bash` cell. It keeps the text as
its own parser reads it (quotes and escapes of the host removed, continuation lines joined),
where each character came from in the host file, and how a replacement is written back there,
so findings and edits land on the host's own lines and columns.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xlamigrate.kinds.textaccess import TextEdit

SHELL_SYNTAX = "shell:"  # the `syntax` of every shell access, wherever the shell text is


def shell_syntax(form: str, encodings: tuple[str, ...]) -> str:
    """The `syntax` of a shell access: its form, then the host contexts (innermost first)."""
    return SHELL_SYNTAX + "|".join((form, *encodings))


class CannotRender(ValueError):
    """A replacement cannot be written in its host context (it is left to a hand edit)."""


_YAML_PLAIN_UNSAFE = re.compile(r": |\s#|[\n\r\t]|^[\s\-?:,\[\]{}#&*!|>'\"%@`]|\s$")


def _shell_single(text: str) -> str | None:
    return text.replace("'", "'\\''")


def escape_double(text: str) -> str:
    """`text` inside a double-quoted shell string."""
    return re.sub(r'(["\\$`])', r"\\\1", text)


def _yaml_double(text: str) -> str | None:
    return json.dumps(text, ensure_ascii=False)[1:-1]  # a JSON string body is a YAML one


def _yaml_single(text: str) -> str | None:
    return None if "\n" in text else text.replace("'", "''")


def _yaml_plain(text: str) -> str | None:
    return None if _YAML_PLAIN_UNSAFE.search(text) else text


def _single_line(text: str) -> str | None:
    return None if "\n" in text or "\r" in text else text


def _yaml_flow_plain(text: str) -> str | None:
    return None if re.search(r"[,\[\]{}]", text) else _yaml_plain(text)


def _compose_dollars(text: str) -> str | None:
    return text.replace("$", "$$")


def _kubernetes_dollars(text: str) -> str | None:
    return re.sub(r"\$(?=[$(])", "$$", text)


# How a replacement is written in each host context, innermost first in `Embedded.encodings`.
# None: it cannot be written there (the edit is refused and the finding left for a hand edit).
ENCODERS: dict[str, Callable[[str], str | None]] = {
    "shell-single": _shell_single,  # inside '...' of a shell word
    "shell-double": escape_double,  # inside "..." of a shell word
    "yaml-double": _yaml_double,
    "yaml-single": _yaml_single,
    "yaml-plain": _yaml_plain,
    "line": _single_line,  # a Dockerfile instruction, a notebook `!` line
    "yaml-flow-plain": _yaml_flow_plain,  # a plain scalar inside `[...]` or `{...}`
    "compose": _compose_dollars,  # docker compose interpolates `$`: `$$` is a `$`
    "kubernetes": _kubernetes_dollars,  # command/args: `$(NAME)` expands, `$$` is a `$`
}


def encode(text: str, encodings: Sequence[str]) -> str | None:
    """`text` as written through each host context in turn; None where one cannot hold it."""
    for name in encodings:
        if name.startswith("indent:"):  # a YAML block scalar: lines keep the block's indent
            text = text.replace("\n", "\n" + " " * int(name.removeprefix("indent:")))
            continue
        encoded = ENCODERS[name](text)
        if encoded is None:
            return None
        text = encoded
    return text


@dataclass(frozen=True)
class Embedded:
    """`text`, found in `host`: character i came from host[starts[i]:ends[i]] (an escape spans
    more than one host character; a joined continuation line lies between two characters)."""

    text: str
    host: str
    starts: tuple[int, ...] | None = None  # None: `text` is host[offset:offset + len(text)]
    ends: tuple[int, ...] | None = None
    offset: int = 0
    encodings: tuple[str, ...] = ()  # innermost first
    editable: bool = True  # False: findings only (the host's spelling cannot be rewritten)

    @classmethod
    def whole(cls, text: str) -> Embedded:
        return cls(text, text)

    @classmethod
    def slice(cls, host: str, start: int, end: int, encodings: tuple[str, ...] = ()) -> Embedded:
        """host[start:end] as it is (a single-quoted string's body, a heredoc)."""
        return cls(host[start:end], host, offset=start, encodings=encodings)

    @classmethod
    def mapped(
        cls,
        host: str,
        pieces: Sequence[tuple[str, int, int]],
        encodings: tuple[str, ...] = (),
        editable: bool = True,
    ) -> Embedded:
        """The text of `pieces` (characters, each with its host start and end) joined."""
        text = "".join(char for char, _, _ in pieces)
        if len(text) != len(pieces):
            raise ValueError("one piece per character")
        starts = tuple(start for _, start, _ in pieces)
        ends = tuple(end for _, _, end in pieces)
        return cls(text, host, starts, ends, encodings=encodings, editable=editable)

    def start_of(self, index: int) -> int:
        """The host offset where character `index` starts (the end, past the last one)."""
        if self.starts is None:
            return self.offset + index
        if index < len(self.starts):
            return self.starts[index]
        return self.ends[-1] if self.ends else self.offset

    def end_of(self, index: int) -> int:
        """The host offset just past character `index - 1` (where a span ending at `index`
        ends); the start of the text for index 0."""
        if self.starts is None or self.ends is None:
            return self.offset + index
        if index <= 0:
            return self.start_of(0)
        return self.ends[index - 1]

    def span(self, start: int, end: int) -> tuple[int, int]:
        if start >= end:
            at = self.start_of(start)
            return at, at
        return self.start_of(start), self.end_of(end)

    def edit(self, edit: TextEdit) -> TextEdit | None:
        """`edit` (in this text) as an edit of the host; None when the host cannot take it."""
        if not self.editable:
            return None
        replacement = encode(edit.replacement, self.encodings) if edit.replacement else ""
        if replacement is None:
            return None
        start, end = self.span(edit.start, edit.end)
        if not edit.replacement and self._whole_lines(edit.start, edit.end):
            start = self._host_line_start(start)
        return TextEdit(start, end, replacement)

    def inner(self, part: Embedded) -> Embedded:
        """`part`, a text found inside this one (its host is this text), mapped to our host."""
        count = len(part.text)
        starts = tuple(self.start_of(part.start_of(i)) for i in range(count))
        ends = tuple(self.end_of(part.end_of(i + 1)) for i in range(count))
        return Embedded(
            part.text,
            self.host,
            starts,
            ends,
            offset=self.start_of(part.start_of(0)),
            encodings=(*part.encodings, *self.encodings),
            editable=self.editable and part.editable,
        )

    def _whole_lines(self, start: int, end: int) -> bool:
        """Whether text[start:end] is whole lines (it starts a line and ends one)."""
        starts_line = start == 0 or self.text[start - 1] == "\n"
        ends_line = end == len(self.text) or self.text[end - 1] == "\n"
        return starts_line and ends_line and start < end

    def _host_line_start(self, offset: int) -> int:
        """A removal of whole lines also takes the host's indentation of the first one."""
        line_start = self.host.rfind("\n", 0, offset) + 1
        return line_start if not self.host[line_start:offset].strip(" \t") else offset
