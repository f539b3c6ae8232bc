"""`xlamigrate verify run_clm.sh -- CONFIG`: a launcher configuration verified end to end.

tests/fixtures/projects/precision_switch_launcher/before/run_clm.sh exports XLA_USE_BF16=1 for
BF16 (XLA_DOWNCAST_BF16=1 for MIXED, neither for FP32) and ends in `torchrun --nproc_per_node=2
train_clm.py`. verify runs the launcher itself with `torchrun` intercepted (one local process),
and each mode's migration of a copy of the folder (made by `xlamigrate rewrite`), on torch-xla's
CPU device; the project itself is never written.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, needs_torch_xla_platform
from tests.test_rewrite_e2e import clean_env

pytestmark = [
    needs_torch_xla_platform,
    pytest.mark.skipif(shutil.which("bash") is None, reason="the launcher is a bash script"),
]

PROJECT = FIXTURES / "projects" / "precision_switch_launcher" / "before"
LAUNCH = "torchrun --nproc_per_node=2 train_clm.py --steps 4 --lr 0.05"
MODES = ("full-bf16", "fp32-copy", "autocast")


def digest(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def verify_launcher(config: str) -> tuple[int, dict[str, Any], str]:
    result = subprocess.run(
        [sys.executable, "-m", "xlamigrate.cli", "verify", "run_clm.sh", "--mode", "all",
         "--format", "json", "--", config],
        cwd=PROJECT, env=clean_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    try:
        document = json.loads(result.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"exit {result.returncode}, no JSON:\n{result.stdout}\n{result.stderr}")
    return result.returncode, document, result.stderr


@pytest.fixture(scope="module")
def verdicts() -> dict[str, tuple[int, dict[str, Any], str]]:
    before = digest(PROJECT)
    results = {config: verify_launcher(config) for config in ("BF16", "MIXED", "FP32")}
    assert digest(PROJECT) == before  # verify migrates copies, never the project
    return results


@pytest.mark.parametrize(
    ("config", "flag"), [("BF16", "XLA_USE_BF16=1"), ("MIXED", "XLA_DOWNCAST_BF16=1")]
)
def test_a_configuration_that_sets_a_flag_is_verified_through_the_launcher_in_every_mode(
    verdicts: dict[str, tuple[int, dict[str, Any], str]], config: str, flag: str
) -> None:
    code, document, stderr = verdicts[config]
    assert code == 0, json.dumps(document, indent=1)
    assert document["legacy_flags"] == [flag]  # set by the launcher, not by verify
    assert [c["mode"] for c in document["comparisons"]] == list(MODES)
    assert all(c["verdict"] == "equivalent" for c in document["comparisons"])
    runs = document["runs"]
    for label in ("original", *MODES):
        assert runs[label]["launches"] == [LAUNCH], label  # the launcher's own torchrun line
        assert runs[label]["steps"] == 4
    assert runs["full-bf16"]["dtypes"]["params"].keys() == {"torch.bfloat16"}
    assert runs["fp32-copy"]["dtypes"]["masters"].keys() == {"torch.float32"}
    autocast = runs["autocast"]["mechanism"]
    assert autocast["backwards_after_autocast_forward"] == autocast["backwards"] > 0
    assert "--auto-cast=none" in runs["autocast"]["flags"]["NEURON_CC_FLAGS"]
    assert "3 equivalent, 0 divergent, 0 failed" in stderr


def test_the_fp32_configuration_launches_and_trains_as_before(
    verdicts: dict[str, tuple[int, dict[str, Any], str]],
) -> None:
    code, document, _ = verdicts["FP32"]
    assert code == 0, json.dumps(document, indent=1)
    assert document["legacy_flags"] == []
    original = document["runs"]["original"]
    for comparison in document["comparisons"]:
        checks = {check["name"]: check for check in comparison["checks"]}
        assert checks["launch"]["passed"] and comparison["verdict"] == "equivalent"
        run = document["runs"][comparison["mode"]]
        assert run["dtypes"]["params"].keys() == {"torch.float32"}
        assert run["losses"] == original["losses"]  # the very same run
    assert any("sets no legacy flag" in note for note in document["notes"])


SWITCH = FIXTURES / "projects" / "switch_variable_launcher" / "before"


def test_a_flag_the_launcher_computes_from_its_switch_is_verified_in_every_mode() -> None:
    """Issue 33, item 5: run.sh exports `XLA_USE_BF16=$USE_BF16`, which its getopts switch sets
    to 0 or 1. With -b the legacy run is bf16; each mode's migration (`BF16_RECIPE=$USE_BF16`,
    the recipe under that signal in train.py) stores on the device what the flag stored."""
    before = digest(SWITCH)
    result = subprocess.run(
        [sys.executable, "-m", "xlamigrate.cli", "verify", "run.sh", "--mode", "all",
         "--format", "json", "--", "-b", "-s", "4"],
        cwd=SWITCH, env=clean_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    document = json.loads(result.stdout)
    assert result.returncode == 0, json.dumps(document, indent=1)
    assert digest(SWITCH) == before
    assert document["legacy_flags"] == ["XLA_USE_BF16=1"]
    for comparison in document["comparisons"]:
        assert comparison["verdict"] == "equivalent", comparison
        checks = {check["name"]: check["passed"] for check in comparison["checks"]}
        assert checks["census"], comparison
    runs = document["runs"]
    assert runs["original"]["launches"] == ["torchrun --nproc_per_node=2 train.py --steps 4"]
    assert runs["full-bf16"]["dtypes"]["params"].keys() == {"torch.bfloat16"}
    assert runs["autocast"]["dtypes"]["params"].keys() == {"torch.float32"}
