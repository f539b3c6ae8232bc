"""The input cast's cost per step: bf16 models run on a bf16 batch without any hook and with
`cast_inputs_to_module_dtype(model, output_dtype=torch.float32)` (what the rewrite installs:
hooks on the model and on every submodule holding floating parameters of its own, and a
`TorchFunctionMode` active during the model's forward that looks at every torch call to cast
the mixed operands of matmuls, linears and convolutions).

For each model: the torch calls the mode sees per forward against the calls the forward makes
itself (issue 36: the hooks' own dtype reads and casts went through the mode too), then the
median wall time over `--repeat` turns of a forward under no_grad and of a forward with
backward, timed in turns (a burst of other work slows both alike). Measures only; asserts no
timing.

    python benchmarks/input_cast.py [--repeat 20] [--threads N]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from unittest import mock

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from xlamigrate_runtime import casting
from xlamigrate_runtime.casting import cast_inputs_to_module_dtype


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], nn.Module]
    batch: tuple[int, ...]


class Block(nn.Module):
    """Linear, GELU, LayerNorm: many small ops and two hooked submodules per block."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.norm(nn.functional.gelu(self.linear(x)))
        return out


def blocks(count: int, width: int) -> nn.Module:
    return nn.Sequential(*(Block(width) for _ in range(count)))


def encoder(layers: int, width: int) -> nn.Module:
    layer = nn.TransformerEncoderLayer(width, nhead=8, dim_feedforward=4 * width, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)


CASES = (
    Case("100 blocks Linear-GELU-LayerNorm, width 64", lambda: blocks(100, 64), (8, 64)),
    Case("TransformerEncoder 12 layers, width 128", lambda: encoder(12, 128), (4, 32, 128)),
    Case("TransformerEncoder 24 layers, width 64", lambda: encoder(24, 64), (4, 16, 64)),
)  # fmt: skip


class Calls(TorchFunctionMode):
    """Counts the torch calls dispatched to it."""

    count = 0

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        self.count += 1
        return func(*args, **(kwargs or {}))


def calls_through_the_mode(model: nn.Module, x: torch.Tensor) -> int:
    seen = 0
    dispatch = casting._ModelForward.__torch_function__

    def counting(mode: Any, *rest: Any) -> Any:
        nonlocal seen
        seen += 1
        return dispatch(mode, *rest)

    with mock.patch.object(casting._ModelForward, "__torch_function__", counting):
        model(x)
    return seen


def step(model: nn.Module, x: torch.Tensor, backward: bool) -> None:
    if backward:
        model(x).float().sum().backward()
        return
    with torch.no_grad():
        model(x)


def timed(models: list[nn.Module], x: torch.Tensor, repeat: int, backward: bool) -> list[float]:
    """Median ms per step of each model, timed in turns."""
    times: list[list[float]] = [[] for _ in models]
    for model in models:
        step(model, x, backward)
    for _ in range(repeat):
        for index, model in enumerate(models):
            start = time.perf_counter()
            step(model, x, backward)
            times[index].append(time.perf_counter() - start)
    return [statistics.median(each) * 1e3 for each in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--threads", type=int, help="intra-op threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    for case in CASES:
        torch.manual_seed(0)
        bare = case.build().to(torch.bfloat16)
        cast = copy.deepcopy(bare)
        hooks = len(cast_inputs_to_module_dtype(cast, output_dtype=torch.float32).handles)
        x = torch.randn(*case.batch).to(torch.bfloat16)
        with torch.no_grad(), Calls() as own:
            bare(x)
        with torch.no_grad():
            through = calls_through_the_mode(cast, x)
        print(
            f"{case.name}, batch {'x'.join(map(str, case.batch))}: {hooks} hooks; torch calls"
            f" per forward through the mode {through}, the forward's own {own.count}"
        )
        for backward in (False, True):
            ms = timed([bare, cast], x, args.repeat, backward)
            label = "forward and backward" if backward else "forward (no_grad)"
            print(
                f"  {label:<21} no cast {ms[0]:8.2f} ms   the cast {ms[1]:8.2f} ms"
                f"  x{ms[1] / ms[0]:.2f}"
            )


if __name__ == "__main__":
    main()
