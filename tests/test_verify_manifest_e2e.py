"""`xlamigrate verify k8s/jobs.yaml -- JOB` and `xlamigrate verify Dockerfile`: a Kubernetes Job and
an image verified end to end through their container's command and environment.

tests/fixtures/projects/kubernetes_precision_jobs/before/k8s/jobs.yaml has two Jobs running the
same `torchrun --nproc_per_node=32 train_clm.py` in /workspace: tiny-lm-bf16 sets
XLA_USE_BF16=1 (and takes its step count through `$(STEPS)`), tiny-lm-fp32 sets nothing. The
Dockerfile of dockerfile_env_cmd sets XLA_USE_BF16=1 and NEURON_CC_FLAGS with ENV and runs
`python train_clm.py` from its WORKDIR. verify runs each container's command from the project
(torchrun intercepted: one local process) and from each mode's migration of a copy, made by
`xlamigrate rewrite`, on torch-xla's CPU device; the project itself is never written.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, needs_torch_xla_platform
from tests.test_rewrite_e2e import clean_env
from tests.test_verify_launcher_e2e import MODES, digest

pytestmark = [
    needs_torch_xla_platform,
    pytest.mark.skipif(shutil.which("bash") is None, reason="the container runs under bash"),
]

JOBS = FIXTURES / "projects" / "kubernetes_precision_jobs" / "before"
IMAGE = FIXTURES / "projects" / "dockerfile_env_cmd" / "before"
JOB_LAUNCH = "torchrun --nproc_per_node=32 train_clm.py --steps 1000 --lr 0.05"


def verify(project: Path, manifest: str, *words: str) -> tuple[int, dict[str, Any], str]:
    before = digest(project)
    result = subprocess.run(
        [sys.executable, "-m", "xlamigrate.cli", "verify", manifest, "--mode", "all",
         "--steps", "4", "--format", "json", "--", *words],
        cwd=project, env=clean_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert digest(project) == before  # verify migrates copies, never the project
    try:
        document = json.loads(result.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"exit {result.returncode}, no JSON:\n{result.stdout}\n{result.stderr}")
    return result.returncode, document, result.stderr


def assert_each_recipe_is_in_force(document: dict[str, Any]) -> None:
    runs = document["runs"]
    assert all(c["verdict"] == "equivalent" for c in document["comparisons"])
    assert [c["mode"] for c in document["comparisons"]] == list(MODES)
    assert runs["full-bf16"]["dtypes"]["params"].keys() == {"torch.bfloat16"}
    assert runs["full-bf16"]["flags"]["NEURON_RT_STOCHASTIC_ROUNDING_EN"] == "1"
    assert runs["fp32-copy"]["dtypes"]["masters"].keys() == {"torch.float32"}
    autocast = runs["autocast"]["mechanism"]
    assert autocast["backwards_after_autocast_forward"] == autocast["backwards"] > 0
    assert "--auto-cast=none" in runs["autocast"]["flags"]["NEURON_CC_FLAGS"]
    for label in ("original", *MODES):
        assert runs[label]["flags"]["XLA_USE_BF16"] == ("1" if label == "original" else None)


def test_the_job_that_sets_the_flag_is_verified_in_every_mode() -> None:
    code, document, stderr = verify(JOBS, "k8s/jobs.yaml", "tiny-lm-bf16")
    assert code == 0, json.dumps(document, indent=1)
    assert document["legacy_flags"] == ["XLA_USE_BF16=1"]  # from the Job's env, not from verify
    assert_each_recipe_is_in_force(document)
    for label in ("original", *MODES):  # `$(STEPS)` expanded; /workspace mapped to the project
        assert document["runs"][label]["launches"] == [JOB_LAUNCH], label
    assert "tiny-lm-bf16/train runs without POD_UID here" in " ".join(document["notes"])
    assert "3 equivalent, 0 divergent, 0 failed" in stderr


def test_the_job_that_never_set_the_flag_launches_and_trains_as_before() -> None:
    code, document, _ = verify(JOBS, "k8s/jobs.yaml", "tiny-lm-fp32")
    assert code == 0, json.dumps(document, indent=1)
    assert document["legacy_flags"] == []
    original = document["runs"]["original"]
    for comparison in document["comparisons"]:
        checks = {check["name"]: check for check in comparison["checks"]}
        assert checks["launch"]["passed"] and comparison["verdict"] == "equivalent"
        run = document["runs"][comparison["mode"]]
        assert run["launches"] == [JOB_LAUNCH]
        assert run["dtypes"]["params"].keys() == {"torch.float32"}
        assert run["losses"] == original["losses"]  # the very same run: the recipe is gated


def test_an_image_is_verified_through_its_env_and_cmd_in_every_mode() -> None:
    code, document, stderr = verify(IMAGE, "Dockerfile")
    assert code == 0, json.dumps(document, indent=1)
    assert document["legacy_flags"] == ["XLA_USE_BF16=1"]
    assert_each_recipe_is_in_force(document)
    assert document["runs"]["original"]["flags"]["NEURON_CC_FLAGS"] == "--model-type transformer"
    assert document["runs"]["original"]["launches"] == ["python train_clm.py --steps 1000"]
    assert "3 equivalent, 0 divergent, 0 failed" in stderr


def test_a_container_that_is_not_in_the_manifest_is_an_argument_error() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "xlamigrate.cli", "verify", "k8s/jobs.yaml", "--", "train"],
        cwd=JOBS, env=clean_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2
    assert "k8s/jobs.yaml: 'train' names several containers; one of: tiny-lm-bf16/train" in (
        result.stderr
    )
