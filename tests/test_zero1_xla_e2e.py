"""torch-xla's ZeRO-1 optimizer keeps master shards of its own: the recipes set their dtype
(`optimizer_dtype`) instead of wrapping the optimizer, and the migrated project trains through
its launcher on real torch-xla (PJRT_DEVICE=CPU).

tests/fixtures/projects/zero1_launcher/before is a precision-switch launcher (`run_zero1.sh
BF16|FP32`, BF16 exports XLA_USE_BF16=1) that starts a script stepping
`ZeroRedundancyOptimizer(model.parameters(), torch.optim.AdamW, ...)`; the script prints the
dtypes of the shards its inner AdamW steps. fp32-copy: a bf16 model with float32 master shards
(`optimizer_dtype=torch.float32`); full-bf16: bf16 shards where the recipe applies, as the flag
kept them on the device; FP32 unchanged.

The launcher's `torchrun` runs as one process (tests/test_project_e2e.py's shim): ZeRO-1 over a
world of one. torch-xla 2.9's collectives across two CPU processes (`torch_xla.launch` with
`CPU_NUM_DEVICES=2`) abort in XLA's rendezvous here, so the two-rank run of the issue is not
made; tests/test_zero_gloo_e2e.py runs torch.distributed's ZeRO on two gloo ranks.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, needs_torch_xla_platform
from tests.test_project_e2e import (
    LEGACY_FLAGS,
    LaunchRun,
    Migration,
    checked,
    in_parallel,
    launch,
    make_tools,
    migrate,
    print_table,
)
from tests.test_rewrite_e2e import LEGACY_NOTICE, LOSS_RTOL

pytestmark = [
    needs_torch_xla_platform,
    pytest.mark.skipif(shutil.which("bash") is None, reason="the launcher is a bash script"),
]

PROJECT = FIXTURES / "projects" / "zero1_launcher" / "before"
LAUNCHER = "run_zero1.sh"
JOBS = (
    ("original", "BF16"),
    ("original", "FP32"),
    ("fp32-copy", "BF16"),
    ("fp32-copy", "FP32"),
    ("full-bf16", "BF16"),
)
SHARDS = re.compile(r"^shard dtypes \[(.*)\]$", re.MULTILINE)

Runs = dict[tuple[str, str], LaunchRun]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Migration], Runs]:
    started = time.monotonic()
    root = tmp_path_factory.mktemp("zero1-e2e")
    tools = make_tools(root / "tools")
    modes = sorted({variant for variant, _ in JOBS} - {"original"})
    migrations = dict(
        zip(modes, in_parallel(lambda m: migrate(root / m, m, PROJECT), modes), strict=True)
    )
    folders: dict[str, Path] = {mode: migration.folder for mode, migration in migrations.items()}
    folders["original"] = root / "original"
    shutil.copytree(PROJECT, folders["original"])

    def run(job: tuple[str, str]) -> LaunchRun:
        variant, config = job
        out = root / "runs" / f"{variant}-{config}"
        label = f"{variant} {LAUNCHER} {config}"
        return launch(tools, folders[variant], config, label, out, launcher=LAUNCHER)

    done = dict(zip(JOBS, in_parallel(run, JOBS), strict=True))
    print_table(done, time.monotonic() - started)
    return migrations, done


def good(runs: tuple[dict[str, Migration], Runs], variant: str, config: str) -> LaunchRun:
    return checked(runs[1][(variant, config)])


def shard_dtypes(run: LaunchRun) -> set[str]:
    found = SHARDS.findall(run.output)
    assert found, run.describe()
    return {dtype.strip().strip("'") for line in found for dtype in line.split(",")}


def test_rewrites_succeed(runs: tuple[dict[str, Migration], Runs]) -> None:
    for mode, migration in runs[0].items():
        assert migration.returncode == 0, (mode, migration.output)


def test_original_bf16_run_is_the_legacy_path(runs: tuple[dict[str, Migration], Runs]) -> None:
    run = good(runs, "original", "BF16")
    assert run.env["XLA_USE_BF16"] == "1"
    assert LEGACY_NOTICE in run.output
    assert shard_dtypes(run) == {"torch.float32"}  # as reported; bf16 on the device


def test_fp32_copy_trains_a_bf16_model_with_float32_master_shards(
    runs: tuple[dict[str, Migration], Runs],
) -> None:
    run = good(runs, "fp32-copy", "BF16")
    assert all(run.env[name] is None for name in LEGACY_FLAGS)
    assert LEGACY_NOTICE not in run.output
    assert set(run.params) == {"torch.bfloat16"}
    assert shard_dtypes(run) == {"torch.float32"}
    original = good(runs, "original", "BF16")
    assert run.losses == pytest.approx(original.losses, rel=LOSS_RTOL)
    assert run.losses[-1] != run.losses[0]


def test_full_bf16_keeps_the_shards_bf16_as_the_flag_did(
    runs: tuple[dict[str, Migration], Runs],
) -> None:
    run = good(runs, "full-bf16", "BF16")
    assert all(run.env[name] is None for name in LEGACY_FLAGS)
    assert set(run.params) == {"torch.bfloat16"}
    assert shard_dtypes(run) == {"torch.bfloat16"}


def test_fp32_configuration_is_exactly_as_before(runs: tuple[dict[str, Migration], Runs]) -> None:
    original, run = good(runs, "original", "FP32"), good(runs, "fp32-copy", "FP32")
    assert run.env == original.env
    assert run.record["dtypes"] == original.record["dtypes"]
    assert shard_dtypes(run) == shard_dtypes(original) == {"torch.float32"}
    assert run.losses == original.losses
