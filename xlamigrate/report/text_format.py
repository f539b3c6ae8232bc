"""Human-readable lines, `path:line:col: CODE message`, as ruff and flake8 print them."""

from __future__ import annotations

from xlamigrate.catalogue import Catalogue
from xlamigrate.model import FileError, Finding, ScanReport


def render(report: ScanReport, catalogue: Catalogue) -> str:
    return "".join(line + "\n" for line in lines(report))


def lines(report: ScanReport) -> list[str]:
    return [finding_line(f) for f in report.findings] + [error_line(e) for e in report.errors]


def finding_line(finding: Finding) -> str:
    fix = f" [fix: {finding.fix.applicability}]" if finding.fix else ""
    path = finding.path if finding.cell is None else f"{finding.path}:cell-{finding.cell}"
    where = location(path, finding.span.line, finding.span.column)
    return f"{where}: {finding.code} {finding.message}{fix}"


def error_line(error: FileError) -> str:
    return f"{location(error.path, error.line, None)}: {error.code} {error.message}"


def location(path: str, line: int | None, column: int | None) -> str:
    parts = [path] + [str(part) for part in (line, column) if part is not None]
    return ":".join(parts)


def summary(report: ScanReport) -> str:
    """One line for stderr."""
    files = _plural(report.files_scanned, "file")
    if not report.has_problems:
        return f"No legacy precision flags or outdated torch-xla APIs found ({files} scanned)."
    parts = []
    if report.findings:
        affected = len({f.path for f in report.findings})
        parts.append(
            f"Found {_plural(len(report.findings), 'finding')} in {_plural(affected, 'file')}"
        )
    if report.errors:
        parts.append(f"{_plural(len(report.errors), 'file')} could not be checked")
    return "; ".join(parts) + f" ({files} scanned)."


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
