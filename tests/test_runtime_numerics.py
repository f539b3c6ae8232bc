"""The torchao finding, reproduced: with a tiny learning rate, pure bf16 training with
round-to-nearest stalls, while stochastic rounding and fp32 master weights track fp32.

At weights around 1.0 a bf16 ulp is 2**-7 (0.0078); an AdamW step moves a weight by about the
learning rate, 1e-4, far below half an ulp, so round-to-nearest writes the old value back every
step. The fp32 reference moves the weights by ~0.05 over the run.
"""

from __future__ import annotations

import torch
from torch import nn

from xlamigrate_runtime import FP32ParamsCopy, StochasticRoundingOptimizer

STEPS = 500
LR = 1e-4


def problem() -> tuple[torch.Tensor, torch.Tensor, torch.Generator]:
    """Start weights in [1, 2) (bf16 ulp 2**-7), a target near them, and the data generator."""
    generator = torch.Generator().manual_seed(0)
    start = 1.0 + torch.rand(64, generator=generator)
    target = start + 0.05 * torch.randn(64, generator=generator)
    return start, target, generator


def run(mode: str) -> tuple[torch.Tensor, list[float]]:
    """Trains a linear regression; returns the final weights (fp32 masters where kept)."""
    start, target, generator = problem()
    model = nn.Linear(64, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(start)
    dtype = torch.float32 if mode == "fp32" else torch.bfloat16
    model.to(dtype)
    inner = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    optimizer: torch.optim.Optimizer = {
        "fp32": lambda: inner,
        "bf16-nearest": lambda: inner,
        "bf16-stochastic": lambda: StochasticRoundingOptimizer(inner),
        "bf16-stochastic-bf16-states": lambda: StochasticRoundingOptimizer(inner, bf16_states=True),
        "fp32-master-weights": lambda: FP32ParamsCopy(inner),
    }[mode]()
    losses = []
    for _ in range(STEPS):
        x = torch.randn(256, 64, generator=generator)
        y = x @ target
        loss = nn.functional.mse_loss(model(x.to(dtype)).squeeze(1).float(), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    if isinstance(optimizer, FP32ParamsCopy):
        return optimizer.master_params()[0].squeeze(0), losses
    return model.weight.detach().float().squeeze(0), losses


def test_tiny_learning_rate_stalls_bf16_nearest_but_not_sr_or_master_weights() -> None:
    reference, reference_losses = run("fp32")
    start = problem()[0]
    moved = (reference - start).norm().item()
    figures = {}
    for mode in (
        "bf16-nearest",
        "bf16-stochastic",
        "bf16-stochastic-bf16-states",
        "fp32-master-weights",
    ):
        weights, losses = run(mode)
        figures[mode] = {
            "moved / fp32 moved": (weights - start.to(torch.bfloat16).float()).norm().item()
            / moved,
            "distance to fp32 / fp32 moved": (weights - reference).norm().item() / moved,
            "final loss": sum(losses[-20:]) / 20,
        }
    figures["fp32"] = {"final loss": sum(reference_losses[-20:]) / 20}
    first_loss = sum(reference_losses[:20]) / 20
    print(f"\nAdamW lr={LR}, {STEPS} steps, fp32 moved the weights by {moved:.4f}")
    print(f"initial loss {first_loss:.5f}")
    for mode, values in figures.items():
        print(f"{mode:<28}" + "  ".join(f"{key} {value:.4f}" for key, value in values.items()))

    nearest, stochastic, masters = (
        figures["bf16-nearest"], figures["bf16-stochastic"], figures["fp32-master-weights"]
    )  # fmt: skip
    assert moved > 0.02  # the reference really trains
    assert nearest["moved / fp32 moved"] < 0.1  # stalls: the weights barely move
    assert nearest["final loss"] > 0.8 * first_loss  # and the loss plateaus
    assert (
        stochastic["distance to fp32 / fp32 moved"] < 0.5 * nearest["distance to fp32 / fp32 moved"]
    )
    assert (
        masters["distance to fp32 / fp32 moved"] < 0.5 * stochastic["distance to fp32 / fp32 moved"]
    )
    # The masters see gradients of a bf16 forward pass, so they cannot match fp32 more closely
    # than the bf16 weights resolve: require an RMS gap per weight under half a bf16 ulp.
    rms_gap = masters["distance to fp32 / fp32 moved"] * moved / 64**0.5
    assert rms_gap < 0.5 * 2**-7
    assert masters["final loss"] < 1.5 * figures["fp32"]["final loss"] + 1e-4
    assert stochastic["final loss"] < 0.5 * nearest["final loss"]
    # States in bf16 too (8 bytes per parameter), rounded stochastically: as close to fp32.
    bf16_states = figures["bf16-stochastic-bf16-states"]
    gap = stochastic["distance to fp32 / fp32 moved"]
    assert bf16_states["distance to fp32 / fp32 moved"] < 1.25 * gap
    assert bf16_states["final loss"] < 0.5 * nearest["final loss"]


def test_bf16_states_follow_a_decaying_second_moment_where_nearest_rounding_stalls() -> None:
    """With beta2 = 0.999 and no gradient, fp32 AdamW's exp_avg_sq shrinks by a thousandth a
    step: below half a bf16 ulp, so a bf16 state rounded to nearest (torchao's
    `_AdamW(bf16_stochastic_round=True)` rounds its states so) never moves. Rounded
    stochastically, its mean over 4,096 elements stays on the fp32 value."""
    weight = nn.Parameter(torch.zeros(4096, dtype=torch.bfloat16))
    optimizer = StochasticRoundingOptimizer(
        torch.optim.AdamW([weight], lr=0.0, weight_decay=0.0), bf16_states=True
    )
    weight.grad = torch.ones_like(weight)
    optimizer.step()
    start = torch.full_like(weight, 1 - 0.999)  # the first exp_avg_sq, rounded to nearest
    nearest = start
    weight.grad = torch.zeros_like(weight)
    for _ in range(STEPS):
        optimizer.step()
        nearest = (nearest.float() * 0.999).to(torch.bfloat16)
    exact = (1 - 0.999) * 0.999**STEPS
    stochastic = optimizer.state[weight]["exp_avg_sq"].float()
    assert torch.equal(nearest, start)  # stalled where it started
    assert abs(stochastic.mean().item() / exact - 1) < 0.005
