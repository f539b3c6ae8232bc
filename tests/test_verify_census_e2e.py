"""`xlamigrate verify` compares the whole device, not the optimizer (issue 33), on real
torch-xla (PJRT_DEVICE=CPU).

The legacy flag stored every float32 tensor on the device in bf16: a frozen backbone the
optimizer does not hold, an EMA made with `copy.deepcopy(model)`. A rewrite that casts only what
the optimizer holds keeps the loss close (the losses alone called it equivalent) but trains a
different model; the census after the warm-up steps names what it missed. A script in which no
flag took effect verifies nothing and says so.

The fixtures are tests/fixtures/verify/<case>.py, with hand rewrites beside them
(<case>.<what it does>.py). One verify per rewrite, 4 steps (the census is taken at step 3),
shared by the assertions below.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest

from tests.conftest import FIXTURES, needs_torch_xla_platform
from tests.test_verify_e2e import verify

pytestmark = needs_torch_xla_platform

CASES = FIXTURES / "verify"
STEPS = "4"
# label: (fixture, hand rewrite given with --rewritten, or None for xlamigrate's own, modes).
# The hand rewrites are the wrong ones (what xlamigrate wrote before issue 33, or a recipe for a
# flag that never took effect); each case's right one is xlamigrate's, verified beside them.
REWRITES: dict[str, tuple[str, str | None, str]] = {
    "backbone left fp32": ("frozen_backbone", "head_only", "full-bf16"),
    "backbone cast": ("frozen_backbone", None, "full-bf16"),
    "ema left fp32": ("ema_deepcopy", "ema_left_fp32", "full-bf16"),
    "ema cast": ("ema_deepcopy", None, "full-bf16"),
    "float64 left": ("downcast_double", "running_loss_f64", "full-bf16"),
    "float64 float32": ("downcast_double", None, "all"),
    "evaluation outside autocast": ("eval_each_epoch", "train_forward_only", "autocast"),
    "evaluation in the recipe": ("eval_each_epoch", None, "all"),
    "late flag migrated": ("late_flag", "recipe_applied", "full-bf16"),
    "late flag left": ("late_flag", None, "all"),
    "ids moved in the training steps": ("train_steps_ids", None, "all"),
    "moments read": ("moments_read", None, "all"),
}


@pytest.fixture(scope="module")
def verified(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, dict[str, Any]]]:
    results = {}
    for label, (case, rewrite, mode) in REWRITES.items():
        folder = tmp_path_factory.mktemp(case)
        script = folder / "train.py"
        shutil.copyfile(CASES / f"{case}.py", script)
        given = ("--rewritten", str(CASES / f"{case}.{rewrite}.py")) if rewrite else ()
        result = verify(script, *given, "-m", mode, "--steps", STEPS, "--format", "json")
        try:
            results[label] = (result.returncode, json.loads(result.stdout))
        except json.JSONDecodeError:
            pytest.fail(f"{label}: exit {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return results


def only_comparison(document: dict[str, Any]) -> dict[str, Any]:
    (comparison,) = document["comparisons"]
    return comparison


def census(document: dict[str, Any], run: str) -> dict[str, str]:
    """name -> element type as stored, of one run's census."""
    return {e["name"]: e["type"] for e in document["runs"][run]["census"]["tensors"]}


def test_a_frozen_backbone_left_fp32_is_divergent_naming_the_backbone(
    verified: dict[str, tuple[int, dict[str, Any]]],
) -> None:
    """The optimizer holds the head only: a cast of the head passes every optimizer check."""
    code, document = verified["backbone left fp32"]
    assert code == 1
    comparison = only_comparison(document)
    assert comparison["verdict"] == "divergent", comparison
    assert comparison["reason"].startswith(
        "2 tensors the legacy run stored in bf16 are f32 in the rewrite: model.0 (2 tensors: "
        "model.0.0.weight, model.0.0.bias)"
    ), comparison["reason"]
    checks = {check["name"]: check["passed"] for check in comparison["checks"]}
    assert checks == {"runs": True, "steps": True, "flags": True, "dtypes": True,
                      "mechanism": True, "census": False}  # fmt: skip
    # what the flag stored, named by module path; the optimizer's state by its parameter
    legacy = census(document, "original")
    assert legacy["model.0.0.weight"] == legacy["model.1.weight"] == "bf16"
    assert legacy["optimizer.state[model.1.weight].momentum_buffer"] == "bf16"
    assert "model.0.0.weight.grad" not in legacy  # frozen: no gradient
    assert census(document, "full-bf16")["model.0.0.weight"] == "f32"
    # the backbone's forward ran in f32 in the rewrite's step graph; under the flag, in bf16
    graph = document["runs"]["full-bf16"]["census"]["graph"]
    assert graph["dot"].get("f32", 0) > 0
    assert document["runs"]["original"]["census"]["graph"]["dot"].keys() == {"bf16"}


def test_the_whole_model_cast_is_equivalent(
    verified: dict[str, tuple[int, dict[str, Any]]],
) -> None:
    code, document = verified["backbone cast"]
    assert code == 0, json.dumps(document, indent=1)
    comparison = only_comparison(document)
    assert comparison["verdict"] == "equivalent"
    passed = {check["name"]: check for check in comparison["checks"]}
    assert passed["census"]["passed"]
    assert passed["census"]["detail"].startswith("11 tensors on the device as the legacy run")
    assert census(document, "full-bf16")["model.0.0.weight"] == "bf16"


def test_an_ema_copy_left_fp32_is_divergent_naming_the_ema(
    verified: dict[str, tuple[int, dict[str, Any]]],
) -> None:
    code, document = verified["ema left fp32"]
    assert code == 1
    comparison = only_comparison(document)
    assert comparison["verdict"] == "divergent", comparison
    assert comparison["reason"].startswith(
        "4 tensors the legacy run stored in bf16 are f32 in the rewrite: ema (4 tensors: "
        "ema.0.weight, ema.0.bias, ema.2.weight, ...)"
    ), comparison["reason"]
    # the deepcopy is found (copies do not call __init__) and named by its variable
    assert census(document, "original")["ema.2.bias"] == "bf16"


def test_an_ema_copy_cast_with_the_model_is_equivalent(
    verified: dict[str, tuple[int, dict[str, Any]]],
) -> None:
    code, document = verified["ema cast"]
    assert code == 0, json.dumps(document, indent=1)
    assert only_comparison(document)["verdict"] == "equivalent"
    stored = census(document, "full-bf16")
    assert {stored[f"ema.{name}"] for name in ("0.weight", "0.bias", "2.weight")} == {"bf16"}


# -- an original in which no legacy flag took effect (issue 33, item 7) ------------------------


@pytest.fixture(scope="module")
def unflagged(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    folder = tmp_path_factory.mktemp("no_flag")
    script = folder / "train.py"
    shutil.copyfile(CASES / "no_flag.py", script)
    # each run in an interpreter of its own, as without a fork server (forkserver.py)
    return verify(script, "-m", "full-bf16", "--steps", "3", env={"XLAMIGRATE_VERIFY_FORK": "0"})


def test_without_a_flag_verify_says_not_verified_and_exits_1(
    unflagged: subprocess.CompletedProcess[str],
) -> None:
    """It used to print a green EQUIVALENT, a recommendation and exit 0: float32 against
    float32, which says nothing about the migration."""
    out = unflagged.stdout
    assert unflagged.returncode == 1, out + unflagged.stderr
    assert out.splitlines()[0] == "xlamigrate verify train.py: original ran with no legacy flag on"
    assert "full-bf16: NOT VERIFIED: no legacy flag took effect in the original" in out
    assert "verify that launcher instead (xlamigrate verify run.sh -- CONFIG)" in out
    assert "--legacy-env XLA_USE_BF16=1" in out
    assert "recommendation:" not in out and "EQUIVALENT" not in out
    assert "xlamigrate: verify: 0 equivalent, 0 divergent, 0 failed, 1 not verified" in (
        unflagged.stderr
    )


def test_without_a_flag_the_note_says_the_rewrite_changes_only_api_calls(
    unflagged: subprocess.CompletedProcess[str],
) -> None:
    """The rewrite does change the script (xm.xla_device() -> torch_xla.device()): not
    'changes nothing'."""
    out = unflagged.stdout
    assert "note: xlamigrate rewrite changes only torch-xla API calls in this script" in out
    assert "changes nothing" not in out


def test_float64_the_flag_stored_in_float32_is_divergent_naming_it(
    verified: dict[str, tuple[int, dict[str, Any]]],
) -> None:
    """Issue 33 item 3: under XLA_DOWNCAST_BF16 the device held a float64 running loss in f32;
    the rewrite that left it float64 holds it in f64. The rewrite xlamigrate writes now makes
    it float32, and is equivalent."""
    code, document = verified["float64 left"]
    assert code == 1
    comparison = only_comparison(document)
    assert comparison["verdict"] == "divergent", comparison
    assert comparison["reason"].startswith(
        "1 tensor the legacy run stored in f32 is f64 in the rewrite: running_loss"
    ), comparison["reason"]
    assert census(document, "original")["running_loss"] == "f32"
    code, document = verified["float64 float32"]
    assert code == 0, json.dumps(document, indent=1)
    for comparison in document["comparisons"]:  # xlamigrate's rewrite, in every mode
        assert comparison["verdict"] == "equivalent", comparison
        assert census(document, comparison["mode"])["running_loss"] == "f32"


def test_an_evaluation_left_outside_autocast_is_divergent_naming_the_forward(
    verified: dict[str, tuple[int, dict[str, Any]]],
) -> None:
    """Issue 33 item 4: the flag ran the evaluation (under no_grad, after each epoch's two
    steps) in bf16; an autocast region around the training forward alone leaves it f32, which
    neither the losses nor the step graph show."""
    code, document = verified["evaluation outside autocast"]
    assert code == 1
    comparison = only_comparison(document)
    assert comparison["verdict"] == "divergent", comparison
    assert comparison["reason"].startswith(
        "the forward of model under no_grad at train.py:18 runs 2 of its 2 matmuls in float32 "
        "where the legacy run ran 0"
    ), comparison["reason"]
    checks = {check["name"]: check["passed"] for check in comparison["checks"]}
    assert checks["mechanism"] and not checks["census"]  # autocast is on around the training
    assert comparison["max_gap"] < 0.05  # and the losses alone would have passed
    (legacy,) = document["runs"]["original"]["census"]["evaluations"]
    assert (legacy["module"], legacy["context"], legacy["site"]) == (
        "model",
        "no_grad",
        "train.py:17",
    )
    assert legacy["graph"]["dot"] == {"bf16": 2}


def test_every_evaluation_runs_in_the_recipe_in_every_mode(
    verified: dict[str, tuple[int, dict[str, Any]]],
) -> None:
    """xlamigrate's autocast rewrite opens a region around the evaluation's forward too; the
    cast modes run it on the bf16 model."""
    code, document = verified["evaluation in the recipe"]
    assert code == 0, json.dumps(document, indent=1)
    for comparison in document["comparisons"]:
        assert comparison["verdict"] == "equivalent", comparison
        census_check = next(c for c in comparison["checks"] if c["name"] == "census")
        assert "1 forward outside training as well (model (no_grad))" in census_check["detail"]
        (seen,) = document["runs"][comparison["mode"]]["census"]["evaluations"]
        assert seen["graph"]["dot"] == {"bf16": 2}, comparison["mode"]


def test_a_recipe_for_a_flag_that_never_took_effect_is_divergent(
    verified: dict[str, tuple[int, dict[str, Any]]],
) -> None:
    """Issue 33 item 6: the flag set after the model went to the device changed nothing (the
    legacy census is all f32); a rewrite that applies the recipe anyway trains bf16."""
    code, document = verified["late flag migrated"]
    assert code == 1
    assert set(census(document, "original").values()) == {"f32"}
    comparison = only_comparison(document)
    assert comparison["verdict"] == "divergent", comparison
    assert comparison["reason"].startswith(
        "8 tensors the legacy run stored in f32 are bf16 in the rewrite: model (8 tensors:"
    ), comparison["reason"]
    assert "did not take effect" in comparison["reason"]


def test_a_flag_that_took_no_effect_left_by_xlamigrate_is_not_verified(
    verified: dict[str, tuple[int, dict[str, Any]]],
) -> None:
    """xlamigrate leaves a flag set after the device started (XM411): the legacy run and the
    rewrites all train in float32. verify says the flag took no effect and verifies nothing,
    instead of failing the rewrites for a write they leave by design."""
    code, document = verified["late flag left"]
    assert code == 1
    assert document["legacy_flags"] == []
    assert document["ineffective_flags"] == ["XLA_USE_BF16=1"]
    for comparison in document["comparisons"]:
        assert comparison["verdict"] == "not verified", comparison
        assert "the script's flag took no effect (XM411)" in comparison["reason"]
        flags = next(c for c in comparison["checks"] if c["name"] == "flags")
        assert flags["passed"] and "with no effect as in the original" in flags["detail"]
    assert any("took no effect" in note for note in document["notes"])
    assert not any("does not set a legacy flag" in note for note in document["notes"])


def test_a_batch_moved_to_the_device_in_the_training_steps_is_not_cast(
    verified: dict[str, tuple[int, dict[str, Any]]],
) -> None:
    """Issue 33 item 8: `ids = next(data).to(device)` in `train_steps(model, ..., device)` is
    a tensor of token ids; taken for a model it was cast to bf16 (a crash in full-bf16, fp32
    training in fp32-copy). Every mode now trains and stores what the flag stored."""
    code, document = verified["ids moved in the training steps"]
    assert code == 0, json.dumps(document, indent=1)
    for comparison in document["comparisons"]:
        assert comparison["verdict"] == "equivalent", comparison
    assert document["runs"]["full-bf16"]["dtypes"]["params"] == {"torch.bfloat16": 3}


def test_the_optimizer_state_read_by_the_script_answers_through_fp32_copy(
    verified: dict[str, tuple[int, dict[str, Any]]],
) -> None:
    """Issue 33 item 10: `optimizer.state[model[0].weight]["exp_avg_sq"]` raised KeyError once
    FP32ParamsCopy keyed the inner state by the masters; the wrapper's state is a view keyed by
    the model's parameters, and the census names the moments by them."""
    code, document = verified["moments read"]
    assert code == 0, json.dumps(document, indent=1)
    assert [c["verdict"] for c in document["comparisons"]] == ["equivalent"] * 3
    stored = census(document, "fp32-copy")
    assert stored["optimizer.state[model.0.weight].exp_avg_sq"] == "f32"
    assert stored["optimizer.master[model.0.weight]"] == "f32"
