"""Coloured text output for a terminal (rich); the plain text reporter serves pipes and files."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from xlamigrate.model import ScanReport, Severity
from xlamigrate.report.text_format import location

_STYLES: dict[Severity, str] = {"error": "bold red", "warning": "bold yellow", "info": "bold blue"}


def print_report(report: ScanReport, console: Console | None = None) -> None:
    console = console or Console(highlight=False)
    for finding in report.findings:
        line = Text()
        path = finding.path if finding.cell is None else f"{finding.path}:cell-{finding.cell}"
        line.append(location(path, finding.span.line, finding.span.column), style="bold")
        line.append(": ")
        line.append(finding.code, style=_STYLES[finding.severity])
        line.append(f" {finding.message}")
        if finding.fix:
            line.append(f" [fix: {finding.fix.applicability}]", style="dim")
        console.print(line, soft_wrap=True)  # one line per finding: the terminal wraps it
    for error in report.errors:
        line = Text()
        line.append(location(error.path, error.line, None), style="bold")
        line.append(": ")
        line.append(error.code, style=_STYLES["error"])
        line.append(f" {error.message}")
        console.print(line, soft_wrap=True)  # one line per finding: the terminal wraps it
