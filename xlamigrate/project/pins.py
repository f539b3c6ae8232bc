"""The oldest torch-xla a project runs on, read from its own pins: `requirements*.txt` and
`constraints*.txt` lines, `pyproject.toml` dependencies, `setup.py` strings and a Dockerfile's
`pip install` words that name torch-xla, torch-neuronx (whose version starts with the torch
release it is built for: torch-neuronx 2.1.2.2.3.0 runs torch-xla 2.1) or torch itself (torch
and torch-xla are released in lock-step, rules/releases.toml: torch 1.13.1 runs torch-xla 1.13).
A file pinning both gives the oldest torch-xla its pins allow together (`torch==2.1.0` with
`torch-xla>=2.0`: 2.1); a folder with several files, the oldest of theirs. A file's pins are the
nearest folder's, from its own up to the project's root: examples in one repository often pin
different releases. Requirement strings are read by `packaging` as pip reads them.

A fix whose replacement is newer than this floor would break the project on the release it
pins, so it is reported instead (`--torch-xla-version` sets the floor for the whole run)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from xlamigrate.apitable import Version
from xlamigrate.project.projectfiles import PIN_FILES, FolderChains, Remember, computed, read_small
from xlamigrate.releasetable import release_table

if TYPE_CHECKING:
    from xlamigrate.project.frameworkpins import FrameworkPins, Pinned

# The packages whose pin names the torch-xla: torch-xla's own release, or the torch release it is
# built for (torch's, and torch-neuronx's first two numbers), which rules/releases.toml maps.
_PACKAGES = {"torch-xla": "torch-xla", "torch-neuronx": "torch", "torch": "torch"}
_FLOOR_OPERATORS = ("==", "===", ">=", "~=", ">")
_NAMED = r"\btorch(?:[-_.]?(?:xla|neuronx))?\b"  # not torchvision, torchaudio, pytorch-lightning
# A quoted string (setup.py, pyproject.toml) or a word of a line (requirements, Dockerfile).
_QUOTED = re.compile(rf"""(?P<q>["'])(?P<text>[^"'\n]*?{_NAMED}[^"'\n]*)(?P=q)""", re.I)
_WORD = re.compile(rf"[^\s\"'\\]*{_NAMED}[^\s\"'\\]*", re.I)
_WHEEL = re.compile(r"\btorch(?:_(?P<package>xla|neuronx))?-(?P<version>\d+(?:\.\d+)+)", re.I)


class Pins:
    """The floors of a project's folders, each read once."""

    def __init__(
        self, root: Path, override: Version | None = None, remember: Remember = computed
    ) -> None:
        self.root = root.resolve()  # the project's root: pins above it are not the project's
        self.override = override
        self.remember = remember
        self._chains = FolderChains(self.root)
        self._floors: dict[Path, Version | None] = {}
        self._frameworks: FrameworkPins | None = None

    def floor(self, path: Path) -> Version | None:
        """The oldest torch-xla the file at `path` runs on; None: nothing pins it."""
        if self.override is not None:
            return self.override
        for folder in self._chains.of(path):
            found = self._folder_floor(folder)
            if found is not None:
                return found
        return None

    def frameworks(self, path: Path) -> Pinned:
        """The frameworks' releases the file at `path` runs on (frameworkpins.py)."""
        from xlamigrate.project.frameworkpins import FrameworkPins

        if self._frameworks is None:
            self._frameworks = FrameworkPins(self.root, self.remember, self._chains)
        return self._frameworks.releases(path)

    def _folder_floor(self, folder: Path) -> Version | None:
        if folder not in self._floors:
            try:
                names = sorted(os.listdir(folder))
            except OSError:
                names = []
            floors = [
                Version(numbers)
                for name in names
                if PIN_FILES.fullmatch(name)
                for numbers in self._file_floors(read_small(folder / name))
            ]
            self._floors[folder] = min(floors) if floors else None
        return self._floors[folder]

    def _file_floors(self, data: bytes | None) -> tuple[tuple[int, ...], ...]:
        if not data:
            return ()
        compute = lambda: tuple(version.numbers for version in _pinned(data))  # noqa: E731
        return tuple(self.remember("torch-xla floor", data, compute))


def _pinned(data: bytes | None) -> Iterator[Version]:
    """The oldest torch-xla the file's requirements allow together: the newest of the oldest
    its torch-xla (or torch-neuronx) pins allow and the oldest its torch pins do (none: the file
    pins neither)."""
    if not data:
        return
    text = data.decode("utf-8", "replace")
    floors: dict[str, list[Version]] = {}  # "torch-xla" / "torch" -> the floor of each pin
    for line in text.splitlines():
        if "torch" not in line.lower():
            continue  # (every pin names torch: most lines of a setup.py or a Dockerfile do not)
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#") else ""
        for names, version in _line_floors(code).items():
            floors.setdefault(names, []).append(version)
    found = [min(floors["torch-xla"])] if "torch-xla" in floors else []
    if "torch" in floors:
        found.append(release_table().torch_xla(min(floors["torch"])))
    if found:
        yield max(found)


def _line_floors(code: str) -> dict[str, Version]:
    """Each pinned package's floor on one line (the first requirement naming it that sets one),
    by what its release names; a wheel's file name where no requirement does."""
    floors: dict[str, Version] = {}
    for candidate in [m["text"] for m in _QUOTED.finditer(code)] + _WORD.findall(code):
        pinned = _floor(candidate)
        if pinned is not None:
            floors.setdefault(*pinned)
    for wheel in _WHEEL.finditer(code):
        package = f"torch-{wheel['package'].lower()}" if wheel["package"] else "torch"
        floors.setdefault(_PACKAGES[package], _release(Version.parse(wheel["version"])))
    return floors


def _floor(candidate: str) -> tuple[str, Version] | None:
    """What a requirement's release names ("torch-xla" or "torch") and the oldest it allows."""
    from packaging.requirements import InvalidRequirement, Requirement  # (only where pinned)
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion
    from packaging.version import Version as Parsed

    try:
        requirement = Requirement(candidate.strip().rstrip(","))
    except InvalidRequirement:
        return None
    names = _PACKAGES.get(canonicalize_name(requirement.name))
    if names is None:
        return None
    floors = []
    for specifier in requirement.specifier:
        if specifier.operator in _FLOOR_OPERATORS:
            try:  # `2.1.*`, `2.1.0+cpu`: the release's numbers
                numbers = Parsed(specifier.version.removesuffix(".*")).release
            except InvalidVersion:
                continue
            floors.append(Version(numbers))
    return (names, _release(min(floors))) if floors else None


def _release(version: Version) -> Version:
    """The release a version names (its first two numbers: torch-neuronx 2.1.2.2.3.0 names
    torch 2.1)."""
    return Version.parse(".".join(str(number) for number in version.numbers[:2]))
