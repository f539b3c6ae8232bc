"""The input cast's cost per forward: a bf16 transformer encoder (nn.TransformerEncoder, many
submodules holding parameters) run on a bf16 batch without any hook, with one hook on the model
(what `cast_inputs_to_module_dtype` installed before submodules were covered), and with what it
installs now: hooks on the model and on every submodule that holds floating parameters of its
own, and the mode active during the model's forward that looks at every torch call (to cast the
mixed operands of matmuls, linears and convolutions).

Prints the median wall time of a forward pass over `--repeat` turns and the hooks installed.
Measures only; asserts no timing.

    python benchmarks/input_cast.py [--layers 12] [--width 128] [--batch 4] [--seq 32]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from xlamigrate_runtime.casting import cast_floating, cast_inputs_to_module_dtype, module_dtype


def encoder(layers: int, width: int) -> nn.Module:
    layer = nn.TransformerEncoderLayer(width, nhead=8, dim_feedforward=4 * width, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False).to(
        torch.bfloat16
    )


def timed(models: list[nn.Module], x: torch.Tensor, repeat: int) -> list[float]:
    """Median ms per forward of each model, timed in turns (a burst of other work slows all
    of them alike)."""
    times: list[list[float]] = [[] for _ in models]
    with torch.no_grad():
        for model in models:
            model(x)
        for _ in range(repeat):
            for index, model in enumerate(models):
                start = time.perf_counter()
                model(x)
                times[index].append(time.perf_counter() - start)
    return [statistics.median(each) * 1e3 for each in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(0)
    x = torch.randn(args.batch, args.seq, args.width).to(torch.bfloat16)

    bare = encoder(args.layers, args.width)
    top = encoder(args.layers, args.width)
    top.register_forward_pre_hook(
        lambda module, inputs: cast_floating(inputs, module_dtype(module) or torch.float32)
    )
    every = encoder(args.layers, args.width)
    hooks = len(cast_inputs_to_module_dtype(every).handles)
    modules = sum(1 for _ in every.modules())
    print(
        f"bf16 TransformerEncoder: {args.layers} layers, width {args.width}, batch "
        f"{args.batch}x{args.seq}; {modules} modules, {hooks} input-cast hooks"
    )
    rows = [("no hook", bare), ("one hook on the model", top), ("what it installs now", every)]
    results = timed([model for _, model in rows], x, args.repeat)
    for (name, _), ms in zip(rows, results, strict=True):
        print(f"  {name:<24} {ms:8.2f} ms/forward  x{ms / results[0]:.3f}")


if __name__ == "__main__":
    main()
