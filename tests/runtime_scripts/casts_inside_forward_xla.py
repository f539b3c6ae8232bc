"""Scenario f: fp32 made inside `forward` and fp32 targets, on a bf16 model on XLA.

Hazard 1: `F.linear(fp32, bf16 weight)` does not fail on XLA when it is traced, it promotes to
fp32, so that part of the model computes in fp32 where the legacy flag kept everything in bf16;
here the promoted result then meets a bf16 bias and the HLO verifier rejects the graph at the
step ("mixed precision is disallowed"). Hazard 2: a loss of the bf16 output against fp32
targets. `bare` trains the bf16 model as it is; `cast` under `cast_inputs_to_module_dtype(model,
output_dtype=torch.float32)`. Prints the dtypes the forward computed in, the output dtype, and
the losses of a few accumulated steps through `xm.optimizer_step` with `clip_grad_norm_`.

    python casts_inside_forward_xla.py bare|cast
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from _common import emit
from torch import nn

from xlamigrate_runtime import cast_inputs_to_module_dtype


class PositionMixer(nn.Module):
    """A functional layer fed features that `forward` makes in fp32 (positions, a scale)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8, 8) * 0.3)
        self.position = nn.Parameter(torch.randn(8, 8) * 0.3)
        self.head = nn.Linear(8, 1)
        self.seen: list[str] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(8, device=x.device).float() / 8  # fp32, whatever x is
        mixed = F.linear(x, self.weight) + F.linear(positions.expand_as(x), self.position)
        scores = torch.matmul(mixed, torch.ones(8, 8, device=x.device) / 8)  # fp32 made here
        self.seen += [str(mixed.dtype), str(scores.dtype)]
        return self.head(torch.tanh(scores))


def run(device: torch.device, cast: bool) -> dict[str, object]:
    import torch_xla.core.xla_model as xm

    torch.manual_seed(0)
    model = PositionMixer().to(device).to(torch.bfloat16)
    if cast:
        cast_inputs_to_module_dtype(model, output_dtype=torch.float32)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(2, 16, 8, generator=generator)  # two micro-batches, every step
    targets = inputs[:, :, :2].sum(dim=2, keepdim=True).to(device)  # fp32
    inputs = inputs.to(device).to(torch.bfloat16)
    losses, grad_dtypes = [], set()
    for _ in range(8):
        total = 0.0
        for x, y in zip(inputs, targets, strict=True):  # gradient accumulation
            output = model(x)
            loss = F.mse_loss(output, y) / 2
            loss.backward()
            total += loss.item()
        grad_dtypes |= {str(p.grad.dtype) for p in model.parameters() if p.grad is not None}
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        xm.optimizer_step(optimizer)
        optimizer.zero_grad()
        losses.append(total)
    return {
        "computed_in": sorted(set(model.seen)),
        "output": str(output.dtype),
        "grads": sorted(grad_dtypes),
        "params": sorted({str(p.dtype) for p in model.parameters()}),
        "losses": losses,
    }


def main() -> None:
    import torch_xla

    emit(run(torch_xla.device(), cast=sys.argv[1] == "cast"))


if __name__ == "__main__":
    main()
