"""`optimizer.state` of the wrappers: the inner optimizer's state, keyed by the model's parameters.

A script reads `optimizer.state[p]["exp_avg_sq"]` for the `p` of `model.parameters()` (logging,
a manual LR rule); the inner optimizer keys its state by the fp32 masters it steps. The
wrapper's `state` is a view that translates the key and hands back the inner optimizer's own
dict. The XLA case runs in its own interpreter, as in test_runtime_xla.py.
"""

from __future__ import annotations

import copy
import io
import json
import os
import pickle
import subprocess
import sys
from collections import defaultdict
from typing import Any

import pytest
import torch
from torch import nn
from torch.optim import Optimizer

from tests.conftest import ROOT, needs_torch_xla_platform
from xlamigrate_runtime import AdamW_FP32ParamsCopy, FP32ParamsCopy, StochasticRoundingOptimizer
from xlamigrate_runtime.optim import MASTERS_KEY


def bf16_mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)).to(torch.bfloat16)


def loss_of(model: nn.Module, step: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(32, 8, generator=generator)
    y = x.sum(dim=1, keepdim=True)
    return nn.functional.mse_loss(model(x.to(torch.bfloat16)).float(), y)


def train(model: nn.Module, optimizer: Optimizer, steps: int) -> None:
    for step in range(steps):
        optimizer.zero_grad()
        loss_of(model, step).backward()
        optimizer.step()


def wrapped_adamw(steps: int = 3, **options: Any) -> tuple[nn.Module, FP32ParamsCopy]:
    model = bf16_mlp()
    optimizer = FP32ParamsCopy(torch.optim.AdamW(model.parameters(), lr=1e-2), **options)
    train(model, optimizer, steps)
    return model, optimizer


def round_trip(state: dict[str, Any]) -> dict[str, Any]:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded: dict[str, Any] = torch.load(buffer, weights_only=True)
    return loaded


# --- reading a model parameter's state ---------------------------------------------------------


def test_exp_avg_sq_of_a_model_parameter_is_read_through_the_wrapper() -> None:
    """The moments are fp32 AdamW's on fp32 masters, bit for bit, found by the bf16 parameter."""
    model = bf16_mlp()
    masters = [p.detach().float().clone().requires_grad_() for p in model.parameters()]
    reference = torch.optim.AdamW(masters, lr=1e-2)
    optimizer = FP32ParamsCopy(torch.optim.AdamW(model.parameters(), lr=1e-2))
    for step in range(3):
        optimizer.zero_grad()
        loss_of(model, step).backward()
        for master, param in zip(masters, model.parameters(), strict=True):
            master.grad = param.grad.float()
        reference.step()
        optimizer.step()
    for param, master in zip(model.parameters(), masters, strict=True):
        moment = optimizer.state[param]["exp_avg_sq"]
        assert moment.dtype == torch.float32 and moment.shape == param.shape
        assert torch.equal(moment, reference.state[master]["exp_avg_sq"])
        assert torch.equal(optimizer.state[param]["exp_avg"], reference.state[master]["exp_avg"])
        assert float(optimizer.state[param]["step"]) == 3


def test_state_of_a_parameter_is_the_inner_optimizers_own_dict() -> None:
    model, optimizer = wrapped_adamw()
    for param, master in zip(model.parameters(), optimizer.master_params(), strict=True):
        assert optimizer.state[param] is optimizer.optimizer.state[master]


def test_the_drop_in_class_answers_for_the_model_parameters_too() -> None:
    model = bf16_mlp()
    optimizer = AdamW_FP32ParamsCopy(model.parameters(), lr=1e-2)
    train(model, optimizer, 2)
    assert all(optimizer.state[p]["exp_avg_sq"].dtype == torch.float32 for p in model.parameters())


def test_an_fp32_parameter_is_its_own_master_and_key() -> None:
    weight = nn.Parameter(torch.randn(8, 4).to(torch.bfloat16))
    scale = nn.Parameter(torch.ones(4))  # fp32 beside bf16: stepped directly, no master
    optimizer = FP32ParamsCopy(torch.optim.AdamW([weight, scale], lr=1e-2))
    for _ in range(2):
        optimizer.zero_grad()
        ((torch.randn(3, 8).to(torch.bfloat16) @ weight).float() * scale).square().mean().backward()
        optimizer.step()
    assert optimizer.master_params()[1] is scale
    assert optimizer.state[scale] is optimizer.optimizer.state[scale]
    assert optimizer.state[weight] is optimizer.optimizer.state[optimizer.master_params()[0]]
    assert [id(p) for p in optimizer.state] == [id(weight), id(scale)]


# --- writing through it ------------------------------------------------------------------------


def test_a_write_through_the_view_is_seen_by_the_inner_optimizer() -> None:
    """A manual rule resets one parameter's step count: the next step is Adam's first again."""
    model, optimizer = wrapped_adamw(steps=3)
    first, *others = list(model.parameters())
    optimizer.state[first]["step"] = torch.tensor(0.0)
    train(model, optimizer, 1)
    inner = optimizer.optimizer.state
    masters = optimizer.master_params()
    assert float(inner[masters[0]]["step"]) == 1
    assert all(float(inner[master]["step"]) == 4 for master in masters[1:])
    assert all(float(optimizer.state[p]["step"]) == 4 for p in others)


def test_replacing_and_deleting_an_entry_reach_the_inner_optimizer() -> None:
    model, optimizer = wrapped_adamw()
    first, second = list(model.parameters())[:2]
    master = optimizer.master_params()[0]
    fresh: dict[str, Any] = {}
    optimizer.state[first] = fresh
    assert optimizer.optimizer.state[master] is fresh
    del optimizer.state[second]
    assert optimizer.master_params()[1] not in optimizer.optimizer.state
    train(model, optimizer, 1)  # AdamW makes both states again, from step 1
    assert float(optimizer.state[first]["step"]) == float(optimizer.state[second]["step"]) == 1


def test_assigning_a_new_state_resets_the_inner_optimizers_state() -> None:
    """`optimizer.state = defaultdict(dict)`, a reset in plain torch, resets the moments."""
    model, optimizer = wrapped_adamw()
    optimizer.state = defaultdict(dict)
    assert len(optimizer.state) == 0 and len(optimizer.optimizer.state) == 0
    train(model, optimizer, 1)
    assert all(float(optimizer.state[p]["step"]) == 1 for p in model.parameters())


# --- a mapping over the model's parameters --------------------------------------------------


def test_iteration_len_and_contains_see_the_model_parameters_that_have_state() -> None:
    model = bf16_mlp()
    model[2].bias.requires_grad_(False)  # no gradient: AdamW makes no state for it
    params = list(model.parameters())
    optimizer = FP32ParamsCopy(torch.optim.AdamW(params, lr=1e-2))
    assert len(optimizer.state) == 0 and list(optimizer.state) == []
    assert params[0] not in optimizer.state
    assert optimizer.state.get(params[0]) is None
    assert len(optimizer.state) == 0  # get made no empty state (state[p] would, as in torch)
    train(model, optimizer, 2)
    with_state = params[:-1]
    assert len(optimizer.state) == len(with_state)
    assert [id(p) for p in optimizer.state] == [id(p) for p in with_state]
    assert all(p in optimizer.state for p in with_state)
    assert params[-1] not in optimizer.state
    assert all(
        key is param and value is optimizer.optimizer.state[master]
        for (key, value), param, master in zip(
            optimizer.state.items(), with_state, optimizer.master_params(), strict=False
        )
    )
    assert optimizer.state.get(params[0], "default") is optimizer.state[params[0]]
    assert optimizer.state.get(params[-1], "default") == "default"


def test_a_master_is_accepted_as_a_key_but_listed_under_its_parameter() -> None:
    """`master_params()` are the inner optimizer's keys: code that looked its state up by them
    keeps working; iteration lists each state once, under the model's parameter."""
    model, optimizer = wrapped_adamw()
    for param, master in zip(model.parameters(), optimizer.master_params(), strict=True):
        assert master in optimizer.state
        assert optimizer.state[master] is optimizer.state[param]
    listed = {id(p) for p in optimizer.state}
    assert listed == {id(p) for p in model.parameters()}
    assert not listed & {id(m) for m in optimizer.master_params()}


def test_parameters_of_a_group_added_later_have_their_state_read_too() -> None:
    model = bf16_mlp()
    optimizer = FP32ParamsCopy(torch.optim.AdamW(model[0].parameters(), lr=1e-2))
    optimizer.add_param_group({"params": list(model[2].parameters()), "lr": 5e-3})
    train(model, optimizer, 2)
    assert [id(p) for p in optimizer.state] == [id(p) for p in model.parameters()]
    assert optimizer.state[model[2].weight]["exp_avg_sq"].dtype == torch.float32


# --- what it does not know -------------------------------------------------------------------


def test_an_unknown_tensor_is_a_key_error_that_says_what_the_state_is_keyed_by() -> None:
    _, optimizer = wrapped_adamw()
    stranger = torch.zeros(3, 4, dtype=torch.bfloat16)
    with pytest.raises(KeyError) as raised:
        optimizer.state[stranger]
    message = str(raised.value)
    assert "FP32ParamsCopy.state is keyed by the model's parameters" in message
    assert "param_groups" in message and "fp32 masters" in message
    assert "torch.bfloat16 tensor of shape (3, 4)" in message
    assert "FP32ParamsCopy.optimizer.state" in message  # where the inner keys live
    with pytest.raises(KeyError, match="keyed by the model's parameters"):
        optimizer.state[stranger] = {}
    assert stranger not in optimizer.state  # `in` and get answer, as for any mapping
    assert optimizer.state.get(stranger, "default") == "default"


def test_a_key_that_is_no_tensor_is_a_key_error_too() -> None:
    _, optimizer = wrapped_adamw()
    with pytest.raises(KeyError, match=r"keyed by the model's parameters.*a str is not one"):
        optimizer.state["exp_avg_sq"]
    assert 0 not in optimizer.state and [] not in optimizer.state


# --- checkpoints and torch's own users of `state` --------------------------------------------


def test_state_dict_keeps_its_format_and_round_trips_through_the_view() -> None:
    model, optimizer = wrapped_adamw()
    count = len(list(model.parameters()))
    saved = optimizer.state_dict()
    assert set(saved) == {"state", "param_groups", MASTERS_KEY}
    assert list(saved["state"]) == list(range(count))
    assert all(set(entry) == {"step", "exp_avg", "exp_avg_sq"} for entry in saved["state"].values())
    assert saved["param_groups"][0]["params"] == list(range(count))
    assert saved["state"] == optimizer.optimizer.state_dict()["state"]

    twin = copy.deepcopy(model)
    restored = FP32ParamsCopy(torch.optim.AdamW(twin.parameters(), lr=123.0))
    restored.load_state_dict(round_trip(saved))
    for mine, theirs in zip(model.parameters(), twin.parameters(), strict=True):
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(restored.state[theirs][key], optimizer.state[mine][key])
    # the view answers from the inner optimizer's new state (load_state_dict replaced it)
    for param, master in zip(twin.parameters(), restored.master_params(), strict=True):
        assert restored.state[param] is restored.optimizer.state[master]
    again = restored.state_dict()
    for index, entry in saved["state"].items():
        assert all(torch.equal(entry[k], again["state"][index][k]) for k in entry)
    assert all(
        torch.equal(a, b)
        for a, b in zip(saved[MASTERS_KEY].values(), again[MASTERS_KEY].values(), strict=True)
    )


def test_schedulers_swa_and_zero_grad_keep_working_with_the_view() -> None:
    model = bf16_mlp()
    optimizer = FP32ParamsCopy(torch.optim.AdamW(model.parameters(), lr=1e-2))
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-2, total_steps=10)
    for step in range(3):
        optimizer.zero_grad(set_to_none=False)
        loss_of(model, step).backward()
        optimizer.step()
        scheduler.step()
    swa = torch.optim.swa_utils.SWALR(optimizer, swa_lr=1e-3)
    train(model, optimizer, 1)
    swa.step()
    assert optimizer.optimizer.param_groups[0]["lr"] != 1e-2
    assert all(float(optimizer.state[p]["step"]) == 4 for p in model.parameters())


def test_a_wrapper_pickles_and_deepcopies_whole() -> None:
    """Optimizer.__getstate__ keeps defaults, state and param_groups only: the wrappers keep
    everything, so a copy has its inner optimizer, masters and a view onto its own state."""
    _, optimizer = wrapped_adamw()
    for copied in (copy.deepcopy(optimizer), pickle.loads(pickle.dumps(optimizer))):
        params = [p for group in copied.param_groups for p in group["params"]]
        assert len(copied.state) == len(params)
        for param, master in zip(params, copied.master_params(), strict=True):
            assert copied.state[param] is copied.optimizer.state[master]
        for mine, theirs in zip(optimizer.state.values(), copied.state.values(), strict=True):
            assert torch.equal(mine["exp_avg_sq"], theirs["exp_avg_sq"])
        for param in params:  # and it still steps
            param.grad = torch.ones_like(param)
        copied.step()
        assert all(float(copied.state[p]["step"]) == 4 for p in params)


def test_stochastic_rounding_optimizer_state_is_keyed_by_the_model_parameters() -> None:
    """It keeps no masters: between steps the inner state is the parameters' own."""
    model = bf16_mlp()
    optimizer = StochasticRoundingOptimizer(torch.optim.AdamW(model.parameters(), lr=1e-2))
    train(model, optimizer, 2)
    assert [id(p) for p in optimizer.state] == [id(p) for p in model.parameters()]
    assert all(optimizer.state[p]["exp_avg_sq"].dtype == torch.float32 for p in model.parameters())
    with pytest.raises(KeyError) as raised:
        optimizer.state[torch.zeros(2)]
    assert "StochasticRoundingOptimizer.state is keyed by the model's parameters" in str(
        raised.value
    )
    assert "masters" not in str(raised.value)


# --- on the XLA device ------------------------------------------------------------------------

# A bf16 MLP on the XLA device and one batch: what each script below trains (it imports the
# runtime's optimizers itself).
XLA_PRELUDE = """
import json
import torch
import torch_xla
import torch_xla.core.xla_model as xm

device = torch_xla.device()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
model = model.to(torch.bfloat16).to(device)
generator = torch.Generator().manual_seed(1)
inputs = torch.randn(32, 8, generator=generator)
targets = inputs.sum(dim=1, keepdim=True)
inputs, targets = (t.to(device=device, dtype=torch.bfloat16) for t in (inputs, targets))
"""

XLA_SCRIPT = (
    XLA_PRELUDE
    + """
from xlamigrate_runtime import FP32ParamsCopy
optimizer = FP32ParamsCopy(torch.optim.AdamW(model.parameters(), lr=1e-2))

def train(steps):
    for _ in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(inputs), targets).backward()
        xm.optimizer_step(optimizer)
        torch_xla.sync()

train(3)
params, masters = list(model.parameters()), optimizer.master_params()
inner = optimizer.optimizer.state
moments = [optimizer.state[p]["exp_avg_sq"] for p in params]
saved = optimizer.state_dict()
first = optimizer.state[params[0]]
first["step"] = torch.zeros_like(first["step"])
train(1)
print(json.dumps({
    "same_dicts": all(optimizer.state[p] is inner[m] for p, m in zip(params, masters)),
    "keys_are_params": [id(p) for p in optimizer.state] == [id(p) for p in params],
    "len": len(optimizer.state),
    "params": len(params),
    "contains": all(p in optimizer.state for p in params),
    "moment_dtypes": sorted({str(m.dtype) for m in moments}),
    "moment_devices": sorted({m.device.type for m in moments}),
    "moments_positive": all(bool((m.cpu() > 0).all()) for m in moments),
    "moments_in_state_dict": all(
        torch.equal(m.cpu(), saved["state"][i]["exp_avg_sq"].cpu()) for i, m in enumerate(moments)
    ),
    "steps_after_write": [float(optimizer.state[p]["step"]) for p in params],
}))
"""
)


@needs_torch_xla_platform
def test_exp_avg_sq_is_read_and_written_through_the_wrapper_on_xla() -> None:
    result = subprocess.run(
        [sys.executable, "-c", XLA_SCRIPT],
        env={**os.environ, "PJRT_DEVICE": "CPU"},
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    if result.returncode != 0:
        pytest.fail(f"the XLA script exited {result.returncode}:\n{result.stderr[-4000:]}")
    run = json.loads(result.stdout.strip().splitlines()[-1])
    assert run["same_dicts"] and run["keys_are_params"] and run["contains"]
    assert run["len"] == run["params"] == 4
    assert run["moment_dtypes"] == ["torch.float32"]
    assert run["moment_devices"] == ["xla"]
    assert run["moments_positive"]
    assert run["moments_in_state_dict"]
    assert run["steps_after_write"] == [1.0, 4.0, 4.0, 4.0]  # the reset one restarted


XLA_BF16_STATES_SCRIPT = (
    XLA_PRELUDE
    + """
from xlamigrate_runtime import StochasticRoundingOptimizer
inner = torch.optim.AdamW(model.parameters(), lr=1e-2)
optimizer = StochasticRoundingOptimizer(inner, bf16_states=True)
losses = []
for _ in range(20):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(inputs), targets)
    loss.backward()
    xm.optimizer_step(optimizer)
    torch_xla.sync()
    losses.append(float(loss))
moments = [optimizer.state[p][key] for p in model.parameters() for key in ("exp_avg", "exp_avg_sq")]
print(json.dumps({
    "dtypes": sorted({str(m.dtype) for m in moments}),
    "devices": sorted({m.device.type for m in moments}),
    "finite": all(bool(torch.isfinite(m.cpu()).all()) for m in moments),
    "first_loss": sum(losses[:3]) / 3,
    "last_loss": sum(losses[-3:]) / 3,
}))
"""
)


@needs_torch_xla_platform
def test_bf16_states_on_xla_stay_bf16_on_the_device_and_train() -> None:
    result = subprocess.run(
        [sys.executable, "-c", XLA_BF16_STATES_SCRIPT],
        env={**os.environ, "PJRT_DEVICE": "CPU"},
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    if result.returncode != 0:
        pytest.fail(f"the XLA script exited {result.returncode}:\n{result.stderr[-4000:]}")
    run = json.loads(result.stdout.strip().splitlines()[-1])
    assert run["dtypes"] == ["torch.bfloat16"]
    assert run["devices"] == ["xla"]
    assert run["finite"]
    assert run["last_loss"] < 0.5 * run["first_loss"]
