"""The lines a scan closes with on stderr, as ruff's: how many findings in how many files, and
how many of them `xlamigrate rewrite` fixes (in the mode their fixes were judged for), with
the unsafe ones it fixes only when asked."""

from __future__ import annotations

from xlamigrate.report.text_format import FIXABLE
from xlamigrate.results import ScanReport


def summary(report: ScanReport, mode: str) -> str:
    """`mode`: the recipe the scan judged each fix for (a write's fix depends on it)."""
    files = plural(report.files_scanned, "file")
    if not report.has_problems:
        return f"No legacy precision flags or outdated torch-xla APIs found ({files} scanned)."
    parts = []
    if report.findings:
        affected = len({f.path for f in report.findings})
        parts.append(
            f"Found {plural(len(report.findings), 'finding')} in {plural(affected, 'file')}"
        )
    if report.errors:
        parts.append(f"{plural(len(report.errors), 'file')} could not be checked")
    lines = ["; ".join(parts) + f" ({files} scanned)."]
    fixes = fixable_line(report, mode)
    return "\n".join(lines + ([fixes] if fixes else []))


def fixable_line(report: ScanReport, mode: str) -> str | None:
    """`[*] K fixable with ...` and the hidden unsafe fixes; None when nothing is fixable."""
    counts = {"safe": 0, "unsafe": 0}
    for finding in report.findings:
        if finding.fix is not None and finding.fix.applicability in counts:
            counts[finding.fix.applicability] += 1
    command = f"`xlamigrate rewrite --mode {mode}`"
    hidden = ""
    if counts["unsafe"]:
        fixes = plural(counts["unsafe"], "hidden fix", "hidden fixes")
        option = (
            "`--unsafe-fixes`"
            if counts["safe"]
            else f"`xlamigrate rewrite --mode {mode} --unsafe-fixes`"
        )
        hidden = f" ({fixes} can be enabled with {option})"
    if counts["safe"]:
        return f"{FIXABLE} {counts['safe']} fixable with {command}{hidden}."
    return f"No fixes available{hidden}." if hidden else None


def plural(count: int, noun: str, plural_noun: str | None = None) -> str:
    return f"{count} {noun if count == 1 else (plural_noun or noun + 's')}"
