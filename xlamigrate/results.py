"""The value types every part of xlamigrate exchanges: findings, fixes, per-file results."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

UNPARSABLE_FILE = "XM901"  # a file that could not be read or parsed
WRITE_FAILED = "XM902"  # a rewritten file that could not be written

Access = Literal["write", "read", "delete"]
Severity = Literal["error", "warning", "info"]
Applicability = Literal["safe", "unsafe", "manual"]
# Where a write lands: this process's environment, a child process's, or a test's patched one.
Target = Literal["process", "child", "test"]

ACCESSES: tuple[Access, ...] = ("write", "read", "delete")
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")
APPLICABILITIES: tuple[Applicability, ...] = ("safe", "unsafe", "manual")


@dataclass(frozen=True)
class Span:
    """A region of a file: 1-based lines and columns, end column exclusive (as SARIF counts)."""

    line: int
    column: int
    end_line: int
    end_column: int


@dataclass(frozen=True)
class Fix:
    """How a finding can be fixed: `safe` keeps behaviour, `unsafe` needs opting in, `manual`
    is never edited automatically."""

    applicability: Applicability


@dataclass(frozen=True)
class Finding:
    code: str
    path: str
    span: Span
    severity: Severity
    message: str
    variable: str | None = None
    access: Access | None = None
    value: str | None = None
    enabled: bool | None = None
    fix: Fix | None = None
    cell: int | None = None  # notebooks: the code cell (0-based); lines count within it
    file_line: int | None = None  # notebooks: the line of the .ipynb file (GitHub, SARIF)
    # `message` in parts, as the text output shows them (findings.worded fills them from the
    # rule's template): the short first line, what to do or what the rewrite does, and why.
    title: str | None = field(default=None, compare=False)
    help: str | None = field(default=None, compare=False)
    note: str | None = field(default=None, compare=False)

    @property
    def sort_key(self) -> tuple[str, int, int, int, str]:
        cell = -1 if self.cell is None else self.cell
        return (self.path, cell, self.span.line, self.span.column, self.code)


@dataclass(frozen=True)
class FileError:
    """A file that could not be read or parsed; always reported, never filtered away."""

    path: str
    line: int | None
    message: str
    code: str = UNPARSABLE_FILE
    column: int | None = None  # where the parser stopped, where it says (1-based)


@dataclass(frozen=True)
class FileResult:
    path: str
    findings: tuple[Finding, ...] = ()
    errors: tuple[FileError, ...] = ()


@dataclass(frozen=True)
class LaunchEdge:
    """One enabling write of a launcher and the project's word on it: what it reaches, and
    whether it was migrated (turned into `signal`, or gone where the recipe is
    unconditional) or kept (`reason` says why)."""

    launcher: str
    line: int
    variable: str
    reaches: tuple[str, ...]  # the processes it reaches, as the launcher names them
    scripts: tuple[str, ...]  # the scripts of the project that took the recipe for it
    migrated: bool
    signal: str | None = None
    reason: str = ""


@dataclass(frozen=True)
class ScanReport:
    """Everything one scan produced, sorted by path and position."""

    files_scanned: int
    findings: tuple[Finding, ...] = ()
    errors: tuple[FileError, ...] = ()
    files_parsed: int = field(default=0, compare=False)
    launches: tuple[LaunchEdge, ...] = ()  # the project's launch graph, where it has one

    @property
    def has_problems(self) -> bool:
        return bool(self.findings or self.errors)


@dataclass(frozen=True)
class RewriteOutcome:
    path: str
    original: bytes
    rewritten: bytes | None  # None: nothing to change
    fixed: tuple[Finding, ...] = ()
    remaining: tuple[Finding, ...] = ()  # reported for manual work
    errors: tuple[FileError, ...] = ()
    # A launched script whose recipe could not go in whole: why (its launchers keep the flag).
    unapplied: str | None = None
    created: bool = False  # a file the rewrite adds (`--runtime vendor`): `original` is empty
    why: str | None = None  # a change that fixes no finding: what it is for

    @property
    def changed(self) -> bool:
        return self.rewritten is not None and self.rewritten != self.original


@dataclass(frozen=True)
class RewriteReport:
    """Everything one rewrite run produced, in path order."""

    files_scanned: int
    outcomes: tuple[RewriteOutcome, ...] = ()
    errors: tuple[FileError, ...] = ()
    launches: tuple[LaunchEdge, ...] = ()  # the project's launch graph, where it has one
