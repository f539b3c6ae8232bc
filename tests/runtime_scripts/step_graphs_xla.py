"""Scenario: a training step with each runtime optimizer, and a step through the input cast, is
one XLA graph.

Each step (forward, backward, `optimizer.step()`, `zero_grad()`, `torch_xla.sync()`) is
counted after two warm-up steps (which compile, with the optimizer's states made) with
torch_xla.debug.metrics: graphs compiled, graphs run, device-to-host transfers, and aten
operations that fell back to the host (see `_common.counted`). The loss is returned, never
read on the host inside the step: that would cut the step into two graphs and a transfer.
Prints, per scenario, the counts and the losses of the counted steps.

Scenarios: FP32ParamsCopy(AdamW) rounding to nearest and stochastically, AdamW_FP32ParamsCopy,
and StochasticRoundingOptimizer(AdamW) with fp32 and with bf16 states, on the bf16 MLP fed bf16
inputs; a bf16 model under `cast_inputs_to_module_dtype(model, output_dtype=torch.float32)` fed
fp32 inputs and trained against fp32 targets with SGD, whose forward makes fp32 that the cast's
mode and a submodule hook turn into bf16; and a forward through it alone. And a control, which
the counts must tell apart: the FP32ParamsCopy step reading its loss with `.item()` inside it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
import torch_xla
import torch_xla.core.xla_model as xm
from _common import counted, emit, mlp, regression_data
from torch import nn

from xlamigrate_runtime import (
    AdamW_FP32ParamsCopy,
    FP32ParamsCopy,
    StochasticRoundingOptimizer,
    cast_inputs_to_module_dtype,
)

LR = 1e-2
OPTIMIZERS: dict[str, Callable[[nn.Module], torch.optim.Optimizer]] = {
    "fp32_params_copy": lambda m: FP32ParamsCopy(torch.optim.AdamW(m.parameters(), lr=LR)),
    "fp32_params_copy_stochastic": lambda m: FP32ParamsCopy(
        torch.optim.AdamW(m.parameters(), lr=LR), stochastic_rounding=True
    ),
    "adamw_fp32_params_copy": lambda m: AdamW_FP32ParamsCopy(m.parameters(), lr=LR),
    "stochastic_rounding_optimizer": lambda m: StochasticRoundingOptimizer(
        torch.optim.AdamW(m.parameters(), lr=LR)
    ),
    "stochastic_rounding_optimizer_bf16_states": lambda m: StochasticRoundingOptimizer(
        torch.optim.AdamW(m.parameters(), lr=LR), bf16_states=True
    ),
}


class Positions(nn.Module):
    """A bf16 model whose forward makes fp32: positions fed to a functional linear (the cast's
    mode computes it in bf16) and added to a hidden state (the head's hook casts the sum)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(16, 32)
        self.mix = nn.Parameter(torch.randn(32, 16) * 0.1)
        self.head = nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(16, device=x.device).float() / 16  # fp32, whatever x is
        hidden = torch.tanh(self.embed(x)) + F.linear(positions, self.mix)
        return self.head(hidden + positions.repeat(2))


def training_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, inputs: torch.Tensor, targets: torch.Tensor
) -> Callable[[], torch.Tensor]:
    def step() -> torch.Tensor:
        loss = F.mse_loss(model(inputs).float(), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.detach()

    return step


def _read(loss: torch.Tensor) -> torch.Tensor:
    loss.item()
    return loss


def scenario(step: Callable[[], torch.Tensor]) -> dict[str, object]:
    calls, results = counted(step)
    return {"calls": calls, "results": [t.float().flatten().tolist() for t in results]}


def main() -> None:
    device = torch_xla.device()
    xm.set_rng_state(1234)
    inputs, targets = (t.to(device) for t in regression_data(seed=1))  # fp32
    results = {}
    for name, wrap in OPTIMIZERS.items():
        model = mlp(seed=0).to(device)
        step = training_step(model, wrap(model), inputs.to(torch.bfloat16), targets)
        results[name] = scenario(step)

    # The control: the same step reading its loss on the host (`loss.item()`) is two graphs.
    model = mlp(seed=0).to(device)
    step = training_step(
        model, OPTIMIZERS["fp32_params_copy"](model), inputs.to(torch.bfloat16), targets
    )
    results["loss_read_inside_the_step"] = scenario(lambda: _read(step()))

    torch.manual_seed(0)
    cast = Positions().to(torch.bfloat16).to(device)
    cast_inputs_to_module_dtype(cast, output_dtype=torch.float32)
    sgd = torch.optim.SGD(cast.parameters(), lr=0.05)
    results["input_cast_step"] = scenario(training_step(cast, sgd, inputs, targets))
    with torch.no_grad():
        results["input_cast_forward"] = scenario(lambda: cast(inputs))
        results["input_cast_forward"]["output_dtype"] = str(cast(inputs).dtype)
    emit(results)


if __name__ == "__main__":
    main()
