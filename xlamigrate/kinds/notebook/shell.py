"""The shell a notebook runs, through the one shell engine: the `!cmd` lines (and `%sx`,
`%system`) of Python cells, and `%%bash`-like cells. Each text is a slice of its cell, so
findings carry the cell's own line and column. They are reported, not rewritten: the commands
start processes of their own, whose scripts the recipe belongs to."""

from __future__ import annotations

from collections.abc import Sequence

from xlamigrate.catalogue import Catalogue
from xlamigrate.kinds.notebook.escapes import escaped_spans
from xlamigrate.kinds.notebook.magics import CellRole
from xlamigrate.kinds.textaccess import TextAnalysis
from xlamigrate.request import FileTask
from xlamigrate.results import FileResult

Slice = tuple[int, int, tuple[str, ...]]  # start, end in the cell, host encodings


def shell_slices(source: str, role: CellRole) -> tuple[Slice, ...]:
    """Where the cell's shell texts are: its body for a shell cell, each command of a Python
    cell (`!cmd`, with the lines a backslash continues it on)."""
    if role.role == "text":
        return ((role.body, len(source), ()),)
    return tuple(
        (start, end, ("line",))
        for start, end, escape in escaped_spans(source)
        if escape.role == "shell"
    )


def scan_shell(
    path: str,
    source: str,
    slices: Sequence[Slice],
    catalogue: Catalogue,
    enabled: frozenset[str],
) -> FileResult:
    """Findings in the cell `source` (its lines and columns) for the shell texts at `slices`."""
    if not any(flag in source[start:end] for start, end, _ in slices for flag in catalogue.flags):
        return FileResult(path)  # the engine (tree-sitter) is loaded only for texts that need it
    from xlamigrate.kinds.embedded import Embedded
    from xlamigrate.kinds.shell.analysis import analyse_source
    from xlamigrate.kinds.shell.render import render
    from xlamigrate.kinds.textkind import TextKind, scan_text

    def analyse(text: str, names: frozenset[str]) -> TextAnalysis:
        parts = [
            analyse_source(Embedded.slice(text, start, end, encodings), names)
            for start, end, encodings in slices
        ]
        return TextAnalysis(
            tuple(access for part in parts for access in part.accesses),
            tuple(problem for part in parts for problem in part.problems),
            tuple(mention for part in parts for mention in part.mentions),
        )

    task = FileTask(path, source.encode("utf-8"), catalogue, enabled)
    return scan_text(task, TextKind(analyse, render))


def launched_scripts(cells: Sequence[tuple[str, CellRole]]) -> tuple[str, ...]:
    """The Python scripts the notebook's shell texts start (`!torchrun train.py`, a `%%bash`
    cell's `python train.py`), as written: children of the kernel, which inherit its `%env`."""
    from xlamigrate.kinds.embedded import Embedded
    from xlamigrate.kinds.shell.analysis import launches

    scripts: list[str] = []
    for source, role in cells:
        if role.role == "text" and role.kind != "shell":
            continue
        for start, end, encodings in shell_slices(source, role):
            if ".py" not in source[start:end]:
                continue  # tree-sitter is loaded only for texts that may start a script
            text = Embedded.slice(source, start, end, encodings)
            scripts.extend(
                launch.script
                for launch in launches(text)
                if launch.script is not None and launch.script.endswith(".py")
            )
    return tuple(dict.fromkeys(scripts))
