"""What make itself reads of a Makefile, as far as the shell engine and the flags need it: each
logical recipe line as the shell text make hands to `/bin/sh -c` (mapped back to the file), the
`$(NAME)` expansions in it, and make's own variable assignments with whether they are exported.

Make has no maintained Python parser that keeps positions; this reads only the line structure
make documents (a rule line, tab-led recipe lines, backslash continuations, `define`) and leaves
everything between the lines to the shell engine."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from xlamigrate.kinds.embedded import Embedded

# A rule line: targets, one or two colons that are not an assignment's, the rest (prerequisites,
# an optional `; recipe`, or a target-specific assignment).
_RULE = re.compile(r"^(?P<targets>[^\s:#=][^:#=]*?)\s*(?P<colons>:{1,2}|&:)(?!=)(?P<rest>.*)$")
_ASSIGNMENT = re.compile(
    r"^(?P<prefix>(?:(?:override|export|private|unexport)\s+)*)"
    r"(?P<name>[A-Za-z_][A-Za-z0-9_.]*)\s*(?P<op>:::=|::=|:=|\?=|\+=|!=|=)\s*(?P<value>.*?)\s*$"
)
_EXPORTS = re.compile(r"^export(?:\s+(?P<names>[^=:#]*?))?\s*$")
_DIRECTIVES = re.compile(r"^(?:ifeq|ifneq|ifdef|ifndef|else|endif|include|-include|sinclude)\b")
_DEFINE = re.compile(r"^(?:(?:override|export)\s+)*define\b")
_RECIPE_PREFIXES = "@-+"  # echo off, ignore errors, run under -n: make's, not the shell's
_EXPORT_ALL = ".EXPORT_ALL_VARIABLES"


@dataclass(frozen=True)
class Expansion:
    """A make expansion in a recipe, `$(NAME)` or `${NAME}`: make's value of NAME (a make
    variable, or the environment's), host offsets of the whole expansion."""

    name: str
    start: int
    end: int


@dataclass(frozen=True)
class Recipe:
    """One logical recipe line: the shell text make runs, and the expansions make filled in."""

    shell: Embedded
    expansions: tuple[Expansion, ...]


@dataclass(frozen=True)
class Assignment:
    """A make variable's assignment; `exported`: recipes get it in their environment."""

    name: str
    op: str
    value: str
    start: int  # the name
    end: int  # the value's end
    value_start: int
    exported: bool
    line_start: int  # the logical line (for its removal)
    line_end: int


@dataclass(frozen=True)
class Makefile:
    recipes: tuple[Recipe, ...]
    assignments: tuple[Assignment, ...]


@dataclass(frozen=True)
class _Line:
    start: int  # host offset of the line's first character
    text: str  # without its line break


def read(text: str) -> Makefile:
    """The recipes and assignments of a Makefile, in the order they are written."""
    recipes: list[Recipe] = []
    found: list[tuple[str, str, str, int, int, int, int, int, bool]] = []
    exported: set[str] = set()
    export_all = False
    in_rule = False
    lines = list(_lines(text))
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.text.startswith("\t") and in_rule:
            group, index = _logical(lines, index)
            recipes.append(_recipe(text, group, skip=1))
            continue
        group, index = _logical(lines, index)
        content = " ".join(part.text.rstrip("\\").strip() for part in group)
        content = _without_comment(content)
        if not content:
            continue
        if _DEFINE.match(content):
            index = _after_define(lines, index)
            in_rule = False
            continue
        if _DIRECTIVES.match(content):
            continue
        exports = _EXPORTS.match(content)
        if exports is not None:
            names = exports.group("names")
            if names is None:
                export_all = True
            else:
                exported.update(names.split())
            continue
        assignment = _ASSIGNMENT.match(content)
        rule = _RULE.match(content) if assignment is None else None
        if rule is not None:
            in_rule = True
            if rule.group("targets").strip() == _EXPORT_ALL:
                export_all = True
            rest = rule.group("rest")
            specific = _ASSIGNMENT.match(rest.strip())
            if specific is not None:
                assignment = specific
            elif ";" in rest and len(group) == 1:  # `target: prerequisites ; recipe`
                at = line.text.index(";", line.text.index(rest)) + 1
                recipes.append(_recipe(text, [_Line(line.start + at, line.text[at:])], skip=0))
        else:
            in_rule = False
        if assignment is not None and len(group) == 1:
            found.append(_assignment(line, assignment))
    assignments = tuple(
        Assignment(
            name, op, value, start, end, value_start, explicit or export_all or name in exported,
            line_start, line_end,
        )
        for name, op, value, start, end, value_start, line_start, line_end, explicit in found
    )  # fmt: skip
    return Makefile(tuple(recipes), assignments)


def _lines(text: str) -> Iterator[_Line]:
    start = 0
    for raw in text.splitlines(keepends=True):
        yield _Line(start, raw.rstrip("\r\n"))
        start += len(raw)


def _continues(line: str) -> bool:
    """A line ending in an odd number of backslashes goes on on the next one."""
    stripped = line.rstrip("\\")
    return (len(line) - len(stripped)) % 2 == 1


def _logical(lines: list[_Line], index: int) -> tuple[list[_Line], int]:
    group = [lines[index]]
    index += 1
    while _continues(group[-1].text) and index < len(lines):
        group.append(lines[index])
        index += 1
    return group, index


def _after_define(lines: list[_Line], index: int) -> int:
    while index < len(lines) and not lines[index].text.strip().startswith("endef"):
        index += 1
    return index + 1


def _without_comment(content: str) -> str:
    match = re.search(r"(?<!\\)#", content)
    return (content[: match.start()] if match else content).strip()


def _assignment(
    line: _Line, match: re.Match[str]
) -> tuple[str, str, str, int, int, int, int, int, bool]:
    """(name, op, value, host start, end, value start, line start, line end, exported here)."""
    offset = line.text.index(match.string)
    value = _without_comment(match.group("value"))
    value_start = line.start + offset + match.start("value")
    return (
        match.group("name"),
        match.group("op"),
        value,
        line.start + offset + match.start("name"),
        value_start + len(value),
        value_start,
        line.start,
        line.start + len(line.text),
        "export" in match.group("prefix").split(),
    )


def _recipe(host: str, group: list[_Line], skip: int) -> Recipe:
    """A logical recipe line as the shell gets it: the first line without its tab and make's
    `@`/`-`/`+` prefixes, each continuation line without its leading tab (the backslash and the
    line break stay: the shell joins them), `$$` as `$`, and each make expansion an opaque
    shell expansion of the same length (`$(PYTHON)` reads as `$_______`)."""
    pieces: list[tuple[str, int, int]] = []
    expansions: list[Expansion] = []
    for number, line in enumerate(group):
        text = line.text
        position = skip if text.startswith("\t") else 0
        if number == 0:
            while position < len(text) and text[position] in _RECIPE_PREFIXES + " \t":
                position += 1
        if number:
            pieces.append(("\n", line.start - 1, line.start))
        while position < len(text):
            start = line.start + position
            if text[position] != "$" or position + 1 >= len(text):
                pieces.append((text[position], start, start + 1))
                position += 1
                continue
            following = text[position + 1]
            if following == "$":
                pieces.append(("$", start, start + 2))
                position += 2
                continue
            end = _expansion_end(text, position)
            inner = text[position + 2 : end - 1] if following in "({" else following
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", inner):
                expansions.append(Expansion(inner, start, line.start + end))
            pieces.append(("$", start, start + 1))
            pieces.extend(
                ("_", line.start + i, line.start + i + 1) for i in range(position + 1, end)
            )
            position = end
    return Recipe(Embedded.mapped(host, pieces, editable=False), tuple(expansions))


def _expansion_end(text: str, dollar: int) -> int:
    """Where the make expansion at `dollar` ends: `$X`, `$(...)`, `${...}` (nested ones too);
    an unclosed one runs to the line's end."""
    opener = text[dollar + 1]
    closer = {"(": ")", "{": "}"}.get(opener)
    if closer is None:
        return dollar + 2
    depth = 0
    for index in range(dollar + 1, len(text)):
        if text[index] == opener:
            depth += 1
        elif text[index] == closer:
            depth -= 1
            if depth == 0:
                return index + 1
    return len(text)
