"""Human-readable text as ruff prints it: each finding's short first line,
`path:line:col: CODE [*] message`, then what to do (`help:`) and why (`note:`); the one-line
form (`concise`) for tools that read `path:line:col: CODE message` lines."""

from __future__ import annotations

from collections.abc import Sequence

from xlamigrate.catalogue import Catalogue
from xlamigrate.results import FileError, Finding, ScanReport

FIXABLE = "[*]"  # ruff's mark of a finding its fix command fixes (a safe fix)
INDENT = "  "


def render(report: ScanReport, catalogue: Catalogue) -> str:
    blocks = [finding_text(finding) for finding in report.findings]
    return joined(blocks + [error_line(error) for error in report.errors])


def joined(blocks: Sequence[str]) -> str:
    """Blocks (a finding's lines, or a line of their own) as the text output prints them: a
    blank line between them where any has more than its first line."""
    return "".join(block + "\n" for block in _spaced(blocks))


def finding_text(finding: Finding) -> str:
    """A finding's block (see `finding_block`) as one string."""
    return "\n".join(finding_block(finding))


def finding_block(finding: Finding) -> list[str]:
    """The short first line, then its `help:` and `note:` lines (indented)."""
    mark = f" {FIXABLE}" if is_fixable(finding) else ""
    first = f"{finding_location(finding)}: {finding.code}{mark} {finding.title or finding.message}"
    return [first, *(f"{INDENT}{label}: {text}" for label, text in explanation(finding))]


def explanation(finding: Finding) -> list[tuple[str, str]]:
    """(label, text) of the lines under a finding's first line."""
    parts = (("help", finding.help), ("note", finding.note))
    return [(label, text) for label, text in parts if text]


def is_fixable(finding: Finding) -> bool:
    """Whether `rewrite` fixes it without `--unsafe-fixes`."""
    return finding.fix is not None and finding.fix.applicability == "safe"


def finding_line(finding: Finding) -> str:
    """The whole finding on one line (`--output-format concise`; what a rewrite of standard
    input leaves, on stderr, for an editor)."""
    fix = f" [fix: {finding.fix.applicability}]" if finding.fix else ""
    return f"{finding_location(finding)}: {finding.code} {finding.message}{fix}"


def error_line(error: FileError) -> str:
    return f"{location(error.path, error.line, error.column)}: {error.code} {error.message}"


def finding_location(finding: Finding) -> str:
    path = finding.path if finding.cell is None else f"{finding.path}:cell-{finding.cell}"
    return location(path, finding.span.line, finding.span.column)


def location(path: str, line: int | None, column: int | None) -> str:
    parts = [path] + [str(part) for part in (line, column if line else None) if part is not None]
    return ":".join(parts)


def _spaced(blocks: Sequence[str]) -> list[str]:
    """A blank line between findings, where any of them has more than its first line."""
    if not any("\n" in block for block in blocks):
        return list(blocks)
    return [block + ("\n" if index < len(blocks) - 1 else "") for index, block in enumerate(blocks)]
