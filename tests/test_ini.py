"""INI files: tox's setenv and pytest-env's env are writes at their own line and column, manual
(the rewrite does not edit INI files); a flag named elsewhere outside comments is XM301. Each
tests/fixtures/ini/<file> has <stem>.findings.txt."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from xlamigrate.catalogue import Catalogue
from xlamigrate.engine import rewrite_source, scan_source
from xlamigrate.kinds import kind_by_name
from xlamigrate.request import RewriteRequest

INI = FIXTURES / "ini"
CASES = sorted(path for path in INI.iterdir() if not path.name.endswith(".findings.txt"))


def expected(case: Path) -> list[str]:
    lines = case.with_name(case.stem + ".findings.txt").read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_ini_fixture(case: Path, precision_rules: frozenset[str], catalogue: Catalogue) -> None:
    assert kind_by_name(case.name) == "ini"
    result = scan_source(case.name, case.read_bytes(), "ini", catalogue, precision_rules)
    assert result.errors == ()
    assert [f"{f.span.line}:{f.span.column} {f.code}" for f in result.findings] == expected(case)
    assert all(f.fix is not None and f.fix.applicability == "manual" for f in result.findings)


def test_a_write_says_what_to_do_by_hand(catalogue: Catalogue) -> None:
    data = (INI / "tox.ini").read_bytes()
    result = scan_source("tox.ini", data, "ini", catalogue, frozenset({"XM101"}))
    message = result.findings[0].message
    assert "in tox's setenv" in message
    assert "xlamigrate does not rewrite tox.ini" in message and "BF16_RECIPE=1" in message


def test_a_runtime_variable_in_pytest_env_is_xm503(catalogue: Catalogue) -> None:
    data = (INI / "setup.cfg").read_bytes()
    result = scan_source("setup.cfg", data, "ini", catalogue, frozenset({"XM503"}))
    assert [(f.span.line, f.span.column, f.code) for f in result.findings] == [(12, 7, "XM503")]


def test_the_same_section_in_a_file_of_another_name_is_not_a_setting(catalogue: Catalogue) -> None:
    data = b"[testenv]\nsetenv =\n    XLA_USE_BF16 = 1\n"
    result = scan_source("other.ini", data, "ini", catalogue, catalogue.select((), ()))
    assert [f.code for f in result.findings] == ["XM301"]


def test_a_file_that_is_not_ini_names_the_flag_for_review(catalogue: Catalogue) -> None:
    data = b"XLA_USE_BF16=1 # not INI: no section\n"
    result = scan_source("job.cfg", data, "ini", catalogue, catalogue.select((), ()))
    assert [(f.code, f.span.line) for f in result.findings] == [("XM301", 1)]
    assert "does not read as INI" in result.findings[0].message


def test_the_rewrite_leaves_an_ini_file_as_it_is(catalogue: Catalogue) -> None:
    data = (INI / "tox.ini").read_bytes()
    enabled = catalogue.select((), ())
    outcome = rewrite_source(
        "tox.ini", data, "ini", catalogue, enabled, RewriteRequest("full-bf16")
    )
    assert outcome.rewritten is None
    assert len(outcome.remaining) == 5
