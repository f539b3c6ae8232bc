"""Every rule's examples (rules/<code>.toml, `[[examples]]`; xlamigrate/ruleexamples.py) are its
tests: a rewrite in each mode an example is about reports exactly the findings of the rule it
lists (position and fix applicability) and changes exactly the files its `fixed` table names,
to exactly that text; a scan configured for that mode says the same of them (what it says is
what the rewrite would do). `xlamigrate rule CODE` prints the same examples."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import ROOT
from xlamigrate.catalogue import Catalogue, load_catalogue
from xlamigrate.config import load_settings
from xlamigrate.engine import rewrite_paths, scan_paths
from xlamigrate.findings import worded
from xlamigrate.request import RewriteRequest
from xlamigrate.results import FileError, Finding
from xlamigrate.ruleexamples import Example, examples_of
from xlamigrate.rulesdata import read_toml, rules_directory

_CATALOGUE = load_catalogue()
MODES = tuple(_CATALOGUE.modes)
RULES = sorted(_CATALOGUE.rules)
EXAMPLES = [
    pytest.param(code, example, id=f"{code}-{index}")
    for code in RULES
    for index, example in enumerate(examples_of(code, MODES), 1)
]


def _reported_by_rewrite_only(code: str) -> bool:
    """A rule of the rewrite's own work (`reported_by = "rewrite"` in its file: XM409, what it
    adds to the project's dependencies), which a scan, writing nothing, never reports."""
    data = read_toml(rules_directory().joinpath(f"{code}.toml"))
    return bool(data.get("reported_by") == "rewrite")


RUNS = [
    pytest.param(code, example, mode, id=f"{code}-{index}-{mode}")
    for code in RULES
    for index, example in enumerate(examples_of(code, MODES), 1)
    for mode in MODES
    if example.about_mode(mode)
]


def write_example(example: Example, folder: Path) -> None:
    for path, text in example.files:
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text, encoding="utf-8")


def described(item: Finding | FileError) -> str:
    """`path:[cell-N:]line:column applicability: first line`, as an example lists a finding (the
    first line as the text output words it)."""
    if isinstance(item, FileError):
        return f"{item.path}:{item.line}:{item.column} none: {item.message}"
    cell = "" if item.cell is None else f"cell-{item.cell + 1}:"
    fix = item.fix.applicability if item.fix is not None else "none"
    title = worded(item, _CATALOGUE.rules.get(item.code)).title
    return f"{item.path}:{cell}{item.span.line}:{item.span.column} {fix}: {title}"


def test_every_rule_has_an_example_of_what_it_reports_or_says_why_not() -> None:
    for code in RULES:
        examples = examples_of(code, MODES)
        reason = read_toml(rules_directory().joinpath(f"{code}.toml")).get("no_examples")
        if reason is None:
            assert any(not example.valid for example in examples), code
        else:
            assert examples == () and reason.strip(), code


def test_every_fix_an_example_shows_is_one_its_rule_offers() -> None:
    for code in RULES:
        rule = _CATALOGUE.rule(code)
        for example in examples_of(code, MODES):
            for finding in example.findings:
                offered = (*rule.applicabilities, "none" if not rule.fixes else "")
                assert finding.fix in offered, f"{code}: {finding}"


def positioned(items: list[Finding | FileError]) -> list[Finding | FileError]:
    def order(item: Finding | FileError) -> tuple[str, int, int, int]:
        if isinstance(item, FileError):
            return (item.path, -1, item.line or 0, item.column or 0)
        cell = -1 if item.cell is None else item.cell
        return (item.path, cell, item.span.line, item.span.column)

    return sorted(items, key=order)


def run_example(
    code: str, example: Example, mode: str, folder: Path, catalogue: Catalogue
) -> tuple[list[str], dict[str, str], list[str]]:
    """The rule's findings a rewrite in `mode` reports, the files it changes, and the rule's
    findings a scan configured for `mode` reports."""
    write_example(example, folder)
    settings = replace(load_settings([Path(".")], catalogue), mode=mode)
    report = rewrite_paths(
        [Path(".")], settings, catalogue, RewriteRequest(mode), jobs=1, use_cache=False
    )
    reported = [f for outcome in report.outcomes for f in (*outcome.fixed, *outcome.remaining)]
    changed = {
        outcome.path: outcome.rewritten.decode("utf-8")
        for outcome in report.outcomes
        if outcome.changed and outcome.rewritten is not None
    }
    scan = scan_paths([Path(".")], settings, catalogue, jobs=1, use_cache=False)
    return (
        [described(f) for f in positioned([*reported, *report.errors]) if f.code == code],
        changed,
        [described(f) for f in positioned([*scan.findings, *scan.errors]) if f.code == code],
    )


@pytest.mark.parametrize(("code", "example", "mode"), RUNS)
def test_the_example_gets_what_it_shows_and_a_scan_says_so(
    code: str,
    example: Example,
    mode: str,
    catalogue: Catalogue,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rewrite reports the example's findings and writes its `fixed` files; a scan in the
    same mode reports the same findings (a rule of the rewrite's own work aside)."""
    project = tmp_path / "project"  # (a message may name the project's folder)
    project.mkdir()
    monkeypatch.chdir(project)
    reported, changed, scanned = run_example(code, example, mode, project, catalogue)
    assert reported == [str(finding) for finding in example.findings]
    assert changed == example.rewritten(mode)
    if not _reported_by_rewrite_only(code):
        assert scanned == reported


def test_the_rule_command_prints_the_examples() -> None:
    """`xlamigrate rule XM201` shows each example's files, the findings and each mode's edits."""
    result = subprocess.run(
        [sys.executable, "-m", "xlamigrate.cli", "rule", "XM201"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    printed = result.stdout.splitlines()
    for example in examples_of("XM201", MODES):
        assert f"Example: {example.about}" in printed
        for path, text in example.files:
            assert f"  {path}:" in printed
            assert [f"    {line}".rstrip() for line in text.splitlines()] == printed[
                printed.index(f"  {path}:") + 1 :
            ][: len(text.splitlines())]
        for finding in example.findings:
            assert f"    {finding.where} [fix: {finding.fix}] {finding.title}" in printed
        for mode, changed in example.fixed:
            assert f"  `xlamigrate rewrite --mode {mode}` writes:" in printed
            for path, text in changed:
                added = _added(example, path, text)
                assert all(f"    +{line}".rstrip() in printed for line in added)


def _added(example: Example, path: str, text: str) -> list[str]:
    before = dict(example.files)[path].splitlines()
    return [line for line in text.splitlines() if line not in before]
