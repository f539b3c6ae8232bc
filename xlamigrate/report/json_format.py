"""The stable JSON output other tools parse (shape documented in README.md)."""

from __future__ import annotations

import json
from typing import Any

from xlamigrate import __version__
from xlamigrate.catalogue import Catalogue
from xlamigrate.results import FileError, Finding, LaunchEdge, ScanReport


def render(report: ScanReport, catalogue: Catalogue) -> str:
    document = {
        "version": __version__,
        "files_scanned": report.files_scanned,
        "findings": [finding_json(finding) for finding in report.findings],
        "errors": [error_json(error) for error in report.errors],
        "launches": [launch_json(edge) for edge in report.launches],
    }
    return json.dumps(document, indent=2) + "\n"


def launch_json(edge: LaunchEdge) -> dict[str, Any]:
    """One edge of the launch graph: a launcher's enabling write, what it reaches, and what
    the rewrite (in the configured mode) does with it."""
    return {
        "launcher": edge.launcher,
        "line": edge.line,
        "variable": edge.variable,
        "reaches": list(edge.reaches),
        "scripts": list(edge.scripts),
        "migrated": edge.migrated,
        "signal": edge.signal,
        "reason": edge.reason or None,
    }


def finding_json(finding: Finding) -> dict[str, Any]:
    """The stable finding shape; notebook findings add "cell" (0-based; lines are in the cell)
    and "file_line" (the line of the .ipynb file)."""
    span = finding.span
    document: dict[str, Any] = {
        "code": finding.code,
        "path": finding.path,
        "line": span.line,
        "column": span.column,
        "end_line": span.end_line,
        "end_column": span.end_column,
        "severity": finding.severity,
        "message": finding.message,
        "title": finding.title or finding.message,
        "help": finding.help,
        "note": finding.note,
        "variable": finding.variable,
        "access": finding.access,
        "value": finding.value,
        "enabled": finding.enabled,
        "fix": {"applicability": finding.fix.applicability} if finding.fix else None,
    }
    if finding.cell is not None:
        document["cell"] = finding.cell
        document["file_line"] = finding.file_line
    return document


def error_json(error: FileError) -> dict[str, Any]:
    """A file that could not be checked; `column` where the parser says where it stopped."""
    return {
        "path": error.path,
        "line": error.line,
        "column": error.column,
        "code": error.code,
        "message": error.message,
    }
