"""Findings that agree and explain, over every fixture: a message refers only to findings the
same output lists, its brackets, quotes and backticks close, and each finding's fix is one its
rule's documentation (`xlamigrate rule`, generated from rules/<code>.toml) says it can have."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict

import pytest

from tests.conftest import ROOT
from tests.fixture_outputs import Output, fixture_outputs
from xlamigrate.catalogue import Catalogue
from xlamigrate.ruleexamples import examples_of
from xlamigrate.ruletext import rule_text

SEE = re.compile(r"\bsee (XM\d{3})")
PAIRS = ("()", "[]", "{}")


@pytest.fixture(scope="module")
def outputs(catalogue: Catalogue) -> list[Output]:
    return fixture_outputs(catalogue)


def test_every_finding_a_message_refers_to_is_listed_in_the_same_output(
    outputs: list[Output],
) -> None:
    dangling = [
        (output.command, output.path, finding.code, code)
        for output in outputs
        for finding in output.findings
        for code in SEE.findall(finding.message)
        if code not in {other.code for other in output.findings}
    ]
    assert dangling == []


def test_no_finding_message_leaves_a_bracket_quote_or_backtick_open(
    outputs: list[Output],
) -> None:
    unbalanced = [
        (output.path, finding.code, finding.message)
        for output in outputs
        for finding in output.findings
        if any(finding.message.count(a) != finding.message.count(b) for a, b in PAIRS)
        or finding.message.count("`") % 2
        or finding.message.count('"') % 2
    ]
    assert unbalanced == []


def test_every_fix_the_engine_gives_is_one_its_rule_documents(
    outputs: list[Output], catalogue: Catalogue
) -> None:
    given: dict[str, set[str]] = defaultdict(set)
    for output in outputs:
        for finding in output.findings:
            given[finding.code].add(finding.fix.applicability if finding.fix else "none")
    assert set(given) >= {"XM101", "XM201", "XM401", "XM402", "XM406", "XM501"}  # (it ran)
    for code, levels in given.items():
        documented = set(catalogue.rule(code).applicabilities) or {"none"}
        assert levels <= documented, (code, levels - documented)


def test_a_rule_documents_only_fixes_the_engine_gives_somewhere(
    outputs: list[Output], catalogue: Catalogue
) -> None:
    """The other way round: no rule promises an applicability that neither a fixture nor one
    of its own examples (rules/<code>.toml, each run by tests/test_rule_examples.py) shows
    (rules no fixture here reaches are left to their own tests)."""
    given: dict[str, set[str]] = defaultdict(set)
    for output in outputs:
        for finding in output.findings:
            given[finding.code].add(finding.fix.applicability if finding.fix else "none")
    for code in given:
        for example in examples_of(code, tuple(catalogue.modes)):
            given[code] |= {finding.fix for finding in example.findings}
    for code, levels in given.items():
        assert set(catalogue.rule(code).applicabilities) <= levels, code


def test_rule_prints_where_each_fix_applies_from_the_rules_data(catalogue: Catalogue) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "xlamigrate.cli", "rule", "XM201"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    examples = examples_of("XM201", tuple(catalogue.modes))
    assert result.stdout.strip() == rule_text(catalogue.rule("XM201"), examples).strip()
    assert "Fix: safe/manual." in result.stdout
    assert "  safe:   a read that is true exactly where the recipe is on" in result.stdout
    assert "never rewrites a read" not in result.stdout


def test_the_readings_of_a_rule_with_no_fix_say_so(catalogue: Catalogue) -> None:
    assert "Fix: none (reported, never fixed)." in rule_text(catalogue.rule("XM901"))


def _messages(case: str, mode: str, catalogue: Catalogue) -> dict[str, str]:
    """`line:col CODE` -> message, of what the rewrite leaves of a fixture case."""
    from tests.conftest import PRECISION_IGNORE, RECIPE_APPLIED
    from tests.snapshots import case_input
    from xlamigrate.engine import rewrite_source

    path = case_input(case)
    enabled = catalogue.select((), PRECISION_IGNORE)
    done = rewrite_source(path.name, path.read_bytes(), "python", catalogue, enabled, mode,
                          context=RECIPE_APPLIED)  # fmt: skip
    return {f"{f.span.line}:{f.span.column} {f.code}": f.message for f in done.remaining}


def test_an_optimizer_class_xlamigrate_does_not_know_is_named_as_the_cause(
    catalogue: Catalogue,
) -> None:
    unknown = "`Shampoo(model.parameters(), lr=0.1)` takes the model's parameters"
    fp32 = _messages("optimizer_not_known", "fp32-copy", catalogue)
    assert unknown in fp32["8:1 XM406"]
    autocast = _messages("optimizer_not_known", "autocast", catalogue)
    assert autocast["13:5 XM402"].startswith(
        "the forward pass before `loss.backward()`; no model found to look for; " + unknown
    )


def test_a_dict_key_handed_to_the_environment_names_the_call_it_cannot_read_through(
    catalogue: Catalogue,
) -> None:
    from tests.snapshots import case_input
    from xlamigrate.engine import scan_source

    path = case_input("dict_key_handed_to_environ")
    found = scan_source(path.name, path.read_bytes(), "python", catalogue, catalogue.select())
    first, second, unused = (f.message for f in found.findings)
    assert "`os.environ.update(config.ENV)` at line 9 puts it into the environment" in first
    assert "does not read a mapping through `settings.ENV`" in second
    assert "no environment access in this file uses it" in unused
    assert "cannot tell how this reaches the environment" not in first + second + unused
