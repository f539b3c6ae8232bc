"""Runtime optimizers: step time, stochastic-rounding cast throughput and memory per parameter.

For each parameter count (default ~10M and ~100M), split over Linear-sized tensors (transformer
layers of q, k, v, o, MLP up and down weights, plus one 1-D tensor holding the remainder), on
CPU and on CUDA when available, prints:

1. the median time of `optimizer.step()` (ms/step, and as a ratio to fp32 AdamW foreach) of
   stock AdamW on fp32 params, stock AdamW on bf16 params (bf16 states: the legacy flag /
   full-bf16 baseline), FP32ParamsCopy (round-to-nearest by default, which on CPU keeps its
   fp32 gradient buffers between steps; the same with fresh ones every step; stochastic),
   AdamW_FP32ParamsCopy and StochasticRoundingOptimizer, all around
   `torch.optim.AdamW(foreach=True)`; gradients are random tensors set once on `.grad`, and
   only `step()` is timed;
2. the throughput of `stochastic_round_to_bf16(x)` against `x.to(torch.bfloat16)` on a float32
   tensor of the same element count (GB/s of input read, elements/s, ratio), and the same two
   writing into an existing bf16 tensor (`out=` / `copy_`), as the optimizers do;
3. the bytes per parameter each mode holds after its steps, measured (params + grads + every
   tensor of the optimizer state + distinct fp32 masters), next to the design table's figures.

Measures only; asserts no timing. Timings on a shared machine are noisy: candidates are timed
in turns (a burst of other work slows all of them alike), each figure is a median of
`--repeat` turns, process CPU time is printed next to wall time, and so is the load average.
On an oversubscribed host, multi-threaded ATen kernels wait for descheduled OpenMP threads;
`--threads 1` then gives steadier figures.

    python benchmarks/runtime_optimizers.py [--quick] [--params 10000000 100000000]
        [--steps N] [--warmup N] [--repeat 3] [--layers 3] [--threads N]
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.optim import Optimizer

from xlamigrate_runtime import native
from xlamigrate_runtime.optim import (
    AdamW_FP32ParamsCopy,
    FP32ParamsCopy,
    StochasticRoundingOptimizer,
)
from xlamigrate_runtime.rounding import stochastic_round_to_bf16

LR = 1e-4
FULL_SIZES = (10_000_000, 100_000_000)
QUICK_SIZES = (1_000_000, 4_000_000)
STEPS_AT_10M = 10  # timed steps per repeat at 10M params; scaled down for larger counts
MIN_STEPS = 3  # at 100M params: 3 turns of 3 steps, the allocator's page faults vary a lot
CAST_REPEAT_FACTOR = 3  # casts are cheap: more turns for steadier medians


def adamw(params: list[torch.Tensor]) -> Optimizer:
    return torch.optim.AdamW(params, lr=LR, foreach=True)


@dataclass(frozen=True)
class Mode:
    label: str
    dtype: torch.dtype
    build: Callable[[list[torch.Tensor]], Optimizer]
    expected: str  # the "Memory per parameter" row of /work/shared/design/recipes.md


KEPT_GRADS = "16 (fp32-copy); +4 on CPU (kept fp32 grads)"
MODES = (
    Mode("AdamW foreach, fp32 params", torch.float32, adamw, "16 (fp32 AdamW)"),
    Mode("AdamW foreach, bf16 params+states", torch.bfloat16, adamw, "8 (legacy flag/full-bf16)"),
    Mode(
        "FP32ParamsCopy, nearest",
        torch.bfloat16,
        lambda params: FP32ParamsCopy(adamw(params)),
        KEPT_GRADS,
    ),
    Mode(
        "FP32ParamsCopy, nearest, fresh grads",
        torch.bfloat16,
        lambda params: FP32ParamsCopy(adamw(params), keep_fp32_grads=False),
        "16 (fp32-copy)",
    ),
    Mode(
        "FP32ParamsCopy, stochastic",
        torch.bfloat16,
        lambda params: FP32ParamsCopy(adamw(params), stochastic_rounding=True),
        KEPT_GRADS,
    ),
    Mode(
        "AdamW_FP32ParamsCopy",
        torch.bfloat16,
        lambda params: AdamW_FP32ParamsCopy(params, lr=LR, foreach=True),
        KEPT_GRADS,
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
    params: list[torch.Tensor] = []
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


@dataclass(frozen=True)
class Timing:
    """Seconds per call: wall clock, and CPU time of the whole process."""

    wall: float
    cpu: float


def timed(work: Callable[[], object], device: torch.device, iterations: int) -> Timing:
    """Wall time and process CPU time (all threads) of one call of `work`, averaged over
    `iterations` calls. CPU time is what other work on a shared machine disturbs least (with
    one thread: more threads add their OpenMP spin-waiting to it)."""
    sync(device)
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(iterations):
        work()
    sync(device)
    cpu = (time.process_time() - cpu_start) / iterations
    return Timing((time.perf_counter() - start) / iterations, cpu)


def medians(runs: list[Timing]) -> Timing:
    return Timing(statistics.median(t.wall for t in runs), statistics.median(t.cpu for t in runs))


def round_robin(
    works: list[Callable[[], object]], device: torch.device, iterations: int, repeat: int
) -> list[Timing]:
    """Median timings of each work, measured in turns: a burst of other work on a shared
    machine then slows every candidate alike instead of one of them."""
    runs: list[list[Timing]] = [[] for _ in works]
    for _ in range(repeat):
        for work, timings in zip(works, runs, strict=True):
            timings.append(timed(work, device, iterations))
    return [medians(timings) for timings in runs]


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
                add(master.grad)  # None between steps: fp32 grads live only inside step()
    for kept in (getattr(optimizer, "_kept_grads", None) or {}).values():  # keep_fp32_grads
        add(kept)
    return sum(tensor.nbytes for tensor in tensors.values())


def load() -> str:
    """The 1-minute load average: how much other work shared the cores during a figure."""
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "?"


def bench_optimizers(
    device: torch.device, tensor_shapes: list[tuple[int, ...]], count: int, steps: int, args: Args
) -> None:
    built = []
    for mode in MODES:
        params = make_params(tensor_shapes, mode.dtype, device)
        optimizer = mode.build(params)
        for _ in range(args.warmup):
            optimizer.step()
        built.append((params, optimizer))
    timings = round_robin([optimizer.step for _, optimizer in built], device, steps, args.repeat)
    print(
        f"{'optimizer step':<36} {'ms/step':>9} {'x fp32':>7} {'cpu ms':>9} {'x fp32':>7} "
        f"{'B/param':>8}  table B/param"
    )
    baseline = timings[0]
    for mode, (params, optimizer), timing in zip(MODES, built, timings, strict=True):
        per_param = held_bytes(params, optimizer) / count
        print(
            f"{mode.label:<36} {timing.wall * 1000:9.2f} {timing.wall / baseline.wall:7.2f} "
            f"{timing.cpu * 1000:9.2f} {timing.cpu / baseline.cpu:7.2f} {per_param:8.2f}  "
            f"{mode.expected}"
        )
    print(f"(load average {load()})")
    del built
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def bench_cast(device: torch.device, count: int, steps: int, args: Args) -> None:
    x = torch.randn(count, device=device, generator=torch.Generator(device=device).manual_seed(1))
    generator = torch.Generator(device=device).manual_seed(2)
    existing = torch.empty(count, dtype=torch.bfloat16, device=device)
    casts: list[tuple[str, str, Callable[[], object]]] = [
        ("new tensor", "x.to(torch.bfloat16)", lambda: x.to(torch.bfloat16)),
        (
            "new tensor",
            "stochastic_round_to_bf16(x)",
            lambda: stochastic_round_to_bf16(x, generator),
        ),
        ("into bf16", "bf16.copy_(x)", lambda: existing.copy_(x)),
        (
            "into bf16",
            "stochastic_round_to_bf16(x, out=bf16)",
            lambda: stochastic_round_to_bf16(x, generator, out=existing),
        ),
    ]
    for _ in range(max(1, args.warmup)):
        for _, _, cast in casts:
            cast()
    works = [cast for _, _, cast in casts]
    timings = round_robin(works, device, max(steps, 3), CAST_REPEAT_FACTOR * args.repeat)
    print(
        f"{'fp32 -> bf16 cast':<39} {'ms':>8} {'GB/s':>6} {'Gelem/s':>8} {'x plain':>8} "
        f"{'cpu ms':>8} {'x plain':>8}"
    )
    plain: dict[str, Timing] = {}
    for (kind, label, _), timing in zip(casts, timings, strict=True):
        base = plain.setdefault(kind, timing)
        print(
            f"{label:<39} {timing.wall * 1000:8.2f} {x.nbytes / timing.wall / 1e9:6.2f} "
            f"{count / timing.wall / 1e9:8.3f} {timing.wall / base.wall:8.2f} "
            f"{timing.cpu * 1000:8.2f} {timing.cpu / base.cpu:8.2f}"
        )
    print(f"(load average {load()})")


@dataclass(frozen=True)
class Args:
    sizes: tuple[int, ...]
    layers: int
    steps: int | None
    warmup: int
    repeat: int


def steps_for(count: int, args: Args) -> int:
    """Timed steps per repeat: `--steps`, else 10 at 10M params, fewer (>= 3) for more."""
    if args.steps is not None:
        return args.steps
    return max(MIN_STEPS, round(STEPS_AT_10M * 10_000_000 / count))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", type=int, nargs="+", help="parameter counts (10M and 100M)")
    parser.add_argument("--quick", action="store_true", help="1M and 4M params instead")
    parser.add_argument("--layers", type=int, default=3, help="6 Linear weights per layer")
    parser.add_argument("--steps", type=int, help="timed steps per repeat (default: by size)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    namespace = parser.parse_args()
    sizes = tuple(namespace.params or (QUICK_SIZES if namespace.quick else FULL_SIZES))
    args = Args(sizes, namespace.layers, namespace.steps, namespace.warmup, namespace.repeat)
    if (
        min(sizes) < 1
        or args.layers < 1
        or (args.steps is not None and args.steps < 1)
        or args.repeat < 1
        or args.warmup < 0
    ):
        parser.error("--params, --layers, --steps and --repeat must be >= 1, --warmup >= 0")
    if namespace.threads is not None:
        torch.set_num_threads(namespace.threads)

    devices = [torch.device("cpu")]
    if torch.cuda.is_available():
        devices.append(torch.device("cuda"))
    print(
        f"torch {torch.__version__}, threads: {torch.get_num_threads()}, cores: {os.cpu_count()}, "
        f"devices: {', '.join(str(device) for device in devices)}, load average: {load()}"
    )
    print(
        f"medians of {args.repeat} turns (casts: {CAST_REPEAT_FACTOR * args.repeat}), candidates "
        f"timed in turns; warmup {args.warmup}; cpu ms = process CPU time, all threads"
    )
    print(f"CPU stochastic rounding: {native.describe()}")
    for device in devices:
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        for total in args.sizes:
            tensor_shapes = shapes(total, args.layers)
            count = sum(math.prod(shape) for shape in tensor_shapes)
            steps = steps_for(count, args)
            largest = max(tensor_shapes, key=math.prod)
            print(
                f"\n== device: {device} ({name}), params: {count:,} in {len(tensor_shapes)} "
                f"tensors (largest {largest}), {steps} timed steps per repeat"
            )
            bench_optimizers(device, tensor_shapes, count, steps, args)
            print()
            bench_cast(device, count, steps, args)


if __name__ == "__main__":
    main()
