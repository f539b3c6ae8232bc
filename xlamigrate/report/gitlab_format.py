"""GitLab code quality (a JSON list of issues, as `artifacts:reports:codequality` reads it)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from xlamigrate.catalogue import Catalogue
from xlamigrate.results import ScanReport, Severity

_SEVERITIES: dict[Severity, str] = {"error": "major", "warning": "minor", "info": "info"}


def render(report: ScanReport, catalogue: Catalogue) -> str:
    issues: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for finding in report.findings:
        line = (finding.file_line or 1) if finding.cell is not None else finding.span.line
        issues.append(
            _issue(finding.code, finding.message, finding.path, line, finding.severity, seen)
        )
    for error in report.errors:
        severity = (
            catalogue.rules[error.code].severity if error.code in catalogue.rules else "error"
        )
        issues.append(
            _issue(error.code, error.message, error.path, error.line or 1, severity, seen)
        )
    return json.dumps(issues, indent=2) + "\n"


def _issue(
    code: str, message: str, path: str, line: int, severity: Severity, seen: dict[str, int]
) -> dict[str, Any]:
    # Stable while lines move: the path, the rule, the message and which repeat of them it is.
    key = f"{path}\0{code}\0{message}"
    seen[key] = seen.get(key, 0) + 1
    fingerprint = hashlib.sha256(f"{key}\0{seen[key]}".encode()).hexdigest()
    return {
        "description": f"{code} {message}",
        "check_name": code,
        "fingerprint": fingerprint,
        "severity": _SEVERITIES[severity],
        "location": {"path": path, "lines": {"begin": line}},
    }
