"""Runtime optimizers: step time, stochastic-rounding cast throughput and memory per parameter.

For the same parameter count, split over Linear-sized tensors (transformer layers of q, k, v, o,
MLP up and down weights, plus one 1-D tensor holding the remainder), on CPU and on CUDA when
available, prints:

1. the median time of `optimizer.step()` (ms/step, and as a ratio to fp32 AdamW foreach) of
   stock AdamW on fp32 params, stock AdamW on bf16 params (bf16 states: the legacy flag /
   full-bf16 baseline), FP32ParamsCopy (round-to-nearest and stochastic) and
   StochasticRoundingOptimizer, all around `torch.optim.AdamW(foreach=True)`; gradients are
   random tensors set once on `.grad`, and only `step()` is timed;
2. the throughput of `stochastic_round_to_bf16(x)` against `x.to(torch.bfloat16)` on a float32
   tensor of the same element count (GB/s of input read);
3. the bytes per parameter each mode holds after its steps, measured (params + grads + every
   tensor of the optimizer state + distinct fp32 masters), next to the design table's figures.

Measures only; asserts no timing.

    python benchmarks/runtime_optimizers.py [--params 10000000] [--steps 10] [--warmup 3]
                                            [--repeat 3] [--layers 3]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.optim import Optimizer

from xlamigrate.runtime.optim import FP32ParamsCopy, StochasticRoundingOptimizer
from xlamigrate.runtime.rounding import stochastic_round_to_bf16

LR = 1e-4


def adamw(params: list[torch.Tensor]) -> Optimizer:
    return torch.optim.AdamW(params, lr=LR, foreach=True)


@dataclass(frozen=True)
class Mode:
    label: str
    dtype: torch.dtype
    build: Callable[[list[torch.Tensor]], Optimizer]
    expected: str  # the "Memory per parameter" row of /work/shared/design/recipes.md


MODES = (
    Mode("AdamW foreach, fp32 params", torch.float32, adamw, "16 (fp32 AdamW)"),
    Mode("AdamW foreach, bf16 params+states", torch.bfloat16, adamw, "8 (legacy flag/full-bf16)"),
    Mode(
        "FP32ParamsCopy, nearest",
        torch.bfloat16,
        lambda params: FP32ParamsCopy(adamw(params)),
        "16 (fp32-copy)",
    ),
    Mode(
        "FP32ParamsCopy, stochastic",
        torch.bfloat16,
        lambda params: FP32ParamsCopy(adamw(params), stochastic_rounding=True),
        "16 (fp32-copy)",
    ),
    Mode(
        "StochasticRoundingOptimizer",
        torch.bfloat16,
        lambda params: StochasticRoundingOptimizer(adamw(params)),
        "12 (bf16, fp32 states)",
    ),
)


def shapes(total: int, layers: int) -> list[tuple[int, ...]]:
    """`layers` transformer layers of Linear weights (4 of d x d, d x 4d, 4d x d), 12 d^2 each,
    plus one 1-D tensor with the remainder, so that the shapes hold exactly `total` elements."""
    width = max(1, math.isqrt(total // (12 * layers)))
    result: list[tuple[int, ...]] = []
    for _ in range(layers):
        result += [(width, width)] * 4 + [(4 * width, width), (width, 4 * width)]
    rest = total - sum(math.prod(shape) for shape in result)
    if rest < 0:
        raise SystemExit(f"--params {total} is too small for {layers} layers")
    if rest:
        result.append((rest,))
    return result


def make_params(
    tensor_shapes: list[tuple[int, ...]], dtype: torch.dtype, device: torch.device
) -> list[torch.Tensor]:
    generator = torch.Generator(device=device).manual_seed(0)
    params = []
    for shape in tensor_shapes:
        param = torch.nn.Parameter(
            (torch.randn(shape, device=device, generator=generator) * 0.02).to(dtype)
        )
        param.grad = (torch.randn(shape, device=device, generator=generator) * 1e-3).to(dtype)
        params.append(param)
    return params


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(
    work: Callable[[], object], device: torch.device, iterations: int, repeat: int
) -> float:
    """Median over `repeat` runs of the time of one call of `work`, averaged over `iterations`."""
    times = []
    for _ in range(repeat):
        sync(device)
        start = time.perf_counter()
        for _ in range(iterations):
            work()
        sync(device)
        times.append((time.perf_counter() - start) / iterations)
    return statistics.median(times)


def held_bytes(params: list[torch.Tensor], optimizer: Optimizer) -> int:
    """Bytes of params, grads, optimizer-state tensors (the wrapper's and its inner optimizer's)
    and fp32 masters that are distinct tensors from the params; each tensor counted once."""
    tensors: dict[int, torch.Tensor] = {}

    def add(tensor: object) -> None:
        if isinstance(tensor, torch.Tensor):
            tensors[id(tensor)] = tensor

    for param in params:
        add(param)
        add(param.grad)
    optimizers = [optimizer]
    inner = getattr(optimizer, "optimizer", None)
    if isinstance(inner, Optimizer):
        optimizers.append(inner)
    for each in optimizers:
        for state in each.state.values():
            for value in state.values():
                add(value)
    if isinstance(optimizer, FP32ParamsCopy):
        param_ids = {id(param) for param in params}
        for master in optimizer.master_params():
            if id(master) not in param_ids:
                add(master)
    return sum(tensor.nbytes for tensor in tensors.values())


def bench_optimizers(
    device: torch.device, tensor_shapes: list[tuple[int, ...]], count: int, args: argparse.Namespace
) -> None:
    print(f"{'optimizer step':<36} {'ms/step':>9} {'x fp32':>7} {'B/param':>8}  table B/param")
    baseline = None
    for mode in MODES:
        params = make_params(tensor_shapes, mode.dtype, device)
        optimizer = mode.build(params)
        for _ in range(args.warmup):
            optimizer.step()
        seconds = median_seconds(optimizer.step, device, args.steps, args.repeat)
        per_param = held_bytes(params, optimizer) / count
        baseline = baseline or seconds
        print(
            f"{mode.label:<36} {seconds * 1000:9.2f} {seconds / baseline:7.2f} "
            f"{per_param:8.2f}  {mode.expected}"
        )
        del optimizer, params
        if device.type == "cuda":
            torch.cuda.empty_cache()


def bench_cast(device: torch.device, count: int, args: argparse.Namespace) -> None:
    x = torch.randn(count, device=device, generator=torch.Generator(device=device).manual_seed(1))
    generator = torch.Generator(device=device).manual_seed(2)
    casts = (
        ("x.to(torch.bfloat16)", lambda: x.to(torch.bfloat16)),
        ("stochastic_round_to_bf16(x)", lambda: stochastic_round_to_bf16(x, generator)),
    )
    print(f"{'fp32 -> bf16 cast':<36} {'ms':>9} {'GB/s':>7} {'x plain':>8}")
    baseline = None
    for label, cast in casts:
        for _ in range(args.warmup):
            cast()
        seconds = median_seconds(cast, device, args.steps, args.repeat)
        baseline = baseline or seconds
        print(
            f"{label:<36} {seconds * 1000:9.2f} {x.nbytes / seconds / 1e9:7.2f} "
            f"{seconds / baseline:8.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", type=int, default=10_000_000)
    parser.add_argument("--layers", type=int, default=3, help="6 Linear weights per layer")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per repeat")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.params < 1 or args.layers < 1 or args.steps < 1 or args.repeat < 1 or args.warmup < 0:
        parser.error("--params, --layers, --steps and --repeat must be >= 1, --warmup >= 0")

    tensor_shapes = shapes(args.params, args.layers)
    count = sum(math.prod(shape) for shape in tensor_shapes)
    devices = [torch.device("cpu")]
    if torch.cuda.is_available():
        devices.append(torch.device("cuda"))
    print(
        f"torch {torch.__version__}, threads: {torch.get_num_threads()}, "
        f"devices: {', '.join(str(device) for device in devices)}"
    )
    largest = max(tensor_shapes, key=math.prod)
    print(
        f"params: {count:,} in {len(tensor_shapes)} tensors (largest {largest}), "
        f"steps {args.steps} x repeat {args.repeat} (median), warmup {args.warmup}"
    )
    for device in devices:
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        print(f"\n== device: {device} ({name})")
        bench_optimizers(device, tensor_shapes, count, args)
        print()
        bench_cast(device, count, args)


if __name__ == "__main__":
    main()
