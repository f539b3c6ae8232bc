"""Bytes per parameter at rest and at the peak of an optimizer step, for each runtime optimizer
next to stock AdamW (the modes of `runtime_optimizers.py`), on the CPU.

The peak is read from PyTorch's memory profiler (`torch.profiler` with `profile_memory=True`):
its timeline of every CPU tensor alive during the step (parameters, gradients, optimizer state,
masters and the step's temporaries), the largest total over the step divided by the parameter
count. "At rest" is that timeline's first sample: what the optimizer keeps between steps.
`MemoryProfileTimeline` is a private API of torch 2.9; the figures are what it counts.

Measures only; asserts nothing.

    python benchmarks/step_memory.py [--params 8000000] [--layers 2]
"""

from __future__ import annotations

import argparse
import warnings

import torch
from runtime_optimizers import MODES, Mode, adamw, shapes  # (beside this script)
from torch.profiler import ProfilerActivity, profile
from torch.profiler._memory_profiler import MemoryProfileTimeline

from xlamigrate_runtime.optim import StochasticRoundingOptimizer

SMALL_BUCKET = 1 << 20  # a StochasticRoundingOptimizer bucket well below the model's size


def measure(mode: Mode, total: int, layers: int) -> tuple[float, float]:
    torch.manual_seed(0)
    params = [
        torch.randn(shape, dtype=mode.dtype).requires_grad_() for shape in shapes(total, layers)
    ]
    count = sum(p.numel() for p in params)
    optimizer = mode.build(params)
    for param in params:
        param.grad = torch.randn_like(param)
    optimizer.step()  # states made: what the optimizer keeps from here on
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(
            activities=[ProfilerActivity.CPU],
            profile_memory=True,
            record_shapes=True,
            with_stack=True,
        ) as profiler:
            optimizer.step()
        timeline = MemoryProfileTimeline(profiler._memory_profile())
        _, sizes = timeline._coalesce_timeline("cpu")  # type: ignore[no-untyped-call]
    totals = [sum(sample) for sample in sizes]
    return totals[0] / count, max(totals) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", type=int, default=8_000_000)
    parser.add_argument("--layers", type=int, default=2)
    args = parser.parse_args()
    modes = [
        *MODES,
        Mode(
            f"StochasticRoundingOptimizer, {SMALL_BUCKET:,}-element buckets",
            torch.bfloat16,
            lambda params: StochasticRoundingOptimizer(adamw(params), bucket_elements=SMALL_BUCKET),
            "12 (bf16, fp32 states)",
        ),
    ]
    print(f"CPU, {args.params:,} parameters; bytes per parameter")
    print(f"{'optimizer':<58} {'at rest':>8} {'peak':>8}")
    for mode in modes:
        rest, peak = measure(mode, args.params, args.layers)
        print(f"{mode.label:<58} {rest:8.2f} {peak:8.2f}")


if __name__ == "__main__":
    main()
