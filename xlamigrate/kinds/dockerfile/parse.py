"""Dockerfile text as instructions, after BuildKit's parser: the `# escape=` directive, line
continuations (comment and blank lines inside them dropped), heredocs, ONBUILD. Each
instruction's text keeps the file offset of every character, so edits land on the original text
whatever the continuations. Used by `dockerfile.py`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from xlamigrate.kinds.textaccess import TextEdit

KEYWORDS = frozenset(
    {
        *("ADD", "ARG", "CMD", "COPY", "ENTRYPOINT", "ENV", "EXPOSE", "FROM", "HEALTHCHECK"),
        *("LABEL", "MAINTAINER", "ONBUILD", "RUN", "SHELL", "STOPSIGNAL", "USER", "VOLUME"),
        "WORKDIR",
    }
)

_DIRECTIVE = re.compile(r"#[ \t]*([A-Za-z][A-Za-z0-9_-]*)[ \t]*=[ \t]*(\S*)[ \t]*$")
_KEYWORD = re.compile(r"[ \t]*(\S+?)(?=[ \t]|$)")
_HEREDOC = re.compile(r"(?:(?<=\s)|^)<<(-?)([\"']?)([A-Za-z_][A-Za-z0-9_.-]*)\2")
_EXPANDS = re.compile(r"\$[A-Za-z_{(]")


class Unparsable(Exception):
    """Raised while reading one instruction; it becomes a `problems` entry."""


@dataclass(frozen=True)
class Text:
    """A stretch of the file as one string, each character with its offset in the file."""

    chars: str
    origin: tuple[int, ...]  # one per character, plus the offset just past the last

    @classmethod
    def plain(cls, text: str, start: int, end: int) -> Text:
        return cls(text[start:end], tuple(range(start, end + 1)))

    def at(self, index: int) -> int:
        """The file offset where character `index` starts."""
        return self.origin[index]

    def after(self, index: int) -> int:
        """The file offset just past character `index - 1` (where a span ending at `index` ends)."""
        return self.origin[index - 1] + 1 if index > 0 else self.origin[0]

    def tail(self, index: int) -> Text:
        return Text(self.chars[index:], self.origin[index:])


@dataclass(frozen=True)
class Heredoc:
    body: Text
    expands: bool  # an unquoted delimiter: `$X` in the body is expanded


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case; ONBUILD's own instruction is read as itself, `onbuild` set
    line: int
    start: int  # the first line's start
    keyword_end: int
    stop: int  # past the last line, heredoc bodies and newline included
    args: Text
    heredocs: tuple[Heredoc, ...] = ()
    onbuild: bool = False

    @property
    def removal(self) -> TextEdit:
        return TextEdit(self.start, self.stop, "")

    def mentions(self, text: str, names: frozenset[str]) -> bool:
        source = text[self.start : self.stop]
        return any(name in source for name in names)


@dataclass(frozen=True)
class Parsed:
    instructions: tuple[Instruction, ...]
    escape: str
    problems: tuple[tuple[int, str], ...]


def parse(text: str) -> Parsed:
    lines = _physical_lines(text)
    escape = _escape_directive(text, lines)
    continued = re.compile(re.escape(escape) + r"[ \t]*$")
    instructions: list[Instruction] = []
    problems: list[tuple[int, str]] = []
    index = 0
    while index < len(lines):
        start, end, _ = lines[index]
        content = text[start:end]
        if _skipped(content):
            index += 1
            continue
        keyword = _KEYWORD.match(content)
        assert keyword is not None  # a line that is not blank has a first word
        keyword_end = start + keyword.end()
        position = keyword_end
        while position < end and text[position] in " \t":
            position += 1
        chars: list[str] = []
        origin: list[int] = []
        first = index
        while True:
            segment_start = position if index == first else lines[index][0]
            segment_end = lines[index][1]
            continuation = continued.search(text, segment_start, segment_end)
            if continuation:
                segment_end = continuation.start()
            chars.append(text[segment_start:segment_end])
            origin.extend(range(segment_start, segment_end))
            last = index
            index += 1
            if not continuation:
                break
            while index < len(lines) and _skipped(text[lines[index][0] : lines[index][1]]):
                index += 1
            if index == len(lines):
                break
        origin.append(origin[-1] + 1 if origin else position)
        args = Text("".join(chars), tuple(origin))
        word = keyword.group(1).upper()
        stop = lines[last][2]
        heredocs: list[Heredoc] = []
        if word in ("RUN", "COPY", "ADD"):
            for match in _HEREDOC.finditer(args.chars):
                body_start = lines[index][0] if index < len(lines) else len(text)
                while index < len(lines) and not _ends_heredoc(text, lines[index], match):
                    index += 1
                if index == len(lines):
                    problems.append((first + 1, f"heredoc {match.group(3)} is never closed"))
                    body_end = stop = len(text)
                else:
                    body_end = lines[index][0]
                    stop = lines[index][2]
                    index += 1
                heredocs.append(Heredoc(Text.plain(text, body_start, body_end), not match[2]))
        instruction = Instruction(word, first + 1, start, keyword_end, stop, args, tuple(heredocs))
        instructions.append(_onbuild(instruction) if word == "ONBUILD" else instruction)
    return Parsed(tuple(instructions), escape, tuple(problems))


def _physical_lines(text: str) -> list[tuple[int, int, int]]:
    """(start, end of content without the line break, start of the next line)."""
    lines = []
    start = 0
    while start < len(text):
        newline = text.find("\n", start)
        following = len(text) if newline == -1 else newline + 1
        end = len(text) if newline == -1 else newline
        if end > start and text[end - 1] == "\r":
            end -= 1
        lines.append((start, end, following))
        start = following
    return lines


def _escape_directive(text: str, lines: Sequence[tuple[int, int, int]]) -> str:
    """The escape character: `\\` unless a `# escape=` directive at the very top says '`'."""
    for start, end, _ in lines:
        directive = _DIRECTIVE.match(text, start, end)
        if directive is None:
            break
        if directive.group(1).lower() == "escape" and directive.group(2) in ("\\", "`"):
            return directive.group(2)
    return "\\"


def _skipped(content: str) -> bool:
    stripped = content.lstrip(" \t")
    return not stripped or stripped.startswith("#")


def _ends_heredoc(text: str, line: tuple[int, int, int], marker: re.Match[str]) -> bool:
    content = text[line[0] : line[1]]
    return (content.lstrip("\t") if marker.group(1) else content) == marker.group(3)


def _onbuild(instruction: Instruction) -> Instruction:
    """ONBUILD's instruction, read as itself (it runs when an image is built from this one)."""
    args = instruction.args
    inner = re.match(r"(\S+)[ \t]*", args.chars)
    if inner is None:
        return instruction
    return replace(
        instruction,
        keyword=inner.group(1).upper(),
        keyword_end=args.after(len(inner.group(1))),
        args=args.tail(inner.end()),
        onbuild=True,
    )


def docker_words(chars: str, escape: str) -> list[tuple[int, int]]:
    """BuildKit's `parseWords`: blank-separated words, quotes and escapes kept in the word."""
    words = []
    index = 0
    while index < len(chars):
        if chars[index].isspace():
            index += 1
            continue
        start = index
        quote = ""
        while index < len(chars):
            char = chars[index]
            if quote:
                if char == quote:
                    quote = ""
                elif char == escape and quote != "'" and index + 1 < len(chars):
                    index += 1
            elif char.isspace():
                break
            elif char in "'\"":
                quote = char
            elif char == escape and index + 1 < len(chars):
                index += 1
            index += 1
        words.append((start, index))
    return words


def docker_value(raw: str, escape: str) -> str | None:
    """What Docker makes of a word: quotes removed, escapes applied (None if it expands `$`)."""
    return unquote(raw, escape, frozenset({'"', "$", escape}), backticks=False)


def unquote(raw: str, escape: str, escapable: frozenset[str], backticks: bool) -> str | None:
    """A word's value: quotes removed, `escape` applied (inside double quotes only before one
    of `escapable`); None when it expands a variable (or runs a backtick command)."""
    out = []
    quote = ""
    index = 0
    while index < len(raw):
        char = raw[index]
        if quote == "'":
            if char == "'":
                quote = ""
            else:
                out.append(char)
        elif char == escape and index + 1 < len(raw) and (not quote or raw[index + 1] in escapable):
            out.append(raw[index + 1])
            index += 1
        elif _EXPANDS.match(raw, index) or (backticks and char == "`"):
            return None
        elif char == '"' and quote:
            quote = ""
        elif char in "'\"" and not quote:
            quote = char
        else:
            out.append(char)
        index += 1
    if quote:
        raise Unparsable(f"unterminated {quote} quote")
    return "".join(out)


def item_removals(
    text: Text,
    spans: Sequence[tuple[int, int]],
    removable: Sequence[bool],
    lead: int | None,
    whole: TextEdit | None,
) -> list[TextEdit | None]:
    """How to cut each of several items (assignments, commands) out of their list.

    One item: `whole`. Otherwise the first item that stays is the anchor: items before it go
    with the gap after them, items after it with the gap before them, so any of them can be cut
    together and what stays keeps its separators. With no anchor, `lead` (the keyword's end)
    is one; without it the first item takes the gap after it.
    """
    if len(spans) == 1:
        return [whole]
    anchor = next((i for i, r in enumerate(removable) if not r), -1 if lead is not None else 0)
    removals: list[TextEdit | None] = []
    for index, (start, end) in enumerate(spans):
        if index < anchor or (index == anchor == 0):
            removals.append(TextEdit(text.at(start), text.at(spans[index + 1][0]), ""))
        elif index > 0:
            removals.append(TextEdit(text.after(spans[index - 1][1]), text.after(end), ""))
        else:
            assert lead is not None
            removals.append(TextEdit(lead, text.after(end), ""))
    return removals
