"""`.env` files (docker compose env_file, python-dotenv): `NAME=VALUE` lines, optional `export`."""

from __future__ import annotations

import re

from xlamigrate.flagvalue import FlagValue
from xlamigrate.kinds import textscan
from xlamigrate.kinds.textaccess import TextAccess, TextAnalysis, line_removal

_ASSIGNMENT = re.compile(
    r"^[ \t]*(?:export[ \t]+)?(?P<name>[A-Za-z_][A-Za-z0-9_.]*)[ \t]*=[ \t]*"
    r"(?P<value>\"(?:[^\"\\]|\\.)*\"|'[^']*'|[^#\n]*?)[ \t]*(?:#.*)?$"
)


def analyse(text: str, names: frozenset[str]) -> TextAnalysis:
    accesses = []
    offset = 0
    for line in text.splitlines(keepends=True):
        match = _ASSIGNMENT.match(line.rstrip("\r\n"))
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
    return TextAnalysis(tuple(accesses))


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


KIND = textscan.TextKind(analyse, render)
scan, rewrite, analyse_file = KIND.scan, KIND.rewrite, KIND.analyse_file
