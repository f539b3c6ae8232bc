"""The scan fixtures are the spec: tests/fixtures/cases/<case>.<ext> is reported as its
<case>.scan.snap says, finding by finding, with each message and fix applicability
(tests/fixtures/cases/README.md; `--update-snapshots` writes them again)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import snapshots
from tests.conftest import fixture_kind
from xlamigrate.catalogue import Catalogue
from xlamigrate.engine import scan_source

SCAN_FIXTURES = snapshots.cases()


def test_there_are_scan_fixtures_of_every_kind() -> None:
    assert len(SCAN_FIXTURES) >= 15
    kinds = {fixture_kind(case) for case in SCAN_FIXTURES}
    assert {"python", "shell", "dockerfile", "yaml", "dotenv", "notebook"} <= kinds


@pytest.mark.parametrize("case", SCAN_FIXTURES, ids=lambda case: case.name)
def test_scan_fixture(
    case: Path, catalogue: Catalogue, precision_rules: frozenset[str], update_snapshots: bool
) -> None:
    kind = fixture_kind(case)
    assert kind is not None
    result = scan_source(case.name, case.read_bytes(), kind, catalogue, precision_rules)
    assert result.errors == ()
    produced = snapshots.scan_snapshot(result.findings, catalogue)
    path = snapshots.snapshot_path(snapshots.case_name(case))
    snapshots.assert_matches(path, produced, update_snapshots)
