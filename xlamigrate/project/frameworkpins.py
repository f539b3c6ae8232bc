"""The releases of Lightning, accelerate, optimum-neuron (and the platform's packages:
torch-xla, torch-neuronx, libtpu) a project pins, read where its torch-xla pin is read
(`requirements*.txt`, `pyproject.toml`, `setup.py`, a Dockerfile's `pip install`), by
`packaging` as pip reads them. Each package's pin is the nearest folder's that names it.

A framework sets a legacy flag in some of its releases only: a project pinned to a release that
does not is not told it does (XM104)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from xlamigrate.apitable import Version
from xlamigrate.frameworktable import Releases, framework_table
from xlamigrate.nxdttable import nxdt_table
from xlamigrate.project.projectfiles import PIN_FILES, FolderChains, Remember, computed, read_small

Pinned = tuple[tuple[str, Releases], ...]  # (canonical package, the releases its pin allows)

_RELEASE = re.compile(r"\d+(?:\.\d+)*")
_QUOTED = re.compile(r"\"([^\"\n]*)\"|'([^'\n]*)'")


class FrameworkPins:
    """The frameworks' pins of a project's folders, each folder read once."""

    def __init__(
        self, root: Path, remember: Remember = computed, chains: FolderChains | None = None
    ) -> None:
        self.root = root.resolve()
        self.remember = remember
        self._chains = chains if chains is not None else FolderChains(self.root)
        self.packages = framework_table().packages | nxdt_table().packages
        self._named = re.compile(
            "|".join(sorted((p.replace("-", "[-_.]") for p in self.packages), key=len)[::-1]),
            re.I,
        )
        self._folders: dict[Path, dict[str, Releases]] = {}

    def releases(self, path: Path) -> Pinned:
        """Each package pinned for the file at `path`, with the releases its pin allows."""
        found: dict[str, Releases] = {}
        for folder in self._chains.of(path):
            for package, releases in self._folder(folder).items():
                found.setdefault(package, releases)
        return tuple(sorted(found.items()))

    def _folder(self, folder: Path) -> dict[str, Releases]:
        if folder not in self._folders:
            try:
                names = sorted(os.listdir(folder))
            except OSError:
                names = []
            pinned: dict[str, Releases] = {}
            for name in names:
                if PIN_FILES.fullmatch(name):
                    for package, releases in self._file_pins(read_small(folder / name)):
                        pinned.setdefault(package, releases)
            self._folders[folder] = pinned
        return self._folders[folder]

    def _file_pins(self, data: bytes | None) -> list[tuple[str, Releases]]:
        """The file's pins, remembered for its bytes as plain values."""
        if not data:
            return []
        question = "\0".join(["framework pins", *sorted(self.packages)])
        plain = self.remember(question, data, lambda: [_plain(*p) for p in self._pinned(data)])
        return [_releases(*pin) for pin in plain]

    def _pinned(self, data: bytes | None) -> Iterator[tuple[str, Releases]]:
        if not data:
            return
        for line in data.decode("utf-8", "replace").splitlines():
            code = line.split("#", 1)[0]
            if self._named.search(code) is None:
                continue
            quoted = [double or single for double, single in _QUOTED.findall(code)]
            words = [word.strip("\"',") for word in code.split()]
            for candidate in (*quoted, *words):
                found = requirement_releases(candidate, self.packages)
                if found is not None:
                    yield found


def requirement_releases(text: str, packages: frozenset[str]) -> tuple[str, Releases] | None:
    """The package a requirement string names (one of `packages`) and the releases it allows;
    None where it is no such requirement. `torch-xla[tpu]` pins libtpu too: it reads as libtpu
    with any release (the platform is what it says)."""
    from packaging.requirements import InvalidRequirement, Requirement  # (only where pinned)
    from packaging.utils import canonicalize_name

    try:
        requirement = Requirement(text.strip())
    except InvalidRequirement:
        return None
    name = canonicalize_name(requirement.name)
    if name not in packages:
        return None
    low: Version | None = None
    high: Version | None = None
    included = False
    for specifier in requirement.specifier:
        version = _release(specifier.version)
        if version is None:
            continue
        operator = specifier.operator
        if operator in ("==", "===") and specifier.version.endswith(".*"):
            low, high, included = _higher(low, version), _bumped(version), False
        elif operator in ("==", "==="):
            low, high, included = version, version, True
        elif operator in (">=", ">"):
            low = _higher(low, version)
        elif operator == "~=":
            low = _higher(low, version)
            written = tuple(int(n) for n in _numbers(specifier.version))
            high, included = _bumped(Version(written[:-1] or written)), False
        elif operator in ("<", "<=") and (high is None or version < high):
            high, included = version, operator == "<="
    spelled = f"{name}{requirement.specifier}" if requirement.specifier else name
    if "tpu" in requirement.extras and name == "torch-xla":
        return "libtpu", Releases(spelled=spelled)
    return name, Releases(low, high, included, spelled)


_PlainPin = tuple[str, tuple[int, ...] | None, tuple[int, ...] | None, bool, str]


def _plain(package: str, releases: Releases) -> _PlainPin:
    low, high = releases.low, releases.high
    return (
        package,
        None if low is None else low.numbers,
        None if high is None else high.numbers,
        releases.high_included,
        releases.spelled,
    )


def _releases(
    package: str,
    low: tuple[int, ...] | None,
    high: tuple[int, ...] | None,
    included: bool,
    spelled: str,
) -> tuple[str, Releases]:
    return package, Releases(
        None if low is None else Version(low),
        None if high is None else Version(high),
        included,
        spelled,
    )


def _release(text: str) -> Version | None:
    match = _RELEASE.match(text)
    return Version.parse(match[0]) if match else None


def _numbers(text: str) -> list[str]:
    match = _RELEASE.match(text)
    return match[0].split(".") if match else []


def _higher(current: Version | None, version: Version) -> Version:
    return version if current is None or current < version else current


def _bumped(version: Version) -> Version:
    """The first release after every release that starts with `version` (2.4 -> 2.5)."""
    numbers = list(version.numbers)
    numbers[-1] += 1
    return Version(tuple(numbers))
