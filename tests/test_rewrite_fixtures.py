"""The rewrite fixtures are the spec: tests/fixtures/<mode>/<case>.in.<ext> becomes
<case>.out.<ext>, leaves the findings of <case>.remaining.txt (if any) for manual work, and is
idempotent. The extension says the kind (.py, .sh, .env, .dockerfile, .yaml).

Each is one file on its own: a launcher's write is planned as if every process it starts ran
a script of the project that took the recipe (what the project decides when it does; the
project fixtures under tests/fixtures/projects/ test those decisions)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, RECIPE_APPLIED, fixture_kind
from xlamigrate.catalogue import Catalogue
from xlamigrate.engine import rewrite_source
from xlamigrate.kinds.python.rewrite import MODES

CASES = [
    pytest.param(mode, case, id=f"{mode}/{case.name}")
    for mode in MODES
    for case in sorted((FIXTURES / mode).glob("*.in.*"))
]


def case_name(case: Path) -> str:
    return case.name.split(".in.")[0]


def output_of(case: Path) -> Path:
    return case.with_name(case.name.replace(".in.", ".out."))


def kind_of(case: Path) -> str:
    kind = fixture_kind(case)
    assert kind is not None
    return kind


def expected_remaining(case: Path) -> list[str]:
    listing = case.with_name(case_name(case) + ".remaining.txt")
    if not listing.exists():
        return []
    return [line.strip() for line in listing.read_text().splitlines() if line.strip()]


def test_every_mode_has_the_required_python_cases() -> None:
    for mode in MODES:
        names = {case_name(case) for case in (FIXTURES / mode).glob("*.in.py")}
        assert len(names) >= 12, mode
        for case in (FIXTURES / mode).glob("*.in.*"):
            assert output_of(case).is_file(), (mode, case.name)


@pytest.mark.parametrize(("mode", "case"), CASES)
def test_rewrite_fixture(
    mode: str, case: Path, catalogue: Catalogue, precision_rules: frozenset[str]
) -> None:
    expected = output_of(case).read_bytes()
    enabled = precision_rules
    outcome = rewrite_source(
        case.name,
        case.read_bytes(),
        kind_of(case),
        catalogue,
        enabled,
        mode,
        context=RECIPE_APPLIED,
    )
    assert outcome.errors == ()
    produced = outcome.rewritten if outcome.rewritten is not None else outcome.original
    assert produced.decode() == expected.decode()
    remaining = [
        f"{'' if f.cell is None else f'{f.cell}:'}{f.span.line}:{f.span.column} {f.code}"
        for f in outcome.remaining
    ]
    assert remaining == expected_remaining(case)


@pytest.mark.parametrize(("mode", "case"), CASES)
def test_rewritten_fixture_parses_and_is_a_fixed_point(
    mode: str, case: Path, catalogue: Catalogue, precision_rules: frozenset[str]
) -> None:
    output = output_of(case)
    if output.suffix == ".py":
        ast.parse(output.read_bytes())
    enabled = precision_rules
    again = rewrite_source(
        output.name,
        output.read_bytes(),
        kind_of(case),
        catalogue,
        enabled,
        mode,
        context=RECIPE_APPLIED,
    )
    assert not again.changed
    assert again.errors == ()


def test_each_case_has_the_same_input_in_every_mode() -> None:
    """The inputs are copied per mode (pairs live together); the copies must not drift apart."""
    for case in sorted((FIXTURES / MODES[0]).glob("*.in.*")):
        for mode in MODES[1:]:
            copy = FIXTURES / mode / case.name
            assert copy.read_bytes() == case.read_bytes(), (mode, case.name)
