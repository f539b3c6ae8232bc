"""The project's own small files (pins, dependency lists), found as pip and Python find them: the
nearest folder's, from a script's own folder up to the project's root."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

LARGEST = 1 << 20  # bytes: a pin or dependency file is small; a larger file of that name is not one
# The files a project pins anything in (pins.py reads torch-xla's, frameworkpins.py the
# frameworks').
PIN_FILES = re.compile(
    r"(?:requirements.*\.txt|constraints.*\.txt|pyproject\.toml|setup\.py"
    r"|(?:Docker|Container)file(?:\..*)?|.*\.(?:dockerfile|Dockerfile|Containerfile))"
)
# An answer about a pin file's bytes (the question, the bytes, how to answer: plain values),
# remembered for those bytes where a cache is kept (RunCache.answer): a warm run does not parse
# requirements again, nor import `packaging` to.
Remember = Callable[[str, bytes, Callable[[], Any]], Any]


def computed(question: str, data: bytes, compute: Callable[[], Any]) -> Any:
    """A Remember that remembers nothing: the answer, computed."""
    return compute()


def folders_up(folder: Path, root: Path) -> Iterator[Path]:
    """`folder`, then each parent up to `root` (resolved paths); only `folder` where it is not
    inside `root`."""
    while True:
        yield folder
        if folder == root or folder.parent == folder or root not in folder.parents:
            return
        folder = folder.parent


class FolderChains:
    """The folders whose pins a file gets, from its own (resolved) up to `root`, worked out
    once per folder of files: a file that is no symlink lies where its folder resolves."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._chains: dict[Path, tuple[Path, ...]] = {}

    def of(self, path: Path) -> tuple[Path, ...]:
        if os.path.islink(path):  # (its pins are its target's folder's)
            return tuple(folders_up(path.resolve().parent, self.root))
        parent = path.parent
        chain = self._chains.get(parent)
        if chain is None:
            chain = self._chains[parent] = tuple(folders_up(parent.resolve(), self.root))
        return chain


def read_small(path: Path) -> bytes | None:
    """The bytes of a regular file of at most LARGEST bytes; None otherwise or unreadable."""
    try:
        if not path.is_file() or path.stat().st_size > LARGEST:
            return None
        return path.read_bytes()
    except OSError:
        return None
