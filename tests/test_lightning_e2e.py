"""A Lightning project migrated in every mode trains in Lightning itself.

tests/fixtures/projects/lightning_module/ is a TPU launcher (`run_lit.sh bf16|fp32`, bf16
exports XLA_USE_BF16=1) and a script whose LightningModule builds its optimizer in
`configure_optimizers` and computes its loss in `training_step` (the Trainer backpropagates what
it returns). The rewrite casts the module's model and feeds `self.net` through the input cast in
`configure_optimizers`, wraps that optimizer in FP32ParamsCopy (fp32-copy) and puts
`training_step`'s forward under autocast (autocast), each under BF16_RECIPE.

Lightning's XLA accelerator asks GCP's metadata server for the TPU's environment
(`tpu-env`) even with PJRT_DEVICE=CPU, which this machine cannot reach: the runs below use
Lightning's CPU accelerator (the script's `accelerator="tpu"` replaced in the copy) with the
signal set, so what is checked is that the migrated module trains in Lightning, with the recipe's
dtypes and optimizer; torch-xla's own numerics are checked by the other e2e modules.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests import snapshots
from tests.conftest import FIXTURES
from xlamigrate.kinds.python.rewrite import MODES

lightning = pytest.importorskip("lightning")

CASE = FIXTURES / "projects" / "lightning_module"
SCRIPT = "train_lit.py"
STEPS = 4
PROBE = """
import json, runpy, sys
import lightning as L

sys.argv = ["train_lit.py", "--max_steps", "{steps}"]
fit = L.Trainer.fit


def fit_and_report(self, model, *args, **kwargs):
    result = fit(self, model, *args, **kwargs)
    print("RESULT " + json.dumps({{
        "params": sorted({{str(p.dtype) for p in model.parameters()}}),
        "optimizer": type(self.optimizers[0]).__name__,
        "loss": float(self.callback_metrics["train_loss"]),
        "steps": self.global_step,
    }}))
    return result


L.Trainer.fit = fit_and_report
runpy.run_path("train_lit.py", run_name="__main__")
"""


def train(folder: Path, signal: bool) -> dict[str, object]:
    script = folder / SCRIPT
    script.write_text(script.read_text().replace('accelerator="tpu"', 'accelerator="cpu"'))
    env = {k: v for k, v in os.environ.items() if k not in ("BF16_RECIPE", "XLA_USE_BF16")}
    if signal:
        env["BF16_RECIPE"] = "1"
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(steps=STEPS)],
        cwd=folder, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, result.stdout[-3000:] + result.stderr[-3000:]
    report: dict[str, object] = json.loads(lines[-1][len("RESULT ") :])
    return report


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, bool], dict[str, object]]:
    root = tmp_path_factory.mktemp("lightning-e2e")
    jobs = [(variant, signal) for variant in ("before", *MODES) for signal in (True, False)]

    def run(job: tuple[str, bool]) -> dict[str, object]:
        variant, signal = job
        folder = root / f"{variant}-{signal}"
        if variant == "before":
            shutil.copytree(CASE / variant, folder)
        else:
            snapshots.write_tree(snapshots.project_tree(CASE, variant), folder)
        return train(folder, signal)

    with ThreadPoolExecutor(max_workers=2) as pool:  # two cores
        return dict(zip(jobs, pool.map(run, jobs), strict=True))


def test_the_original_trains_in_float32(runs: dict[tuple[str, bool], dict[str, object]]) -> None:
    report = runs[("before", True)]
    assert report["params"] == ["torch.float32"]
    assert report["steps"] == STEPS


@pytest.mark.parametrize("mode", MODES)
def test_the_recipes_configuration_trains_with_its_dtypes(
    runs: dict[tuple[str, bool], dict[str, object]], mode: str
) -> None:
    report = runs[(mode, True)]
    assert report["steps"] == STEPS
    if mode == "autocast":
        assert report["params"] == ["torch.float32"]
    else:
        assert report["params"] == ["torch.bfloat16"]
    assert report["optimizer"] == ("FP32ParamsCopy" if mode == "fp32-copy" else "AdamW")
    assert report["loss"] == pytest.approx(runs[("before", True)]["loss"], rel=0.05)


@pytest.mark.parametrize("mode", MODES)
def test_without_the_signal_the_module_trains_as_before(
    runs: dict[tuple[str, bool], dict[str, object]], mode: str
) -> None:
    assert runs[(mode, False)] == runs[("before", False)]
