"""Dockerfile text as instructions, after BuildKit's parser: the `# escape=` directive, line
continuations (comment and blank lines inside them dropped), heredocs, ONBUILD. Each
instruction's text is an `Embedded` text of the file, so findings and edits land on the original
text whatever the continuations."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from xlamigrate.kinds.embedded import Embedded
from xlamigrate.kinds.textaccess import LineIndex, Problem, TextEdit

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
    """Raised while reading one instruction; it becomes a `problems` entry. `at`: where in the
    text read (its index), where the reader can say."""

    def __init__(self, message: str, at: int | None = None) -> None:
        super().__init__(message)
        self.at = at


@dataclass(frozen=True)
class Heredoc:
    body: Embedded
    expands: bool  # an unquoted delimiter: `$X` in the body is expanded
    marker: tuple[int, int]  # the `<<EOF` operator, in the instruction's text


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case; ONBUILD's own instruction is read as itself, `onbuild` set
    line: int
    start: int  # the first line's start
    keyword_end: int
    stop: int  # past the last line, heredoc bodies and newline included
    args: Embedded  # the text after the keyword, continuations joined (no line breaks)
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
    problems: tuple[Problem, ...]


def parse(text: str) -> Parsed:
    lines = _physical_lines(text)
    escape = _escape_directive(text, lines)
    continued = re.compile(re.escape(escape) + r"[ \t]*$")
    instructions: list[Instruction] = []
    problems: list[Problem] = []
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
        origin: list[int] = []
        first = index
        while True:
            segment_start = position if index == first else lines[index][0]
            segment_end = lines[index][1]
            continuation = continued.search(text, segment_start, segment_end)
            if continuation:
                segment_end = continuation.start()
            origin.extend(range(segment_start, segment_end))
            last = index
            index += 1
            if not continuation:
                break
            while index < len(lines) and _skipped(text[lines[index][0] : lines[index][1]]):
                index += 1
            if index == len(lines):
                break
        args = _joined(text, origin, position)
        word = keyword.group(1).upper()
        stop = lines[last][2]
        heredocs: list[Heredoc] = []
        if word in ("RUN", "COPY", "ADD"):
            for match in _HEREDOC.finditer(args.text):
                body_start = lines[index][0] if index < len(lines) else len(text)
                while index < len(lines) and not _ends_heredoc(text, lines[index], match):
                    index += 1
                if index == len(lines):
                    never_closed = f"heredoc {match.group(3)} is never closed"
                    at = args.start_of(match.start())
                    problems.append(LineIndex(text).problem(at, never_closed))
                    body_end = stop = len(text)
                else:
                    body_end = lines[index][0]
                    stop = lines[index][2]
                    index += 1
                body = Embedded.slice(text, body_start, body_end)
                heredocs.append(Heredoc(body, not match[2], match.span()))
        instruction = Instruction(word, first + 1, start, keyword_end, stop, args, tuple(heredocs))
        instructions.append(_onbuild(instruction) if word == "ONBUILD" else instruction)
    return Parsed(tuple(instructions), escape, tuple(problems))


def _joined(text: str, origin: Sequence[int], position: int) -> Embedded:
    """The characters of `text` at `origin` as one line of text (empty: at `position`)."""
    if not origin:
        return Embedded.slice(text, position, position, ("line",))
    if origin[-1] - origin[0] == len(origin) - 1:  # one physical line
        return Embedded.slice(text, origin[0], origin[-1] + 1, ("line",))
    return Embedded.mapped(text, [(text[o], o, o + 1) for o in origin], ("line",))


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
    inner = re.match(r"(\S+)[ \t]*", args.text)
    if inner is None:
        return instruction
    return replace(
        instruction,
        keyword=inner.group(1).upper(),
        keyword_end=args.end_of(len(inner.group(1))),
        args=tail(args, inner.end()),
        onbuild=True,
    )


def from_stage(instruction: Instruction) -> tuple[str, str]:
    """A FROM instruction's image and stage name (`FROM base AS train`), lower case."""
    words = [w.lower() for w in instruction.args.text.split() if not w.startswith("--")]
    image = words[0] if words else ""
    return image, words[2] if len(words) >= 3 and words[1] == "as" else ""


def tail(text: Embedded, index: int) -> Embedded:
    """`text` from character `index` on, still mapped to the file."""
    return text.inner(Embedded.slice(text.text, index, len(text.text)))


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


def docker_value(raw: str, escape: str, at: int = 0) -> str | None:
    """What Docker makes of a word: quotes removed, `escape` applied (inside double quotes only
    before `"`, `$` or itself); None when it expands a variable. `at`: where `raw` starts in the
    text read (an unterminated quote says where it opened there)."""
    out = []
    quote = ""
    opened = 0
    index = 0
    while index < len(raw):
        char = raw[index]
        if quote == "'":
            if char == "'":
                quote = ""
            else:
                out.append(char)
        elif (
            char == escape
            and index + 1 < len(raw)
            and (not quote or raw[index + 1] in ('"', "$", escape))
        ):
            out.append(raw[index + 1])
            index += 1
        elif _EXPANDS.match(raw, index):
            return None
        elif char == '"' and quote:
            quote = ""
        elif char in "'\"" and not quote:
            quote, opened = char, index
        else:
            out.append(char)
        index += 1
    if quote:
        raise Unparsable(f"unterminated {quote} quote", at + opened)
    return "".join(out)


def item_removals(
    text: Embedded,
    spans: Sequence[tuple[int, int]],
    removable: Sequence[bool],
    lead: int | None,
    whole: TextEdit | None,
) -> list[TextEdit | None]:
    """How to cut each of several assignments out of their instruction.

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
            removals.append(TextEdit(text.start_of(start), text.start_of(spans[index + 1][0]), ""))
        elif index > 0:
            removals.append(TextEdit(text.end_of(spans[index - 1][1]), text.end_of(end), ""))
        else:
            assert lead is not None
            removals.append(TextEdit(lead, text.end_of(end), ""))
    return removals
