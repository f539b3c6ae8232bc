"""Whether a rewritten run trains like the original: both ran, the rewrite's dtypes are what its
mode promises, and its smoothed loss curve stays within a relative tolerance of the original's."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from xlamigrate.recipes import Recipe
from xlamigrate.verify.runs import RunResult, legacy_flags_on

EQUIVALENT, DIVERGENT, FAILED = "equivalent", "divergent", "failed"
FP32 = "torch.float32"

# Losses are compared as trailing means over this many steps: one batch's loss swings with its
# data far more than bf16 rounding moves it, and a migration error shows as a trend, not a blip.
WINDOW = 5
# Default tolerance on the relative gap of the smoothed curves (see docs/verify.md for the
# measurements behind it).
RTOL = 0.05


@dataclass(frozen=True)
class Check:
    name: str  # "runs", "steps", "flags", "dtypes", "losses"
    passed: bool
    detail: str


@dataclass(frozen=True)
class Comparison:
    mode: str
    verdict: str  # EQUIVALENT, DIVERGENT or FAILED
    reason: str
    checks: tuple[Check, ...]
    gaps: tuple[float, ...] = ()  # per compared step, relative gap of the smoothed curves
    first_divergence: int | None = None  # 1-based step

    @property
    def max_gap(self) -> float | None:
        finite = [gap for gap in self.gaps if math.isfinite(gap)]
        return max(finite) if finite else None


def smooth(losses: Sequence[float], window: int) -> list[float]:
    """Trailing means: step k averages steps k-window+1 .. k (fewer at the start)."""
    smoothed = []
    for index in range(len(losses)):
        part = losses[max(0, index - window + 1) : index + 1]
        smoothed.append(sum(part) / len(part))
    return smoothed


def relative_gaps(
    original: Sequence[float], rewritten: Sequence[float], window: int
) -> list[float]:
    """|rewrite - original| / |original| of the smoothed curves, step by step. A rewrite whose
    loss is not finite where the original's is gets an infinite gap."""
    gaps = []
    for before, after in zip(smooth(original, window), smooth(rewritten, window), strict=False):
        if not math.isfinite(after) and math.isfinite(before):
            gaps.append(math.inf)
        elif before == after:
            gaps.append(0.0)
        else:
            gaps.append(abs(after - before) / abs(before) if before else math.inf)
    return gaps


def compare(
    original: RunResult,
    rewritten: RunResult,
    mode: Recipe,
    legacy_on: bool,
    rtol: float = RTOL,
    window: int = WINDOW,
) -> Comparison:
    checks: list[Check] = []

    def failed(name: str, detail: str, gaps: Sequence[float] = ()) -> Comparison:
        checks.append(Check(name, False, detail))
        return Comparison(mode.name, FAILED, detail, tuple(checks), tuple(gaps))

    if not original.ok:
        return failed("runs", f"the original {original.problem}")
    if not rewritten.ok:
        return failed("runs", f"the rewrite {rewritten.problem}")
    checks.append(Check("runs", True, "both runs finished their steps"))

    steps = len(original.losses)
    if len(rewritten.losses) < steps:
        return failed(
            "steps",
            f"the rewrite stopped after {len(rewritten.losses)} optimizer steps; "
            f"the original ran {steps}",
        )
    unread = [label for label, run in (("original", original), ("rewrite", rewritten))
              if any(loss is None for loss in run.losses[:steps])]  # fmt: skip
    if unread:
        return failed("steps", f"the {' and '.join(unread)} lost the value of some steps' loss")
    checks.append(Check("steps", True, f"{steps} optimizer steps each"))

    still_on = legacy_flags_on(rewritten.flags)
    if still_on:
        return failed(
            "flags",
            f"the rewrite still runs with {', '.join(still_on)}: the legacy write is not "
            "migrated (see the findings left for manual work)",
        )
    checks.append(Check("flags", True, "no legacy flag on in the rewrite"))

    dtype_problem = _dtype_problem(rewritten, mode, legacy_on)
    if dtype_problem:
        return failed("dtypes", dtype_problem)
    expected = mode.param_dtype if legacy_on else FP32
    checks.append(Check("dtypes", True, f"parameters are {expected}"))

    before = [loss for loss in original.losses[:steps] if loss is not None]
    after = [loss for loss in rewritten.losses[:steps] if loss is not None]
    gaps = relative_gaps(before, after, window)
    over = next((index for index, gap in enumerate(gaps) if not gap <= rtol), None)
    if over is not None:
        detail = (
            f"the loss diverges at step {over + 1}: smoothed {smooth(after, window)[over]:.6g} "
            f"vs {smooth(before, window)[over]:.6g} ({_percent(gaps[over])} apart; "
            f"tolerance {_percent(rtol)})"
        )
        checks.append(Check("losses", False, detail))
        return Comparison(mode.name, DIVERGENT, detail, tuple(checks), tuple(gaps), over + 1)
    largest = max(range(len(gaps)), key=gaps.__getitem__)
    detail = (
        f"losses agree within {_percent(rtol)} over {steps} steps "
        f"(largest gap {_percent(gaps[largest])} at step {largest + 1})"
    )
    checks.append(Check("losses", True, detail))
    return Comparison(mode.name, EQUIVALENT, detail, tuple(checks), tuple(gaps))


def _dtype_problem(rewritten: RunResult, mode: Recipe, legacy_on: bool) -> str | None:
    params = dict(rewritten.dtypes.get("params", {}))
    if not legacy_on:
        if set(params) - {FP32}:
            return (
                f"parameters are {_dtypes(params)}, but the original trained in float32 "
                "(no legacy flag was on): the rewrite casts where the original did not"
            )
        return None
    if set(params) != {mode.param_dtype}:
        return f"parameters are {_dtypes(params)}; {mode.name} promises {mode.param_dtype}"
    masters = dict(rewritten.dtypes.get("masters", {}))
    if mode.fp32_masters and set(masters) != {FP32}:
        held = f"master weights in {_dtypes(masters)}" if masters else "no master weights"
        return f"the optimizer holds {held}; {mode.name} keeps float32 master weights"
    return None


def _dtypes(counts: dict[str, int]) -> str:
    if not counts:
        return "none (no floating-point parameter in the optimizer)"
    return ", ".join(f"{dtype} ({count})" for dtype, count in sorted(counts.items()))


def _percent(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.2%}"
