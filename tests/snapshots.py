"""Snapshots of what the tool does to a fixture: tests/fixtures/cases/<case>.<ext> is one input;
<case>.scan.snap is what `xlamigrate scan` reports for it, and <case>.<mode>.snap what
`xlamigrate rewrite --mode <mode>` does to it (the findings it fixed and the ones it leaves,
each with its message and fix applicability, then the rewritten text, byte for byte).

A snapshot is text a reviewer reads in a diff:

    xlamigrate rewrite --mode autocast
    # what the case is about (lines of `# `, kept when the snapshot is written again)
    fixed 3:1 XM101 [fix: safe] `XLA_USE_BF16` turns on bf16 for the whole device
        help: ...
    left 12:22 XM201 [fix: manual] ...
        note: ...
    --------------------------------------------------------- rewritten text
    <the file as the rewrite writes it>

`python -m pytest tests/test_rewrite_fixtures.py tests/test_scan_fixtures.py --update-snapshots`
writes what the engine now gives over the snapshots that differ (and the tests pass); review
the change with `git diff tests/fixtures/cases/`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from xlamigrate.catalogue import Catalogue
from xlamigrate.findings import worded_all
from xlamigrate.kinds.python.rewrite import MODES
from xlamigrate.model import Finding
from xlamigrate.report.text_format import explanation

CASES = Path(__file__).resolve().parent / "fixtures" / "cases"
SCAN = "scan"
RULE = b"-" * 57 + b" rewritten text"
_SEPARATOR = b"\n" + RULE + b"\n"
_FIRST = re.compile(r"(?P<status>fixed|left|found) (?P<where>[\d:]+) (?P<code>XM\d+) \[fix: ")
INDENT = "    "


@dataclass(frozen=True)
class Entry:
    """One finding as a snapshot holds it: its first line and the lines under it."""

    status: str  # "fixed" or "left" by a rewrite, "found" by a scan
    where: str  # [cell:]line:column
    code: str
    lines: tuple[str, ...]

    @property
    def key(self) -> str:
        """`[cell:]line:column CODE`, as tests compare positions."""
        return f"{self.where} {self.code}"


@dataclass(frozen=True)
class Snapshot:
    command: str  # "xlamigrate scan", "xlamigrate rewrite --mode M"
    entries: tuple[Entry, ...]
    text: bytes | None = None  # the rewritten file (a scan has none)
    notes: tuple[str, ...] = ()  # the `# ` lines under the command: what the case is about

    def render(self) -> bytes:
        entries = (line for entry in self.entries for line in entry.lines)
        lines = [self.command, *self.notes, *entries]
        head = "\n".join(lines).encode("utf-8")
        return head + b"\n" if self.text is None else head + _SEPARATOR + self.text

    @property
    def left(self) -> list[str]:
        """The keys of the findings a rewrite leaves for manual work."""
        return [entry.key for entry in self.entries if entry.status == "left"]

    @property
    def found(self) -> list[str]:
        return [entry.key for entry in self.entries if entry.status == "found"]


def entry(status: str, finding: Finding) -> Entry:
    cell = "" if finding.cell is None else f"{finding.cell}:"
    where = f"{cell}{finding.span.line}:{finding.span.column}"
    applicability = finding.fix.applicability if finding.fix else "none"
    first = (
        f"{status} {where} {finding.code} [fix: {applicability}] {finding.title or finding.message}"
    )
    under = (f"{INDENT}{label}: {text}" for label, text in explanation(finding))
    return Entry(status, where, finding.code, (first, *under))


def scan_snapshot(findings: Iterable[Finding], catalogue: Catalogue) -> Snapshot:
    """The findings as the text output words them (a short first line, help, note)."""
    worded = worded_all(findings, catalogue)
    return Snapshot("xlamigrate scan", tuple(entry("found", f) for f in worded))


def rewrite_snapshot(
    mode: str,
    fixed: Sequence[Finding],
    left: Sequence[Finding],
    text: bytes,
    catalogue: Catalogue,
) -> Snapshot:
    entries = sorted(
        [
            *(entry("fixed", f) for f in worded_all(fixed, catalogue)),
            *(entry("left", f) for f in worded_all(left, catalogue)),
        ],
        key=lambda e: ([int(part) for part in e.where.split(":")], e.code, e.status),
    )
    return Snapshot(f"xlamigrate rewrite --mode {mode}", tuple(entries), text)


def parse(data: bytes) -> Snapshot:
    head, separator, text = data.partition(_SEPARATOR)
    lines = head.decode("utf-8").removesuffix("\n").split("\n")
    notes = tuple(line for line in lines[1:] if line.startswith("#"))
    entries: list[Entry] = []
    for line in lines[1 + len(notes) :]:
        first = _FIRST.match(line)
        if first is None:
            assert entries and line.startswith(INDENT), f"not a snapshot line: {line!r}"
            last = entries.pop()
            entries.append(Entry(last.status, last.where, last.code, (*last.lines, line)))
        else:
            entries.append(Entry(first["status"], first["where"], first["code"], (line,)))
    return Snapshot(lines[0], tuple(entries), text if separator else None, notes)


def snapshot_path(case: str, command: str = SCAN) -> Path:
    """<case>.scan.snap, or <case>.<mode>.snap for a rewrite in that mode."""
    return CASES / f"{case}.{command}.snap"


def read(case: str, command: str = SCAN) -> Snapshot:
    return parse(snapshot_path(case, command).read_bytes())


def rewritten(case: str, mode: str) -> bytes:
    """What the rewrite in `mode` writes for the case."""
    text = read(case, mode).text
    assert text is not None, (case, mode)
    return text


def case_input(case: str) -> Path:
    """The case's one input, whatever its extension."""
    (found,) = [path for path in CASES.glob(f"{case}.*") if not path.name.endswith(".snap")]
    return found


def cases(command: str = SCAN, suffix: str = "") -> list[Path]:
    """The inputs with a snapshot of `command` (a mode, or "scan"), by extension if asked."""
    return sorted(
        case_input(path.name.removesuffix(f".{command}.snap"))
        for path in CASES.glob(f"*.{command}.snap")
        if not suffix or case_input(path.name.removesuffix(f".{command}.snap")).suffix == suffix
    )


def rewrites(suffix: str = "") -> list[tuple[str, Path]]:
    """(mode, input) of every rewrite snapshot, of the inputs with this extension if asked."""
    return [(mode, case) for mode in MODES for case in cases(mode, suffix)]


def case_name(path: Path) -> str:
    return path.name.removesuffix(path.suffix)


def assert_matches(path: Path, produced: Snapshot, update: bool) -> None:
    """The snapshot on disk is what the engine produced; `update` writes it instead."""
    if path.exists():
        produced = replace(produced, notes=parse(path.read_bytes()).notes)
    data = produced.render()
    if update and (not path.exists() or path.read_bytes() != data):
        path.write_bytes(data)
        return
    stored = path.read_bytes()
    if stored != data:  # (+: what the engine gives now, -: the snapshot)
        assert data.decode("utf-8", "replace") == parse(stored).render().decode("utf-8", "replace")
        assert data == stored  # (the same text, other bytes: line endings, encoding)
