"""The project fixtures are the spec of the project model: tests/fixtures/projects/<case>/before/
is a small training project (launchers and the scripts they start); `xlamigrate rewrite --mode M`
does to it what <case>/<M>.snap says: the findings it fixes and the ones it leaves for manual
work ("path:line:column CODE", with message and fix applicability), and the text of each file it
changes (tests/snapshots.py; `--update-snapshots` writes them again). A second rewrite changes
nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests import snapshots
from tests.conftest import FIXTURES, PRECISION_IGNORE
from xlamigrate.catalogue import Catalogue
from xlamigrate.config import load_settings
from xlamigrate.engine import rewrite_paths, scan_paths
from xlamigrate.kinds.python.rewrite import MODES
from xlamigrate.request import RewriteRequest
from xlamigrate.results import Finding, RewriteReport

PROJECTS = FIXTURES / "projects"
CASES = [
    pytest.param(mode, case, id=f"{case.name}/{mode}")
    for case in sorted(p for p in PROJECTS.iterdir() if (p / "before").is_dir())
    for mode in MODES
]


def rewrite_project(folder: Path, mode: str, catalogue: Catalogue) -> RewriteReport:
    settings = load_settings([folder], catalogue).with_overrides(ignore=PRECISION_IGNORE)
    report = rewrite_paths([Path(".")], settings, catalogue, RewriteRequest(mode), jobs=1)
    for outcome in report.outcomes:
        if outcome.changed and outcome.rewritten is not None:
            (folder / outcome.path).write_bytes(outcome.rewritten)
    return report


def remaining(report: RewriteReport) -> list[str]:
    return [finding_key(f) for outcome in report.outcomes for f in outcome.remaining]


def finding_key(f: Finding) -> str:
    """path:[cell:]line:column CODE, as the *.remaining.txt listings have them."""
    return (
        f"{f.path}:{'' if f.cell is None else f'{f.cell}:'}{f.span.line}:{f.span.column} {f.code}"
    )


def expected_remaining(case: Path, mode: str) -> list[str]:
    return snapshots.project_snapshot(case, mode).left


def test_every_project_case_has_a_snapshot_per_mode() -> None:
    for case in PROJECTS.iterdir():
        assert sorted(path.name for path in case.iterdir()) == sorted(
            ["before", *(f"{mode}.snap" for mode in MODES)]
        ), case.name


@pytest.mark.parametrize(("mode", "case"), CASES)
def test_project_rewrite(
    mode: str,
    case: Path,
    catalogue: Catalogue,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    update_snapshots: bool,
) -> None:
    work = tmp_path / case.name
    shutil.copytree(case / "before", work)
    monkeypatch.chdir(work)
    report = rewrite_project(work, mode, catalogue)
    assert report.errors == ()
    before, produced = snapshots.tree(case / "before"), snapshots.tree(work)
    assert produced.keys() == before.keys()  # (a rewrite here creates no file)
    changed = [(path, data) for path, data in produced.items() if before[path] != data]
    snapshot = snapshots.rewrite_snapshot(
        mode,
        [f for outcome in report.outcomes for f in outcome.fixed],
        [f for outcome in report.outcomes for f in outcome.remaining],
        changed,
        catalogue,
    )
    snapshots.assert_matches(case / f"{mode}.snap", snapshot, update_snapshots)
    assert sorted(remaining(report)) == sorted(expected_remaining(case, mode))
    again = rewrite_project(work, mode, catalogue)
    assert [o.path for o in again.outcomes if o.changed] == []


@pytest.mark.parametrize(
    "case", sorted(p for p in PROJECTS.iterdir() if (p / "before").is_dir()), ids=lambda p: p.name
)
def test_scan_says_what_the_rewrite_does_with_each_launcher_write(
    case: Path, catalogue: Catalogue, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A launcher finding is fixable exactly when `rewrite` (default mode) migrates it, and it
    names the script it starts (a notebook whose own cells train starts none). (Scanned in a
    copy: in this checkout the project found from the case is this repository.)"""
    shutil.copytree(case / "before", tmp_path / case.name)
    monkeypatch.chdir(tmp_path / case.name)
    settings = load_settings([Path(".")], catalogue).with_overrides(ignore=PRECISION_IGNORE)
    report = scan_paths([Path(".")], settings, catalogue, jobs=1)
    left = set(expected_remaining(case, "full-bf16"))
    launcher_writes = [
        f for f in report.findings if f.code in ("XM101", "XM102") and not f.path.endswith(".py")
    ]
    for finding in launcher_writes:
        assert finding.fix is not None
        manual = finding.fix.applicability == "manual"
        assert manual == (finding_key(finding) in left), finding.message
        if manual or finding.cell is None:
            assert ".py" in finding.message, finding.message
