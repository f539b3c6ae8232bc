"""Scenario: stochastic rounding stays inside the XLA graph.

After a warm-up call (which compiles), each further call of `stochastic_round_to_bf16` with its
step's `torch_xla.sync()` is counted with torch_xla.debug.metrics: graphs compiled, graphs run,
device-to-host transfers, and aten operations that fell back to the host. A bit cast
(`view(torch.int32)`) was such a fallback: two transfers and extra graph runs per tensor and
call. Also counted: the same for `copy_stochastically_rounded_` into a bf16 parameter.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch
import torch_xla
import torch_xla.core.xla_model as xm
from _common import counted, emit

from xlamigrate_runtime import stochastic_round_to_bf16
from xlamigrate_runtime.rounding import copy_stochastically_rounded_


def fresh(step: Callable[[], torch.Tensor]) -> dict[str, object]:
    """`step` counted (see `counted`), and whether every counted call's result differs from
    the one before (fresh noise)."""
    calls, results = counted(step)
    fresh_noise = all(bool((a != b).any()) for a, b in itertools.pairwise(results))
    return {"calls": calls, "fresh_noise": fresh_noise}


def main() -> None:
    device = torch_xla.device()
    xm.set_rng_state(1234)
    source = torch.randn(64, 256, device=device)
    target = torch.zeros(64, 256, dtype=torch.bfloat16, device=device)
    results = {"round": fresh(lambda: stochastic_round_to_bf16(source))}
    results["copy"] = fresh(lambda: copy_stochastically_rounded_(target, source).clone())
    emit(results)


if __name__ == "__main__":
    main()
