"""Cell magics, as data: what each makes of the text below it (Python the kernel runs, the script
of a program, a file the notebook writes, or text xlamigrate does not read).

A program's or a file's text is read as the kind the registry gives its interpreter or its name
(`%%script bash` as a `#!bash` file, `%%writefile train.py` as `train.py`), so adding a file kind
teaches notebooks about it too.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from xlamigrate.kinds import kind_by_name, kind_by_shebang

Action = Literal["wrap", "run", "write"]


@dataclass(frozen=True)
class CellMagic:
    """One row of the table. `wrap`: the rest of the cell is a cell of its own (Python, or
    another magic); `run`: a program reads it as its script; `write`: it is saved to the file its
    first argument names."""

    action: Action
    program: str | None = None  # run: the program; None: the first argument names it
    value_options: frozenset[str] = frozenset()  # options that take the next word as value


_SCRIPT = frozenset({"--proc", "--out", "--err"})  # IPython's script magics (%%bash --out x)

CELL_MAGICS: Mapping[str, CellMagic] = MappingProxyType(
    {
        # Python the kernel runs, timed, profiled, debugged or with its output captured
        "capture": CellMagic("wrap"),
        "time": CellMagic("wrap"),
        "timeit": CellMagic("wrap"),
        "prun": CellMagic("wrap"),
        "debug": CellMagic("wrap"),
        "memit": CellMagic("wrap"),
        # a program that reads the cell as its script
        "script": CellMagic("run", None, _SCRIPT),
        "bash": CellMagic("run", "bash", _SCRIPT),
        "sh": CellMagic("run", "sh", _SCRIPT),
        "python": CellMagic("run", "python", _SCRIPT),
        "python2": CellMagic("run", "python2", _SCRIPT),
        "python3": CellMagic("run", "python3", _SCRIPT),
        "pypy": CellMagic("run", "pypy", _SCRIPT),
        "perl": CellMagic("run", "perl", _SCRIPT),
        "ruby": CellMagic("run", "ruby", _SCRIPT),
        # each line a shell command
        "sx": CellMagic("run", "sh"),
        "system": CellMagic("run", "sh"),
        "!": CellMagic("run", "sh"),
        # a file the notebook writes
        "writefile": CellMagic("write"),
        "file": CellMagic("write"),
    }
)

Role = Literal["python", "text", "skipped"]


@dataclass(frozen=True)
class CellRole:
    """What a code cell is. `python`: the kernel runs it (its magic lines are masked); `text`:
    from `body` on it is the text of a file of `kind`, read alone; `skipped`: not read."""

    role: Role
    body: int = 0  # where the text of the role starts in the cell (past its magic lines)
    body_line: int = 1  # the line of the cell it starts on
    magic: str = ""  # the magic line that decided, as written
    kind: str | None = None  # role "text": the file kind


_CELL_MAGIC = re.compile(r"[ \t\r\n]*%%(?P<name>\S+)(?P<args>[^\n]*)")


def cell_role(source: str) -> CellRole:
    """The role of a code cell from its leading cell magics (a wrapping one, like `%%capture`,
    hands the rest of the cell to the next)."""
    start = 0
    while (match := _CELL_MAGIC.match(source, start)) is not None:
        line_end = source.find("\n", match.end())
        body = len(source) if line_end == -1 else line_end + 1
        body_line = source.count("\n", 0, body) + 1
        written = match.group(0).strip()
        magic = CELL_MAGICS.get(match["name"])
        if magic is None:
            return CellRole("skipped", body, body_line, written)
        if magic.action == "wrap":
            start = body
            continue
        kind = _kind(magic, match["args"])
        if kind is None or kind == "notebook":
            return CellRole("skipped", body, body_line, written)
        return CellRole("text", body, body_line, written, kind)
    return CellRole("python")


def _kind(magic: CellMagic, args: str) -> str | None:
    """The kind of the text: its interpreter's as a `#!` line names it, or its file's."""
    words = _positionals(_split(args), magic.value_options)
    if magic.action == "run":
        program = magic.program or (words[0] if words else None)
        return None if program is None else kind_by_shebang(b"#!" + program.encode())
    return kind_by_name(os.path.basename(words[0])) if words else None


def _split(args: str) -> list[str]:
    try:
        return shlex.split(args)
    except ValueError:  # an open quote: IPython would complain; the words are still a guide
        return args.split()


def _positionals(words: list[str], value_options: frozenset[str]) -> list[str]:
    positionals: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word.startswith("-") and positionals == []:
            skip = word in value_options
        else:
            positionals.append(word)
    return positionals
