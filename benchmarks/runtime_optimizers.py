"""Runtime optimizers: step time, bytes per parameter at rest and at a step's peak, and the
stochastic-rounding cast's throughput.

For each parameter count (default 1M, 10M and 100M), split over Linear-sized tensors
(transformer layers of q, k, v, o, MLP up and down weights, plus one 1-D tensor holding the
remainder), on CPU and on CUDA when available, prints:

1. for each candidate, built side by side in this one process: the median time of `step()`
   (ms/step, as a ratio to fp32 AdamW foreach, and for the master-weights wrappers to the
   hand-written master loop around the same AdamW), and bytes per parameter at rest (params,
   grads, every tensor of the optimizer state, fp32 masters and kept fp32 gradients, each
   counted once) and at the step's peak (at rest plus the most the step allocates on top,
   from the profiler's allocation events). Candidates: stock AdamW on fp32 params (foreach,
   fused); stock AdamW on bf16 params (bf16 states: the legacy flag / full-bf16 baseline);
   the master loop as Neuron's AdamW_FP32ParamsCopy sample writes it (an fp32 copy per
   parameter, `grad.float()`, the AdamW update on the copies, `p.data.copy_(copy)`: it
   notices no write made outside it), around AdamW foreach and fused; FP32ParamsCopy around
   the same (with fresh fp32 gradients, as that loop, and with the CPU default of kept ones);
   StochasticRoundingOptimizer with fp32 states and with bf16 states; torchao's
   `_AdamW(bf16_stochastic_round=True)` where torchao is installed (the `bench` extra).
   Gradients are random tensors set once on `.grad` (the bf16 candidates share theirs), and
   only `step()` is timed;
2. the throughput of `stochastic_round_to_bf16(x)` against `x.to(torch.bfloat16)` on a float32
   tensor of the same element count (GB/s of input read, elements/s, ratio), and the same two
   writing into an existing bf16 tensor (`out=` / `copy_`), as the optimizers do.

Measures only; asserts no timing. Timings on a shared machine are noisy: candidates are timed
in turns (a burst of other work slows all of them alike), each figure is a median of
`--repeat` turns, process CPU time is printed next to wall time, and so is the load average.
On an oversubscribed host, multi-threaded ATen kernels wait for descheduled OpenMP threads;
`--threads 1` then gives steadier figures.

    python benchmarks/runtime_optimizers.py [--quick] [--params 1000000 10000000 100000000]
        [--steps N] [--warmup N] [--repeat 3] [--layers 3] [--threads N] [--no-cast]
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch.optim import Optimizer
from torch.profiler import ProfilerActivity, profile

from xlamigrate_runtime import native
from xlamigrate_runtime.optim import FP32ParamsCopy, StochasticRoundingOptimizer
from xlamigrate_runtime.rounding import stochastic_round_to_bf16

LR = 1e-4
FULL_SIZES = (1_000_000, 10_000_000, 100_000_000)
QUICK_SIZES = (1_000_000, 4_000_000)
STEPS_AT_10M = 10  # timed steps per repeat at 10M params; scaled for other counts
MAX_STEPS = 50  # (at 1M)
MIN_STEPS = 3  # at 100M params: 3 turns of 3 steps, the allocator's page faults vary a lot
CAST_REPEAT_FACTOR = 3  # casts are cheap: more turns for steadier medians


class Steps(Protocol):
    def step(self) -> Any: ...


def adamw(params: list[torch.Tensor], fused: bool = False) -> Optimizer:
    if fused:
        return torch.optim.AdamW(params, lr=LR, fused=True)
    return torch.optim.AdamW(params, lr=LR, foreach=True)


class HandMasterLoop:
    """The master-weights loop of Neuron's AdamW_FP32ParamsCopy sample: an fp32 copy of each
    parameter made once, `grad.float()` every step, the update on the copies (here stock AdamW,
    foreach or fused, so that only the wrapping differs), `p.data.copy_(copy)`. With
    `kept_grads`, the fp32 gradients are copied into buffers kept between steps instead, as
    FP32ParamsCopy does on the CPU by default (fresh ones page-fault there: see the docs). It
    does not notice a write made to a parameter outside it, which FP32ParamsCopy does."""

    def __init__(self, params: list[torch.Tensor], fused: bool, kept_grads: bool) -> None:
        self.params = params
        self.masters = [param.detach().to(torch.float32) for param in params]
        self.kept = [torch.empty_like(master) for master in self.masters] if kept_grads else []
        self.optimizer = adamw(self.masters, fused)

    @torch.no_grad()
    def step(self) -> None:
        for index, (param, master) in enumerate(zip(self.params, self.masters, strict=True)):
            if param.grad is None:
                master.grad = None
            elif self.kept:
                master.grad = self.kept[index].copy_(param.grad)
            else:
                master.grad = param.grad.float()
        self.optimizer.step()
        for param, master in zip(self.params, self.masters, strict=True):
            param.data.copy_(master)
            master.grad = None


def torchao_adamw() -> Callable[[list[torch.Tensor]], Steps] | None:
    """torchao's bf16 AdamW with stochastic rounding (bf16 params and states: 8 B/param), or
    None where torchao is not installed."""
    try:
        from torchao.optim import _AdamW  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        return None

    def build(params: list[torch.Tensor]) -> Steps:
        optimizer: Steps = _AdamW(params, lr=LR, bf16_stochastic_round=True)
        return optimizer

    return build


@dataclass(frozen=True)
class Mode:
    label: str
    dtype: torch.dtype
    build: Callable[[list[torch.Tensor]], Steps]
    expected: str  # the "Memory per parameter" row of /work/shared/design/recipes.md
    hand: str | None = None  # the label of the hand loop it is compared with


HAND_FOREACH = "hand master loop, AdamW foreach"
HAND_FUSED = "hand master loop, AdamW fused"
MODES = (
    Mode("AdamW foreach, fp32 params", torch.float32, adamw, "16 (fp32 AdamW)"),
    Mode("AdamW fused, fp32 params", torch.float32, lambda ps: adamw(ps, True), "16"),
    Mode("AdamW foreach, bf16 params+states", torch.bfloat16, adamw, "8 (legacy flag/full-bf16)"),
    Mode(
        "hand master loop as the sample, grad.float()",
        torch.bfloat16,
        lambda ps: HandMasterLoop(ps, fused=False, kept_grads=False),
        "16",
    ),
    Mode(
        HAND_FOREACH,
        torch.bfloat16,
        lambda ps: HandMasterLoop(ps, fused=False, kept_grads=True),
        "20 (kept fp32 grads)",
    ),
    Mode(
        HAND_FUSED,
        torch.bfloat16,
        lambda ps: HandMasterLoop(ps, fused=True, kept_grads=True),
        "20 (kept fp32 grads)",
    ),
    Mode(
        "FP32ParamsCopy, AdamW foreach",
        torch.bfloat16,
        lambda ps: FP32ParamsCopy(adamw(ps)),
        "16 (fp32-copy); +4 on CPU (kept fp32 grads)",
        HAND_FOREACH,
    ),
    Mode(
        "FP32ParamsCopy, AdamW fused",
        torch.bfloat16,
        lambda ps: FP32ParamsCopy(adamw(ps, True)),
        "16 (fp32-copy); +4 on CPU (kept fp32 grads)",
        HAND_FUSED,
    ),
    Mode(
        "FP32ParamsCopy(follow_data_writes=False), AdamW foreach",
        torch.bfloat16,
        lambda ps: FP32ParamsCopy(adamw(ps), follow_data_writes=False),
        "16 (fp32-copy); +4 on CPU (kept fp32 grads)",
        HAND_FOREACH,
    ),
    Mode(
        "FP32ParamsCopy(follow_data_writes=False), AdamW fused",
        torch.bfloat16,
        lambda ps: FP32ParamsCopy(adamw(ps, True), follow_data_writes=False),
        "16 (fp32-copy); +4 on CPU (kept fp32 grads)",
        HAND_FUSED,
    ),
    Mode(
        "StochasticRoundingOptimizer, AdamW foreach",
        torch.bfloat16,
        lambda ps: StochasticRoundingOptimizer(adamw(ps)),
        "12 (bf16, fp32 states)",
    ),
    Mode(
        "StochasticRoundingOptimizer, bf16 states",
        torch.bfloat16,
        lambda ps: StochasticRoundingOptimizer(adamw(ps), bf16_states=True),
        "8 (bf16, bf16 states)",
    ),
)


def modes() -> list[Mode]:
    """MODES, and torchao's SR AdamW where torchao is installed (a note where it is not)."""
    build = torchao_adamw()
    if build is None:
        print("torchao is not installed: its bf16 SR AdamW is left out (pip install torchao)")
        return list(MODES)
    return [*MODES, Mode("torchao _AdamW(bf16_stochastic_round)", torch.bfloat16, build, "8")]


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
    return [
        torch.nn.Parameter(
            (torch.randn(shape, device=device, generator=generator) * 0.02).to(dtype)
        )
        for shape in tensor_shapes
    ]


def make_grads(
    tensor_shapes: list[tuple[int, ...]], dtype: torch.dtype, device: torch.device
) -> list[torch.Tensor]:
    """Gradients for every candidate of this dtype: read, never written, by their steps."""
    generator = torch.Generator(device=device).manual_seed(1)
    return [
        (torch.randn(shape, device=device, generator=generator) * 1e-3).to(dtype)
        for shape in tensor_shapes
    ]


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


def held_bytes(params: list[torch.Tensor], optimizer: Steps) -> int:
    """Bytes of params, grads, optimizer-state tensors (the wrapper's and its inner optimizer's)
    and fp32 masters and kept fp32 grads that are distinct tensors from the params; each tensor
    counted once."""
    tensors: dict[int, torch.Tensor] = {}

    def add(values: Iterable[object]) -> None:
        for value in values:
            if isinstance(value, torch.Tensor):
                tensors[id(value)] = value

    add(params)
    add(param.grad for param in params)
    for each in (optimizer, getattr(optimizer, "optimizer", None)):
        if isinstance(each, Optimizer):
            add(value for state in each.state.values() for value in state.values())
    if isinstance(optimizer, HandMasterLoop):
        add([*optimizer.masters, *optimizer.kept])
    if isinstance(optimizer, FP32ParamsCopy):
        add(optimizer.master_params())
    add(getattr(optimizer, "_kept_grads", {}).values())  # the wrappers' keep_fp32_grads
    return sum(tensor.nbytes for tensor in tensors.values())


def step_allocation_peak(optimizer: Steps) -> int:
    """The most bytes one `step()` holds allocated on top of what existed before it: the
    running sum of the profiler's allocation events (frees are negative), at its maximum."""
    with profile(activities=[ProfilerActivity.CPU, *cuda_activity()], profile_memory=True) as run:
        optimizer.step()
    events = [event for event in run.profiler.kineto_results.events() if event.name() == "[memory]"]
    running = peak = 0
    for event in sorted(events, key=lambda event: event.start_ns()):
        running += event.nbytes()
        peak = max(peak, running)
    return peak


def cuda_activity() -> list[ProfilerActivity]:
    return [ProfilerActivity.CUDA] if torch.cuda.is_available() else []


def load() -> str:
    """The 1-minute load average: how much other work shared the cores during a figure."""
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "?"


def bench_optimizers(
    device: torch.device,
    tensor_shapes: list[tuple[int, ...]],
    count: int,
    steps: int,
    args: Args,
    candidates: list[Mode],
) -> None:
    grads = {
        dtype: make_grads(tensor_shapes, dtype, device) for dtype in {m.dtype for m in candidates}
    }
    built = []
    for mode in candidates:
        params = make_params(tensor_shapes, mode.dtype, device)
        for param, grad in zip(params, grads[mode.dtype], strict=True):
            param.grad = grad
        optimizer = mode.build(params)
        for _ in range(args.warmup):
            optimizer.step()
        built.append((params, optimizer))
    timings = round_robin([optimizer.step for _, optimizer in built], device, steps, args.repeat)
    print(
        f"{'optimizer step':<58} {'ms/step':>8} {'x fp32':>6} {'x hand':>6} {'cpu ms':>8} "
        f"{'x fp32':>6} {'B/param':>7} {'peak':>6}  design table B/param"
    )
    baseline = timings[0]
    by_label = {mode.label: timing for mode, timing in zip(candidates, timings, strict=True)}
    for mode, (params, optimizer), timing in zip(candidates, built, timings, strict=True):
        rest = held_bytes(params, optimizer)
        peak = rest + step_allocation_peak(optimizer)
        hand = f"{timing.wall / by_label[mode.hand].wall:6.2f}" if mode.hand in by_label else ""
        print(
            f"{mode.label:<58} {timing.wall * 1000:8.2f} {timing.wall / baseline.wall:6.2f} "
            f"{hand:>6} {timing.cpu * 1000:8.2f} {timing.cpu / baseline.cpu:6.2f} "
            f"{rest / count:7.2f} {peak / count:6.2f}  {mode.expected}"
        )
    print(f"(load average {load()})")
    del built, grads
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
    """Timed steps per repeat: `--steps`, else 10 at 10M params, in proportion between 3 and
    50 for other counts."""
    if args.steps is not None:
        return args.steps
    return min(MAX_STEPS, max(MIN_STEPS, round(STEPS_AT_10M * 10_000_000 / count)))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", type=int, nargs="+", help="parameter counts (1M, 10M, 100M)")
    parser.add_argument("--quick", action="store_true", help="1M and 4M params instead")
    parser.add_argument("--layers", type=int, default=3, help="6 Linear weights per layer")
    parser.add_argument("--steps", type=int, help="timed steps per repeat (default: by size)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--no-cast", action="store_true", help="skip the SR cast throughput")
    parser.add_argument(
        "--only", nargs="+", metavar="TEXT", help="the candidates whose label holds a TEXT"
    )
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
    candidates = modes()
    if namespace.only:  # (the fp32 AdamW baseline is always timed: the ratios are to it)
        candidates = [
            mode
            for index, mode in enumerate(candidates)
            if index == 0 or any(text in mode.label for text in namespace.only)
        ]
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
            bench_optimizers(device, tensor_shapes, count, steps, args, candidates)
            if not namespace.no_cast:
                print()
                bench_cast(device, count, steps, args)


if __name__ == "__main__":
    main()
