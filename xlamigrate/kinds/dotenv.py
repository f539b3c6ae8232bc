"""`.env` files (docker compose env_file, python-dotenv): `NAME=VALUE` lines, optional `export`."""

from __future__ import annotations

import re

from xlamigrate.flagvalue import FlagValue
from xlamigrate.kinds import textkind
from xlamigrate.kinds.textaccess import Problem, TextAccess, TextAnalysis, line_removal

_ASSIGNMENT = re.compile(
    r"^[ \t]*(?:export[ \t]+)?(?P<name>[A-Za-z_][A-Za-z0-9_.]*)[ \t]*=[ \t]*"
    r"(?P<value>\"(?:[^\"\\]|\\.)*\"|'[^']*'|[^#\n]*?)[ \t]*(?:#.*)?$"
)
# A statement's start: its name, and what follows it (a bare name passes the environment's on).
_STATEMENT = re.compile(r"^[ \t]*(?:export[ \t]+)?(?P<name>[A-Za-z_][A-Za-z0-9_.]*)(?P<rest>.*)$")
_QUOTED = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'[^']*'")


def analyse(text: str, names: frozenset[str]) -> TextAnalysis:
    accesses = []
    problems = []
    offset = 0
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        content = line.rstrip("\r\n")
        problem = _problem(content, number, names)
        if problem is not None:
            problems.append(problem)
        match = None if problem else _ASSIGNMENT.match(content)
        if match and match.group("name") in names:
            start = offset + match.start("name")
            end = offset + match.end("value")
            value = unquote(match.group("value"))
            accesses.append(
                TextAccess(
                    variable=match.group("name"),
                    kind="write",
                    form="dotenv",
                    value=FlagValue((value,)),
                    start=start,
                    end=end,
                    assignment=(start, end),
                    value_range=(offset + match.start("value"), end),
                    removal=line_removal(text, offset + match.start(), end),
                    syntax="dotenv",
                )
            )
        offset += len(line)
    return TextAnalysis(tuple(accesses), tuple(problems))


def _problem(line: str, number: int, names: frozenset[str]) -> Problem | None:
    """Why a line that sets a flag is no `NAME=VALUE` statement (as python-dotenv and compose
    read them), at the place it goes wrong; None for any other line."""
    statement = _STATEMENT.match(line)
    if statement is None or statement["name"] not in names:
        return None
    after_name = statement["rest"].lstrip(" \t")
    if not after_name:
        return None  # a bare name: the environment's value, passed on
    if not after_name.startswith("="):
        found = f"expected = after {statement['name']}, found {after_name!r}"
        return Problem(number, found, len(line) - len(after_name) + 1)
    value = after_name[1:].lstrip(" \t")
    if value[:1] not in ("'", '"'):
        return None  # unquoted: the rest of the line, up to a comment
    quoted = _QUOTED.match(value)
    if quoted is None:
        return Problem(number, f"unterminated {value[0]} quote", len(line) - len(value) + 1)
    trailing = value[quoted.end() :].lstrip(" \t")
    if not trailing or trailing.startswith("#"):  # (a comment, blanks before it or not)
        return None
    found = f"unexpected text after the quoted value: {trailing!r}"
    return Problem(number, found, len(line) - len(trailing) + 1)


def unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        inner = value[1:-1]
        return inner.replace('\\"', '"') if value[0] == '"' else inner
    return value


def render(syntax: str, name: str, value: str, append: bool = False) -> str:
    """An assignment line's `NAME=VALUE`; .env files do not expand variables, so an append is
    the value alone (the file's value replaces the environment's anyway)."""
    if re.fullmatch(r"[A-Za-z0-9_./:=,+-]*", value):
        return f"{name}={value}"
    return f'{name}="{value}"'


KIND = textkind.TextKind(analyse, render)
scan, rewrite, analyse_file = KIND.scan, KIND.rewrite, KIND.analyse_file
