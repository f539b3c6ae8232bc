"""GitHub Actions workflow commands: one `::error file=...` annotation per finding."""

from __future__ import annotations

from xlamigrate.catalogue import Catalogue
from xlamigrate.results import ScanReport, Severity

_COMMANDS: dict[Severity, str] = {"error": "error", "warning": "warning", "info": "notice"}


def render(report: ScanReport, catalogue: Catalogue) -> str:
    lines = []
    for finding in report.findings:
        span = finding.span
        properties: dict[str, object] = {
            "file": finding.path,
            "line": span.line,
            "col": span.column,
            "endLine": span.end_line,
            "endColumn": span.end_column,
            "title": f"xlamigrate ({finding.code})",
        }
        if finding.cell is not None:  # annotate the line of the .ipynb file; name the cell's
            properties = {
                "file": finding.path,
                "line": finding.file_line or 1,
                "title": f"xlamigrate ({finding.code}) in cell {finding.cell}, line {span.line}",
            }
        lines.append(
            _command(_COMMANDS[finding.severity], properties, f"{finding.code} {finding.message}")
        )
    for error in report.errors:
        properties = {
            "file": error.path,
            "line": error.line or 1,
            "title": f"xlamigrate ({error.code})",
        }
        lines.append(_command("error", properties, f"{error.code} {error.message}"))
    return "".join(line + "\n" for line in lines)


def _command(name: str, properties: dict[str, object], message: str) -> str:
    rendered = ",".join(
        f"{key}={_escape_property(str(value))}" for key, value in properties.items()
    )
    return f"::{name} {rendered}::{_escape_data(message)}"


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")
