"""A checkpoint taken with `xm.save` and resumed into a fresh model and optimizer continues the
run exactly, in the legacy original and in every rewrite (fp32-copy resumes its fp32 masters,
autocast its fp32 weights), on torch-xla CPU.

tests/fixtures/cases/tied_lm_resume.py trains a tied-embedding LM with a LambdaLR warmup for
10 steps, saves model, optimizer and scheduler, builds everything afresh (another seed), loads
the checkpoint and trains 5 more steps; then it trains the same 15 steps without a break. The
resumed losses must be the unbroken run's, bit for bit; and each rewrite must train like the
legacy run. Every run is a subprocess (torch-xla never loads in pytest's process)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests import snapshots
from tests.conftest import environment_without, needs_torch_xla_platform
from tests.test_rewrite_e2e import LOSS_RTOL, PARAM_DTYPE
from tests.xla_children import run_python
from xlamigrate.kinds.python.rewrite import MODES

pytestmark = needs_torch_xla_platform

CASE = "tied_lm_resume"


def run(script: Path, checkpoint: Path) -> dict[str, Any]:
    env = environment_without("XLA_")
    env["PJRT_DEVICE"] = "CPU"
    result = run_python([str(script), str(checkpoint)], script.parent, env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    document: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return document


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("resume")
    scripts = {"original": snapshots.case_input(CASE).read_bytes()}
    scripts.update({mode: snapshots.rewritten(CASE, mode) for mode in MODES})
    jobs = []
    for name, text in scripts.items():
        script = folder / f"{name}.py"
        script.write_bytes(text)
        jobs.append((name, script, folder / f"{name}.pt"))
    with ThreadPoolExecutor(max_workers=2) as pool:  # two cores
        results = pool.map(lambda job: (job[0], run(job[1], job[2])), jobs)
        return dict(results)


@pytest.mark.parametrize("name", ["original", *MODES])
def test_a_resumed_run_continues_exactly(runs: dict[str, dict[str, Any]], name: str) -> None:
    assert len(runs[name]["after"]) == 5
    assert runs[name]["after"] == runs[name]["straight"]


@pytest.mark.parametrize("mode", MODES)
def test_each_rewrite_resumes_in_its_recipe_and_trains_like_the_legacy_run(
    runs: dict[str, dict[str, Any]], mode: str
) -> None:
    assert runs[mode]["param_dtype"] == PARAM_DTYPE[mode]
    legacy, migrated = runs["original"]["after"][-1], runs[mode]["after"][-1]
    assert abs(migrated - legacy) <= LOSS_RTOL * abs(legacy)
