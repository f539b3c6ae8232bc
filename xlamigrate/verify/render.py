"""What `xlamigrate verify` prints: a table of the runs, a compact loss plot, the verdict per
mode (text, through rich), or all of it as JSON."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from xlamigrate.recipes import RECIPES
from xlamigrate.verify.compare import (
    MATMULS,
    NOT_VERIFIED,
    PASSING,
    Comparison,
    reference_problem,
)
from xlamigrate.verify.runs import RunResult
from xlamigrate.verify.verifier import ORIGINAL, VerifyReport

MARKERS = {ORIGINAL: "O", **{name: recipe.marker for name, recipe in RECIPES.items()}}
OVERLAP = "*"
PLOT_WIDTH, PLOT_HEIGHT = 60, 10
WIDTH = 124  # the table's width where no terminal says (a pipe, a file, CI logs)
# B/param: weights+gradients+optimizer bytes per parameter at the first step, as stored;
# RSS MB: the process's peak resident memory; ms/step: the median step after the warm-up;
# device: the floating tensors held on the device after the warm-up (the census), by element
# type as stored; matmuls: the dot/convolution ops of that step's graph, by element type.
# (A run's exit code is in its verdict's reason: "crashed (exit code 1)".)
COLUMNS = ("run", "steps", "last loss", "params", "masters", "B/param", "RSS MB", "ms/step",
           "device", "matmuls", "max gap", "verdict")  # fmt: skip
LEGEND = (
    "device: floating tensors on the XLA device after step {step}, by the element type stored "
    "(modules' parameters, buffers and gradients, optimizer state, masters, the script's "
    "tensors); matmuls: dot/convolution ops of that step's graph, by element type"
)
MEMORY_PARTS = ("weights", "grads", "optimizer")
PLAIN: dict[str, Any] = {"markup": False, "highlight": False, "soft_wrap": True}  # text as is
NUMERIC = frozenset({"last loss", "B/param", "RSS MB", "ms/step", "max gap"})


def render_text(report: VerifyReport, color: bool = False, width: int | None = WIDTH) -> str:
    """Plain text unless `color`; `width` None follows the terminal."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console(width=width, force_terminal=color, no_color=not color, record=True)
    with console.capture() as captured:
        legacy = ", ".join(report.legacy_on) or (
            f"{', '.join(report.ineffective)} set, to no effect"
            if report.ineffective
            else "no legacy flag on"
        )
        console.print(f"xlamigrate verify {report.script}: original ran with {legacy}", **PLAIN)
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
        for column in COLUMNS:
            table.add_column(column, justify="right" if column in NUMERIC else "left")
        verdicts = {comparison.mode: comparison for comparison in report.comparisons}
        for label, run in report.runs.items():
            table.add_row(*_row(label, run, verdicts.get(label)), style=_style(verdicts.get(label)))
        console.print(table)
        step = next((run.census.get("step") for run in report.runs.values() if run.census), None)
        if step is not None:
            console.print(LEGEND.format(step=step), **PLAIN)
        console.print()
        for line in loss_plot(_curves(report.runs)):
            console.print(line, **PLAIN)
        console.print()
        if report.reference_problem is not None:
            console.print(f"original: NO REFERENCE: {report.reference_problem}", **PLAIN)
        for comparison in report.comparisons:
            console.print(f"{comparison.mode}: {comparison.verdict.upper()}: ", end="", **PLAIN)
            console.print(comparison.reason, **PLAIN)
            run = report.runs[comparison.mode]
            if run.problem is not None and run.stderr_tail:
                console.print(_indent(run.stderr_tail), style="dim", **PLAIN)
        original = report.runs[ORIGINAL]
        if original.problem is not None and original.stderr_tail:
            console.print(
                f"original's stderr:\n{_indent(original.stderr_tail)}", style="dim", **PLAIN
            )
        advice = recommendation(report)
        if advice:
            console.print(f"recommendation: {advice}", **PLAIN)
        for note in report.notes:
            console.print(f"note: {note}", **PLAIN)
    return captured.get()


def _row(label: str, run: RunResult, comparison: Comparison | None) -> list[str]:
    losses = [loss for loss in run.losses if loss is not None]
    params = ", ".join(_short(dtype) for dtype in run.dtypes.get("params", {})) or "-"
    masters = ", ".join(_short(dtype) for dtype in run.dtypes.get("masters", {})) or "-"
    gap = comparison.max_gap if comparison is not None else None
    verdict = comparison.verdict if comparison is not None else _original_verdict(run)
    return [
        label,
        f"{len(run.losses)}{'' if run.stopped_at_limit or not run.losses else ' (end)'}",
        f"{losses[-1]:.6g}" if losses else "-",
        params,
        masters,
        _bytes_per_parameter(run),
        "-" if run.peak_rss is None else f"{run.peak_rss / 2**20:.0f}",
        "-" if run.seconds_per_step is None else f"{run.seconds_per_step * 1e3:.1f}",
        _device(run),
        _matmuls(run),
        "-" if gap is None else f"{gap:.2%}",
        verdict,
    ]


def _device(run: RunResult) -> str:
    """The census by element type: "12 bf16" or "8 bf16, 4 f32"."""
    counts: dict[str, int] = {}
    for entry in run.census.get("tensors", ()):
        counts[entry["type"]] = counts.get(entry["type"], 0) + 1
    return _counts(counts)


def _matmuls(run: RunResult) -> str:
    graph = run.census.get("graph") or {}
    counts: dict[str, int] = {}
    for op in MATMULS:
        for element_type, count in graph.get(op, {}).items():
            counts[element_type] = counts.get(element_type, 0) + count
    return _counts(counts)


def _counts(counts: dict[str, int]) -> str:
    order = ("bf16", "f16", "f32", "f64")
    ranked = sorted(counts, key=lambda t: (order.index(t) if t in order else len(order), t))
    return ", ".join(f"{counts[t]} {t}" for t in ranked) or "-"


def _bytes_per_parameter(run: RunResult) -> str:
    """Weights + gradients + optimizer, bytes per parameter as stored: "2+2+8"."""
    parts = [run.bytes_per_parameter(part) for part in MEMORY_PARTS]
    if any(part is None for part in parts):
        return "-"
    return "+".join(f"{part:.3g}" for part in parts if part is not None)


def recommendation(report: VerifyReport) -> str | None:
    """One line from the measurements: which passing mode tracks the original closest, which
    holds the fewest bytes per parameter, which steps fastest."""
    passing = [c for c in report.comparisons if c.verdict in PASSING]
    if all(c.verdict == NOT_VERIFIED for c in report.comparisons):
        return None  # nothing was verified: no rewrite to recommend
    if not passing:
        return "none of the rewrites passed; see the reasons above"
    parts = []
    gaps = [c for c in passing if c.max_gap is not None]
    if len(gaps) > 1:
        best = min(gaps, key=lambda c: c.max_gap or 0.0)
        if sum(c.max_gap == best.max_gap for c in gaps) == 1:  # no claim in a tie
            parts.append(f"{best.mode} tracks the original closest (max gap {best.max_gap:.2%})")
    held = {c.mode: _total_bytes(report.runs[c.mode]) for c in passing}
    sized = {mode: size for mode, size in held.items() if size is not None}
    if len(sized) > 1:
        lean = min(sized, key=sized.__getitem__)
        most = max(sized, key=sized.__getitem__)
        if list(sized.values()).count(sized[lean]) == 1:  # no claim in a tie
            parts.append(
                f"{lean} holds the least per parameter ({sized[lean]:.3g} B, against "
                f"{sized[most]:.3g} B for {most})"
            )
    timed = {c.mode: report.runs[c.mode].seconds_per_step for c in passing}
    steps = {mode: s for mode, s in timed.items() if s is not None}
    if len(steps) > 1:
        fast = min(steps, key=steps.__getitem__)
        parts.append(f"{fast} steps fastest ({steps[fast] * 1e3:.1f} ms on this CPU)")
    if len(passing) == 1:
        return f"{passing[0].mode} is the one rewrite that passed"
    return "; ".join(parts) or None


def _total_bytes(run: RunResult) -> float | None:
    parts = [run.bytes_per_parameter(part) for part in MEMORY_PARTS]
    return None if any(p is None for p in parts) else sum(p for p in parts if p is not None)


def _original_verdict(run: RunResult) -> str:
    if not run.ok:
        return "failed"
    return "reference" if reference_problem(run) is None else "diverged"


def _style(comparison: Comparison | None) -> str:
    if comparison is None:
        return ""
    if comparison.verdict == NOT_VERIFIED:
        return "yellow"
    return "green" if comparison.verdict in PASSING else "red"


SHORT_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64"}


def _short(dtype: str) -> str:
    name = dtype.removeprefix("torch.")
    return SHORT_DTYPES.get(name, name)


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines())


def _curves(runs: Mapping[str, RunResult]) -> dict[str, list[float]]:
    return {label: [loss for loss in run.losses if loss is not None] for label, run in runs.items()}


def loss_plot(
    curves: Mapping[str, Sequence[float]], width: int = PLOT_WIDTH, height: int = PLOT_HEIGHT
) -> list[str]:
    """The curves on one character grid, one letter per run, `*` where runs share a cell."""
    values = [value for curve in curves.values() for value in curve if math.isfinite(value)]
    steps = max((len(curve) for curve in curves.values()), default=0)
    if not values or steps == 0:
        return ["(no losses recorded)"]
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    columns = width
    grid = [[" "] * columns for _ in range(height)]
    for label, curve in curves.items():
        marker = MARKERS.get(label, label[:1].upper())
        for index, value in enumerate(curve):
            if not math.isfinite(value):
                continue
            column = round(index * (columns - 1) / max(steps - 1, 1))
            row = height - 1 - round((value - low) / span * (height - 1))
            cell = grid[row][column]
            grid[row][column] = marker if cell in (" ", marker) else OVERLAP
    label_width = max(len(f"{high:.4g}"), len(f"{low:.4g}"))
    lines = []
    for number, row_cells in enumerate(grid):
        axis = f"{high:.4g}" if number == 0 else f"{low:.4g}" if number == height - 1 else ""
        lines.append(f"{axis:>{label_width}} |{''.join(row_cells).rstrip()}")
    lines.append(f"{'':>{label_width}} +{'-' * columns}")
    last = f"step {steps}"
    lines.append(f"{'':>{label_width}}  step 1{last:>{columns - 6}}")
    legend = "  ".join(f"{MARKERS.get(label, label[:1].upper())} {label}" for label in curves)
    lines.append(f"loss per optimizer step: {legend}  {OVERLAP} overlap")
    return lines


def render_json(report: VerifyReport) -> str:
    options = report.options
    document: dict[str, Any] = {
        "script": report.script,
        "equivalent": report.equivalent,
        "steps": options.steps,
        "rtol": options.rtol,
        "window": options.window,
        "legacy_flags": list(report.legacy_on),
        "ineffective_flags": list(report.ineffective),
        "reference_problem": report.reference_problem,
        "runs": {label: _run_json(run) for label, run in report.runs.items()},
        "comparisons": [_comparison_json(comparison) for comparison in report.comparisons],
        "recommendation": recommendation(report),
        "notes": list(report.notes),
    }
    return json.dumps(document, indent=2, allow_nan=False) + "\n"


def _run_json(run: RunResult) -> dict[str, Any]:
    return {
        "returncode": run.returncode,
        "ok": run.ok,
        "problem": run.problem,
        "steps": len(run.losses),
        "stopped_at_limit": run.stopped_at_limit,
        "losses": [_number(loss) for loss in run.losses],
        "dtypes": run.dtypes,
        "devices": run.devices,
        "flags": run.flags,
        "mechanism": run.mechanism,
        "memory": run.memory,
        "census": run.census,
        "bytes_per_parameter": {part: run.bytes_per_parameter(part) for part in MEMORY_PARTS},
        "seconds_per_step": run.seconds_per_step,
        "launches": list(run.launches),
        "peak_rss": run.peak_rss,
        "seconds": round(run.seconds, 3),
        "stderr_tail": run.stderr_tail if not run.ok else "",
    }


def _comparison_json(comparison: Comparison) -> dict[str, Any]:
    return {
        "mode": comparison.mode,
        "verdict": comparison.verdict,
        "reason": comparison.reason,
        "first_divergence": comparison.first_divergence,
        "max_gap": _number(comparison.max_gap),
        "gaps": [_number(gap) for gap in comparison.gaps],
        "checks": [
            {"name": check.name, "passed": check.passed, "detail": check.detail}
            for check in comparison.checks
        ],
    }


def _number(value: float | None) -> float | str | None:
    """JSON has no NaN or infinity: those become the strings "nan", "inf", "-inf"."""
    if value is None or math.isfinite(value):
        return value
    return str(value)
