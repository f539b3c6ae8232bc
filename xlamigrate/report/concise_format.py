"""One line per finding, `path:line:col: CODE message [fix: safe]`, for tools that read lines
(ruff's `--output-format concise`)."""

from __future__ import annotations

from xlamigrate.catalogue import Catalogue
from xlamigrate.report.text_format import error_line, finding_line
from xlamigrate.results import ScanReport


def render(report: ScanReport, catalogue: Catalogue) -> str:
    lines = [finding_line(f) for f in report.findings] + [error_line(e) for e in report.errors]
    return "".join(line + "\n" for line in lines)
