"""One env-access model, two front ends: the scan analyses Python on the standard library's `ast`
(astwalk.py), the rewriter on libcst (envwalk.py). Both must find the same accesses (variable,
kind, target, form, value, helper, span), mentions and child scripts, and the same number of
shell command strings, on every flagged fixture and on generated programs with flags injected
anywhere; otherwise scan and rewrite would drift apart."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import libcst as cst
import pytest
from hypothesis import given
from libcst.metadata import MetadataWrapper, PositionProvider

from tests.conftest import FIXTURES
from tests.test_properties import injected_generated_programs, injected_training_scripts, profile
from xlamigrate.catalogue import load_catalogue
from xlamigrate.kinds.python.astpositions import SourceLines
from xlamigrate.kinds.python.detect import span_of
from xlamigrate.kinds.python.envaccess import (
    EnvAccessAnalysis,
    analyse_env_accesses,
    analyse_module_env_accesses,
)
from xlamigrate.model import Span
from xlamigrate.neuronflags import NEURON_CC_FLAGS, STOCHASTIC_ROUNDING

# hypothesmith's programs are odd but valid code that warns (`1()`, `x is 1`).
pytestmark = pytest.mark.filterwarnings("ignore::SyntaxWarning")
CATALOGUE = load_catalogue()
ALSO = (STOCHASTIC_ROUNDING, NEURON_CC_FLAGS)
NAMES = tuple(name.encode() for name in (*CATALOGUE.flags, *ALSO))
FLAGGED = sorted(
    path for path in FIXTURES.rglob("*.py") if any(name in path.read_bytes() for name in NAMES)
)


def described(analysis: EnvAccessAnalysis, span: Any) -> dict[str, list[str]]:
    return {
        "accesses": sorted(
            repr((a.variable, a.kind, a.target, a.form, a.value, a.via, span(a.node)))
            for a in analysis.accesses
        ),
        "mentions": sorted(
            repr((m.variable, m.context, m.value, span(m.node))) for m in analysis.mentions
        ),
        "children": sorted(analysis.children),
        "commands": [str(len(analysis.commands))],
    }


def both_analyses(data: bytes) -> tuple[dict[str, list[str]], dict[str, list[str]]] | None:
    try:
        module = cst.parse_module(data)
        tree = ast.parse(data)
    except (cst.ParserSyntaxError, SyntaxError, ValueError, RecursionError):
        return None
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    on_libcst = analyse_env_accesses(wrapper, CATALOGUE.flags, ALSO)
    on_ast = analyse_module_env_accesses(tree, module.code, CATALOGUE.flags, ALSO)
    lines = SourceLines(module.code)

    def libcst_span(node: cst.CSTNode) -> Span:
        return span_of(node, positions)

    return described(on_libcst, libcst_span), described(on_ast, lines.span)


def test_the_fixtures_name_flags_in_enough_files_to_compare() -> None:
    assert len(FLAGGED) > 150


@pytest.mark.parametrize("path", FLAGGED, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_both_front_ends_find_the_same_on_each_flagged_fixture(path: Path) -> None:
    found = both_analyses(path.read_bytes())
    assert found is not None
    on_libcst, on_ast = found
    assert on_ast == on_libcst


@profile(ci_examples=60)
@given(data=injected_training_scripts())
def test_both_front_ends_find_the_same_in_training_scripts_with_flags_injected(
    data: bytes,
) -> None:
    found = both_analyses(data)
    if found is not None:
        assert found[1] == found[0]


@profile(ci_examples=60)
@given(data=injected_generated_programs())
def test_both_front_ends_find_the_same_in_generated_programs_with_flags_injected(
    data: bytes,
) -> None:
    found = both_analyses(data)
    if found is not None:
        assert found[1] == found[0]


@pytest.mark.parametrize("path", FLAGGED, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_the_scan_on_ast_reports_what_the_scan_on_libcst_reports(path: Path) -> None:
    """Findings, shell command strings' included, whenever the ast path answers alone."""
    from xlamigrate.kinds.python.scan import _parsed, _scan_on_ast, _scan_on_libcst
    from xlamigrate.request import STANDALONE

    data, enabled = path.read_bytes(), CATALOGUE.select()
    parsed = _parsed(data)
    assert parsed is not None
    on_ast = _scan_on_ast(str(path), *parsed, CATALOGUE, enabled, STANDALONE)
    on_libcst = _scan_on_libcst(str(path), data, CATALOGUE, enabled, STANDALONE)
    if on_ast is None:  # only where a write of its own turns a flag on: the rewriter's to plan
        assert any(f.access == "write" and f.enabled is not False for f in on_libcst.findings)
        return
    assert on_ast.findings == on_libcst.findings
    assert on_ast.errors == on_libcst.errors
