"""The `.ipynb` file itself: its JSON read into cells (a file that is not a notebook is an error
naming why), and written back in Jupyter's own layout so a rewrite changes only its cells."""

from __future__ import annotations

import json
from typing import Any

from xlamigrate.results import FileError

Notebook = dict[str, Any]


def load(path: str, data: bytes) -> Notebook | FileError:
    try:
        notebook = json.loads(data.decode("utf-8"))
    except json.JSONDecodeError as error:  # the parser's words, without its "line 3 column 5"
        return FileError(
            path, error.lineno, f"could not read the notebook: {error.msg}", column=error.colno
        )
    except UnicodeDecodeError as error:
        return FileError(path, None, f"could not read the notebook: {error}")
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        return FileError(path, None, "could not read the notebook: no list of cells")
    for index, cell in enumerate(notebook["cells"]):
        if not isinstance(cell, dict):
            return FileError(
                path, None, f"could not read the notebook: cell {index} is not an object"
            )
        source = cell.get("source", "")
        if not isinstance(source, str) and not (
            isinstance(source, list) and all(isinstance(part, str) for part in source)
        ):
            return FileError(
                path,
                None,
                f"could not read the notebook: the source of cell {index} is not text "
                "(a string or a list of strings)",
            )
    return notebook


def code_sources(notebook: Notebook) -> list[tuple[int, str]]:
    """(cell index, source) of every code cell."""
    return [
        (index, source_of(cell))
        for index, cell in enumerate(notebook["cells"])
        if cell.get("cell_type") == "code"
    ]


def source_of(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def set_source(cell: dict[str, Any], source: str) -> None:
    """A new source, kept in the cell's own shape (a list of lines, or one string)."""
    lines = source.splitlines(keepends=True)
    cell["source"] = lines if isinstance(cell.get("source"), list) else source


def dump(notebook: Notebook) -> bytes:
    """Jupyter's layout (nbformat.writes): one-space indent, sorted keys, UTF-8, final newline."""
    return (json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()
