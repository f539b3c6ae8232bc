"""The runtime on a real XLA device (torch-xla on CPU, PJRT_DEVICE=CPU).

torch-xla never loads in pytest's process: a failed XLA compile poisons the whole process, and
a CPU backward before the XLA device exists breaks later XLA backward passes. Each scenario is
a script in tests/runtime_scripts/ run once in its own interpreter; it prints one JSON line of
measurements and the tests below assert on them.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from typing import Any

import pytest

from tests.conftest import ROOT, needs_torch_xla_platform
from tests.xla_children import run_python

SCRIPTS = ROOT / "tests" / "runtime_scripts"

pytestmark = needs_torch_xla_platform


def run_script(name: str, *args: str, fresh: bool = False) -> dict[str, Any]:
    """Runs a scenario script on the CPU PJRT device (`fresh`: in a new interpreter, which has
    not imported torch-xla yet); its last stdout line is the JSON result."""
    argv, env = [str(SCRIPTS / name), *args], {**os.environ, "PJRT_DEVICE": "CPU"}
    result = run_python(argv, ROOT, env, timeout=300, fresh=fresh)
    if result.returncode != 0:
        pytest.fail(f"{name} {' '.join(args)} exited {result.returncode}:\n{result.stderr[-4000:]}")
    lines = result.stdout.strip().splitlines()
    assert lines, f"{name} printed nothing; stderr:\n{result.stderr[-4000:]}"
    results: dict[str, Any] = json.loads(lines[-1])
    return results


def flat(tensors: list[list[float]]) -> list[float]:
    return [value for tensor in tensors for value in tensor]


def distance(a: list[float], b: list[float]) -> float:
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=True)))


# -- a. FP32ParamsCopy(AdamW) through xm.optimizer_step, against eager CPU ---------------------


@pytest.fixture(scope="module")
def xla_training() -> dict[str, Any]:
    return run_script("fp32_params_copy_training.py", "--device", "xla")


@pytest.fixture(scope="module")
def cpu_training() -> dict[str, Any]:
    return run_script("fp32_params_copy_training.py", "--device", "cpu")


def test_xm_optimizer_step_keeps_params_bf16_and_masters_fp32_on_the_xla_device(
    xla_training: dict[str, Any],
) -> None:
    assert xla_training["param_dtypes"] == ["torch.bfloat16"]
    assert xla_training["param_devices"] == ["xla"]
    assert xla_training["master_dtypes"] == ["torch.float32"]
    assert xla_training["master_devices"] == ["xla"]
    assert not any(xla_training["master_is_param"])
    assert xla_training["inner_state_dtypes"] == ["torch.float32"]
    assert xla_training["params_are_nearest_rounding_of_masters"]


def test_lr_scheduler_on_the_wrapper_reaches_the_inner_optimizer_on_xla(
    xla_training: dict[str, Any],
) -> None:
    # StepLR(step_size=4, gamma=0.5) stepped 10 times: two halvings.
    expected = xla_training["first_lr"] * 0.25
    assert xla_training["outer_lr"] == pytest.approx(expected)
    assert xla_training["inner_lr"] == pytest.approx(expected)


def test_fp32_params_copy_training_on_xla_lowers_the_loss(xla_training: dict[str, Any]) -> None:
    losses = xla_training["losses"]
    assert losses[-1] < 0.8 * losses[0]
    assert all(later <= earlier for earlier, later in itertools.pairwise(losses))


def test_fp32_params_copy_training_on_xla_matches_eager_cpu(
    xla_training: dict[str, Any], cpu_training: dict[str, Any]
) -> None:
    """Same weights, data and wrapper; only the backend differs. XLA fuses the bf16 forward and
    backward and rounds intermediates differently from eager CPU, so gradients agree to bf16
    precision (2**-8 relative), not bit for bit; Adam turns that into small update differences."""
    assert cpu_training["params_are_nearest_rounding_of_masters"]
    # Losses are bf16 scalars: allow about 6 bf16 ulps (2**-8 relative each); measured <= 2.
    for xla_loss, cpu_loss in zip(xla_training["losses"], cpu_training["losses"], strict=True):
        assert xla_loss == pytest.approx(cpu_loss, rel=0.03)
    xla_masters, cpu_masters = flat(xla_training["masters"]), flat(cpu_training["masters"])
    initial = flat(cpu_training["initial_params"])
    assert initial == flat(xla_training["initial_params"])
    # Adam's first step moves every weight by exactly +-lr: a weight whose update direction
    # differed between backends would be >= 2 lr apart. Measured: <= 0.13 lr.
    worst = max(abs(x - c) for x, c in zip(xla_masters, cpu_masters, strict=True))
    assert worst < xla_training["first_lr"]
    # The two trajectories are the same one: their gap is a few percent of the distance
    # travelled (measured 0.5%).
    assert distance(xla_masters, cpu_masters) < 0.05 * distance(cpu_masters, initial)


# -- b. stochastic rounding on XLA --------------------------------------------------------------


@pytest.fixture(scope="module")
def stochastic() -> dict[str, Any]:
    return run_script("stochastic_rounding_xla.py")


def test_stochastic_round_to_bf16_on_xla_gives_only_the_two_bf16_neighbours(
    stochastic: dict[str, Any],
) -> None:
    rounding = stochastic["rounding"]
    assert rounding["dtype"] == "torch.bfloat16"
    assert rounding["device"] == "xla"
    assert rounding["neighbours_only"]
    assert rounding["bf16_exact_values_unchanged"]  # including -0.0
    assert rounding["infinities_unchanged"]
    assert rounding["nan_stays_nan"]


def test_stochastic_round_to_bf16_on_xla_is_unbiased(stochastic: dict[str, Any]) -> None:
    """Mean of 4096 draws per value, 96 values across signs and magnitudes: within 5 sigma of x
    (sigma <= ulp / (2 sqrt(4096))); round-to-nearest is far outside that bound."""
    rounding = stochastic["rounding"]
    assert rounding["max_bias_in_ulps"] < rounding["bias_bound_in_ulps"]
    assert rounding["max_rate_error_in_sigmas"] < 5.0
    assert rounding["max_nearest_rounding_bias_in_ulps"] > 5 * rounding["bias_bound_in_ulps"]


def test_stochastic_round_to_bf16_on_xla_draws_fresh_noise(stochastic: dict[str, Any]) -> None:
    assert stochastic["rounding"]["rows_differ"]
    assert stochastic["rounding"]["calls_differ"]


def test_stochastic_rounding_stays_in_the_xla_graph() -> None:
    """After warm-up, each call (and each rounded copy into a bf16 tensor) is one graph run,
    compiles nothing, moves nothing to the host and falls back to no host operation: the bit
    cast it was made of did, twice a call (issue 36)."""
    counted = run_script("stochastic_rounding_graph_xla.py")
    for name in ("round", "copy"):
        for call in counted[name]["calls"]:
            assert call == {"compilations": 0, "executions": 1, "to_host": 0, "fallbacks": []}
        assert counted[name]["fresh_noise"]


def test_fp32_params_copy_with_stochastic_rounding_steps_on_xla(stochastic: dict[str, Any]) -> None:
    run = stochastic["fp32_params_copy"]
    assert run["param_dtypes"] == ["torch.bfloat16"]
    assert run["param_devices"] == ["xla"]
    assert run["master_dtypes"] == ["torch.float32"]
    assert run["params_are_roundings_of_masters"]
    assert run["params_rounded_away_from_nearest"] > 0  # the rounding really is stochastic
    assert run["losses"][-1] < run["losses"][0]


def test_stochastic_rounding_optimizer_steps_on_xla(stochastic: dict[str, Any]) -> None:
    run = stochastic["stochastic_rounding_optimizer"]
    assert run["param_dtypes"] == ["torch.bfloat16"]
    assert run["param_devices"] == ["xla"]
    assert run["moment_dtypes"] == ["torch.float32"]
    assert run["moment_devices"] == ["xla"]
    assert run["state_keyed_by_params"]  # the fp32 stand-ins are gone after the step
    assert run["inner_params_are_model_params"]
    assert run["losses"][-1] < run["losses"][0]


# -- c. masters follow changes made outside the optimizer, on XLA ----------------------------


@pytest.fixture(scope="module")
def outside_changes() -> dict[str, Any]:
    return run_script("masters_follow_outside_changes_xla.py")


def test_masters_follow_a_loaded_state_dict_on_xla(outside_changes: dict[str, Any]) -> None:
    run = outside_changes["other_state"]
    # The step after load_state_dict starts from the loaded values (exact up to fp32 rounding)...
    assert run["max_error_vs_new_params_minus_lr_grad"] < 1e-6
    # ...not from the stale masters, which the loaded state is >= 0.5 away from.
    assert run["min_distance_to_stale_masters_minus_lr_grad"] > 0.1
    assert run["param_dtypes"] == ["torch.bfloat16"]
    assert run["master_dtypes"] == ["torch.float32"]
    assert run["master_devices"] == ["xla"]
    assert run["params_are_nearest_rounding_of_masters"]


def test_reloading_the_same_state_keeps_master_precision_on_xla(
    outside_changes: dict[str, Any],
) -> None:
    run = outside_changes["same_state"]
    assert run["masters_finer_than_bf16"] > run["elements"] // 2  # the check has something to lose
    assert run["masters_changed"] == 0, run


# -- d. the autocast recipe, and the stochastic-rounding flag's timing -----------------------


@pytest.fixture(scope="module")
def autocast_and_flags() -> dict[str, Any]:
    return run_script("autocast_and_flags_xla.py", fresh=True)  # torch_xla's import is tested


def test_bf16_autocast_on_xla_runs_matmuls_in_bf16_and_keeps_params_fp32(
    autocast_and_flags: dict[str, Any],
) -> None:
    run = autocast_and_flags["autocast"]
    assert run["device_type"] == "xla"
    assert run["device_type_without_argument"] == "xla"  # torch_xla is loaded
    assert run["dtype"] == "torch.bfloat16"
    assert run["matmul_inside"] == "torch.bfloat16"
    assert run["matmul_outside"] == "torch.float32"
    assert run["layer_outputs"] == ["torch.bfloat16", "torch.bfloat16"]
    assert run["param_dtypes"] == ["torch.float32"]
    assert run["param_devices"] == ["xla"]
    assert run["grad_dtypes"] == ["torch.float32"]
    assert run["loss_finite"]


def test_enable_stochastic_rounding_warns_only_after_the_xla_device_was_used(
    autocast_and_flags: dict[str, Any],
) -> None:
    run = autocast_and_flags["enable_stochastic_rounding"]
    assert run["before_import"]["warnings"] == 0
    assert run["before_device"]["warnings"] == 0
    assert run["after_device"]["warnings"] == 1
    assert run["after_device"]["mentions_variable"]
    assert run["after_device"]["warned_at_caller"]
    assert {stage["value"] for stage in run.values()} == {"1"}  # set in every case


# -- f. fp32 made inside forward and fp32 targets, on a bf16 model -----------------------------


def test_fp32_made_inside_forward_fails_a_bare_bf16_model_on_xla() -> None:
    """Hazard 1, measured: `F.linear` of fp32 positions made in `forward` promotes when traced,
    and the promoted result meeting a bf16 bias fails the HLO verifier at the step."""
    result = run_python(
        [str(SCRIPTS / "casts_inside_forward_xla.py"), "bare"], ROOT,
        {**os.environ, "PJRT_DEVICE": "CPU"}, timeout=300,
    )  # fmt: skip
    assert result.returncode != 0
    assert "mixed precision is disallowed" in result.stderr


def test_the_cast_computes_inside_forward_in_bf16_and_trains_against_fp32_targets() -> None:
    run = run_script("casts_inside_forward_xla.py", "cast")
    assert run["computed_in"] == ["torch.bfloat16"]  # F.linear and matmul of fp32 made inside
    assert run["output"] == "torch.float32"  # for the loss against fp32 targets (hazard 2)
    assert run["grads"] == run["params"] == ["torch.bfloat16"]
    losses = run["losses"]
    assert all(math.isfinite(loss) for loss in losses)
    assert losses[-1] < 0.6 * losses[0]


# -- g. one XLA graph per training step -------------------------------------------------------


ONE_GRAPH = {"compilations": 0, "executions": 1, "to_host": 0, "fallbacks": []}


@pytest.fixture(scope="module")
def step_graphs() -> dict[str, Any]:
    return run_script("step_graphs_xla.py")


@pytest.mark.parametrize(
    "scenario",
    [
        "fp32_params_copy",
        "fp32_params_copy_stochastic",
        "adamw_fp32_params_copy",
        "stochastic_rounding_optimizer",
        "stochastic_rounding_optimizer_bf16_states",
        "input_cast_step",
    ],
)
def test_a_training_step_with_the_runtime_is_one_xla_graph(
    step_graphs: dict[str, Any], scenario: str
) -> None:
    """Issue 36: after warm-up, each step (forward, backward, step, zero_grad, sync) with each
    runtime optimizer, and with the input cast on a model fed fp32, compiles nothing, runs one
    graph, moves nothing to the host and falls back to no host operation; and it trains."""
    run = step_graphs[scenario]
    assert run["calls"] == [ONE_GRAPH] * 4
    losses = [loss for (loss,) in run["results"]]
    assert all(later < earlier for earlier, later in itertools.pairwise(losses)), losses


def test_a_forward_through_the_input_cast_is_one_xla_graph(step_graphs: dict[str, Any]) -> None:
    run = step_graphs["input_cast_forward"]
    assert run["calls"] == [ONE_GRAPH] * 4
    assert run["output_dtype"] == "torch.float32"
    assert all(output == run["results"][0] for output in run["results"])  # same weights


def test_the_graph_counts_see_a_loss_read_inside_the_step(step_graphs: dict[str, Any]) -> None:
    """The control: `loss.item()` inside the step cuts it in two graphs and one transfer."""
    for call in step_graphs["loss_read_inside_the_step"]["calls"]:
        assert call["compilations"] == 0
        assert (call["executions"], call["to_host"]) == (2, 1)
