"""Whether a rewritten run trains like the original: both ran, the rewrite's dtypes are what its
mode promises, it holds on the device what the legacy run held there (the census), and its
smoothed loss curve stays within a relative tolerance of the original's."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from xlamigrate.neuronflags import NEURON_CC_FLAGS, STOCHASTIC_ROUNDING
from xlamigrate.recipes import EnvironmentEdits, Recipe
from xlamigrate.verify.runs import RunResult, legacy_flags_on

EQUIVALENT, DIVERGENT, FAILED = "equivalent", "divergent", "failed"
# No legacy flag took effect in the original: it trained in float32, so a float32 rewrite that
# matches it says nothing about the migration.
NOT_VERIFIED = "not verified"
# The original is no reference (it crashed, or its loss went NaN or infinite): the rewrite ran
# with its mechanism in place and its finite loss falls.
TRAINS = "trains"
PASSING = (EQUIVALENT, TRAINS)
FP32 = "torch.float32"

# Losses are compared as trailing means over this many steps: one batch's loss swings with its
# data far more than bf16 rounding moves it, and a migration error shows as a trend, not a blip.
WINDOW = 5
# Default tolerance on the relative gap of the smoothed curves (see docs/verify.md for the
# measurements behind it).
RTOL = 0.05


@dataclass(frozen=True)
class Check:
    name: str  # "runs", "steps", "flags", "dtypes", "mechanism", "launch", "census", "losses"
    passed: bool
    detail: str


@dataclass(frozen=True)
class Comparison:
    mode: str
    verdict: str  # EQUIVALENT, DIVERGENT, FAILED, TRAINS or NOT_VERIFIED
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
    environment: EnvironmentEdits | None = None,
    ineffective: Sequence[str] = (),
) -> Comparison:
    """`environment`: the recipe's environment edits the rewrite was planned with (Neuron's,
    for xlamigrate's own rewrites), checked in the rewrite's process; None checks none.
    `ineffective`: legacy flags on in the original's environment that took no effect there."""
    checks: list[Check] = []

    def failed(name: str, detail: str, gaps: Sequence[float] = ()) -> Comparison:
        checks.append(Check(name, False, detail))
        return Comparison(mode.name, FAILED, detail, tuple(checks), tuple(gaps))

    reference = reference_problem(original)
    if not rewritten.ok:  # where both failed, the original's failure explains the rewrite's
        failure = f"the original {original.problem}" if not original.ok else None
        return failed("runs", failure or f"the rewrite {rewritten.problem}")
    if reference is not None:
        return _on_its_own(rewritten, mode, legacy_on, environment, reference)
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

    if ineffective and _has_census(original) and _has_census(rewritten):
        # the flag took no effect in the original: a rewrite that stores its modules narrower
        # changes how it trains, whatever it promises
        narrower, detail = census_problem(original.census, rewritten.census, mode)
        if narrower:
            checks.append(Check("census", False, detail))
            return Comparison(mode.name, DIVERGENT, detail, tuple(checks))
    problem = _promise_checks(rewritten, mode, legacy_on, environment, checks, ineffective)
    if problem is not None:
        return failed(*problem)
    if not legacy_on and (original.launches or rewritten.launches):
        if original.launches != rewritten.launches:
            return failed(
                "launch",
                f"the migrated launcher starts {_launched(rewritten)} where the original "
                f"started {_launched(original)}: a configuration that never set a legacy flag "
                "must launch as before",
            )
        checks.append(Check("launch", True, f"launches as before: {_launched(original)}"))

    before = [loss for loss in original.losses[:steps] if loss is not None]
    after = [loss for loss in rewritten.losses[:steps] if loss is not None]
    gaps = relative_gaps(before, after, window)
    if legacy_on and _has_census(original) and _has_census(rewritten):
        wider, detail = census_problem(original.census, rewritten.census, mode)
        checks.append(Check("census", not wider, detail))
        if wider:
            return Comparison(mode.name, DIVERGENT, detail, tuple(checks), tuple(gaps))
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


def reference_problem(original: RunResult) -> str | None:
    """Why the original cannot be the reference the rewrites are compared with, or None."""
    if not original.ok:
        return f"the original {original.problem}"
    for index, loss in enumerate(original.losses):
        if loss is not None and not math.isfinite(loss):
            return f"the original's loss is {loss} at step {index + 1}: it diverged"
    return None


def _promise_checks(
    rewritten: RunResult,
    mode: Recipe,
    legacy_on: bool,
    environment: EnvironmentEdits | None,
    checks: list[Check],
    ineffective: Sequence[str] = (),
) -> tuple[str, str] | None:
    """The rewrite's own promises, whatever the original did: no legacy flag (but one that
    took no effect in the original and takes none here, left for manual work), the mode's
    dtypes, its mechanism. Passed checks go into `checks`; the first failure is returned."""
    still_on = legacy_flags_on(rewritten.flags)
    idle = still_on and set(still_on) <= set(ineffective) and no_flag_effect(rewritten.census)
    if still_on and not idle:
        return (
            "flags",
            f"the rewrite still runs with {', '.join(still_on)}: the legacy write is not "
            "migrated (see the findings left for manual work)",
        )
    checks.append(
        Check("flags", True, f"{', '.join(still_on)} still set, with no effect as in the original"
              " (left for manual work)" if idle else "no legacy flag on in the rewrite")
    )  # fmt: skip
    dtype_problem = _dtype_problem(rewritten, mode, legacy_on)
    if dtype_problem:
        return "dtypes", dtype_problem
    expected = mode.param_dtype if legacy_on else FP32
    checks.append(Check("dtypes", True, f"parameters are {expected}"))
    mechanism_problem = _mechanism_problem(rewritten, mode, legacy_on, environment)
    if mechanism_problem:
        return "mechanism", mechanism_problem
    checks.append(Check("mechanism", True, _mechanism_summary(mode, legacy_on, environment)))
    return None


def _on_its_own(
    rewritten: RunResult,
    mode: Recipe,
    legacy_on: bool,
    environment: EnvironmentEdits | None,
    reference: str,
) -> Comparison:
    """The verdict where the original is no reference: the rewrite keeps its promises, and its
    loss is finite at every step and falls (the mean of its second half below its first's)."""
    checks = [Check("runs", True, f"the rewrite ran; {reference}, so it is no reference")]

    def failed(name: str, detail: str) -> Comparison:
        checks.append(Check(name, False, detail))
        return Comparison(mode.name, FAILED, f"{reference}; {detail}", tuple(checks))

    losses = rewritten.losses
    if len(losses) < 2 or any(loss is None for loss in losses):
        return failed("steps", f"the rewrite recorded {len(losses)} usable steps; judged on its "
                      "own it needs at least 2, each with its loss")  # fmt: skip
    checks.append(Check("steps", True, f"{len(losses)} optimizer steps"))
    problem = _promise_checks(rewritten, mode, legacy_on, environment, checks)
    if problem is not None:
        return failed(*problem)
    values = [loss for loss in losses if loss is not None]
    bad = next((index for index, loss in enumerate(values) if not math.isfinite(loss)), None)
    if bad is not None:
        return failed("losses", f"the rewrite's loss is {values[bad]} at step {bad + 1} too")
    half = len(values) // 2  # halves, not single steps: one batch's loss swings with its data
    early, late = _mean(values[: len(values) - half]), _mean(values[-half:])
    if not late < early:
        return failed(
            "losses",
            f"the rewrite's loss does not fall: {late:.6g} over its last {half} steps, "
            f"{early:.6g} over its first {len(values) - half}",
        )
    detail = (
        f"{reference}; judged on its own, the rewrite trains: its loss is finite and falls "
        f"from {early:.6g} (mean of its first {len(values) - half} steps) to {late:.6g} "
        f"(mean of its last {half})"
    )
    checks.append(Check("losses", True, detail))
    return Comparison(mode.name, TRAINS, detail, tuple(checks))


def _launched(run: RunResult) -> str:
    return "; ".join(f"`{line}`" for line in run.launches) or "nothing"


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


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
    if mode.fp32_masters and sum(masters.values()) < sum(params.values()):
        return (
            f"the optimizer holds {sum(masters.values())} float32 master weights for "
            f"{sum(params.values())} parameters; {mode.name} keeps one for each"
        )
    return None


def _mechanism_problem(
    rewritten: RunResult, mode: Recipe, legacy_on: bool, environment: EnvironmentEdits | None
) -> str | None:
    """What of the mode's mechanism the rewrite's run lacks, beyond the dtypes: an autocast
    region around each forward pass and not around backward(), the Neuron variables."""
    seen = rewritten.mechanism
    backwards = seen.get("backwards", 0)
    under = seen.get("backwards_after_autocast_forward", 0)
    inside = seen.get("backwards_in_autocast", 0)
    if not legacy_on:
        if under or inside:
            return (
                "an XLA bf16 autocast region was active, but the original trained in float32 "
                "(no legacy flag was on): the rewrite autocasts where the original did not"
            )
        return None
    if mode.autocast_forward and seen:
        if under < backwards:
            return (
                f"the model's forward pass ran outside a torch.autocast('xla', bf16) region "
                f"before {backwards - under} of {backwards} backward passes: autocast is not "
                "active, so the rewrite trains in float32"
            )
        if inside:
            return (
                f"backward() ran inside the autocast region {inside} of {backwards} times: the "
                "region belongs around the forward pass and the loss only"
            )
    if environment is not None:
        flags = rewritten.flags
        if environment.rounding_on and flags.get(STOCHASTIC_ROUNDING) != "1":
            return (
                f"{STOCHASTIC_ROUNDING} is {_shown(flags.get(STOCHASTIC_ROUNDING))} in the "
                f"rewrite; {mode.name} sets it to 1 on Neuron (the legacy flag implied it)"
            )
        if environment.auto_cast_none and _auto_cast(flags.get(NEURON_CC_FLAGS)) != "none":
            return (
                f"{NEURON_CC_FLAGS} is {_shown(flags.get(NEURON_CC_FLAGS))} in the rewrite; "
                f"{mode.name} needs --auto-cast=none there on Neuron (the last --auto-cast wins)"
            )
    return None


def _mechanism_summary(mode: Recipe, legacy_on: bool, environment: EnvironmentEdits | None) -> str:
    if not legacy_on:
        return "no autocast region, as in the float32 original"
    parts = []
    if mode.autocast_forward:
        parts.append("every forward pass under torch.autocast('xla', bf16), backward outside")
    if mode.fp32_masters:
        parts.append("float32 master weights")
    if environment is not None and environment.rounding_on:
        parts.append(f"{STOCHASTIC_ROUNDING}=1")
    if environment is not None and environment.auto_cast_none:
        parts.append("--auto-cast=none")
    return "; ".join(parts) or f"parameters in {mode.param_dtype}"


def _auto_cast(flags: str | None) -> str | None:
    """The value of the last --auto-cast in NEURON_CC_FLAGS (the one neuronx-cc keeps)."""
    value = None
    for word in (flags or "").split():
        if word.startswith("--auto-cast="):
            value = word.split("=", 1)[1]
    return value


def _shown(value: str | None) -> str:
    return "unset" if value is None else repr(value)


def _dtypes(counts: dict[str, int]) -> str:
    if not counts:
        return "none (no floating-point parameter in the optimizer)"
    return ", ".join(f"{dtype} ({count})" for dtype, count in sorted(counts.items()))


def _percent(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.2%}"


# -- the census: what each run holds on the device ----------------------------------------------

MODULE_KINDS = ("parameter", "buffer", "grad")  # a module's own tensors and its gradients
ELEMENT_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "f64": 8}
MATMULS = ("dot", "convolution")
NAMES_SHOWN = 3  # tensors named per module in a verdict; the rest are counted


def census_problem(
    original: Mapping[str, Any], rewritten: Mapping[str, Any], mode: Recipe
) -> tuple[bool, str]:
    """(whether the rewrite stores something wider than the legacy run did, what the census
    shows), matching tensors by name. A module's tensor (parameter, buffer, gradient) that the
    flag stored in bf16 and the rewrite in f32 is a tensor the migration missed (a frozen
    backbone, an EMA copy, a teacher), except in autocast, whose model stays float32 by design
    (there the step graph's matmuls must run in bf16). Optimizer state (fp32-copy's beside its
    masters, an fp32 option of full-bf16) and the script's own tensors (inputs stay fp32 until
    the model's input cast) may be f32; float64 where the flag stored less is wider anywhere.
    Masters have no counterpart in the legacy run: the dtypes check holds them."""
    before = {entry["name"]: entry for entry in original.get("tensors", ())}
    after = list(rewritten.get("tensors", ()))
    widest = {kind: "f32" if mode.autocast_forward else "bf16" for kind in MODULE_KINDS}
    missed: list[dict[str, Any]] = []
    narrowed: list[dict[str, Any]] = []  # a module's tensor the legacy run left wider
    kept: dict[str, int] = {}  # a kind of tensor kept wider by design: how many
    compared = 0
    for entry in after:
        legacy = before.get(entry["name"])
        if legacy is None:
            continue
        compared += 1
        stored, storing = _bytes(legacy["type"]), _bytes(entry["type"])
        if storing < stored and entry["kind"] in MODULE_KINDS:
            narrowed.append({**entry, "was": legacy["type"]})
        if storing <= stored:
            continue
        if storing > _bytes(widest.get(entry["kind"], "f32")):
            missed.append({**entry, "was": legacy["type"]})
        else:
            kept[entry["kind"]] = kept.get(entry["kind"], 0) + 1
    if missed:
        owners = [e for e in after if e["kind"] in MODULE_KINDS or e["kind"] == "state"]
        why = (
            "the flag changed every tensor on the device, not only the optimizer's: cast these too"
        )
        return True, _stored_otherwise(missed, owners, why)
    if narrowed:  # under a flag that took effect nothing of a module stays wider than bf16
        owners = [e for e in after if e["kind"] in MODULE_KINDS]
        why = (
            "the flag did not take effect on them in the legacy run (set after the device"
            " started?), so the rewrite changes how they train"
        )
        return True, _stored_otherwise(narrowed, owners, why)
    matmuls = _wide_matmuls(original.get("graph", {}), rewritten.get("graph", {}))
    if matmuls is not None:
        return True, matmuls
    evaluations = _wide_evaluations(
        original.get("evaluations", ()), rewritten.get("evaluations", ())
    )
    if evaluations:
        return True, "; ".join(evaluations)
    detail = f"{compared} tensors on the device as the legacy run stored them"
    same = _matched_evaluations(original.get("evaluations", ()), rewritten.get("evaluations", ()))
    if same:
        detail += f"; {len(same)} forward{_s(len(same))} outside training as well ({same[0]}"
        detail += ", ...)" if len(same) > 1 else ")"
    if kept:
        by_design = ", ".join(f"{count} {kind}{_s(count)}" for kind, count in sorted(kept.items()))
        detail += f", or wider by {mode.name}'s design ({by_design} in f32)"
    return False, detail


def _stored_otherwise(tensors: list[dict[str, Any]], owners: list[dict[str, Any]], why: str) -> str:
    """ "N tensors the legacy run stored in X are Y in the rewrite: <by module>; <why>"."""
    was = "/".join(sorted({e["was"] for e in tensors}))
    now = "/".join(sorted({e["type"] for e in tensors}))
    verb = "is" if len(tensors) == 1 else "are"
    groups = "; ".join(_grouped(tensors, owners))
    return (
        f"{len(tensors)} tensor{_s(len(tensors))} the legacy run stored in {was} {verb} {now} in"
        f" the rewrite: {groups}; {why}"
    )


def _wide_matmuls(original: Mapping[str, Any], rewritten: Mapping[str, Any]) -> str | None:
    """Matmul-class ops (dot, convolution) of the step graph the rewrite runs wider than the
    legacy run did (a forward left outside autocast, a module the cast missed), or None."""
    if not original or not rewritten:
        return None

    legacy_wide, _ = _wide_count(original)
    rewrite_wide, total = _wide_count(rewritten)
    if rewrite_wide <= legacy_wide:
        return None
    return (
        f"{rewrite_wide} of the {total} matmuls (dot, convolution) of the rewrite's step graph "
        f"run in float32 where the legacy run ran {legacy_wide}: a module's forward runs "
        "outside the recipe (a cast it missed, or outside the autocast region)"
    )


def _matched_evaluations(
    original: Iterable[Mapping[str, Any]], rewritten: Iterable[Mapping[str, Any]]
) -> list[str]:
    """ "model (no_grad)" for each forward outside training both runs made, paired by the
    module's name in the script and the context."""
    before = {(e["module"], e["context"]): e for e in original if e.get("graph")}
    return [
        f"{e['module']} ({e['context']})"
        for e in rewritten
        if e.get("graph") and (e["module"], e["context"]) in before
    ]


def _wide_evaluations(
    original: Iterable[Mapping[str, Any]], rewritten: Iterable[Mapping[str, Any]]
) -> list[str]:
    """A forward outside training (an evaluation under no_grad, a teacher, a test loop) whose
    graph runs more matmuls in float32 than the same forward did under the flag: one sentence
    each, naming the module and where the script calls it."""
    before = {(e["module"], e["context"]): e for e in original if e.get("graph")}
    found = []
    for entry in rewritten:
        legacy = before.get((entry["module"], entry["context"]))
        if legacy is None or not entry.get("graph"):
            continue
        rewrite_wide, total = _wide_count(entry["graph"])
        legacy_wide, _ = _wide_count(legacy["graph"])
        if rewrite_wide > legacy_wide:
            where = f" at {entry['site']}" if entry.get("site") else ""
            found.append(
                f"the forward of {entry['module']} under {entry['context']}{where} runs "
                f"{rewrite_wide} of its {total} matmuls in float32 where the legacy run ran "
                f"{legacy_wide}: the flag ran every forward in bf16, evaluations too; run this one "
                "in the recipe as well (inside the autocast region, or on the cast model)"
            )
    return found


def _wide_count(graph: Mapping[str, Any]) -> tuple[int, int]:
    """(matmul-class ops wider than 16 bits, all of them) of a census graph."""
    counts = [graph.get(op, {}) for op in MATMULS]
    total = sum(sum(count.values()) for count in counts)
    return sum(n for count in counts for t, n in count.items() if _bytes(t) > 2), total


def _grouped(missed: list[dict[str, Any]], tensors: list[dict[str, Any]]) -> list[str]:
    """The missed tensors by module: each under the outermost module all of whose tensors
    were missed ("ema: 4 tensors" rather than four names), a few named."""
    missed_names = {entry["name"] for entry in missed}
    all_names = [entry["name"] for entry in tensors]
    groups: dict[str, list[str]] = {}
    for entry in missed:
        parts = _path(entry["name"])
        owner = entry["name"]
        for length in range(1, len(parts)):
            prefix = ".".join(parts[:length])
            under = [n for n in all_names if n.startswith(prefix + ".")]
            if under and all(n in missed_names for n in under):
                owner = prefix
                break
        else:
            owner = ".".join(parts[:-1]) or entry["name"]
        groups.setdefault(owner, []).append(entry["name"])
    shown = []
    for owner, names in groups.items():
        listed = ", ".join(names[:NAMES_SHOWN]) + (", ..." if len(names) > NAMES_SHOWN else "")
        shown.append(f"{owner} ({len(names)} tensor{_s(len(names))}: {listed})")
    return shown


_PART = re.compile(r"[^.\[]+(?:\[[^\]]*\])*")


def _path(name: str) -> list[str]:
    """`optimizer.state[model.0.weight].exp_avg` -> optimizer, state[model.0.weight], exp_avg."""
    return _PART.findall(name)


def _bytes(element_type: str) -> int:
    return ELEMENT_BYTES.get(element_type, 0)


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def no_flag_effect(census: Mapping[str, Any]) -> bool:
    """Whether a run with a legacy flag in its environment shows no sign of it on the device:
    modules' tensors in the census, every one float32 (the flag was set after the device
    started, where torch-xla no longer reads it)."""
    types = {e["type"] for e in census.get("tensors", ()) if e.get("kind") in MODULE_KINDS}
    return "error" not in census and types == {"f32"}


def _has_census(run: RunResult) -> bool:
    return bool(run.census.get("tensors")) and "error" not in run.census


def not_verified(comparison: Comparison, hint: str) -> Comparison:
    """An equivalent comparison with an original in which no legacy flag took effect: both
    trained in float32, which verifies nothing about the migration. Failures stand."""
    if comparison.verdict != EQUIVALENT:
        return comparison
    detail = (
        "no legacy flag took effect in the original, so it trained in float32 and this "
        f"compares float32 with float32, not the migration; {hint}"
    )
    checks = (*comparison.checks, Check("reference", False, detail))
    return replace(comparison, verdict=NOT_VERIFIED, reason=detail, checks=checks)
