"""Output of `xlamigrate rewrite`: per file what changed, what was fixed, what is left by hand."""

from __future__ import annotations

import json
import posixpath
from typing import Any

from xlamigrate import __version__
from xlamigrate.kinds.launch import described, split_function
from xlamigrate.report.json_format import error_json, finding_json, launch_json
from xlamigrate.report.text_format import error_line, finding_text, joined
from xlamigrate.results import RewriteOutcome, RewriteReport


def render_json(
    report: RewriteReport, mode: str, applied: bool, diffs: dict[str, str] | None = None
) -> str:
    """`diffs` (with --diff) go into each file's entry, so the output stays one JSON document."""
    diffs = diffs or {}
    files = [
        {**_file_json(outcome), **({"diff": diffs[outcome.path]} if outcome.path in diffs else {})}
        for outcome in report.outcomes
        if _reportable(outcome)
    ]
    document: dict[str, Any] = {
        "version": __version__,
        "mode": mode,
        "applied": applied,  # false with --diff/--check: nothing was written
        "files_scanned": report.files_scanned,
        "files": files,
        "errors": [error_json(error) for error in report.errors],
        "launches": [launch_json(edge) for edge in report.launches],
    }
    return json.dumps(document, indent=2) + "\n"


def _named(script: str, reaches: list[str]) -> str:
    """A launched script as a header names it: the functions of it its processes run, where
    they start in one (`train_func` in train_ray.py)."""
    base = posixpath.basename(script)
    named = [
        described(written, script)
        for written in reaches
        if split_function(written)[1] and posixpath.basename(split_function(written)[0]) == base
    ]
    return ", ".join(dict.fromkeys(named)) or script


def grouped_diffs(report: RewriteReport, diffs: dict[str, str]) -> str:
    """The diffs with each launcher followed by the scripts it migrated (a `#` line names
    them; `patch` and `git apply` skip it), then the other files in path order."""
    out: list[str] = []
    shown: set[str] = set()
    groups: dict[str, list[str]] = {}
    reached: dict[str, list[str]] = {}  # the launches as written (a function's: in its file)
    for edge in report.launches:
        if edge.migrated:
            scripts = groups.setdefault(edge.launcher, [])
            scripts.extend(s for s in edge.scripts if s not in scripts)
            reached.setdefault(edge.launcher, []).extend(edge.reaches)
    for launcher, scripts in groups.items():
        members = [
            path
            for path in dict.fromkeys((launcher, *scripts))
            if path in diffs and path not in shown
        ]
        if not members:
            continue
        signal = next((e.signal for e in report.launches if e.launcher == launcher), None)
        how = f"the recipe under {signal}" if signal else "the recipe"
        names = ", ".join(_named(script, reached[launcher]) for script in scripts)
        out.append(f"# {launcher} starts {names}: {how}\n")
        out.extend(diffs[path] for path in members)
        shown.update(members)
    out.extend(diff for path, diff in diffs.items() if path not in shown)
    return "".join(out)


def render_text(report: RewriteReport, applied: bool) -> str:
    """Per file what changed, then what is left there, each finding as scan prints it."""
    blocks = []
    verb = "rewrote" if applied else "would rewrite"
    for outcome in report.outcomes:
        if outcome.changed:
            done = "created" if outcome.created and applied else verb
            done = "would create" if outcome.created and not applied else done
            what = outcome.why or _plural(len(outcome.fixed), "fix", "fixes")
            blocks.append(f"{outcome.path}: {done} ({what})")
        blocks.extend(finding_text(finding) for finding in outcome.remaining)
    blocks.extend(error_line(error) for error in report.errors)
    return joined(blocks)


def summary(report: RewriteReport, applied: bool) -> str:
    changed = sum(outcome.changed and not outcome.created for outcome in report.outcomes)
    created = sum(outcome.changed and outcome.created for outcome in report.outcomes)
    fixes = sum(len(outcome.fixed) for outcome in report.outcomes if outcome.changed)
    left = sum(len(outcome.remaining) for outcome in report.outcomes)
    verb = "rewritten" if applied else "would be rewritten"
    parts = [f"{_plural(changed, 'file')} {verb} ({_plural(fixes, 'fix', 'fixes')})"]
    if created:  # --runtime vendor
        parts[0] += f", {created} {'created' if applied else 'to create'}"
    if left:
        parts.append(f"{_plural(left, 'finding')} left for manual work")
    if report.errors:
        parts.append(f"{_plural(len(report.errors), 'file')} could not be rewritten")
    return "; ".join(parts) + f" ({_plural(report.files_scanned, 'file')} scanned)."


def _plural(count: int, noun: str, plural: str | None = None) -> str:
    return f"{count} {noun if count == 1 else (plural or noun + 's')}"


def _reportable(outcome: RewriteOutcome) -> bool:
    return outcome.changed or bool(outcome.fixed or outcome.remaining)


def _file_json(outcome: RewriteOutcome) -> dict[str, Any]:
    return {
        "path": outcome.path,
        "changed": outcome.changed,
        "created": outcome.created,
        "why": outcome.why,
        "fixes": [finding_json(finding) for finding in outcome.fixed],
        "remaining": [finding_json(finding) for finding in outcome.remaining],
    }
