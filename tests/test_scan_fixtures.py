"""The scan fixtures are the spec: tests/fixtures/scan/<case>.py yields <case>.findings.txt."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from xlamigrate.catalogue import Catalogue
from xlamigrate.python.scan import scan_python

SCAN_FIXTURES = sorted((FIXTURES / "scan").glob("*.py"))


def expected_findings(case: Path) -> list[str]:
    text = case.with_suffix(".findings.txt").read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_every_fixture_has_an_expected_findings_file() -> None:
    assert len(SCAN_FIXTURES) >= 15
    for case in SCAN_FIXTURES:
        assert case.with_suffix(".findings.txt").is_file(), case.name


@pytest.mark.parametrize("case", SCAN_FIXTURES, ids=lambda case: case.stem)
def test_scan_fixture(case: Path, catalogue: Catalogue) -> None:
    result = scan_python(case.name, case.read_bytes(), catalogue, frozenset(catalogue.rules))
    assert result.errors == ()
    found = [f"{f.span.line}:{f.span.column} {f.code}" for f in result.findings]
    assert found == expected_findings(case)
