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
from xlamigrate.report.text_format import explanation
from xlamigrate.results import FileError, Finding

CASES = Path(__file__).resolve().parent / "fixtures" / "cases"
SCAN = "scan"
RULE = b"-" * 57 + b" rewritten "
# Before each rewritten file: `RULE text` in a case's snapshot, `RULE file PATH` in a project's.
_SEPARATOR = re.compile(rb"\n" + re.escape(RULE) + rb"(text|file [^\n]+)\n")
_FIRST = re.compile(r"(?P<status>fixed|left|found|error) (?P<where>\S+) (?P<code>XM\d+) \[fix: ")
INDENT = "    "


@dataclass(frozen=True)
class Entry:
    """One finding as a snapshot holds it: its first line and the lines under it."""

    status: str  # "fixed" or "left" by a rewrite, "found" by a scan; "error": a file error
    where: str  # [path:][cell:]line:column (the path in a project's snapshot)
    code: str
    lines: tuple[str, ...]

    @property
    def key(self) -> str:
        """`[path:][cell:]line:column CODE`, as tests compare positions."""
        return f"{self.where} {self.code}"

    @property
    def order(self) -> tuple[str, list[int], str, str]:
        parts = self.where.split(":")
        numbers = [part for part in parts if part.isdigit()]
        path = ":".join(parts[: len(parts) - len(numbers)])
        return (path, [int(n) for n in numbers], self.code, self.status)


@dataclass(frozen=True)
class Snapshot:
    command: str  # "xlamigrate scan", "xlamigrate rewrite --mode M"
    entries: tuple[Entry, ...]
    # The rewritten files: ("", text) for a case; (path, text) of each changed file of a project.
    files: tuple[tuple[str, bytes], ...] | None = None  # (a scan has none)
    notes: tuple[str, ...] = ()  # the `# ` lines under the command: what the case is about

    def render(self) -> bytes:
        entries = (line for entry in self.entries for line in entry.lines)
        lines = [self.command, *self.notes, *entries]
        head = "\n".join(lines).encode("utf-8")
        if not self.files:
            return head + b"\n"
        parts = [head]
        for path, data in self.files:
            label = b"text" if path == "" else b"file " + path.encode("utf-8")
            parts += [b"\n", RULE, label, b"\n", data]
        return b"".join(parts)

    @property
    def text(self) -> bytes | None:
        """A case's rewritten file."""
        return None if self.files is None else dict(self.files).get("")

    @property
    def left(self) -> list[str]:
        """The keys of the findings a rewrite leaves for manual work."""
        return [entry.key for entry in self.entries if entry.status == "left"]

    @property
    def errors(self) -> list[str]:
        """The first line of each file error."""
        return [entry.lines[0] for entry in self.entries if entry.status == "error"]

    @property
    def found(self) -> list[str]:
        return [entry.key for entry in self.entries if entry.status == "found"]


def entry(status: str, finding: Finding, with_path: bool = False) -> Entry:
    path = f"{finding.path}:" if with_path else ""
    cell = "" if finding.cell is None else f"{finding.cell}:"
    where = f"{path}{cell}{finding.span.line}:{finding.span.column}"
    applicability = finding.fix.applicability if finding.fix else "none"
    title = finding.title or finding.message
    first = f"{status} {where} {finding.code} [fix: {applicability}] {title}"
    under = (f"{INDENT}{label}: {text}" for label, text in explanation(finding))
    return Entry(status, where, finding.code, (first, *under))


def error_entry(error: FileError) -> Entry:
    """A file error (XM901: what could not be read), where the parser stopped."""
    where = ":".join(str(part) for part in (error.line, error.column) if part is not None) or "-"
    first = f"error {where} {error.code} [fix: none] {error.message}"
    return Entry("error", where, error.code, (first,))


def scan_snapshot(
    findings: Iterable[Finding], catalogue: Catalogue, errors: Iterable[FileError] = ()
) -> Snapshot:
    """The findings as the text output words them (a short first line, help, note), then the
    errors."""
    worded = worded_all(findings, catalogue)
    entries = (*(entry("found", f) for f in worded), *map(error_entry, errors))
    return Snapshot("xlamigrate scan", entries)


def rewrite_snapshot(
    mode: str,
    fixed: Sequence[Finding],
    left: Sequence[Finding],
    files: Sequence[tuple[str, bytes]],
    catalogue: Catalogue,
    options: str = "",
    errors: Iterable[FileError] = (),
) -> Snapshot:
    """A rewrite's findings and files: ("", text) for one file; a project's changed files by
    their paths (its findings then say their path too)."""
    with_path = any(path for path, _ in files) or not files
    entries = sorted(
        [
            *(entry("fixed", f, with_path) for f in worded_all(fixed, catalogue)),
            *(entry("left", f, with_path) for f in worded_all(left, catalogue)),
        ],
        key=lambda e: e.order,
    )
    command = f"xlamigrate rewrite --mode {mode}{' ' if options else ''}{options}"
    return Snapshot(command, (*entries, *map(error_entry, errors)), tuple(files))


def parse(data: bytes) -> Snapshot:
    pieces = _SEPARATOR.split(data)  # head, then label and text of each file
    lines = pieces[0].decode("utf-8").removesuffix("\n").split("\n")
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
    labels, texts = pieces[1::2], pieces[2::2]
    files = tuple(
        ("" if label == b"text" else label.removeprefix(b"file ").decode("utf-8"), text)
        for label, text in zip(labels, texts, strict=True)
    )
    is_rewrite = lines[0].startswith("xlamigrate rewrite")
    return Snapshot(lines[0], tuple(entries), files if is_rewrite else None, notes)


def snapshot_path(case: str, command: str = SCAN, folder: Path = CASES) -> Path:
    """<case>.scan.snap, or <case>.<mode>.snap for a rewrite in that mode."""
    return folder / f"{case}.{command}.snap"


def read(case: str, command: str = SCAN, folder: Path = CASES) -> Snapshot:
    return parse(snapshot_path(case, command, folder).read_bytes())


def rewritten(case: str, mode: str, folder: Path = CASES) -> bytes:
    """What the rewrite in `mode` (the snapshot's command) writes for the case."""
    text = read(case, mode, folder).text
    assert text is not None, (case, mode)
    return text


def case_input(case: str, folder: Path = CASES) -> Path:
    """The case's one input, whatever its extension."""
    (found,) = [path for path in folder.glob(f"{case}.*") if not path.name.endswith(".snap")]
    return found


def cases(command: str = SCAN, suffix: str = "", folder: Path = CASES) -> list[Path]:
    """The inputs with a snapshot of `command` (a mode, or "scan"), by extension if asked."""
    inputs = (
        case_input(path.name.removesuffix(f".{command}.snap"), folder)
        for path in folder.glob(f"*.{command}.snap")
    )
    return sorted(path for path in inputs if not suffix or path.suffix == suffix)


def rewrites(suffix: str = "") -> list[tuple[str, Path]]:
    """(mode, input) of every rewrite snapshot, of the inputs with this extension if asked."""
    return [(mode, case) for mode in MODES for case in cases(mode, suffix)]


def tree(folder: Path) -> dict[str, bytes]:
    """Every file below `folder` by its relative path."""
    return {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def project_snapshot(case: Path, mode: str) -> Snapshot:
    """tests/fixtures/{projects,nxdt}/<case>/<mode>.snap."""
    return parse((case / f"{mode}.snap").read_bytes())


def project_tree(case: Path, mode: str) -> dict[str, bytes]:
    """A project fixture's files once rewritten in `mode`: before/ with the snapshot's files."""
    files = project_snapshot(case, mode).files
    assert files is not None
    return {**tree(case / "before"), **dict(files)}


def write_tree(files: dict[str, bytes], folder: Path) -> Path:
    """The files (a `tree` or a `project_tree`) written under `folder`."""
    for name, data in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return folder


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
