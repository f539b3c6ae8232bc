"""Bytes per parameter at rest and at the peak of an optimizer step, for each runtime optimizer
next to stock AdamW (the candidates of `runtime_optimizers.py`), on the CPU, without timing them.

"At rest" counts what a candidate keeps between steps (params, grads, every optimizer-state
tensor, fp32 masters and kept fp32 gradients, each tensor once); the peak adds the most one
`step()` holds allocated on top of that, from the allocation events of PyTorch's profiler
(`profile_memory=True`). Measures only; asserts nothing.

    python benchmarks/step_memory.py [--params 8000000] [--layers 2]
"""

from __future__ import annotations

import argparse
import warnings

import torch
from runtime_optimizers import (  # (beside this script)
    Mode,
    adamw,
    held_bytes,
    make_grads,
    make_params,
    modes,
    shapes,
    step_allocation_peak,
)

from xlamigrate_runtime.optim import StochasticRoundingOptimizer

SMALL_BUCKET = 1 << 20  # a StochasticRoundingOptimizer bucket well below the model's size


def measure(mode: Mode, total: int, layers: int) -> tuple[float, float]:
    tensor_shapes = shapes(total, layers)
    cpu = torch.device("cpu")
    params = make_params(tensor_shapes, mode.dtype, cpu)
    for param, grad in zip(params, make_grads(tensor_shapes, mode.dtype, cpu), strict=True):
        param.grad = grad
    count = sum(p.numel() for p in params)
    optimizer = mode.build(params)
    optimizer.step()  # states made: what the optimizer keeps from here on
    rest = held_bytes(params, optimizer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peak = rest + step_allocation_peak(optimizer)
    return rest / count, peak / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", type=int, default=8_000_000)
    parser.add_argument("--layers", type=int, default=2)
    args = parser.parse_args()
    candidates = [
        *modes(),
        Mode(
            f"StochasticRoundingOptimizer, {SMALL_BUCKET:,}-element buckets",
            torch.bfloat16,
            lambda params: StochasticRoundingOptimizer(adamw(params), bucket_elements=SMALL_BUCKET),
            "12 (bf16, fp32 states)",
        ),
    ]
    print(f"CPU, {args.params:,} parameters; bytes per parameter")
    print(f"{'optimizer':<58} {'at rest':>8} {'peak':>8}")
    for mode in candidates:
        rest, peak = measure(mode, args.params, args.layers)
        print(f"{mode.label:<58} {rest:8.2f} {peak:8.2f}")


if __name__ == "__main__":
    main()
