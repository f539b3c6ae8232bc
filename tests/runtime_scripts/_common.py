"""Shared by the runtime scripts: the toy model and data, bit helpers, XLA graph counts, and the
JSON result line.

The scripts run in their own interpreter (torch-xla must never load in pytest's process); the
test reads the last stdout line as JSON. A crash exits non-zero with its traceback on stderr.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import nn


def mlp(seed: int, dtype: torch.dtype = torch.bfloat16) -> nn.Module:
    """A 16-32-1 tanh MLP, built on CPU from `seed` so every device starts from the same weights."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1)).to(dtype)


def regression_data(seed: int, rows: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed fp32 inputs and targets (a smooth function of the inputs), built on CPU."""
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(rows, 16, generator=generator)
    targets = torch.sin(inputs[:, :4].sum(dim=1, keepdim=True))
    return inputs, targets


def bf16_neighbours(exact: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The bf16 values just toward zero and just away from zero of fp32 `exact` (CPU only).

    Truncating the low 16 bits of the pattern is the toward-zero neighbour; the next pattern
    up is the away-from-zero one (sign-magnitude). Independent of the runtime's own helpers.
    """
    bits = exact.detach().cpu().to(torch.float32).view(torch.int32)
    toward = bits & -65536
    away = toward + 65536
    return toward.view(torch.float32), away.view(torch.float32)


def is_a_bf16_rounding(rounded: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """CPU check: each bf16 element equals one of the two bf16 neighbours of its fp32 value."""
    toward, away = bf16_neighbours(exact)
    value = rounded.detach().cpu().to(torch.float32)
    return (value == toward) | (value == away)


def values(tensors: list[torch.Tensor]) -> list[list[float]]:
    """Exact values as nested floats (fp32 and bf16 are exactly representable as Python floats)."""
    return [t.detach().cpu().to(torch.float32).flatten().tolist() for t in tensors]


def counted(
    step: Callable[[], torch.Tensor], calls: int = 4, warm_up: int = 2
) -> tuple[list[dict[str, object]], list[torch.Tensor]]:
    """Per call of `step` (each followed by a `torch_xla.sync()`), after `warm_up` calls (which
    compile): graphs compiled, graphs run, device-to-host transfers, and the aten operations
    that fell back to the host; and the counted calls' results, fetched to the CPU once the
    counting is done. torch-xla is imported here, not above: the CPU scripts share this file."""
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as metrics

    def count(name: str) -> int:
        data = metrics.metric_data(name)
        return int(data[0]) if data else 0

    kept = []  # (a result nothing holds is never computed)
    for _ in range(warm_up):
        kept.append(step())
        torch_xla.sync()
    xm.wait_device_ops()
    counts: list[dict[str, object]] = []
    for _ in range(calls):
        metrics.clear_all()
        kept.append(step())
        torch_xla.sync()
        xm.wait_device_ops()  # (graphs run asynchronously: counted once they have)
        counts.append(
            {
                "compilations": count("CompileTime"),
                "executions": count("ExecuteTime"),
                "to_host": count("TransferFromDeviceTime"),
                "fallbacks": sorted(n for n in metrics.counter_names() if n.startswith("aten::")),
            }
        )
    return counts, [tensor.cpu() for tensor in kept[warm_up:]]


def emit(results: dict[str, Any]) -> None:
    """Prints the results as one JSON line: the last line of stdout is what the test reads."""
    sys.stdout.flush()
    print(json.dumps(results), flush=True)
