"""The scan fixtures are the spec: tests/fixtures/scan/<case>.py yields <case>.findings.txt."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import FIXTURES, fixture_kind
from xlamigrate.catalogue import Catalogue
from xlamigrate.engine import scan_source

SCAN_FIXTURES = sorted(
    path for path in (FIXTURES / "scan").iterdir() if fixture_kind(path) is not None
)


def findings_file(case: Path) -> Path:
    return case.with_name(case.name.removesuffix(case.suffix) + ".findings.txt")


def expected_findings(case: Path) -> list[str]:
    text = findings_file(case).read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_every_fixture_has_an_expected_findings_file() -> None:
    assert len(SCAN_FIXTURES) >= 15
    for case in SCAN_FIXTURES:
        assert findings_file(case).is_file(), case.name


@pytest.mark.parametrize("case", SCAN_FIXTURES, ids=lambda case: case.name)
def test_scan_fixture(case: Path, catalogue: Catalogue, precision_rules: frozenset[str]) -> None:
    kind = fixture_kind(case)
    assert kind is not None
    result = scan_source(case.name, case.read_bytes(), kind, catalogue, precision_rules)
    assert result.errors == ()
    found = [
        f"{'' if f.cell is None else f'{f.cell}:'}{f.span.line}:{f.span.column} {f.code}"
        for f in result.findings
    ]
    assert found == expected_findings(case)
