"""The rewrite fixtures are the spec: tests/fixtures/<mode>/<case>.in.py becomes <case>.out.py,
leaves the findings of <case>.remaining.txt (if any) for manual work, and is idempotent."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from xlamigrate.catalogue import Catalogue
from xlamigrate.python.rewrite import MODES, rewrite_python

CASES = [
    pytest.param(mode, case, id=f"{mode}/{case.name.removesuffix('.in.py')}")
    for mode in MODES
    for case in sorted((FIXTURES / mode).glob("*.in.py"))
]


def expected_remaining(case: Path) -> list[str]:
    listing = case.with_name(case.name.replace(".in.py", ".remaining.txt"))
    if not listing.exists():
        return []
    return [line.strip() for line in listing.read_text().splitlines() if line.strip()]


def test_every_mode_has_the_required_cases() -> None:
    for mode in MODES:
        names = {case.name.removesuffix(".in.py") for case in (FIXTURES / mode).glob("*.in.py")}
        assert len(names) >= 12, mode
        for case in names:
            assert (FIXTURES / mode / f"{case}.out.py").is_file(), (mode, case)


@pytest.mark.parametrize(("mode", "case"), CASES)
def test_rewrite_fixture(mode: str, case: Path, catalogue: Catalogue) -> None:
    expected = case.with_name(case.name.replace(".in.py", ".out.py")).read_bytes()
    outcome = rewrite_python(
        case.name, case.read_bytes(), catalogue, frozenset(catalogue.rules), mode
    )
    assert outcome.errors == ()
    produced = outcome.rewritten if outcome.rewritten is not None else outcome.original
    assert produced.decode() == expected.decode()
    remaining = [f"{f.span.line}:{f.span.column} {f.code}" for f in outcome.remaining]
    assert remaining == expected_remaining(case)


@pytest.mark.parametrize(("mode", "case"), CASES)
def test_rewritten_fixture_parses_and_is_a_fixed_point(
    mode: str, case: Path, catalogue: Catalogue
) -> None:
    output = case.with_name(case.name.replace(".in.py", ".out.py"))
    ast.parse(output.read_bytes())
    again = rewrite_python(
        output.name, output.read_bytes(), catalogue, frozenset(catalogue.rules), mode
    )
    assert not again.changed


def test_each_case_has_the_same_input_in_every_mode() -> None:
    """The inputs are copied per mode (pairs live together); the copies must not drift apart."""
    for case in sorted((FIXTURES / MODES[0]).glob("*.in.py")):
        for mode in MODES[1:]:
            copy = FIXTURES / mode / case.name
            assert copy.read_bytes() == case.read_bytes(), (mode, case.name)
