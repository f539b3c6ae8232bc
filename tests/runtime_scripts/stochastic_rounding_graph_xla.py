"""Scenario: stochastic rounding stays inside the XLA graph.

After a warm-up call (which compiles), each further call of `stochastic_round_to_bf16` with its
step's `torch_xla.sync()` is counted with torch_xla.debug.metrics: graphs compiled, graphs run,
device-to-host transfers, and aten operations that fell back to the host. A bit cast
(`view(torch.int32)`) was such a fallback: two transfers and extra graph runs per tensor and
call. Also counted: the same for `copy_stochastically_rounded_` into a bf16 parameter.
"""

from __future__ import annotations

import itertools

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as metrics
from _common import emit

from xlamigrate_runtime import stochastic_round_to_bf16
from xlamigrate_runtime.rounding import copy_stochastically_rounded_

CALLS = 4


def counted(step: object) -> dict[str, object]:
    """Per call of `step` (each followed by a sync), after two warm-up calls: graphs compiled,
    graphs run, device-to-host transfers, and the aten operations that fell back to the host;
    and whether every call's result differs from the one before (fresh noise)."""
    kept = []  # (a result nothing holds is never computed)
    for _ in range(2):
        kept.append(step())  # type: ignore[operator]
        torch_xla.sync()
    xm.wait_device_ops()
    calls: list[dict[str, object]] = []
    for _ in range(CALLS):
        metrics.clear_all()
        kept.append(step())  # type: ignore[operator]
        torch_xla.sync()
        xm.wait_device_ops()  # (graphs run asynchronously: counted once they have)
        calls.append(
            {
                "compilations": _count("CompileTime"),
                "executions": _count("ExecuteTime"),
                "to_host": _count("TransferFromDeviceTime"),
                "fallbacks": sorted(n for n in metrics.counter_names() if n.startswith("aten::")),
            }
        )
    results = [tensor.cpu() for tensor in kept[2:]]
    fresh = all(bool((a != b).any()) for a, b in itertools.pairwise(results))
    return {"calls": calls, "fresh_noise": fresh}


def _count(name: str) -> int:
    data = metrics.metric_data(name)
    return int(data[0]) if data else 0


def main() -> None:
    device = torch_xla.device()
    xm.set_rng_state(1234)
    source = torch.randn(64, 256, device=device)
    target = torch.zeros(64, 256, dtype=torch.bfloat16, device=device)
    results = {"round": counted(lambda: stochastic_round_to_bf16(source))}
    results["copy"] = counted(lambda: copy_stochastically_rounded_(target, source).clone())
    emit(results)


if __name__ == "__main__":
    main()
