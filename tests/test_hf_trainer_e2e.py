"""A Hugging Face Trainer project migrated to full-bf16 trains like its legacy run, through its
launcher, on real torch-xla (PJRT_DEVICE=CPU: the Trainer picks the XLA device itself).

tests/fixtures/projects/hf_trainer/before: `run_hf.sh bf16|fp32` (bf16 exports XLA_USE_BF16=1)
starts a script that hands a tiny BERT classifier to `Trainer(model=model, ...)`, which builds
the optimizer itself. full-bf16 casts that model before the Trainer (under BF16_RECIPE);
fp32-copy and autocast are manual there (the Trainer's own optimizer and forward; the finding
names its knobs), so the flag stays and those trees are not run.

tests/test_project_e2e.py's shims run the launcher's torchrun as one process; its recorder notes
the parameters' dtypes at the first optimizer step and the losses.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, needs_torch_xla_platform
from tests.test_project_e2e import (
    LEGACY_FLAGS,
    LaunchRun,
    in_parallel,
    launch,
    make_tools,
    migrate,
    print_table,
)
from tests.test_rewrite_e2e import LEGACY_NOTICE

pytest.importorskip("transformers")
pytestmark = [
    needs_torch_xla_platform,
    pytest.mark.skipif(shutil.which("bash") is None, reason="the launcher is a bash script"),
]

PROJECT = FIXTURES / "projects" / "hf_trainer" / "before"
LAUNCHER = "run_hf.sh"
JOBS = (("original", "bf16"), ("original", "fp32"), ("full-bf16", "bf16"), ("full-bf16", "fp32"))
Runs = dict[tuple[str, str], LaunchRun]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    started = time.monotonic()
    root = tmp_path_factory.mktemp("hf-trainer-e2e")
    tools = make_tools(root / "tools")
    migration = migrate(root / "full-bf16", "full-bf16", PROJECT)
    assert migration.returncode == 0, migration.output
    folders: dict[str, Path] = {"full-bf16": migration.folder, "original": root / "original"}
    shutil.copytree(PROJECT, folders["original"])

    def run(job: tuple[str, str]) -> LaunchRun:
        variant, config = job
        out = root / "runs" / f"{variant}-{config}"
        return launch(tools, folders[variant], config, f"{variant} {config}", out, LAUNCHER)

    done = dict(zip(JOBS, in_parallel(run, JOBS), strict=True))
    print_table(done, time.monotonic() - started)
    return done


def good(runs: Runs, variant: str, config: str) -> LaunchRun:
    run = runs[(variant, config)]
    assert run.ok, run.describe()
    assert len(run.torchrun_calls) == 1, run.describe()
    return run


def test_the_legacy_run_trains_under_the_flag(runs: Runs) -> None:
    run = good(runs, "original", "bf16")
    assert run.env["XLA_USE_BF16"] == "1"
    assert LEGACY_NOTICE in run.output
    assert set(run.params) == {"torch.float32"}  # as reported: bf16 on the device


def test_full_bf16_hands_the_trainer_a_bf16_model_and_trains_as_the_legacy_run(
    runs: Runs,
) -> None:
    """The Trainer's optimizer is built on the cast model; the losses are the legacy run's
    (both computed in bf16 on the device)."""
    original, run = good(runs, "original", "bf16"), good(runs, "full-bf16", "bf16")
    assert all(run.env[name] is None for name in LEGACY_FLAGS)
    assert LEGACY_NOTICE not in run.output
    assert set(run.params) == {"torch.bfloat16"}
    assert None not in run.losses
    assert run.losses == pytest.approx(original.losses, rel=0.02)


def test_the_fp32_configuration_is_exactly_as_before(runs: Runs) -> None:
    original, run = good(runs, "original", "fp32"), good(runs, "full-bf16", "fp32")
    assert run.env == original.env
    assert run.record["dtypes"] == original.record["dtypes"]
    assert run.losses == original.losses
