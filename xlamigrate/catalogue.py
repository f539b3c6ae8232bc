"""Loads the rule catalogue, flag table and modes from `rules/*.toml`; selects rules by prefix."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

from xlamigrate.model import APPLICABILITIES, SEVERITIES, Applicability, Severity

FLAGS_FILE = "flags.toml"
MODES_FILE = "modes.toml"
LAUNCHERS_FILE = "launchers.toml"  # read by xlamigrate.kinds.launch
PLATFORMS_FILE = "platforms.toml"  # read by xlamigrate.project.platform
_NOT_RULES = frozenset({LAUNCHERS_FILE, PLATFORMS_FILE})


class CatalogueError(Exception):
    """The shipped rule files are malformed: a packaging bug, reported as an internal error."""


class UnknownCodeError(ValueError):
    """A --select/--ignore/noqa code that matches no rule."""


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    summary: str
    severity: Severity
    fix: Applicability | None
    message: str
    explanation: str
    references: tuple[str, ...]


@dataclass(frozen=True)
class Flag:
    name: str
    write_rule: str
    effect: str


@dataclass(frozen=True)
class Mode:
    name: str
    summary: str
    param_dtype: str  # the parameters' dtype in a run of the rewritten script
    fp32_masters: bool  # whether the optimizer keeps float32 master weights


@dataclass(frozen=True)
class Catalogue:
    rules: Mapping[str, Rule]
    flags: Mapping[str, Flag]
    modes: Mapping[str, Mode]

    def rule(self, code: str) -> Rule:
        return self.rules[code]

    def expand(self, selectors: Iterable[str]) -> frozenset[str]:
        """Turns code prefixes (`XM1`, `XM101`, `ALL`) into the set of codes they name."""
        codes: set[str] = set()
        for selector in selectors:
            wanted = selector.strip().upper()
            if not wanted:
                continue
            matched = (
                set(self.rules)
                if wanted == "ALL"
                else {code for code in self.rules if code.startswith(wanted)}
            )
            if not matched:
                raise UnknownCodeError(f"unknown rule code or prefix: {selector!r}")
            codes |= matched
        return frozenset(codes)

    def select(self, select: Iterable[str] = (), ignore: Iterable[str] = ()) -> frozenset[str]:
        """The enabled codes: everything (or `select`) minus `ignore`."""
        select = list(select)
        chosen = self.expand(select) if select else frozenset(self.rules)
        return chosen - self.expand(ignore)


def rules_directory() -> Traversable:
    """The `rules/` data: inside the installed package, or at the top of a source checkout."""
    packaged = resources.files("xlamigrate").joinpath("rules")
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "rules"


def load_catalogue(directory: Traversable | None = None) -> Catalogue:
    directory = directory if directory is not None else rules_directory()
    rules: dict[str, Rule] = {}
    flags: dict[str, Flag] = {}
    modes: dict[str, Mode] = {}
    entries = sorted(directory.iterdir(), key=lambda entry: entry.name)
    for entry in entries:
        if not entry.name.endswith(".toml") or entry.name in _NOT_RULES:
            continue
        data = _read_toml(entry)
        if entry.name == FLAGS_FILE:
            for item in data.get("flag", []):
                flag = Flag(name=item["name"], write_rule=item["write_rule"], effect=item["effect"])
                flags[flag.name] = flag
        elif entry.name == MODES_FILE:
            for item in data.get("mode", []):
                modes[item["name"]] = Mode(
                    name=item["name"],
                    summary=item["summary"],
                    param_dtype=item["param_dtype"],
                    fp32_masters=item["fp32_masters"],
                )
        else:
            rule = _parse_rule(entry.name, data)
            rules[rule.code] = rule
    if not rules or not flags or not modes:
        raise CatalogueError(f"rules, flags or modes missing in {directory}")
    for flag in flags.values():
        if flag.write_rule not in rules:
            raise CatalogueError(f"flag {flag.name} names unknown rule {flag.write_rule}")
    return Catalogue(rules=rules, flags=flags, modes=modes)


def _read_toml(entry: Traversable) -> dict[str, Any]:
    try:
        return tomllib.loads(entry.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise CatalogueError(f"cannot read rule file {entry.name}: {error}") from error


def _parse_rule(filename: str, data: dict[str, Any]) -> Rule:
    try:
        severity = data["severity"]
        fix = data["fix"]
        if severity not in SEVERITIES:
            raise CatalogueError(f"{filename}: severity {severity!r} not in {SEVERITIES}")
        if fix != "none" and fix not in APPLICABILITIES:
            raise CatalogueError(f"{filename}: fix {fix!r} not in {APPLICABILITIES} or 'none'")
        rule = Rule(
            code=data["code"],
            name=data["name"],
            summary=data["summary"],
            severity=severity,
            fix=None if fix == "none" else fix,
            message=data["message"],
            explanation=data["explanation"].strip(),
            references=tuple(data.get("references", ())),
        )
    except KeyError as missing:
        raise CatalogueError(f"{filename}: missing key {missing}") from missing
    if filename != f"{rule.code}.toml":
        raise CatalogueError(f"{filename}: holds rule {rule.code}; name the file after its code")
    return rule
