"""A Ray Train project whose workers got the legacy flag through the job's `runtime_env` trains,
once migrated, like its legacy run: on a real Ray cluster (one node) and real
torch-xla (PJRT_DEVICE=CPU) in the Ray worker.

tests/fixtures/projects/ray_worker_env/before/train_ray.py sets `XLA_USE_BF16=1` in
`ray.init(runtime_env={"env_vars": ...})` for `--precision bf16` only; its `train_func` (the
Train worker loop) writes its losses, its parameters' dtypes, its optimizer's class and the
worker's precision variables. The rewrite renames the key to the signal and puts the recipe
in `train_func`, reading the signal there (`bf16_recipe()`): a module constant would be read
in the driver, where the variable is not set, and pickled into the worker as False.

Runs: the original in both configurations, each mode's bf16 configuration, and autocast's fp32
one (the gate is the same function in every mode). One Ray head serves all runs, two jobs at a
time: it counts four logical CPUs, so that Ray Train's v1 API (whose trainer actor takes a CPU of
its own) runs two jobs as v2 does (whose driver reserves none, and which rejects the
`trainer_resources` a script could pass to free that CPU).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import pytest

from tests import snapshots
from tests.conftest import FIXTURES, needs_torch_xla_platform
from tests.test_project_e2e import base_environment, in_parallel, migrate

pytest.importorskip("ray.train.torch")
pytestmark = needs_torch_xla_platform

PROJECT = FIXTURES / "projects" / "ray_worker_env" / "before"
MODES = ("full-bf16", "fp32-copy", "autocast")
JOBS = (
    ("original", "bf16"),
    ("original", "fp32"),
    ("full-bf16", "bf16"),
    ("fp32-copy", "bf16"),
    ("autocast", "bf16"),
    ("autocast", "fp32"),
)
_RAY = [sys.executable, "-c", "from ray.scripts.scripts import main; main()"]


@dataclass(frozen=True)
class RayRun:
    label: str
    returncode: int
    output: str
    record: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and bool(self.record)

    def describe(self) -> str:
        return f"{self.label}: exit {self.returncode}\n{self.output[-4000:]}"


Runs = dict[tuple[str, str], RayRun]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    started = time.monotonic()
    root = tmp_path_factory.mktemp("ray-e2e")
    folders = {"original": root / "original"}
    shutil.copytree(PROJECT, folders["original"])
    for mode in MODES:
        migration = migrate(root / mode, mode, PROJECT)
        assert migration.returncode == 0, migration.output
        folders[mode] = migration.folder
    env = {**base_environment(), "PJRT_DEVICE": "CPU", "RAY_ADDRESS": "auto"}
    env.pop("XLA_USE_BF16", None)
    head = subprocess.run(
        [*_RAY, "start", "--head", "--num-cpus=4", "--include-dashboard=false",
         "--disable-usage-stats"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert head.returncode == 0, head.stdout + head.stderr

    def run(job: tuple[str, str]) -> RayRun:
        variant, config = job
        out = root / f"{variant}-{config}.json"
        done = subprocess.run(
            [sys.executable, "train_ray.py", str(out), "--precision", config],
            cwd=folders[variant], env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        record = json.loads(out.read_text()) if out.exists() else {}
        return RayRun(f"{variant} {config}", done.returncode, done.stdout + done.stderr, record)

    try:
        done = dict(zip(JOBS, in_parallel(run, JOBS), strict=True))
    finally:
        subprocess.run([*_RAY, "stop", "--force"], env=env, capture_output=True, timeout=120)
    print(f"\nRay e2e: {len(JOBS)} runs in {time.monotonic() - started:.0f} s")
    for (variant, config), result in done.items():
        losses = result.record.get("losses", [])
        print(f"  {variant:10} {config:5} {result.record.get('dtypes')} {losses[:3]}")
    return done


def good(runs: Runs, variant: str, config: str) -> RayRun:
    result = runs[(variant, config)]
    assert result.ok, result.describe()
    return result


def _bf16_values(losses: list[float]) -> bool:
    """Whether every loss is a bfloat16 value (what a loss computed in bf16 reads as)."""
    import torch

    return all(torch.tensor(loss).bfloat16().float().item() == loss for loss in losses)


def test_the_legacy_flag_reaches_the_worker_through_the_runtime_env(runs: Runs) -> None:
    legacy, fp32 = good(runs, "original", "bf16"), good(runs, "original", "fp32")
    assert legacy.record["env"].get("XLA_USE_BF16") == "1"
    assert "XLA_USE_BF16" not in fp32.record["env"]
    assert legacy.record["dtypes"] == ["torch.float32"]  # as reported: bf16 on the device
    assert _bf16_values(legacy.record["losses"])
    assert not _bf16_values(fp32.record["losses"])


def test_full_bf16_trains_the_worker_in_bf16_with_stochastic_rounding(runs: Runs) -> None:
    legacy, result = good(runs, "original", "bf16"), good(runs, "full-bf16", "bf16")
    env = result.record["env"]
    assert "XLA_USE_BF16" not in env and env["BF16_RECIPE"] == "1"
    assert env["NEURON_RT_STOCHASTIC_ROUNDING_EN"] == "1"  # set in train_func, under the signal
    assert result.record["dtypes"] == ["torch.bfloat16"]
    assert result.record["losses"] == pytest.approx(legacy.record["losses"], rel=0.02)


def test_fp32_copy_keeps_fp32_masters_of_the_bf16_worker_model(runs: Runs) -> None:
    legacy, result = good(runs, "original", "bf16"), good(runs, "fp32-copy", "bf16")
    assert "XLA_USE_BF16" not in result.record["env"]
    assert "NEURON_RT_STOCHASTIC_ROUNDING_EN" not in result.record["env"]
    assert result.record["dtypes"] == ["torch.bfloat16"]
    assert result.record["optimizer"] == "FP32ParamsCopy"
    assert result.record["losses"] == pytest.approx(legacy.record["losses"], rel=0.02)


def test_autocast_runs_the_worker_forward_in_bf16_on_an_fp32_model(runs: Runs) -> None:
    legacy, result = good(runs, "original", "bf16"), good(runs, "autocast", "bf16")
    fp32 = good(runs, "original", "fp32")
    assert result.record["env"]["NEURON_CC_FLAGS"].endswith("--auto-cast=none")
    assert result.record["dtypes"] == ["torch.float32"]
    assert result.record["losses"] == pytest.approx(legacy.record["losses"], rel=0.02)
    assert result.record["losses"] != fp32.record["losses"]  # (the region is on)


def test_the_fp32_configuration_is_exactly_as_before(runs: Runs) -> None:
    original, result = good(runs, "original", "fp32"), good(runs, "autocast", "fp32")
    assert result.record == original.record


def test_the_rewrite_reads_the_signal_in_the_worker_not_at_import() -> None:
    """What the e2e runs rely on, said of the rewritten source: a module constant read in the
    driver would pickle False into the worker."""
    rewritten = snapshots.project_tree(FIXTURES / "projects" / "ray_worker_env", "full-bf16")
    source = rewritten["train_ray.py"].decode()
    assert 'def bf16_recipe():\n    return os.environ.get("BF16_RECIPE") == "1"' in source
    assert "BF16_RECIPE = " not in source
    assert 'env_vars["BF16_RECIPE"] = "1"' in source
