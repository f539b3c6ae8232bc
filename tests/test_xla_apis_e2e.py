"""A torch-xla 2.1-style script on real torch-xla 2.9 (PJRT_DEVICE=CPU): it fails as written
(`xm.xrt_world_size` is gone since 2.7), and `xlamigrate rewrite` makes it run in every
precision mode, training as the legacy flag did.

tests/fixtures/xla-apis-e2e/train_xla21.py sets XLA_USE_BF16=1 itself and uses
`xm.xla_device()`, `xm.xrt_world_size()`, `xm.get_ordinal()` and `xm.mark_step()`. The legacy
baseline is the script with its API calls migrated alone (`rewrite --select XM5`: the flag
stays, so torch-xla's legacy path trains it); each mode's rewrite (both migrations) must land
within the tolerance tests/test_rewrite_e2e.py measured for the recipes against that path.

Every run is its own interpreter (torch-xla never loads in pytest's process), two at a time.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, environment_without, needs_torch_xla_platform
from tests.test_rewrite_e2e import LEGACY_NOTICE, LOSS_RTOL
from tests.test_verify_e2e import verify_json
from tests.xla_children import run_python
from xlamigrate.kinds.python.rewrite import MODES

pytestmark = needs_torch_xla_platform

SCRIPT = FIXTURES / "xla-apis-e2e" / "train_xla21.py"
PARAM_DTYPE = {
    "full-bf16": "torch.bfloat16",
    "fp32-copy": "torch.bfloat16",
    "autocast": "torch.float32",
}
ORIGINAL, APIS_ONLY = "original", "apis-only"


@dataclass(frozen=True)
class Run:
    rewrite: str  # what `xlamigrate rewrite` printed ("" for the original)
    source: str  # the script as it ran
    returncode: int
    output: str

    @property
    def result(self) -> dict[str, object]:
        last = self.output.strip().splitlines()[-1]
        found: dict[str, object] = json.loads(last)
        return found


def _environment() -> dict[str, str]:
    env = environment_without("XLA_", "PJRT_")
    env["PJRT_DEVICE"] = "CPU"
    return env


def _run(label: str) -> Run:
    """The script as written (`original`), its APIs migrated alone (`apis-only`), or migrated
    whole in one mode: rewritten by the CLI in a fresh folder, then trained there."""
    with tempfile.TemporaryDirectory(prefix=f"xlamigrate-apis-{label}-") as folder:
        script = Path(folder) / SCRIPT.name
        shutil.copyfile(SCRIPT, script)
        printed = ""
        if label != ORIGINAL:
            options = (
                ["--select", "XM5"]
                if label == APIS_ONLY
                else ["--mode", label, "--ignore", "XM409"]
            )
            rewrite = subprocess.run(
                [sys.executable, "-m", "xlamigrate.cli", "rewrite", *options, script.name],
                cwd=folder, env=_environment(), capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert rewrite.returncode == 0, rewrite.stdout + rewrite.stderr
            printed = rewrite.stdout
        trained = run_python([script.name], folder, _environment(), timeout=600)
        return Run(printed, script.read_text(), trained.returncode, trained.stdout + trained.stderr)


@pytest.fixture(scope="module")
def runs() -> dict[str, Run]:
    labels = [ORIGINAL, APIS_ONLY, *MODES]
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(labels, pool.map(_run, labels), strict=True))


def test_the_21_style_script_fails_on_torch_xla_29_as_written(runs: dict[str, Run]) -> None:
    original = runs[ORIGINAL]
    assert original.returncode != 0
    assert "has no attribute 'xrt_world_size'" in original.output


def test_its_apis_migrated_alone_it_trains_on_the_legacy_path(runs: dict[str, Run]) -> None:
    baseline = runs[APIS_ONLY]
    assert baseline.returncode == 0, baseline.output
    assert 'os.environ["XLA_USE_BF16"] = "1"' in baseline.source  # the flag is not XM5's
    assert LEGACY_NOTICE in baseline.output
    assert baseline.rewrite == "train_xla21.py: rewrote (4 fixes)\n"


@pytest.mark.parametrize("mode", MODES)
def test_each_mode_runs_and_trains_as_the_legacy_flag_did(runs: dict[str, Run], mode: str) -> None:
    run = runs[mode]
    assert run.returncode == 0, run.output
    assert run.rewrite == "train_xla21.py: rewrote (5 fixes)\n"
    for gone in ("xm.xla_device", "xm.xrt_world_size", "xm.get_ordinal", "xm.mark_step"):
        assert gone not in run.source, gone
    assert "XLA_USE_BF16" not in run.source
    assert LEGACY_NOTICE not in run.output
    assert "deprecated" not in run.output.lower(), run.output  # no warning from torch-xla
    result, legacy = run.result, runs[APIS_ONLY].result
    assert result["param_dtype"] == PARAM_DTYPE[mode]
    assert result["rank"] == 0
    loss, reference = float(str(result["loss"])), float(str(legacy["loss"]))
    assert abs(loss - reference) <= LOSS_RTOL * abs(reference), (loss, reference)


def test_verify_runs_the_original_with_its_removed_apis_migrated(tmp_path: Path) -> None:
    """`xlamigrate verify` on the same script: the original could not start on 2.9, so its
    legacy run takes XM501's fixes alone (the flag as written) and is the reference."""
    script = tmp_path / SCRIPT.name
    shutil.copyfile(SCRIPT, script)
    code, document, stderr = verify_json(script, "--mode", "full-bf16", "--steps", "4")
    assert code == 0, json.dumps(document, indent=1) + stderr
    assert document["legacy_flags"] == ["XLA_USE_BF16=1"]
    assert any("XM501" in note for note in document["notes"])
    assert script.read_bytes() == SCRIPT.read_bytes()  # the user's file is never written
