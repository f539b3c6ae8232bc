"""Coloured text output for a terminal (rich); the plain text reporter serves pipes and files."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from xlamigrate.report.text_format import (
    FIXABLE,
    INDENT,
    explanation,
    finding_location,
    is_fixable,
    location,
)
from xlamigrate.results import ScanReport, Severity

_STYLES: dict[Severity, str] = {"error": "bold red", "warning": "bold yellow", "info": "bold blue"}
_LABELS = {"help": "bold cyan", "note": "bold"}


def print_report(report: ScanReport, console: Console | None = None) -> None:
    """As the plain text: each line of a finding is one line (the terminal wraps it for the
    eye; a copy of it is still one line)."""
    console = console or Console(highlight=False)
    spaced = any(explanation(finding) for finding in report.findings)
    for index, finding in enumerate(report.findings):
        if spaced and index:
            console.print()
        line = Text()
        line.append(finding_location(finding), style="bold")
        line.append(": ")
        line.append(finding.code, style=_STYLES[finding.severity])
        if is_fixable(finding):
            line.append(f" {FIXABLE}", style="cyan")
        line.append(f" {finding.title or finding.message}")
        console.print(line, soft_wrap=True)
        for label, text in explanation(finding):
            extra = Text(INDENT)
            extra.append(f"{label}:", style=_LABELS[label])
            extra.append(f" {text}")
            console.print(extra, soft_wrap=True)
    for index, error in enumerate(report.errors):
        if spaced and (index or report.findings):
            console.print()
        line = Text()
        line.append(location(error.path, error.line, error.column), style="bold")
        line.append(": ")
        line.append(error.code, style=_STYLES["error"])
        line.append(f" {error.message}")
        console.print(line, soft_wrap=True)
