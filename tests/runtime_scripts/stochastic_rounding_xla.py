"""Scenario b: bf16 stochastic rounding on an XLA device.

`stochastic_round_to_bf16` draws its noise from the XLA RNG: every result must be one of the two
bf16 neighbours, and the mean of many draws must be x (unbiased). Then both optimizers that
round stochastically (FP32ParamsCopy(..., stochastic_rounding=True) and
StochasticRoundingOptimizer) train a bf16 MLP for a few steps through `xm.optimizer_step`.
"""

from __future__ import annotations

import math

import torch
import torch_xla
import torch_xla.core.xla_model as xm
from _common import bf16_neighbours, emit, is_a_bf16_rounding, mlp, regression_data

from xlamigrate_runtime import FP32ParamsCopy, StochasticRoundingOptimizer, stochastic_round_to_bf16

DRAWS = 4096
SIGMAS = 5.0
STEPS = 4  # AdamW recompiles each step on XLA (its step count is a constant): keep it short


def targets_between_neighbours() -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 values a known fraction of the way from one bf16 value to the next, both signs,
    magnitudes from 1e-30 to 1e30; returns (values, the fraction = the chance to round away)."""
    generator = torch.Generator().manual_seed(3)
    count = 96
    magnitudes = torch.logspace(-30, 30, count, dtype=torch.float64)
    signs = torch.where(torch.arange(count) % 2 == 0, 1.0, -1.0).to(torch.float64)
    base = (signs * magnitudes).to(torch.float32)
    toward, away = bf16_neighbours(base)
    fraction = torch.randint(1, 1 << 16, (count,), generator=generator).to(torch.float64) / (
        1 << 16
    )
    exact = toward.double() + fraction * (away.double() - toward.double())
    return exact.to(torch.float32), fraction


def rounding_statistics(device: torch.device) -> dict[str, object]:
    exact, fraction = targets_between_neighbours()
    draws = stochastic_round_to_bf16(exact.to(device).unsqueeze(0).expand(DRAWS, -1).contiguous())
    second = stochastic_round_to_bf16(exact.to(device))
    torch_xla.sync()
    result_dtype, result_device = str(draws.dtype), draws.device.type
    draws = draws.cpu()
    toward, away = bf16_neighbours(exact)
    ulp = (away.double() - toward.double()).abs()
    mean = draws.double().mean(dim=0)
    bias_in_ulps = (mean - exact.double()).abs() / ulp
    rate_up = (draws.float() == away).double().mean(dim=0)
    nearest_bias_in_ulps = (exact.to(torch.bfloat16).double() - exact.double()).abs() / ulp

    specials = torch.tensor([0.0, -0.0, 1.0, -2.5, float("inf"), float("-inf"), float("nan")])
    special_draws = stochastic_round_to_bf16(specials.to(device).expand(64, -1).contiguous())
    torch_xla.sync()
    special_draws = special_draws.cpu().float()
    finite = specials[:4]
    return {
        "dtype": result_dtype,
        "device": result_device,
        "neighbours_only": bool(is_a_bf16_rounding(draws, exact.expand(DRAWS, -1)).all()),
        "rows_differ": bool((draws != draws[0]).any()),
        "calls_differ": bool((second.cpu() != draws[0]).any()),  # the RNG state advances
        "max_bias_in_ulps": float(bias_in_ulps.max()),
        # 5 sigma of the mean of DRAWS Bernoulli(p) draws in ulps: sqrt(p(1-p)/DRAWS) <= 1/(2 sqrt)
        "bias_bound_in_ulps": SIGMAS / (2 * math.sqrt(DRAWS)),
        "max_rate_error_in_sigmas": float(
            ((rate_up - fraction).abs() / (fraction * (1 - fraction) / DRAWS).sqrt()).max()
        ),
        "max_nearest_rounding_bias_in_ulps": float(nearest_bias_in_ulps.max()),
        "bf16_exact_values_unchanged": bool(
            (special_draws[:, :4] == finite).all() and torch.signbit(special_draws[:, 1]).all()
        ),
        "infinities_unchanged": bool(
            (special_draws[:, 4] == float("inf")).all()
            and (special_draws[:, 5] == float("-inf")).all()
        ),
        "nan_stays_nan": bool(special_draws[:, 6].isnan().all()),
    }


def train(wrap, device: torch.device) -> tuple[torch.nn.Module, torch.optim.Optimizer, list[float]]:
    model = mlp(seed=0).to(device)
    inputs, targets = (t.to(device=device, dtype=torch.bfloat16) for t in regression_data(seed=1))
    optimizer = wrap(torch.optim.AdamW(model.parameters(), lr=1e-2))
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        xm.optimizer_step(optimizer)
        torch_xla.sync()
        losses.append(loss.detach().float().item())
    return model, optimizer, losses


def fp32_params_copy_with_stochastic_rounding(device: torch.device) -> dict[str, object]:
    model, optimizer, losses = train(lambda o: FP32ParamsCopy(o, stochastic_rounding=True), device)
    params, masters = list(model.parameters()), optimizer.master_params()
    return {
        "losses": losses,
        "param_dtypes": sorted({str(p.dtype) for p in params}),
        "param_devices": sorted({p.device.type for p in params}),
        "master_dtypes": sorted({str(m.dtype) for m in masters}),
        "params_are_roundings_of_masters": all(
            bool(is_a_bf16_rounding(p, m).all()) for p, m in zip(params, masters, strict=True)
        ),
        "params_rounded_away_from_nearest": sum(
            int((p.cpu() != m.cpu().to(torch.bfloat16)).sum())
            for p, m in zip(params, masters, strict=True)
        ),
    }


def stochastic_rounding_optimizer(device: torch.device) -> dict[str, object]:
    model, optimizer, losses = train(StochasticRoundingOptimizer, device)
    params = list(model.parameters())
    state = optimizer.optimizer.state
    moments = [v for s in state.values() for k, v in s.items() if k in ("exp_avg", "exp_avg_sq")]
    return {
        "losses": losses,
        "param_dtypes": sorted({str(p.dtype) for p in params}),
        "param_devices": sorted({p.device.type for p in params}),
        "state_keyed_by_params": len(state) == len(params)
        and all(any(key is p for p in params) for key in state),
        "inner_params_are_model_params": all(
            a is b
            for a, b in zip(optimizer.optimizer.param_groups[0]["params"], params, strict=True)
        ),
        "moment_dtypes": sorted({str(v.dtype) for v in moments}),
        "moment_devices": sorted({v.device.type for v in moments}),
    }


def main() -> None:
    device = torch_xla.device()
    xm.set_rng_state(1234)
    emit(
        {
            "rounding": rounding_statistics(device),
            "fp32_params_copy": fp32_params_copy_with_stochastic_rounding(device),
            "stochastic_rounding_optimizer": stochastic_rounding_optimizer(device),
        }
    )


if __name__ == "__main__":
    main()
