"""Loads the rule catalogue, flag table and modes from `rules/*.toml`; selects rules by prefix."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xlamigrate.recipes.recipe import Recipe, recipe_from_table
from xlamigrate.results import (
    APPLICABILITIES,
    SEVERITIES,
    Applicability,
    Finding,
    Fix,
    Severity,
    Span,
)
from xlamigrate.rulesdata import (
    APIS_FILE,
    FLAGS_FILE,
    FRAMEWORKS_FILE,
    LAUNCH_APIS_FILE,
    LAUNCHERS_FILE,
    MASTER_WEIGHTS_FILE,
    MODEL_OWNERS_FILE,
    MODES_FILE,
    NXDT_FILE,
    OPTIMIZER_FACTORIES_FILE,
    PLATFORMS_FILE,
    RELEASES_FILE,
    read_toml,
)

if TYPE_CHECKING:  # (importlib.abc imports importlib.resources: tempfile, shutil, lzma, bz2)
    from importlib.abc import Traversable
from xlamigrate.rulesdata import CatalogueError as CatalogueError
from xlamigrate.rulesdata import rules_directory as rules_directory

_NOT_RULES = frozenset(
    {
        LAUNCHERS_FILE,
        PLATFORMS_FILE,
        APIS_FILE,
        NXDT_FILE,
        FRAMEWORKS_FILE,
        LAUNCH_APIS_FILE,
        MASTER_WEIGHTS_FILE,
        OPTIMIZER_FACTORIES_FILE,
        MODEL_OWNERS_FILE,
        RELEASES_FILE,
    }
)


class UnknownCodeError(ValueError):
    """A --select/--ignore/noqa code that matches no rule."""


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    summary: str
    severity: Severity
    fix: Applicability | None  # what a finding gets where nothing about its place says more
    message: str
    explanation: str
    references: tuple[str, ...]
    # Each applicability its findings can have and where they have it (safe first): the
    # `rule` command's fix lines, and what a test holds the engine's findings to.
    fixes: tuple[tuple[Applicability, str], ...] = ()

    @property
    def applicabilities(self) -> tuple[Applicability, ...]:
        return tuple(level for level, _ in self.fixes)

    def finding(
        self, path: str, span: Span, subject: str, fix: Applicability | None, **fields: Any
    ) -> Finding:
        """A finding of this rule at `span` of `path`, its message worded for `subject` (`fix`:
        its applicability, None for none; `fields`: the finding's other fields)."""
        return Finding(
            code=self.code,
            path=path,
            span=span,
            severity=self.severity,
            message=self.message.format(subject=subject),
            fix=Fix(fix) if fix else None,
            **fields,
        )


@dataclass(frozen=True)
class Flag:
    name: str
    write_rule: str
    effect: str


@dataclass(frozen=True)
class Catalogue:
    rules: Mapping[str, Rule]
    flags: Mapping[str, Flag]
    modes: Mapping[str, Recipe]  # by name, in modes.toml's order

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


def load_catalogue(directory: Traversable | None = None) -> Catalogue:
    directory = directory if directory is not None else rules_directory()
    rules: dict[str, Rule] = {}
    flags: dict[str, Flag] = {}
    modes: dict[str, Recipe] = {}
    entries = sorted(directory.iterdir(), key=lambda entry: entry.name)
    for entry in entries:
        if not entry.name.endswith(".toml") or entry.name in _NOT_RULES:
            continue
        data = read_toml(entry)
        if entry.name == FLAGS_FILE:
            for item in data.get("flag", []):
                flag = Flag(name=item["name"], write_rule=item["write_rule"], effect=item["effect"])
                flags[flag.name] = flag
        elif entry.name == MODES_FILE:
            for item in data.get("mode", []):
                recipe = recipe_from_table(item)
                modes[recipe.name] = recipe
        else:
            rule = _parse_rule(entry.name, data)
            rules[rule.code] = rule
    if not rules or not flags or not modes:
        raise CatalogueError(f"rules, flags or modes missing in {directory}")
    for flag in flags.values():
        if flag.write_rule not in rules:
            raise CatalogueError(f"flag {flag.name} names unknown rule {flag.write_rule}")
    return Catalogue(rules=rules, flags=flags, modes=modes)


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
            fixes=_fix_cases(filename, fix, data.get("fixes", {})),
        )
    except KeyError as missing:
        raise CatalogueError(f"{filename}: missing key {missing}") from missing
    if filename != f"{rule.code}.toml":
        raise CatalogueError(f"{filename}: holds rule {rule.code}; name the file after its code")
    return rule


def _fix_cases(
    filename: str, default: str, cases: dict[str, str]
) -> tuple[tuple[Applicability, str], ...]:
    """The rule's `[fixes]` table (applicability = where its findings have it), in the order
    safe, unsafe, manual. A rule with a fix says where its default applies too."""
    unknown = set(cases) - set(APPLICABILITIES)
    if unknown:
        raise CatalogueError(f"{filename}: fixes {sorted(unknown)} not in {APPLICABILITIES}")
    if default == "none" and cases:
        raise CatalogueError(f"{filename}: fix = 'none' and yet [fixes] says where it has one")
    if default != "none" and default not in cases:
        raise CatalogueError(f"{filename}: [fixes] must say where its {default!r} fix applies")
    return tuple(
        (level, " ".join(cases[level].split())) for level in APPLICABILITIES if level in cases
    )
