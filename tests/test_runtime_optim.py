"""FP32ParamsCopy and StochasticRoundingOptimizer on CPU torch: one test per promise they make."""

from __future__ import annotations

import copy
import io
import warnings
from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
import torch
from torch import nn
from torch.optim import Optimizer

import xlamigrate_runtime.optim
from xlamigrate_runtime import AdamW_FP32ParamsCopy, FP32ParamsCopy, StochasticRoundingOptimizer
from xlamigrate_runtime.optim import keeps_fp32_grads
from xlamigrate_runtime.rounding import is_bf16_rounding_of

Wrapper = Callable[[Optimizer], Optimizer]
WRAPPERS: dict[str, Wrapper] = {
    "masters-nearest": FP32ParamsCopy,
    "masters-stochastic": lambda inner: FP32ParamsCopy(inner, stochastic_rounding=True),
    "states-stochastic": StochasticRoundingOptimizer,
}


def bf16_mlp(seed: int = 0, width: int = 8, hidden: int = 16) -> nn.Module:
    torch.manual_seed(seed)
    layers = (nn.Linear(width, hidden), nn.Tanh(), nn.Linear(hidden, 1))
    return nn.Sequential(*layers).to(torch.bfloat16)


def batch(
    step: int, width: int = 8, summed: int = 8, base: int = 1000
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs of `width` features; the target is the sum of the first `summed` of them."""
    generator = torch.Generator().manual_seed(base + step)
    x = torch.randn(32, width, generator=generator)
    return x.to(torch.bfloat16), x[:, :summed].sum(dim=1, keepdim=True).to(torch.bfloat16)


def train(model: nn.Module, optimizer: Optimizer, steps: range) -> list[float]:
    losses = []
    for step in steps:
        x, y = batch(step)
        loss = nn.functional.mse_loss(model(x).float(), y.float())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def round_trip(state: dict[str, Any]) -> dict[str, Any]:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded: dict[str, Any] = torch.load(buffer, weights_only=True)
    return loaded


def inner_state_tensors(optimizer: Any) -> list[torch.Tensor]:
    """The inner optimizer's per-parameter state tensors, without AdamW's scalar step count."""
    return [
        value
        for state in optimizer.optimizer.state.values()
        for key, value in state.items()
        if torch.is_tensor(value) and key != "step"
    ]


# --- it is an Optimizer over the model's bf16 parameters ------------------------------------


@pytest.mark.parametrize("name", WRAPPERS)
def test_wrapper_is_an_optimizer_whose_param_groups_are_the_model_parameters(name: str) -> None:
    model = bf16_mlp()
    optimizer = WRAPPERS[name](torch.optim.AdamW(model.parameters(), lr=1e-3))
    assert isinstance(optimizer, Optimizer)
    grouped = [p for group in optimizer.param_groups for p in group["params"]]
    assert len(grouped) == len(list(model.parameters()))
    assert all(a is b for a, b in zip(grouped, model.parameters(), strict=True))
    assert all(p.dtype == torch.bfloat16 for p in grouped)
    assert optimizer.param_groups[0]["lr"] == 1e-3


@pytest.mark.parametrize("name", WRAPPERS)
def test_parameters_stay_bf16_and_training_makes_progress(name: str) -> None:
    model = bf16_mlp()
    optimizer = WRAPPERS[name](torch.optim.AdamW(model.parameters(), lr=1e-2))
    losses = train(model, optimizer, range(40))
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert all(t.dtype == torch.float32 for t in inner_state_tensors(optimizer))
    assert sum(losses[-5:]) < 0.5 * sum(losses[:5])


def test_masters_are_fp32_and_never_alias_the_parameters() -> None:
    model = bf16_mlp()
    optimizer = FP32ParamsCopy(torch.optim.AdamW(model.parameters(), lr=1e-2))
    train(model, optimizer, range(5))
    for param, master in zip(model.parameters(), optimizer.master_params(), strict=True):
        assert master.dtype == torch.float32 and param.dtype == torch.bfloat16
        assert master.data_ptr() != param.data_ptr()
        before = param.detach().clone()
        with torch.no_grad():
            master.add_(1.0)
        assert torch.equal(param, before)


def test_update_is_computed_in_fp32_from_fp32_gradients() -> None:
    model = bf16_mlp()
    masters = [p.detach().float().clone().requires_grad_() for p in model.parameters()]
    reference = torch.optim.AdamW(masters, lr=1e-2, weight_decay=0.1)
    optimizer = FP32ParamsCopy(torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1))
    for step in range(3):
        x, y = batch(step)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x).float(), y.float()).backward()
        for master, param in zip(masters, model.parameters(), strict=True):
            master.grad = param.grad.float()
        reference.step()
        optimizer.step()
        for master, mine, param in zip(
            masters, optimizer.master_params(), model.parameters(), strict=True
        ):
            assert torch.equal(master.detach(), mine)
            assert torch.equal(param, master.detach().to(torch.bfloat16))


# --- LR schedulers, gradient clipping, zero_grad, groups ------------------------------------


def test_lr_scheduler_changes_reach_the_update() -> None:
    model = bf16_mlp()
    optimizer = FP32ParamsCopy(torch.optim.AdamW(model.parameters(), lr=1e-2))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 if step == 0 else 0.0)
    train(model, optimizer, range(1))
    scheduler.step()
    assert optimizer.param_groups[0]["lr"] == 0.0
    masters = [m.clone() for m in optimizer.master_params()]
    train(model, optimizer, range(1, 3))
    assert all(torch.equal(a, b) for a, b in zip(masters, optimizer.master_params(), strict=True))


def test_clip_grad_norm_on_the_model_parameters_scales_the_update() -> None:
    model = bf16_mlp()
    optimizer = FP32ParamsCopy(torch.optim.SGD(model.parameters(), lr=1.0))
    before = [m.clone() for m in optimizer.master_params()]
    x, y = batch(0)
    nn.functional.mse_loss(model(x).float(), y.float()).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1e-3)
    clipped = [p.grad.float() for p in model.parameters()]
    optimizer.step()
    total = torch.sqrt(
        sum((b - m).pow(2).sum() for b, m in zip(before, optimizer.master_params(), strict=True))
    )
    assert abs(total.item() - 1e-3) < 1e-4
    for b, m, g in zip(before, optimizer.master_params(), clipped, strict=True):
        # b - (b - g) in fp32 is exact up to one ulp of b (|b| < 1: below 1.2e-7).
        assert torch.allclose(b - m, g, rtol=0, atol=1.2e-7)


@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad_clears_the_model_gradients(set_to_none: bool) -> None:
    model = bf16_mlp()
    optimizer = FP32ParamsCopy(torch.optim.AdamW(model.parameters(), lr=1e-2))
    train(model, optimizer, range(1))
    x, y = batch(1)
    nn.functional.mse_loss(model(x).float(), y.float()).backward()
    optimizer.zero_grad(set_to_none=set_to_none)
    for param in model.parameters():
        if set_to_none:
            assert param.grad is None
        else:
            assert param.grad is not None and param.grad.dtype == torch.bfloat16
            assert not bool(param.grad.any())
    assert all(m.grad is None for m in optimizer.master_params())


@pytest.mark.parametrize("name", WRAPPERS)
def test_param_groups_keep_their_own_hyperparameters(name: str) -> None:
    model = bf16_mlp()
    first, second = model[0], model[2]
    inner = torch.optim.AdamW(
        [{"params": first.parameters(), "lr": 1e-2}, {"params": second.parameters(), "lr": 0.0}],
        weight_decay=0.0,
    )
    optimizer = WRAPPERS[name](inner)
    frozen = [p.detach().clone() for p in second.parameters()]
    moving = [p.detach().clone() for p in first.parameters()]
    train(model, optimizer, range(5))
    assert all(torch.equal(a, b) for a, b in zip(frozen, second.parameters(), strict=True))
    assert all(not torch.equal(a, b) for a, b in zip(moving, first.parameters(), strict=True))


@pytest.mark.parametrize("name", WRAPPERS)
def test_parameters_without_gradients_are_left_bit_for_bit(name: str) -> None:
    model = bf16_mlp()
    model.register_parameter("unused", nn.Parameter(torch.randn(7).to(torch.bfloat16)))
    model[2].bias.requires_grad_(False)
    optimizer = WRAPPERS[name](torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.5))
    untouched = [model.unused.detach().clone(), model[2].bias.detach().clone()]
    train(model, optimizer, range(5))
    assert torch.equal(untouched[0], model.unused)
    assert torch.equal(untouched[1], model[2].bias)


@pytest.mark.parametrize("name", WRAPPERS)
def test_add_param_group_after_construction(name: str) -> None:
    model = bf16_mlp()
    optimizer = WRAPPERS[name](torch.optim.AdamW(model[0].parameters(), lr=1e-2))
    optimizer.add_param_group({"params": list(model[2].parameters()), "lr": 5e-3})
    assert optimizer.param_groups[1]["lr"] == 5e-3
    assert optimizer.param_groups[1]["weight_decay"] == optimizer.defaults["weight_decay"]
    before = [p.detach().clone() for p in model[2].parameters()]
    train(model, optimizer, range(3))
    assert all(not torch.equal(a, b) for a, b in zip(before, model[2].parameters(), strict=True))
    assert len(optimizer.state_dict()["state"]) == len(list(model.parameters()))
    if isinstance(optimizer, FP32ParamsCopy):
        assert len(optimizer.master_params()) == len(list(model.parameters()))


# --- any optimizer ---------------------------------------------------------------------------


class SignMomentum(Optimizer):
    """A third-party-style optimizer (as transformers defines its own): keeps a momentum state."""

    def __init__(self, params: Any, lr: float = 1e-3, beta: float = 0.9) -> None:
        super().__init__(params, {"lr": lr, "beta": beta})

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                buffer = state.setdefault("momentum", torch.zeros_like(p))
                buffer.mul_(group["beta"]).add_(p.grad, alpha=1 - group["beta"])
                p.add_(buffer.sign(), alpha=-group["lr"])


INNER_OPTIMIZERS: dict[str, Callable[[Any], Optimizer]] = {
    "sgd-momentum": lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9),
    "adam": lambda params: torch.optim.Adam(params, lr=1e-2),
    "adamw-foreach": lambda params: torch.optim.AdamW(params, lr=1e-2, foreach=True),
    "rmsprop": lambda params: torch.optim.RMSprop(params, lr=1e-3),
    "custom": lambda params: SignMomentum(params, lr=1e-2),
}


@pytest.mark.parametrize("inner", INNER_OPTIMIZERS)
@pytest.mark.parametrize("name", WRAPPERS)
def test_wraps_any_torch_optimizer(name: str, inner: str) -> None:
    model = bf16_mlp()
    optimizer = WRAPPERS[name](INNER_OPTIMIZERS[inner](model.parameters()))
    losses = train(model, optimizer, range(30))
    assert sum(losses[-5:]) < sum(losses[:5])
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert all(t.dtype == torch.float32 for t in inner_state_tensors(optimizer))


def test_fp32_parameters_are_stepped_directly() -> None:
    model = bf16_mlp()
    model.append(nn.LayerNorm(1))  # kept in fp32 on purpose
    optimizer = FP32ParamsCopy(torch.optim.AdamW(model.parameters(), lr=1e-2))
    norm_weight = model[3].weight
    assert any(m is norm_weight for m in optimizer.master_params())
    before = norm_weight.detach().clone()
    train(model, optimizer, range(3))
    assert norm_weight.dtype == torch.float32 and not torch.equal(before, norm_weight)


def test_rejects_what_it_cannot_wrap() -> None:
    model = bf16_mlp()
    with pytest.raises(TypeError, match=r"torch\.optim\.Optimizer"):
        FP32ParamsCopy(model.parameters())  # type: ignore[arg-type]
    stepped = torch.optim.AdamW(model.parameters(), lr=1e-2)
    train(model, stepped, range(1))
    with pytest.raises(ValueError, match="before its first step"):
        FP32ParamsCopy(stepped)
    wrapped = FP32ParamsCopy(torch.optim.AdamW(bf16_mlp().parameters()))
    with pytest.raises(TypeError, match="already wrapped"):
        FP32ParamsCopy(wrapped)


def test_adamw_fp32_params_copy_is_a_drop_in_for_the_neuron_sample() -> None:
    model, twin = bf16_mlp(), bf16_mlp()
    sample_style = AdamW_FP32ParamsCopy(model.parameters(), lr=1e-2, betas=(0.8, 0.99))
    explicit = FP32ParamsCopy(torch.optim.AdamW(twin.parameters(), lr=1e-2, betas=(0.8, 0.99)))
    assert isinstance(sample_style.optimizer, torch.optim.AdamW)
    assert sample_style.param_groups[0]["betas"] == (0.8, 0.99)
    train(model, sample_style, range(5))
    train(twin, explicit, range(5))
    assert all(
        torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters(), strict=True)
    )


# --- checkpoints -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", WRAPPERS)
def test_state_dict_round_trip_keeps_fp32_states_and_masters_bit_exact(name: str) -> None:
    model = bf16_mlp()
    optimizer = WRAPPERS[name](torch.optim.AdamW(model.parameters(), lr=1e-2))
    train(model, optimizer, range(4))
    saved = round_trip(optimizer.state_dict())
    twin = copy.deepcopy(model)
    restored = WRAPPERS[name](torch.optim.AdamW(twin.parameters(), lr=123.0))
    restored.load_state_dict(saved)
    assert restored.param_groups[0]["lr"] == 1e-2
    mine, theirs = optimizer.state_dict(), restored.state_dict()
    for index, state in mine["state"].items():
        for key, value in state.items():
            other = theirs["state"][index][key]
            assert other.dtype == value.dtype == torch.float32 and torch.equal(other, value), key
    if isinstance(optimizer, FP32ParamsCopy):
        assert isinstance(restored, FP32ParamsCopy)
        for a, b in zip(optimizer.master_params(), restored.master_params(), strict=True):
            assert b.dtype == torch.float32 and torch.equal(a, b)
        # The masters carry precision the bf16 parameters cannot hold.
        assert any(
            not torch.equal(m, p.float())
            for m, p in zip(optimizer.master_params(), model.parameters(), strict=True)
        )


def test_plain_optimizer_would_cast_the_fp32_states_to_bf16() -> None:
    """Why the wrappers load state themselves: Optimizer.load_state_dict casts to the params."""
    model = bf16_mlp()
    optimizer = FP32ParamsCopy(torch.optim.AdamW(model.parameters(), lr=1e-2))
    train(model, optimizer, range(2))
    plain = torch.optim.AdamW(copy.deepcopy(model).parameters(), lr=1e-2)
    plain.load_state_dict(round_trip(optimizer.state_dict()))
    assert all(s["exp_avg"].dtype == torch.bfloat16 for s in plain.state.values())


def resumed_halfway(
    build: Callable[[nn.Module, float], Any], model_first: bool
) -> tuple[nn.Module, Any]:
    """Five steps, a checkpoint through bytes, and a fresh model and optimizer (other weights,
    another learning rate: both must come from the checkpoint) loaded from it in the given
    order and trained five more steps; the resumed model and its optimizer."""
    first_half = bf16_mlp()
    optimizer = build(first_half, 1e-2)
    train(first_half, optimizer, range(5))
    checkpoint = round_trip({"model": first_half.state_dict(), "opt": optimizer.state_dict()})
    resumed = bf16_mlp(seed=99)  # a fresh process would start from other weights
    restored = build(resumed, 5.0)
    if model_first:
        resumed.load_state_dict(checkpoint["model"])
        restored.load_state_dict(checkpoint["opt"])
    else:
        restored.load_state_dict(checkpoint["opt"])
        resumed.load_state_dict(checkpoint["model"])
    train(resumed, restored, range(5, 10))
    return resumed, restored


@pytest.mark.parametrize("model_first", [True, False], ids=["model-then-opt", "opt-then-model"])
@pytest.mark.parametrize("name", WRAPPERS)
def test_resuming_from_a_checkpoint_continues_exactly(name: str, model_first: bool) -> None:
    uninterrupted = bf16_mlp()
    reference = WRAPPERS[name](torch.optim.AdamW(uninterrupted.parameters(), lr=1e-2))
    train(uninterrupted, reference, range(10))

    resumed, restored = resumed_halfway(
        lambda model, lr: WRAPPERS[name](torch.optim.AdamW(model.parameters(), lr=lr)),
        model_first,
    )

    for a, b in zip(uninterrupted.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)
    if isinstance(reference, FP32ParamsCopy) and isinstance(restored, FP32ParamsCopy):
        for a, b in zip(reference.master_params(), restored.master_params(), strict=True):
            assert torch.equal(a, b)


# --- parameters changed outside the optimizer ------------------------------------------------


def test_masters_follow_a_model_load_after_the_optimizer_was_built() -> None:
    model = bf16_mlp()
    optimizer = FP32ParamsCopy(torch.optim.SGD(model.parameters(), lr=0.1))
    train(model, optimizer, range(3))
    other = bf16_mlp(seed=7).state_dict()
    model.load_state_dict(other)
    optimizer.zero_grad()
    optimizer.step()  # no gradients: nothing updated, but the masters catch up
    for master, param in zip(optimizer.master_params(), model.parameters(), strict=True):
        assert torch.equal(master, param.float())
    train(model, optimizer, range(3, 4))
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())


def test_sample_defect_masters_would_overwrite_a_model_load() -> None:
    """The published sample captured masters once; a stale master would undo the load."""
    model = bf16_mlp()
    optimizer = FP32ParamsCopy(torch.optim.SGD(model.parameters(), lr=0.0))
    train(model, optimizer, range(1))
    loaded = bf16_mlp(seed=7).state_dict()
    model.load_state_dict(loaded)
    train(model, optimizer, range(1, 2))  # lr 0: the step must leave the loaded weights alone
    for name, param in model.named_parameters():
        assert torch.equal(param, loaded[name])


def test_reloading_the_same_values_keeps_the_masters_precision() -> None:
    model = bf16_mlp()
    optimizer = FP32ParamsCopy(torch.optim.AdamW(model.parameters(), lr=1e-3))
    train(model, optimizer, range(5))
    masters = [m.clone() for m in optimizer.master_params()]
    assert any(
        not torch.equal(m, p.float()) for m, p in zip(masters, model.parameters(), strict=True)
    )
    model.load_state_dict(copy.deepcopy(model.state_dict()))
    optimizer.zero_grad()
    optimizer.step()
    assert all(torch.equal(a, b) for a, b in zip(masters, optimizer.master_params(), strict=True))


def test_an_in_place_edit_resyncs_only_the_edited_elements() -> None:
    model = bf16_mlp()
    optimizer = FP32ParamsCopy(torch.optim.AdamW(model.parameters(), lr=1e-3))
    train(model, optimizer, range(5))
    weight = model[0].weight
    master = optimizer.master_params()[0].clone()
    with torch.no_grad():
        weight[0, 0] = 42.0
    optimizer.zero_grad()
    optimizer.step()
    after = optimizer.master_params()[0]
    assert after[0, 0].item() == 42.0
    assert torch.equal(after.flatten()[1:], master.flatten()[1:])


# --- stochastic rounding -----------------------------------------------------------------------


@pytest.mark.parametrize("wrap", ["masters", "states"])
def test_stochastic_rounding_is_reproducible_with_a_generator(wrap: str) -> None:
    def run(seed: int) -> list[torch.Tensor]:
        model = bf16_mlp()
        inner = torch.optim.AdamW(model.parameters(), lr=1e-3)
        generator = torch.Generator().manual_seed(seed)
        optimizer: Optimizer = (
            FP32ParamsCopy(inner, stochastic_rounding=True, generator=generator)
            if wrap == "masters"
            else StochasticRoundingOptimizer(inner, generator=generator)
        )
        train(model, optimizer, range(5))
        return [p.detach().clone() for p in model.parameters()]

    first, second, other = run(1), run(1), run(2)
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    assert any(not torch.equal(a, b) for a, b in zip(first, other, strict=True))


def test_stochastic_rounding_optimizer_keeps_no_fp32_copy_between_steps() -> None:
    model = bf16_mlp()
    optimizer = StochasticRoundingOptimizer(torch.optim.AdamW(model.parameters(), lr=1e-3))
    train(model, optimizer, range(3))
    inner = optimizer.optimizer
    assert all(
        a is b for a, b in zip(inner.param_groups[0]["params"], model.parameters(), strict=True)
    )
    assert set(map(id, inner.state)) == {id(p) for p in model.parameters()}
    held = sum(t.nbytes for t in inner_state_tensors(optimizer))
    count = sum(p.numel() for p in model.parameters())
    assert held == 8 * count  # exp_avg and exp_avg_sq in fp32, nothing else


# --- the per-step work: fp32 gradients, write-back into the parameters' storage ---------------


def wide_bf16_model(seed: int = 0) -> nn.Module:
    """Large enough (> 4096 elements per weight) for the chunked CPU rounding path."""
    return bf16_mlp(seed, width=256, hidden=64)


def wide_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    return batch(step, width=256, summed=4, base=2000)


@pytest.mark.parametrize("name", WRAPPERS)
def test_steps_write_into_the_existing_parameter_storage_and_keep_no_fp32_grads(name: str) -> None:
    model = wide_bf16_model()
    optimizer = WRAPPERS[name](torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True))
    storage = [p.data_ptr() for p in model.parameters()]
    for step in range(3):
        x, y = wide_batch(step)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x).float(), y.float()).backward()
        optimizer.step()
    assert [p.data_ptr() for p in model.parameters()] == storage
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    if isinstance(optimizer, FP32ParamsCopy):
        assert all(m.grad is None for m in optimizer.master_params())  # 16 bytes/param held
        for param, master in zip(model.parameters(), optimizer.master_params(), strict=True):
            assert bool(is_bf16_rounding_of(param, master).all())
            if name == "masters-nearest":
                assert torch.equal(param, master.to(torch.bfloat16))


def test_stochastic_write_back_rounds_each_large_parameter_both_ways() -> None:
    """The masters' updates are far below a bf16 ulp: nearest rounding would write every
    parameter back unchanged, stochastic rounding moves some of them up and some down."""
    model = wide_bf16_model()
    optimizer = FP32ParamsCopy(
        torch.optim.SGD(model.parameters(), lr=1e-5), stochastic_rounding=True
    )
    x, y = wide_batch(0)
    nn.functional.mse_loss(model(x).float(), y.float()).backward()
    optimizer.step()
    weight, master = model[0].weight, optimizer.master_params()[0]
    away = weight.float() != master.to(torch.bfloat16).float()
    assert 0 < int(away.sum()) < weight.numel()
    assert bool(is_bf16_rounding_of(weight, master).all())


def test_non_contiguous_bf16_parameters_are_written_back() -> None:
    weight = nn.Parameter(torch.randn(64, 128).to(torch.bfloat16).t())  # a transposed view
    assert not weight.is_contiguous()
    for stochastic in (False, True):
        optimizer = FP32ParamsCopy(
            torch.optim.SGD([weight], lr=0.1), stochastic_rounding=stochastic
        )
        weight.grad = torch.ones_like(weight)
        optimizer.step()
        master = optimizer.master_params()[0]
        assert bool(is_bf16_rounding_of(weight, master).all())
        assert not weight.is_contiguous()


@pytest.mark.parametrize("name", WRAPPERS)
def test_kept_fp32_grad_buffers_train_bit_for_bit_like_fresh_ones(name: str) -> None:
    """keep_fp32_grads trades 4 bytes per parameter at rest for no allocation per step: the
    same buffers every step, never left on the fp32 tensors, and the very same training.
    The masters' default (None) keeps them on the CPU; StochasticRoundingOptimizer, whose
    point is memory, keeps none unless asked."""
    runs = {}
    for keep in (False, True, None):
        model = wide_bf16_model()
        inner = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
        options = {} if keep is None else {"keep_fp32_grads": keep}  # None: the default
        if name == "states-stochastic":
            optimizer: Any = StochasticRoundingOptimizer(inner, **options)
        else:
            stochastic = name.endswith("stochastic")
            optimizer = FP32ParamsCopy(inner, stochastic_rounding=stochastic, **options)
        buffers = []
        for step in range(4):
            x, y = wide_batch(step)
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x).float(), y.float()).backward()
            optimizer.step()
            buffers.append([grad.data_ptr() for grad in optimizer._kept_grads.values()])
            assert all(
                p.grad is None
                for g in optimizer.optimizer.param_groups
                for p in g["params"]
                if p.dtype == torch.float32
            )
        kept = keep if keep is not None else name != "states-stochastic"
        if kept:
            assert len(buffers[0]) == len(list(model.parameters()))
            assert all(pointers == buffers[0] for pointers in buffers)
        else:
            assert buffers == [[]] * 4
        runs[keep] = [p.detach().clone() for p in model.parameters()]
    for other in (True, None):
        assert all(torch.equal(a, b) for a, b in zip(runs[False], runs[other], strict=True))


def test_fp32_grads_are_kept_by_default_only_where_the_allocator_does_not_cache() -> None:
    assert keeps_fp32_grads(None, torch.device("cpu"))
    assert not keeps_fp32_grads(None, torch.device("cuda", 0))  # caching allocator
    assert not keeps_fp32_grads(None, torch.device("xla", 0))  # fused into the update
    assert keeps_fp32_grads(True, torch.device("xla", 0))
    assert not keeps_fp32_grads(False, torch.device("cpu"))


def test_adamw_fp32_params_copy_takes_keep_fp32_grads() -> None:
    model = wide_bf16_model()
    optimizer = AdamW_FP32ParamsCopy(model.parameters(), lr=1e-2, keep_fp32_grads=True)
    x, y = wide_batch(0)
    nn.functional.mse_loss(model(x).float(), y.float()).backward()
    optimizer.step()
    assert len(optimizer._kept_grads) == 4


@pytest.mark.parametrize("name", WRAPPERS)
def test_the_callers_param_group_dicts_are_left_as_they_were(name: str) -> None:
    """`groups[0]["params"]` ended up holding the fp32 masters: torch keeps the dicts it is
    given as the inner optimizer's groups, and the wrapper put its stand-ins there."""
    model = bf16_mlp()
    params = list(model.parameters())
    groups = [{"params": params[:2], "weight_decay": 0.01}, {"params": params[2:]}]
    optimizer = WRAPPERS[name](torch.optim.AdamW(groups, lr=1e-2))
    train(model, optimizer, range(2))
    assert [p is q for p, q in zip(groups[0]["params"], params[:2], strict=True)] == [True, True]
    assert all(p.dtype == torch.bfloat16 for group in groups for p in group["params"])


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (lambda params: torch.optim.LBFGS(params), "LBFGS"),
        (lambda params: torch.optim.SparseAdam(params), "SparseAdam"),
    ],
)
@pytest.mark.parametrize("name_of_wrapper", WRAPPERS)
def test_optimizers_it_cannot_wrap_are_refused_saying_why(
    build: Callable[[Any], Optimizer], name: str, name_of_wrapper: str
) -> None:
    """LBFGS and SparseAdam were wrapped, and the script crashed at its first step."""
    inner = build(bf16_mlp().parameters())
    refusal = rf"{name} cannot be wrapped: .+\. Keep fp32 master weights"
    with pytest.raises(TypeError, match=refusal):
        WRAPPERS[name_of_wrapper](inner)


@pytest.mark.parametrize("name", WRAPPERS)
def test_adagrad_gets_its_construction_state_made_again_in_fp32(name: str) -> None:
    """Adagrad makes its squared-gradient sums when it is built, on the bf16 parameters: it was
    refused with a misleading "wrap before its first step". Its sums are made again in fp32,
    filled with `initial_accumulator_value` exactly (bf16 would hold 0.10009765625)."""
    model = bf16_mlp()
    optimizer = WRAPPERS[name](
        torch.optim.Adagrad(model.parameters(), lr=0.05, initial_accumulator_value=0.1)
    )
    sums = [state["sum"] for state in optimizer.optimizer.state.values()]  # type: ignore[attr-defined]
    assert len(sums) == 4
    assert all(s.dtype == torch.float32 and bool((s == torch.tensor(0.1)).all()) for s in sums)
    losses = train(model, optimizer, range(30))
    assert sum(losses[-5:]) < sum(losses[:5])
    assert all(t.dtype == torch.float32 for t in inner_state_tensors(optimizer))


def test_fp32_copy_of_adagrad_steps_its_masters_like_fp32_adagrad_bit_for_bit() -> None:
    model = bf16_mlp()
    fp32 = [p.detach().float().requires_grad_() for p in model.parameters()]
    wrapped = FP32ParamsCopy(
        torch.optim.Adagrad(model.parameters(), lr=0.05, initial_accumulator_value=0.1)
    )
    reference = torch.optim.Adagrad(fp32, lr=0.05, initial_accumulator_value=0.1)
    generator = torch.Generator().manual_seed(3)
    for _ in range(5):
        for param, twin in zip(model.parameters(), fp32, strict=True):
            grad = torch.randn(param.shape, generator=generator).to(torch.bfloat16)
            param.grad, twin.grad = grad, grad.float()
        wrapped.step()
        reference.step()
    for master, twin in zip(wrapped.master_params(), fp32, strict=True):
        assert torch.equal(master, twin)
    restored = FP32ParamsCopy(torch.optim.Adagrad(bf16_mlp().parameters(), lr=0.05))
    restored.load_state_dict(round_trip(wrapped.state_dict()))
    assert all(torch.equal(m, t) for m, t in zip(restored.master_params(), fp32, strict=True))


@pytest.mark.parametrize("name", WRAPPERS)
def test_adagrad_that_has_stepped_is_refused(name: str) -> None:
    model = bf16_mlp()
    stepped = torch.optim.Adagrad(model.parameters(), lr=0.05)
    train(model, stepped, range(1))
    with pytest.raises(ValueError, match="before its first step"):
        WRAPPERS[name](stepped)


def test_an_fp16_model_gets_fp32_masters_and_states() -> None:
    """fp16 parameters silently got no masters: stepped in fp16, with fp16 optimizer states, so
    an update below half an fp16 ulp was lost at every step."""
    weight = nn.Parameter(torch.ones(4, dtype=torch.float16))
    optimizer = FP32ParamsCopy(torch.optim.SGD([weight], lr=1.0))
    [master] = optimizer.master_params()
    assert master.dtype == torch.float32 and master is not weight
    for _ in range(100):  # 1e-4 per step: below half an fp16 ulp at 1.0 (2**-11)
        weight.grad = torch.full_like(weight, 1e-4)
        optimizer.step()
    assert torch.allclose(master, torch.full((4,), 0.99), atol=1e-5)
    assert weight.dtype == torch.float16
    assert torch.equal(weight, master.to(torch.float16))


def test_stochastic_rounding_optimizer_warns_about_fp16_parameters() -> None:
    weight = nn.Parameter(torch.ones(4, dtype=torch.float16))
    with pytest.warns(RuntimeWarning, match="fp16 parameters are stepped in fp16"):
        StochasticRoundingOptimizer(torch.optim.SGD([weight], lr=1.0))


def test_a_write_through_p_data_is_followed() -> None:
    """A WGAN weight clip (`p.data.clamp_(...)`) leaves the version counter alone: the next step
    started from the unclipped master and undid it. (Rounding to nearest, the default; with
    stochastic rounding either bf16 neighbour may be the optimizer's own write.)"""
    model = bf16_mlp()
    optimizer = FP32ParamsCopy(torch.optim.SGD(model.parameters(), lr=0.0))
    train(model, optimizer, range(1))
    for param in model.parameters():
        param.data.clamp_(-0.01, 0.01)
    clipped = [param.detach().clone() for param in model.parameters()]
    train(model, optimizer, range(1, 2))  # lr 0: the step must keep the clipped weights
    for param, before in zip(model.parameters(), clipped, strict=True):
        assert torch.equal(param, before)
    bound = torch.tensor(0.01, dtype=torch.bfloat16).float()  # the clip, as bf16 holds it
    for master in optimizer.master_params():
        assert master.abs().max() <= bound


def test_without_following_data_writes_no_parameter_is_read_until_its_version_moves() -> None:
    """`follow_data_writes=False`: a hand loop's cost (no compare each step); a write the
    version counter shows (an in-place op under no_grad, `load_state_dict`) is still followed
    exactly, and a write through `p.data`, as documented, is not."""
    model = bf16_mlp()
    optimizer = FP32ParamsCopy(
        torch.optim.SGD(model.parameters(), lr=0.0), follow_data_writes=False
    )
    train(model, optimizer, range(1))
    with (
        mock.patch.object(
            xlamigrate_runtime.optim, "differ_from_nearest", side_effect=AssertionError("compared")
        ),
        mock.patch.object(
            xlamigrate_runtime.optim, "_is_nearest_rounding", side_effect=AssertionError("read")
        ),
    ):
        train(model, optimizer, range(1, 3))  # (nothing written from outside: nothing read)
    with torch.no_grad():
        for param in model.parameters():
            param.clamp_(-0.01, 0.01)  # (moves the version counter)
    clipped = [param.detach().clone() for param in model.parameters()]
    train(model, optimizer, range(3, 4))  # lr 0: the step keeps the clipped weights
    for param, before, master in zip(
        model.parameters(), clipped, optimizer.master_params(), strict=True
    ):
        assert torch.equal(param, before)
        assert torch.equal(master, before.float())
    for param in model.parameters():
        param.data.mul_(2)  # (a write through .data: not seen in this mode)
    train(model, optimizer, range(4, 5))
    for param, before in zip(model.parameters(), clipped, strict=True):
        assert torch.equal(param, before)  # the masters' values written back over it


def test_adamw_fp32_params_copy_takes_follow_data_writes() -> None:
    weight = nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    assert not AdamW_FP32ParamsCopy([weight], lr=1e-3, follow_data_writes=False).follow_data_writes
    assert AdamW_FP32ParamsCopy([weight], lr=1e-3).follow_data_writes


def test_a_load_one_bf16_step_from_the_masters_is_followed_exactly() -> None:
    """Rounding to nearest, values one bf16 step from a master's rounding are not ours: 1.7% of
    elements kept their old masters, and DDP replicas never became bit-identical."""
    model = bf16_mlp()
    optimizer = FP32ParamsCopy(torch.optim.SGD(model.parameters(), lr=1e-3))
    train(model, optimizer, range(3))
    nudged = {
        name: torch.nextafter(value, torch.full_like(value, float("inf")))
        for name, value in model.state_dict().items()
    }
    model.load_state_dict(nudged)
    optimizer.zero_grad()
    optimizer.step()  # no gradients: nothing updated, but the masters catch up
    for master, param in zip(optimizer.master_params(), model.parameters(), strict=True):
        assert torch.equal(master, param.float())


def test_stochastic_rounding_optimizer_steps_a_bounded_bucket_at_a_time() -> None:
    """Every parameter was upcast at once (a peak of ~28 bytes per parameter during a step):
    the inner optimizer now sees at most `bucket_elements` elements of stand-ins at a time,
    and each result is still a rounding of the fp32 update."""
    seen: list[int] = []

    class Watched(torch.optim.AdamW):
        def step(self, closure: Any = None) -> Any:
            seen.append(sum(p.numel() for g in self.param_groups for p in g["params"]))
            return super().step(closure)

    model = bf16_mlp()
    reference = copy.deepcopy(model).float()  # the same step in fp32 throughout
    optimizer = StochasticRoundingOptimizer(
        Watched(model.parameters(), lr=1e-2), bucket_elements=50
    )
    fp32 = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    x, y = batch(0)
    for net, opt in ((model, optimizer), (reference, fp32)):
        loss = nn.functional.mse_loss(net(x.to(next(net.parameters()).dtype)).float(), y.float())
        opt.zero_grad()
        loss.backward()
    for param, exact in zip(model.parameters(), reference.parameters(), strict=True):
        exact.grad = param.grad.float()  # the very gradients the bf16 model got
    optimizer.step()
    fp32.step()
    largest = max(p.numel() for p in model.parameters())
    assert len(seen) > 1 and max(seen) < 50 + largest
    for param, exact in zip(model.parameters(), reference.parameters(), strict=True):
        assert bool(is_bf16_rounding_of(param, exact.detach()).all())


def test_stochastic_rounding_optimizer_state_dict_makes_no_fp32_copies() -> None:
    model = bf16_mlp()
    optimizer = StochasticRoundingOptimizer(torch.optim.AdamW(model.parameters(), lr=1e-2))
    train(model, optimizer, range(1))
    upcasts = []
    original = torch.Tensor.to

    def counting(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        upcasts.append(args)
        return original(tensor, *args, **kwargs)

    with mock.patch.object(torch.Tensor, "to", counting):
        state = optimizer.state_dict()
    assert upcasts == []
    assert all(
        value.dtype == torch.float32
        for entry in state["state"].values()
        for key, value in entry.items()
        if torch.is_tensor(value) and key != "step"
    )


# --- edges (issue 36) --------------------------------------------------------------------------


@pytest.mark.parametrize("name", WRAPPERS)
def test_a_group_edited_in_place_is_a_clear_error(name: str) -> None:
    model = bf16_mlp()
    optimizer = WRAPPERS[name](torch.optim.AdamW(model.parameters(), lr=1e-2))
    optimizer.param_groups[0]["params"].pop()
    with pytest.raises(RuntimeError, match=r"param_groups\[0\]\['params'\] .* add_param_group"):
        train(model, optimizer, range(1))
    with pytest.raises(RuntimeError, match="edited in place"):
        optimizer.state_dict()


def test_a_plain_optimizers_checkpoint_loads_with_a_warning_saying_what_was_rebuilt() -> None:
    model = bf16_mlp()
    plain = torch.optim.AdamW(model.parameters(), lr=1e-2)
    train(model, plain, range(2))
    wrapped = FP32ParamsCopy(torch.optim.AdamW(model.parameters(), lr=1e-2))
    with pytest.warns(UserWarning, match="no fp32 master weights .* rebuilt from the bf16"):
        wrapped.load_state_dict(plain.state_dict())
    saved = wrapped.state_dict()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (its own checkpoint: nothing to say)
        FP32ParamsCopy(torch.optim.AdamW(model.parameters(), lr=1e-2)).load_state_dict(saved)


@pytest.mark.parametrize("name", WRAPPERS)
def test_sparse_embedding_gradients_step_through_the_wrapper(name: str) -> None:
    """SGD takes the sparse fp32 gradient (only the looked-up rows move); AdamW refuses it
    with its own words, not a copy_() between dense and sparse tensors."""
    torch.manual_seed(0)
    table = nn.Embedding(10, 4, sparse=True).to(torch.bfloat16)
    before = table.weight.detach().clone()
    optimizer = WRAPPERS[name](torch.optim.SGD(table.parameters(), lr=0.5))
    table(torch.tensor([1, 3])).float().pow(2).sum().backward()
    optimizer.step()
    moved = (table.weight != before).any(dim=1)
    assert moved.tolist() == [i in (1, 3) for i in range(10)]
    refused = WRAPPERS[name](torch.optim.AdamW(table.parameters(), lr=0.5))
    table(torch.tensor([2])).float().sum().backward()
    with pytest.raises(RuntimeError, match="does not support sparse gradients"):
        refused.step()


@pytest.mark.parametrize("name", WRAPPERS)
def test_max_grad_norm_clips_the_fp32_gradients_the_update_is_made_from(name: str) -> None:
    """The norm of the exact fp32 gradients and the clipped fp32 copies, as clip_grad_norm_
    would give on an fp32 model holding the same values (on the bf16 model it rounds both)."""
    model = bf16_mlp(seed=3)
    reference = copy.deepcopy(model).float()
    options = {"bucket_elements": 50} if name == "states-stochastic" else {}
    inner = torch.optim.SGD(model.parameters(), lr=0.1)
    if name == "states-stochastic":
        optimizer = StochasticRoundingOptimizer(inner, max_grad_norm=0.05, **options)
    else:
        stochastic = name == "masters-stochastic"
        optimizer = FP32ParamsCopy(inner, stochastic_rounding=stochastic, max_grad_norm=0.05)
    inputs, targets = batch(0)
    nn.functional.mse_loss(model(inputs).float(), targets.float()).backward()
    expected = [p.grad.float() for p in model.parameters()]
    for p, grad in zip(reference.parameters(), expected, strict=True):
        p.grad = grad.clone()
    total = torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.05)
    assert total > 0.05  # (the clip applies)
    masters_before = [p.detach().float().clone() for p in model.parameters()]
    optimizer.step()
    for before, after, ref in zip(
        masters_before, model.parameters(), reference.parameters(), strict=True
    ):
        stepped = before - 0.1 * ref.grad
        assert is_bf16_rounding_of(after.detach(), stepped).all()
    if isinstance(optimizer, FP32ParamsCopy):
        for master, before, ref in zip(
            optimizer.master_params(), masters_before, reference.parameters(), strict=True
        ):
            assert torch.equal(master, before - 0.1 * ref.grad)
    with pytest.raises(ValueError, match="max_grad_norm must be positive"):
        FP32ParamsCopy(torch.optim.SGD(model.parameters(), lr=0.1), max_grad_norm=0.0)


def test_a_frozen_parameter_costs_no_master_until_it_trains() -> None:
    """Built while a weight is frozen, the wrapper keeps no fp32 copy of it (4 bytes a
    parameter); once it trains, its master is made from its value, and it steps exactly as
    in a wrapper that had a master all along (one that got no gradient until then)."""
    model = bf16_mlp(seed=5)
    along = copy.deepcopy(model)
    model[0].weight.requires_grad_(False)
    lazy = FP32ParamsCopy(torch.optim.AdamW(model.parameters(), lr=1e-2))
    eager = FP32ParamsCopy(torch.optim.AdamW(along.parameters(), lr=1e-2))
    assert lazy.master_params()[0] is model[0].weight
    assert [m.dtype for m in lazy.master_params()[1:]] == [torch.float32] * 3
    frozen = model[0].weight.detach().clone()
    for step in range(2):
        for net, optimizer in ((model, lazy), (along, eager)):
            x, y = batch(step)
            optimizer.zero_grad()
            nn.functional.mse_loss(net(x).float(), y.float()).backward()
            along[0].weight.grad = None  # (the eager one's weight gets no update either)
            optimizer.step()
    assert torch.equal(model[0].weight, frozen)
    model[0].weight.requires_grad_(True)
    train(model, lazy, range(2, 5))
    train(along, eager, range(2, 5))
    assert lazy.master_params()[0].dtype == torch.float32
    for mine, theirs in zip(lazy.master_params(), eager.master_params(), strict=True):
        assert torch.equal(mine, theirs)
    for mine, theirs in zip(model.parameters(), along.parameters(), strict=True):
        assert torch.equal(mine, theirs)
    assert lazy.state[model[0].weight]["exp_avg"].dtype == torch.float32


def test_a_frozen_parameter_saved_with_its_master_gets_it_back() -> None:
    model = bf16_mlp(seed=6)
    optimizer = FP32ParamsCopy(torch.optim.AdamW(model.parameters(), lr=1e-2))
    train(model, optimizer, range(3))
    saved = round_trip(optimizer.state_dict())
    model[0].weight.requires_grad_(False)
    again = FP32ParamsCopy(torch.optim.AdamW(model.parameters(), lr=1e-2))
    assert again.master_params()[0] is model[0].weight
    again.load_state_dict(saved)
    assert torch.equal(again.master_params()[0], optimizer.master_params()[0])


def test_a_write_through_p_data_is_followed_in_every_chunk_of_a_large_parameter() -> None:
    """The compare reads every element (a chunk at a time on the CPU): a `p.data` write of one
    element in the last, partial chunk is followed exactly, and only that element."""
    weight = nn.Parameter(torch.randn(3 * 131_072 + 5).to(torch.bfloat16))
    optimizer = FP32ParamsCopy(torch.optim.SGD([weight], lr=1e-3))
    weight.grad = torch.randn_like(weight)
    optimizer.step()
    [master] = optimizer.master_params()
    before = master.clone()
    weight.data[-2] = 7.0
    weight.grad = None
    optimizer.step()
    assert master[-2].item() == 7.0
    assert torch.equal(torch.cat([master[:-2], master[-1:]]), torch.cat([before[:-2], before[-1:]]))


def test_masters_are_rewritten_only_where_a_parameter_was_written_from_outside() -> None:
    """The per-step compare is a read: a step after the optimizer's own write changes no master
    but by the update; one `p.data` write makes one master follow, once."""
    model = wide_bf16_model()
    optimizer = FP32ParamsCopy(torch.optim.AdamW(model.parameters(), lr=1e-2))
    followed: list[torch.Tensor] = []
    follow = xlamigrate_runtime.optim._follow

    def counting(param: torch.Tensor, master: torch.Tensor, ours: torch.Tensor) -> None:
        followed.append(param)
        follow(param, master, ours)

    with mock.patch.object(xlamigrate_runtime.optim, "_follow", counting):
        for step in range(3):
            x, y = wide_batch(step)
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x).float(), y.float()).backward()
            optimizer.step()
        assert followed == []
        model[2].weight.data[0, 3] = 0.5
        optimizer.step()
        optimizer.step()
    assert len(followed) == 1 and followed[0] is model[2].weight


def test_default_buckets_hold_at_most_a_quarter_of_the_model() -> None:
    """One bucket of the whole model peaked at 24 bytes per parameter, above fp32 AdamW's 20:
    a step now upcasts at most a quarter of the parameters at a time (or one larger one)."""
    seen: list[int] = []

    class Watched(torch.optim.AdamW):
        def step(self, closure: Any = None) -> Any:
            seen.append(sum(p.numel() for g in self.param_groups for p in g["params"]))
            return super().step(closure)

    params = [nn.Parameter(torch.randn(n).to(torch.bfloat16)) for n in (300, 200, 200, 100, 900)]
    optimizer = StochasticRoundingOptimizer(Watched(params, lr=1e-2))
    for param in params:
        param.grad = torch.randn_like(param)
    optimizer.step()
    assert seen == [300, 400, 100, 900]  # (1,700 parameters: buckets of at most 425)


# --- StochasticRoundingOptimizer(bf16_states=True): 8 bytes per parameter ----------------------


def bf16_states_adamw(model: nn.Module, lr: float = 1e-2) -> StochasticRoundingOptimizer:
    return StochasticRoundingOptimizer(
        torch.optim.AdamW(model.parameters(), lr=lr), bf16_states=True
    )


def test_bf16_states_hold_8_bytes_per_parameter_and_train() -> None:
    model = bf16_mlp()
    optimizer = bf16_states_adamw(model)
    losses = train(model, optimizer, range(40))
    assert sum(losses[-5:]) < 0.5 * sum(losses[:5])
    count = sum(p.numel() for p in model.parameters())
    states = inner_state_tensors(optimizer)
    assert all(t.dtype == torch.bfloat16 for t in states)
    # exp_avg and exp_avg_sq, 2 bytes each: with the bf16 params and grads, 8 bytes a parameter
    assert sum(t.nbytes for t in states) == 4 * count
    steps = [state["step"] for state in optimizer.optimizer.state.values()]
    assert all(step.dtype == torch.float32 and step.item() == 40 for step in steps)


def test_bf16_states_are_written_back_into_their_own_tensors() -> None:
    model = bf16_mlp()
    optimizer = bf16_states_adamw(model)
    train(model, optimizer, range(1))
    storage = [t.data_ptr() for t in inner_state_tensors(optimizer)]
    train(model, optimizer, range(1, 4))
    assert [t.data_ptr() for t in inner_state_tensors(optimizer)] == storage


def test_bf16_states_are_stochastic_roundings_of_the_fp32_update() -> None:
    """One step from given states: each bf16 moment is one of the two bf16 neighbours of the
    moment fp32 AdamW computes from the same (exactly upcast) states."""
    model = bf16_mlp()
    optimizer = bf16_states_adamw(model)
    train(model, optimizer, range(2))
    reference = copy.deepcopy(model).float()
    fp32 = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    x, y = batch(2)
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x).float(), y.float()).backward()
    for param, twin in zip(model.parameters(), reference.parameters(), strict=True):
        twin.grad = param.grad.float()
        fp32.state[twin] = {
            key: value.clone() if key == "step" else value.float()
            for key, value in optimizer.state[param].items()
        }
    optimizer.step()
    fp32.step()
    for param, twin in zip(model.parameters(), reference.parameters(), strict=True):
        assert bool(is_bf16_rounding_of(param, twin.detach()).all())
        for key in ("exp_avg", "exp_avg_sq"):
            mine, exact = optimizer.state[param][key], fp32.state[twin][key]
            assert mine.dtype == torch.bfloat16
            assert bool(is_bf16_rounding_of(mine, exact).all()), key


def test_bf16_states_keep_a_nan() -> None:
    """A NaN gradient makes NaN moments, which stay NaN in bf16 (not inf, not a number)."""
    weight = nn.Parameter(torch.ones(4096, dtype=torch.bfloat16))
    optimizer = StochasticRoundingOptimizer(torch.optim.AdamW([weight], lr=1e-3), bf16_states=True)
    grad = torch.full_like(weight, 0.5)
    grad[7] = float("nan")
    weight.grad = grad
    optimizer.step()
    for key in ("exp_avg", "exp_avg_sq"):
        state = optimizer.state[weight][key]
        assert state.dtype == torch.bfloat16
        assert torch.isnan(state).nonzero().flatten().tolist() == [7], key
    assert torch.isnan(weight).nonzero().flatten().tolist() == [7]


def test_bf16_states_round_trip_through_state_dict_bit_exact() -> None:
    model = bf16_mlp()
    optimizer = bf16_states_adamw(model)
    train(model, optimizer, range(4))
    saved = round_trip(optimizer.state_dict())
    assert all(
        value.dtype == torch.bfloat16
        for state in saved["state"].values()
        for key, value in state.items()
        if key != "step"
    )
    restored = bf16_states_adamw(copy.deepcopy(model), lr=5.0)
    restored.load_state_dict(saved)
    assert restored.param_groups[0]["lr"] == 1e-2
    mine, theirs = optimizer.state_dict()["state"], restored.state_dict()["state"]
    for index, state in mine.items():
        for key, value in state.items():
            other = theirs[index][key]
            assert other.dtype == value.dtype and torch.equal(other, value), key


@pytest.mark.parametrize("model_first", [True, False], ids=["model-then-opt", "opt-then-model"])
def test_bf16_states_resume_from_a_checkpoint_exactly(model_first: bool) -> None:
    uninterrupted = bf16_mlp()
    reference = bf16_states_adamw(uninterrupted)
    train(uninterrupted, reference, range(10))
    resumed, restored = resumed_halfway(bf16_states_adamw, model_first)
    for a, b in zip(uninterrupted.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)
    for a, b in zip(inner_state_tensors(reference), inner_state_tensors(restored), strict=True):
        assert a.dtype == torch.bfloat16 and torch.equal(a, b)


def test_a_checkpoint_with_fp32_states_loads_into_bf16_states_and_back() -> None:
    model = bf16_mlp()
    fp32_states = StochasticRoundingOptimizer(torch.optim.AdamW(model.parameters(), lr=1e-2))
    train(model, fp32_states, range(3))
    bf16 = bf16_states_adamw(copy.deepcopy(model))
    bf16.load_state_dict(round_trip(fp32_states.state_dict()))
    exact = inner_state_tensors(fp32_states)
    for mine, fp32 in zip(inner_state_tensors(bf16), exact, strict=True):
        assert mine.dtype == torch.bfloat16 and torch.equal(mine, fp32.to(torch.bfloat16))
    back = StochasticRoundingOptimizer(torch.optim.AdamW(copy.deepcopy(model).parameters()))
    back.load_state_dict(round_trip(bf16.state_dict()))
    for theirs, mine in zip(inner_state_tensors(back), inner_state_tensors(bf16), strict=True):
        assert theirs.dtype == torch.float32 and torch.equal(theirs, mine.float())


@pytest.mark.parametrize("inner", ["sgd-momentum", "rmsprop", "adagrad", "custom"])
def test_bf16_states_of_any_optimizer(inner: str) -> None:
    """Every per-element floating state is kept in bf16 (Adagrad's sums, made in fp32 when it
    is built, from its first step on); scalar step counts stay as the optimizer made them."""
    build = {
        **INNER_OPTIMIZERS,
        "adagrad": lambda params: torch.optim.Adagrad(params, lr=0.05),
    }[inner]
    model = bf16_mlp()
    optimizer = StochasticRoundingOptimizer(build(model.parameters()), bf16_states=True)
    losses = train(model, optimizer, range(30))
    assert sum(losses[-5:]) < sum(losses[:5])
    for param in model.parameters():
        state = optimizer.state[param]
        per_element = [v for v in state.values() if torch.is_tensor(v) and v.shape == param.shape]
        assert per_element and all(v.dtype == torch.bfloat16 for v in per_element)
        assert all(
            v.dtype == torch.float32 for v in state.values() if torch.is_tensor(v) and v.dim() == 0
        )
