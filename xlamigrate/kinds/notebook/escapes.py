"""The lines of a Python cell that are IPython's, not Python's: shell escapes (`!cmd`, `!!cmd`,
`files = !ls`, `%sx cmd`), `%env`, any other line magic or help request (`%time f()`, `obj?`),
each with the lines a trailing backslash continues it on, and a one-line cell's magic written
without its `%` (automagic: `pip install x`). The kernel's module masks them; shell escapes go
to the shell engine.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

LINE_SHELL_MAGICS = frozenset({"sx", "system"})  # `%sx cmd` runs `cmd` as `!cmd` does
ENV_MAGICS = frozenset({"env", "set_env"})

LineRole = Literal["shell", "env", "magic"]


@dataclass(frozen=True)
class LineEscape:
    """A line of a Python cell that is IPython's, not Python's. `shell`: a command line from
    `start` on; `env`: `%env NAME=VALUE` (`value` None: `%env NAME`, a read); `magic`: any
    other (a line magic from `start` on, an `obj?` help request)."""

    role: LineRole
    indent: str
    start: int = 0
    name: str = ""
    value: str | None = None


_ESCAPE = re.compile(
    r"(?P<indent>[ \t]*)"
    r"(?:(?P<target>[A-Za-z_][\w.]*(?:[ \t]*,[ \t]*[A-Za-z_][\w.]*)*)[ \t]*=[ \t]*)?"
    r"(?P<escape>!!?|%)"
)
_MAGIC_NAME = re.compile(r"(?P<name>\w+)[ \t]*")
_ENV_WRITE = re.compile(
    r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:[ \t]*=[ \t]*|[ \t]+)(?P<value>.*?)[ \t]*$"
)
_ENV_READ = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)[ \t]*$")
_HELP = re.compile(r"[ \t]*(?:\?\??[\w.*]+|[\w.*]+\?\??)[ \t]*$")


def line_escape(line: str) -> LineEscape | None:
    """What `line` (without its newline) is, when it is not Python."""
    match = _ESCAPE.match(line)
    if match is None:
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        return LineEscape("magic", indent, len(indent)) if _HELP.match(line) else None
    indent = match["indent"]
    if match["escape"] != "%":
        return LineEscape("shell", indent, match.end())
    name = _MAGIC_NAME.match(line, match.end())
    if name is not None and name["name"] in LINE_SHELL_MAGICS:
        return LineEscape("shell", indent, name.end())
    if name is not None and name["name"] in ENV_MAGICS and match["target"] is None:
        read = _ENV_READ.match(line, name.end())
        if read is not None:
            return LineEscape("env", indent, name.end(), read["name"])
        write = _ENV_WRITE.match(line, name.end())
        if write is not None:
            return LineEscape("env", indent, name.end(), write["name"], write["value"])
    return LineEscape("magic", indent, match.start("escape"))


# IPython's line magics and default shell aliases: a one-line cell that starts with one runs it
# without its `%` (automagic): `pip install transformers`, `cd repo`.
AUTOMAGICS = frozenset(
    {
        "alias", "autoawait", "autocall", "automagic", "bookmark", "cat", "cd", "clear",
        "colors", "conda", "config", "cp", "debug", "dhist", "dirs", "doctest_mode", "env",
        "gui", "hist", "history", "killbgscripts", "ldir", "less", "lf", "lk", "ll", "load",
        "load_ext", "loadpy", "logoff", "logon", "logstart", "logstate", "logstop", "ls",
        "lsmagic", "lx", "macro", "magic", "mamba", "man", "matplotlib", "micromamba", "mkdir",
        "more", "mv", "page", "pdb", "pdef", "pdoc", "pfile", "pinfo", "pinfo2", "pip", "popd",
        "pprint", "precision", "prun", "psearch", "psource", "pushd", "pwd", "pycat", "pylab",
        "quickref", "recall", "rehashx", "reload_ext", "rerun", "reset", "reset_selective",
        "rm", "rmdir", "run", "save", "sc", "set_env", "store", "sx", "system", "tb", "time",
        "timeit", "unalias", "unload_ext", "uv", "who", "who_ls", "whos", "xdel", "xmode",
    }
)  # fmt: skip
_AUTOMAGIC = re.compile(r"(?P<indent>[ \t]*)(?P<name>[A-Za-z_]\w*)(?:[ \t]+(?P<rest>.*))?$")
_PYTHON_AFTER_NAME = "!=()<>,+*/%^&|"  # IPython runs `cd = 1`, `ls(x)` as Python


def is_automagic(source: str) -> bool:
    """Whether the cell is one line IPython runs as a magic (it must stay one line)."""
    lines = source.splitlines()
    return len(lines) == 1 and automagic(lines[0]) is not None


def automagic(line: str) -> LineEscape | None:
    """A one-line cell's magic written without its `%` (None: the line is Python)."""
    match = _AUTOMAGIC.match(line)
    if match is None or match["name"] not in AUTOMAGICS:
        return None
    rest = match["rest"] or ""
    if rest[:1] and rest[0] in _PYTHON_AFTER_NAME:
        return None
    at = match.start("name")
    escape = line_escape(f"{line[:at]}%{line[at:]}")
    if escape is None:
        return None
    return replace(escape, start=max(escape.start - 1, at))


@dataclass(frozen=True)
class Escaped:
    """An IPython line of a Python cell and the lines a trailing backslash continues it on
    (`!git clone URL && \\` then `    cd repo`), as IPython reads them: one command."""

    escape: LineEscape
    first: int  # the index of its first line in the cell (0-based)
    count: int  # how many lines it spans


def escaped_lines(lines: Sequence[str]) -> list[Escaped]:
    """The IPython lines among a cell's `lines` (each with its newline, if any)."""
    if len(lines) == 1:
        escape = automagic(lines[0].rstrip("\r\n"))
        if escape is not None:
            return [Escaped(escape, 0, 1)]
    found = []
    continued = False  # the line before is Python ending in a backslash: this one continues it
    index = 0
    while index < len(lines):
        text = lines[index].rstrip("\r\n")
        escape = None if continued else line_escape(text)
        if escape is None:
            continued = text.endswith("\\")
            index += 1
            continue
        count = 1
        while escape.role != "env" and text.endswith("\\") and index + count < len(lines):
            text = lines[index + count].rstrip("\r\n")
            count += 1
        found.append(Escaped(escape, index, count))
        index += count
        continued = False
    return found


def escaped_spans(source: str) -> list[tuple[int, int, LineEscape]]:
    """(start, end, escape) of each IPython line of a cell: its text from the escape's start
    (the command of `!cmd`) to the end of its last line, newline excluded."""
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    spans = []
    for escaped in escaped_lines(lines):
        last = escaped.first + escaped.count - 1
        end = starts[last] + len(lines[last].rstrip("\r\n"))
        spans.append((starts[escaped.first] + escaped.escape.start, end, escaped.escape))
    return spans
