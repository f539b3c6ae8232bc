"""neuronx-distributed-training (NxDT) configs: `precision.type` is the recipe under another name.

tests/fixtures/nxdt/<case>/before.yaml is rewritten in each mode as <case>/<mode>.snap says (the
findings fixed and left, the rewritten text; tests/snapshots.py); a second rewrite changes
nothing. The
facts (which type sets which flag, from which release) are rules/nxdt.toml, read from NxDT's
examples/training_orchestrator.py at each release."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from tests import snapshots
from tests.conftest import FIXTURES, PRECISION_IGNORE
from xlamigrate.apitable import Version
from xlamigrate.catalogue import Catalogue
from xlamigrate.config import load_settings
from xlamigrate.engine import rewrite_paths, rewrite_source, scan_paths
from xlamigrate.kinds import yaml as yaml_kind
from xlamigrate.kinds.python.nxdt_orchestrator import orchestrator_reason
from xlamigrate.kinds.python.rewrite import MODES
from xlamigrate.kinds.yaml.analysis import analyse
from xlamigrate.nxdttable import nxdt_table
from xlamigrate.prefilter import Prefilter
from xlamigrate.request import FileContext, FileTask, RewriteRequest
from xlamigrate.results import Finding

CASES_DIR = FIXTURES / "nxdt"
CASES = [
    pytest.param(mode, case, id=f"{case.name}/{mode}")
    for case in sorted(p for p in CASES_DIR.iterdir() if p.is_dir())
    for mode in MODES
]
NAMES = frozenset({"XLA_USE_BF16", "XLA_DOWNCAST_BF16"})


def _rewrite(data: bytes, mode: str, catalogue: Catalogue, enabled: frozenset[str]) -> bytes:
    outcome = rewrite_source(
        "config.yaml", data, "yaml", catalogue, enabled, mode, context=FileContext()
    )
    assert outcome.errors == ()
    return outcome.rewritten if outcome.rewritten is not None else outcome.original


def _scan(text: str, catalogue: Catalogue, mode: str = "full-bf16") -> list[Finding]:
    task = FileTask(
        "config.yaml", text.encode(), catalogue, frozenset(catalogue.rules), FileContext(mode=mode)
    )
    result = yaml_kind.scan(task)
    assert result.errors == ()
    return list(result.findings)


def _rewritten(case: Path, mode: str) -> bytes:
    text = snapshots.project_snapshot(case, mode).text
    assert text is not None
    return text


@pytest.mark.parametrize(("mode", "case"), CASES)
def test_nxdt_config_fixture(
    mode: str,
    case: Path,
    catalogue: Catalogue,
    precision_rules: frozenset[str],
    update_snapshots: bool,
) -> None:
    before = (case / "before.yaml").read_bytes()
    outcome = rewrite_source(
        "config.yaml", before, "yaml", catalogue, precision_rules, mode, context=FileContext()
    )
    assert outcome.errors == ()
    produced = outcome.rewritten if outcome.rewritten is not None else outcome.original
    snapshot = snapshots.rewrite_snapshot(
        mode, outcome.fixed, outcome.remaining, [("", produced)], catalogue
    )
    snapshots.assert_matches(case / f"{mode}.snap", snapshot, update_snapshots)


@pytest.mark.parametrize(("mode", "case"), CASES)
def test_rewritten_nxdt_config_is_a_fixed_point(
    mode: str, case: Path, catalogue: Catalogue, precision_rules: frozenset[str]
) -> None:
    after = _rewritten(case, mode)
    assert _rewrite(after, mode, catalogue, precision_rules) == after


def test_manual_type_with_a_flag_on_becomes_autocast_keeping_quotes_and_comment(
    catalogue: Catalogue, precision_rules: frozenset[str]
) -> None:
    case = CASES_DIR / "manual_use_bf16_on"
    before = (case / "before.yaml").read_text()
    after = _rewrite(before.encode(), "autocast", catalogue, precision_rules).decode()
    old = "  type: 'manual' # ['bf16SR',"
    assert old in before and after == before.replace(old, "  type: 'autocast' # ['bf16SR',")


def test_manual_type_stays_where_the_modes_type_sets_the_flag_itself(
    catalogue: Catalogue,
) -> None:
    text = (CASES_DIR / "manual_use_bf16_on" / "before.yaml").read_text()
    (use, downcast) = _scan(text, catalogue, "full-bf16")
    assert (use.code, use.fix and use.fix.applicability) == ("XM101", "manual")
    assert "bf16SR, sets XLA_USE_BF16=1 itself in NxDT 1.0.0-1.6.0" in use.message
    assert "precision.type autocast (NxDT 1.1.0 and later) sets neither flag" in use.message
    assert downcast.code == "XM102"
    (use, _) = _scan(text, catalogue, "fp32-copy")
    assert "fp32-copy's NxDT type, mixed_precision, sets XLA_DOWNCAST_BF16=1 itself" in use.message


def test_scan_offers_the_autocast_type_as_a_safe_fix_in_autocast_mode(
    catalogue: Catalogue,
) -> None:
    text = (CASES_DIR / "manual_use_bf16_on" / "before.yaml").read_text()
    findings = _scan(text, catalogue, "autocast")
    assert [(f.code, f.fix and f.fix.applicability) for f in findings] == [
        ("XM101", "safe"),
        ("XM102", "safe"),
    ]
    assert "the rewrite sets precision.type to autocast" in findings[0].message


def test_a_type_that_sets_the_flag_is_reported_on_its_value(catalogue: Catalogue) -> None:
    text = (CASES_DIR / "mixed_precision_type" / "before.yaml").read_text()
    (finding,) = _scan(text, catalogue)
    assert (finding.code, finding.variable, finding.value) == ("XM105", "XLA_DOWNCAST_BF16", "1")
    assert finding.fix is not None and finding.fix.applicability == "manual"
    line = text.splitlines()[finding.span.line - 1]
    assert line[finding.span.column - 1 : finding.span.end_column - 1] == "'mixed_precision'"
    assert "training_orchestrator.py from precision.type mixed_precision" in finding.message
    # the keys below it are read under type manual only: no finding of their own
    assert not any(f.code in ("XM101", "XM102") for f in _scan(text, catalogue))


def test_bf16sr_says_it_turns_rounding_on_too(catalogue: Catalogue) -> None:
    text = (CASES_DIR / "bf16sr_type" / "before.yaml").read_text()
    (finding,) = _scan(text, catalogue)
    assert (finding.code, finding.variable) == ("XM105", "XLA_USE_BF16")
    assert "it sets NEURON_RT_STOCHASTIC_ROUNDING_EN=1 too" in finding.message


@pytest.mark.parametrize(
    "config",
    [
        "model:\n  name: llama\nprecision:\n  type: mixed_precision\n",  # no key NxDT reads
        "trainer:\n  precision: bf16-mixed\nmixed_precision: bf16\n",  # Lightning's precision
        "trainer:\n  devices: 2\nprecision: bf16SR\n",  # not a mapping
        "trainer:\n  devices: 2\nprecision:\n  type: mixed-precision\n",  # not an NxDT type
        "- trainer: {}\n  precision: {type: bf16SR}\n",  # not a document's mapping
    ],
)
def test_a_precision_key_of_another_tool_is_no_nxdt_config(config: str) -> None:
    assert analyse(config, NAMES).accesses == ()


def test_fp32_through_manual_has_nothing_to_migrate(catalogue: Catalogue) -> None:
    text = (CASES_DIR / "manual_flags_off" / "before.yaml").read_text()
    for mode in MODES:
        assert _scan(text, catalogue, mode) == []


def test_noqa_on_the_type_line_suppresses_the_framework_finding(catalogue: Catalogue) -> None:
    text = "trainer:\n  devices: 2\nprecision:\n  type: bf16SR  # noqa: XM105\n"
    assert _scan(text, catalogue) == []


def test_the_prefilter_reads_a_config_whose_only_trigger_is_bf16sr(
    catalogue: Catalogue,
) -> None:
    prefilter = Prefilter(catalogue, frozenset(catalogue.rules))
    data = (CASES_DIR / "bf16sr_type" / "before.yaml").read_bytes()
    assert b"xla_" not in data.lower() and b"mixed_precision" not in data
    assert prefilter.may_have_findings("yaml", data)
    assert not prefilter.may_have_findings("yaml", b"trainer:\n  devices: 2\n")


def test_a_pinned_nxdt_without_the_autocast_type_keeps_manual() -> None:
    text = (CASES_DIR / "manual_use_bf16_on" / "before.yaml").read_text()
    found = analyse(text, NAMES, mode="autocast", nxdt_floor=Version.parse("1.0.1")).accesses
    assert found and all(a.applicability == "manual" and a.removal is None for a in found)
    assert "precision.type autocast came in NxDT 1.1.0 (Neuron SDK 2.21.0)" in found[0].note
    assert "this project pins NxDT 1.0.1" in found[0].note


def test_the_table_says_every_bf16_type_but_autocast_sets_a_flag_in_every_release_read() -> None:
    table = nxdt_table()
    on = {name: t.flags_on for name, t in table.types.items()}
    assert on["bf16SR"] == ("XLA_USE_BF16",)
    assert on["mixed_precision"] == on["mixed_precision_SR"] == ("XLA_DOWNCAST_BF16",)
    assert on["autocast"] == on["fp32"] == on["manual"] == ()
    assert all(t.until == table.newest_read for t in table.types.values())
    assert table.types["autocast"].since == Version.parse("1.1.0")


def test_an_export_before_nxdts_orchestrator_overrides_the_config_and_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue
) -> None:
    """NxDT's set_env_variable sets a variable only where the environment has none (every
    release read): the launcher's XLA_USE_BF16=1 beats the config's `type: autocast`. The
    orchestrator takes no recipe, so the export stays, saying so; nothing is rewritten."""
    shutil.copytree(FIXTURES / "nxdt_launcher", tmp_path, dirs_exist_ok=True)
    monkeypatch.chdir(tmp_path)
    settings = load_settings([Path(".")], catalogue).with_overrides(ignore=PRECISION_IGNORE)
    scan = scan_paths([Path(".")], settings, catalogue)
    (export,) = [f for f in scan.findings if f.path == "train.sh"]
    assert (export.code, export.span.line) == ("XM101", 4)
    assert export.fix is not None and export.fix.applicability == "manual"
    assert "neuronx-distributed-training's training_orchestrator.py" in export.message
    assert "this export overrides the config" in export.message
    assert not any(f.path == "conf/llama.yaml" for f in scan.findings)
    for mode in MODES:
        rewrite = rewrite_paths([Path(".")], settings, catalogue, RewriteRequest(mode))
        assert not any(outcome.changed for outcome in rewrite.outcomes), mode
        (edge,) = rewrite.launches
        assert not edge.migrated and "set_env_variable sets only unset variables" in edge.reason


@pytest.mark.parametrize(
    ("source", "recognised"),
    [
        ("def set_env_variable(n, v, append=False, overwrite=False): ...\n"
         "def process_config(cfg): ...\n", True),
        ("def process_config(cfg): ...\n", False),  # a script of the project's own
        ("class C:\n    def set_env_variable(self): ...\n    def process_config(self): ...\n",
         False),
    ],
)  # fmt: skip
def test_nxdts_orchestrator_is_known_by_the_functions_it_defines(
    source: str, recognised: bool
) -> None:
    assert (orchestrator_reason(ast.parse(source)) is not None) == recognised


def _scan_project(tmp_path: Path, files: dict[str, str], catalogue: Catalogue) -> list[Finding]:
    files = {"pyproject.toml": '[tool.xlamigrate]\nmode = "autocast"\n', **files}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    settings = load_settings([tmp_path], catalogue)
    return list(scan_paths([tmp_path], settings, catalogue).findings)


def test_a_project_pinning_nxdt_before_the_autocast_type_keeps_its_manual_config(
    tmp_path: Path, catalogue: Catalogue
) -> None:
    config = (CASES_DIR / "manual_use_bf16_on" / "before.yaml").read_text()
    files = {"conf/llama.yaml": config, "requirements.txt": "neuronx-distributed-training==1.0.1\n"}
    findings = _scan_project(tmp_path, files, catalogue)
    assert [(f.code, f.fix and f.fix.applicability) for f in findings] == [
        ("XM101", "manual"),
        ("XM102", "manual"),
    ]
    assert "this project pins NxDT 1.0.1: upgrade NxDT, then rewrite again" in findings[0].message
    unpinned = _scan_project(tmp_path / "unpinned", {"conf/llama.yaml": config}, catalogue)
    assert [f.fix and f.fix.applicability for f in unpinned] == ["safe", "safe"]


def test_a_project_pinning_an_nxdt_newer_than_the_releases_read_is_told_so(
    tmp_path: Path, catalogue: Catalogue
) -> None:
    config = (CASES_DIR / "bf16sr_type" / "before.yaml").read_text()
    files = {"conf/llama.yaml": config, "requirements.txt": "neuronx-distributed-training>=1.7\n"}
    (finding,) = _scan_project(tmp_path, files, catalogue)
    assert finding.code == "XM105"
    assert "this project pins NxDT 1.7, newer than the releases read" in finding.message
