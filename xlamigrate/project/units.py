"""The project's migration units: the files that change together or not at all. A launcher's
migrated write and every script it reaches are one unit (the write becomes the signal the
script's recipe reads), and so are the scripts that share a launcher, and the modules a launched
script imports (their reads follow its recipe). A rewrite that cannot edit every file of a unit
edits none of its precision migration: half of one trains in FP32 without a word."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Collection, Sequence

from xlamigrate.project.model import Project


def units(project: Project, imports: Callable[[str], Sequence[str]]) -> list[frozenset[str]]:
    """The units of the project with more than one file, each a set of display paths."""
    parent: dict[str, str] = {}

    def root(path: str) -> str:
        while parent.setdefault(path, path) != path:
            parent[path] = parent[parent[path]]
            path = parent[path]
        return path

    def join(one: str, other: str) -> None:
        parent[root(one)] = root(other)

    for launcher, decisions in project.writes.items():
        for decision in decisions.values():
            for script in decision.scripts if decision.migrated else ():
                join(launcher, script)
    for script in project.scripts:
        for module in imports(script):
            join(script, module)
    groups: dict[str, set[str]] = {}
    for path in list(parent):
        groups.setdefault(root(path), set()).add(path)
    return [frozenset(group) for group in groups.values() if len(group) > 1]


def split_units(found: Sequence[frozenset[str]], selected: Collection[str]) -> list[frozenset[str]]:
    """The units of which some files are selected and some are not."""
    return [
        unit
        for unit in found
        if any(p in selected for p in unit) and not all(p in selected for p in unit)
    ]


def together(unit: Collection[str]) -> str:
    """The command that migrates a unit's files together."""
    return "xlamigrate rewrite " + " ".join(shlex.quote(path) for path in sorted(unit))
