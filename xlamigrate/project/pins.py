"""The oldest torch-xla a project runs on, read from its own pins: `requirements*.txt` and
`constraints*.txt` lines, `pyproject.toml` dependencies, `setup.py` strings and a Dockerfile's
`pip install` words that name torch-xla (or torch-neuronx, whose version starts with the torch
release it is built for: torch-neuronx 2.1.2.2.3.0 runs torch-xla 2.1). A file's pins are the
nearest folder's, from its own up to the project's root: examples in one repository often
pin different releases. Requirement strings are read by `packaging` as pip reads them.

A fix whose replacement is newer than this floor would break the project on the release it
pins, so it is reported instead (`--torch-xla-version` sets the floor for the whole run)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from xlamigrate.apitable import Version
from xlamigrate.project.projectfiles import folders_up, read_small

if TYPE_CHECKING:
    from xlamigrate.project.frameworkpins import FrameworkPins, Pinned

_SOURCES = re.compile(
    r"(?:requirements.*\.txt|constraints.*\.txt|pyproject\.toml|setup\.py"
    r"|(?:Docker|Container)file(?:\..*)?|.*\.dockerfile)"
)
PIN_FILES = _SOURCES  # where a project pins anything (frameworkpins.py reads them too)
_PACKAGES = {"torch-xla": 2, "torch-neuronx": 2}  # numbers of the version that name torch-xla
_FLOOR_OPERATORS = ("==", "===", ">=", "~=", ">")
# A quoted string (setup.py, pyproject.toml) or a word of a line (requirements, Dockerfile).
_QUOTED = re.compile(
    r"""(?P<q>["'])(?P<text>[^"'\n]*?(?:torch[-_.]?(?:xla|neuronx))[^"'\n]*)(?P=q)""", re.I
)
_WORD = re.compile(r"[^\s\"'\\]*torch[-_.]?(?:xla|neuronx)[^\s\"'\\]*", re.I)
_WHEEL = re.compile(r"torch_(?:xla|neuronx)-(\d+(?:\.\d+)+)", re.I)


class Pins:
    """The floors of a project's folders, each read once."""

    def __init__(self, root: Path, override: Version | None = None) -> None:
        self.root = root.resolve()  # the project's root: pins above it are not the project's
        self.override = override
        self._floors: dict[Path, Version | None] = {}
        self._frameworks: FrameworkPins | None = None

    def floor(self, path: Path) -> Version | None:
        """The oldest torch-xla the file at `path` runs on; None: nothing pins it."""
        if self.override is not None:
            return self.override
        for folder in folders_up(path.resolve().parent, self.root):
            found = self._folder_floor(folder)
            if found is not None:
                return found
        return None

    def frameworks(self, path: Path) -> Pinned:
        """The frameworks' releases the file at `path` runs on (frameworkpins.py)."""
        from xlamigrate.project.frameworkpins import FrameworkPins

        if self._frameworks is None:
            self._frameworks = FrameworkPins(self.root)
        return self._frameworks.releases(path)

    def _folder_floor(self, folder: Path) -> Version | None:
        if folder not in self._floors:
            try:
                names = sorted(os.listdir(folder))
            except OSError:
                names = []
            floors = [
                version
                for name in names
                if _SOURCES.fullmatch(name)
                for version in _pinned(read_small(folder / name))
            ]
            self._floors[folder] = min(floors) if floors else None
        return self._floors[folder]


def _pinned(data: bytes | None) -> Iterator[Version]:
    """The oldest torch-xla each torch-xla (or torch-neuronx) requirement in the text allows."""
    if not data:
        return
    text = data.decode("utf-8", "replace")
    for line in text.splitlines():
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#") else ""
        for candidate in [m["text"] for m in _QUOTED.finditer(code)] + _WORD.findall(code):
            version = _floor(candidate)
            if version is not None:
                yield version
                break
        else:
            wheel = _WHEEL.search(code)
            if wheel is not None:
                yield _release(Version.parse(wheel[1]), 2)


def _floor(candidate: str) -> Version | None:
    from packaging.requirements import InvalidRequirement, Requirement  # (only where pinned)
    from packaging.utils import canonicalize_name

    try:
        requirement = Requirement(candidate.strip().rstrip(","))
    except InvalidRequirement:
        return None
    numbers = _PACKAGES.get(canonicalize_name(requirement.name))
    if numbers is None:
        return None
    floors = []
    for specifier in requirement.specifier:
        if specifier.operator in _FLOOR_OPERATORS:
            try:
                floors.append(Version.parse(specifier.version.removesuffix(".*")))
            except ValueError:
                continue
    return _release(min(floors), numbers) if floors else None


def _release(version: Version, numbers: int) -> Version:
    """The torch-xla release a version names (its first `numbers` numbers)."""
    return Version(version.numbers[:numbers])
