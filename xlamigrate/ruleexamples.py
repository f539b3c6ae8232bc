"""A rule's examples, kept in its own file (rules/<code>.toml, `[[examples]]`): the files of a
small project, the findings of the rule a scan of them gives, and what each mode's rewrite
makes of them. They are the rule's tests (tests/test_rule_examples.py runs every one through
the engine) and its documentation (`xlamigrate rule CODE` prints them), so neither can say
what the engine does not do.

    [[examples]]
    about = "what the example shows"
    findings = ["train.py:3:1 safe: XLA_USE_BF16 set to \"1\" (on)"]  # where, fix, first line
    modes = ["autocast"]              # the modes it is about (default: every mode)
    [examples.files]
    "train.py" = '''...'''
    [examples.fixed.full-bf16]        # a mode (or `every-mode`) -> each file it changes
    "train.py" = '''...'''

An example without findings is a valid one: the rule reports nothing there. A mode the example
is about and `fixed` does not name leaves every file as it is."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from xlamigrate.rulesdata import CatalogueError, read_toml, rules_directory

EVERY_MODE = "every-mode"  # a `fixed` key: what the rewrite makes of the files in each mode
_KEYS = frozenset({"about", "findings", "modes", "files", "fixed"})
# A finding as an example lists it: where, its fix applicability ("none": it has no fix), and
# the first line the text output gives it.
_FINDING = re.compile(r"(?P<where>\S+) (?P<fix>safe|unsafe|manual|none): (?P<title>.+)")


@dataclass(frozen=True)
class ExampleFinding:
    where: str  # path:[cell-N:]line:column
    fix: str  # safe, unsafe, manual, or none
    title: str  # the first line of its message, as the text output shows it

    @classmethod
    def parse(cls, text: str) -> ExampleFinding:
        match = _FINDING.fullmatch(text)
        if match is None:
            raise ValueError(f"not `path:line:column fix: first line`: {text!r}")
        return cls(match["where"], match["fix"], match["title"])

    def __str__(self) -> str:
        return f"{self.where} {self.fix}: {self.title}"


@dataclass(frozen=True)
class Example:
    about: str
    files: tuple[tuple[str, str], ...]  # (path in the project, text)
    findings: tuple[ExampleFinding, ...]  # the rule's findings there
    modes: tuple[str, ...] | None  # the modes it is about (None: every mode)
    fixed: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]  # mode -> the changed files

    @property
    def valid(self) -> bool:
        """Whether the rule reports nothing here (it shows what the rule leaves alone)."""
        return not self.findings

    def about_mode(self, mode: str) -> bool:
        return self.modes is None or mode in self.modes

    def rewritten(self, mode: str) -> dict[str, str]:
        """The files a rewrite in `mode` changes, as it writes them."""
        by_mode = dict(self.fixed)
        return dict(by_mode.get(mode, by_mode.get(EVERY_MODE, ())))


def examples_of(code: str, modes: tuple[str, ...]) -> tuple[Example, ...]:
    """The examples of rule `code` (its file's `[[examples]]`), checked against the modes."""
    filename = f"{code}.toml"
    data = read_toml(rules_directory().joinpath(filename))
    try:
        return tuple(_example(item, modes) for item in data.get("examples", ()))
    except (KeyError, TypeError, ValueError) as error:
        raise CatalogueError(f"{filename}: examples: {type(error).__name__}: {error}") from error


def _example(item: dict[str, Any], modes: tuple[str, ...]) -> Example:
    unknown = set(item) - _KEYS
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}")
    files = _files(item["files"])
    chosen = item.get("modes")
    named = [*(chosen or ()), *item.get("fixed", {})]
    for name in named:
        if name not in modes and name != EVERY_MODE:
            raise ValueError(f"{name!r} is not a mode ({', '.join(modes)})")
    fixed = tuple((mode, _files(changed)) for mode, changed in item.get("fixed", {}).items())
    for mode, changed in fixed:
        strays = {path for path, _ in changed} - {path for path, _ in files}
        if strays:
            raise ValueError(f"fixed.{mode} names files the example does not have: {strays}")
    return Example(
        about=str(item["about"]),
        files=files,
        findings=tuple(ExampleFinding.parse(str(text)) for text in item.get("findings", ())),
        modes=tuple(chosen) if chosen is not None else None,
        fixed=fixed,
    )


def _files(table: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    if not table or not all(isinstance(text, str) for text in table.values()):
        raise ValueError("files must map each path to its text")
    return tuple((str(path), text) for path, text in table.items())
