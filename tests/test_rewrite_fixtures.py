"""The rewrite fixtures are the spec: tests/fixtures/cases/<case>.<ext> is rewritten in each mode
as its <case>.<mode>.snap says (the findings fixed and left, each with its message and fix
applicability, and the rewritten text), and the rewrite is idempotent. The extension says the
kind (.py, .sh, .env, .dockerfile, .yaml, .ipynb). `--update-snapshots` writes the snapshots
again (tests/fixtures/cases/README.md).

Each is one file on its own: a launcher's write is planned as if every process it starts ran
a script of the project that took the recipe (what the project decides when it does; the
project fixtures under tests/fixtures/projects/ test those decisions)."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

import pytest

from tests import snapshots
from tests.conftest import FIXTURES, RECIPE_APPLIED, fixture_kind
from xlamigrate.catalogue import Catalogue
from xlamigrate.engine import rewrite_source
from xlamigrate.kinds.python.rewrite import MODES

CASES = [
    pytest.param(mode, case, id=f"{mode}/{case.name}")
    for mode in MODES
    for case in snapshots.cases(mode)
]


def kind_of(case: Path) -> str:
    kind = fixture_kind(case)
    assert kind is not None
    return kind


def test_every_mode_has_the_required_python_cases() -> None:
    for mode in MODES:
        assert len(snapshots.cases(mode, ".py")) >= 12, mode


@pytest.mark.parametrize(("mode", "case"), CASES)
def test_rewrite_fixture(
    mode: str,
    case: Path,
    catalogue: Catalogue,
    precision_rules: frozenset[str],
    update_snapshots: bool,
) -> None:
    outcome = rewrite_source(
        case.name,
        case.read_bytes(),
        kind_of(case),
        catalogue,
        precision_rules,
        mode,
        context=RECIPE_APPLIED,
    )
    assert outcome.errors == ()
    produced = outcome.rewritten if outcome.rewritten is not None else outcome.original
    snapshot = snapshots.rewrite_snapshot(
        mode, outcome.fixed, outcome.remaining, [("", produced)], catalogue
    )
    path = snapshots.snapshot_path(snapshots.case_name(case), mode)
    snapshots.assert_matches(path, snapshot, update_snapshots)


@pytest.mark.parametrize(("mode", "case"), CASES)
def test_rewritten_fixture_parses_and_is_a_fixed_point(
    mode: str, case: Path, catalogue: Catalogue, precision_rules: frozenset[str]
) -> None:
    rewritten = snapshots.rewritten(snapshots.case_name(case), mode)
    if case.suffix == ".py":
        ast.parse(rewritten)
    again = rewrite_source(
        case.name,
        rewritten,
        kind_of(case),
        catalogue,
        precision_rules,
        mode,
        context=RECIPE_APPLIED,
    )
    assert not again.changed
    assert again.errors == ()


def recorded_snapshots() -> list[Path]:
    """The snapshots written so far. A new case's are empty until `--update-snapshots` writes
    them (its scan or rewrite test fails on an empty one in any other run)."""
    return [path for path in sorted(snapshots.CASES.glob("*.snap")) if path.stat().st_size]


def test_every_snapshot_reads_back_as_written() -> None:
    for path in recorded_snapshots():
        data = path.read_bytes()
        assert snapshots.parse(data).render() == data, path.name


def test_every_snapshot_belongs_to_a_case() -> None:
    commands = {snapshots.SCAN, *MODES}
    for path in sorted(snapshots.CASES.glob("*.snap")):
        case, command = path.name.removesuffix(".snap").rsplit(".", 1)
        assert command in commands, path.name
        assert snapshots.case_input(case).is_file()
    for path in recorded_snapshots():
        command = path.name.removesuffix(".snap").rsplit(".", 1)[1]
        first = path.read_text(encoding="utf-8").partition("\n")[0]
        rewrite = f"xlamigrate rewrite --mode {command}"
        assert first == ("xlamigrate scan" if command == snapshots.SCAN else rewrite), path.name


def test_the_fixture_tree_holds_no_copies() -> None:
    """One input per case, one snapshot per command, one file for what projects share
    (tests/fixtures/shared/, linked): no file of tests/fixtures/ is another's copy."""
    seen: dict[str, Path] = {}
    for path in sorted(FIXTURES.rglob("*")):
        if not path.is_file() or path.is_symlink() or "__pycache__" in path.parts:
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        assert digest not in seen, f"{path.relative_to(FIXTURES)} copies {seen[digest]}"
        seen[digest] = path.relative_to(FIXTURES)
    assert len(seen) > 500
