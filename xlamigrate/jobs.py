"""One file's work, in whichever process runs it (the run's own, or a worker of its pool): its
bytes read, its launches analysed, its scan or rewrite in the context the project gave it (a
scan made ahead of the project's decisions carries the context it assumed). A task never ends
the run: a crash on a file is that file's error."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from xlamigrate import kinds
from xlamigrate.apitable import Version
from xlamigrate.catalogue import Catalogue
from xlamigrate.discover import SourceFile
from xlamigrate.fileread import regular_file_bytes
from xlamigrate.flagvalue import RECIPE_FLAGS
from xlamigrate.frameworktable import framework_table
from xlamigrate.kinds.textaccess import TextAnalysis
from xlamigrate.prefilter import Prefilter
from xlamigrate.project.model import Analysed
from xlamigrate.project.pins import Pins
from xlamigrate.request import STANDALONE, FileContext, FileTask, RewriteRequest
from xlamigrate.results import FileError, FileResult, RewriteOutcome

# A file of the project the project decided nothing about: its enabling writes start no
# script of the project it could follow.
STANDALONE_PROJECT = FileContext()
SCRIPT_KINDS = ("python", "notebook")  # planned before the launchers (they may get a recipe)


@dataclass(frozen=True)
class Job:
    """One file to scan, plan or rewrite: its bytes and kind, and what the project decided."""

    display: str
    data: bytes
    kind: str = "python"
    context: FileContext = STANDALONE
    analysis: TextAnalysis | None = None  # a launcher's, made for the project already


def pinned_context(job: Job, context: FileContext, pins: Pins) -> FileContext:
    """The context with the torch-xla the file runs on (for a Python file naming it)."""
    if job.kind == "yaml" and b"precision" in job.data:  # an NxDT config's release (XM105)
        return replace(context, frameworks=pins.frameworks(Path(job.display)))
    if job.kind not in SCRIPT_KINDS:
        return context
    if framework_table().may_be_used(job.data, escaped=job.kind == "notebook"):  # (XM104)
        context = replace(context, frameworks=pins.frameworks(Path(job.display)))
    if b"torch_xla" not in job.data:
        return context
    return replace(context, torch_xla=pins.floor(Path(job.display)))


def asks_precision(catalogue: Catalogue, enabled: frozenset[str] | None) -> bool:
    """Whether the rules selected (None: every one) ask for the precision migration."""
    recipe_rules = {catalogue.flags[flag].write_rule for flag in RECIPE_FLAGS}
    return enabled is None or bool(enabled & recipe_rules)


def analyse_job(job: Job, catalogue: Catalogue) -> Analysed | None:
    try:
        with collector_paused():
            launcher = kinds.load_launcher(job.kind)
            analysis = launcher.analyse_file(job.display, job.data, catalogue)
    except Exception:  # the file's own plan reports the problem
        return None
    if analysis is None:
        return None
    text = job.data.decode("utf-8", "replace")
    return Analysed(job.display, job.kind, text, analysis)


def read_file(source: SourceFile) -> bytes | FileError:
    try:
        data = regular_file_bytes(source.location)
    except OSError as error:
        reason = error.strerror or str(error)
        return FileError(source.display, None, f"could not read: {reason}")
    if data is None:
        return FileError(source.display, None, "could not read: not a regular file")
    return data


_PREFILTERS: dict[frozenset[str], Prefilter] = {}  # a process's, by the rules enabled


def prefilter_for(catalogue: Catalogue, enabled: frozenset[str]) -> Prefilter:
    """The process's prefilter for the rules enabled (made once)."""
    prefilter = _PREFILTERS.get(enabled)
    if prefilter is None:
        prefilter = _PREFILTERS[enabled] = Prefilter(catalogue, enabled)
    return prefilter


def scan_source(
    path: str,
    data: bytes,
    kind: str,
    catalogue: Catalogue,
    enabled: frozenset[str],
    context: FileContext = STANDALONE,
) -> FileResult:
    """Scans one file's bytes as the given kind ("python", "shell", "dotenv"...)."""
    with collector_paused():
        return kinds.load(kind).scan(FileTask(path, data, catalogue, enabled, context))


def rewrite_source(
    path: str,
    data: bytes,
    kind: str,
    catalogue: Catalogue,
    enabled: frozenset[str],
    mode: str | RewriteRequest,
    unsafe_fixes: bool = False,
    context: FileContext = STANDALONE,
) -> RewriteOutcome:
    """Plans the rewrite of one file's bytes as the given kind, alone (a launcher's writes stay
    unless `context` says what became of the scripts it starts); writes nothing."""
    request = mode if isinstance(mode, RewriteRequest) else RewriteRequest(mode, unsafe_fixes)
    with collector_paused():
        return kinds.load(kind).rewrite(FileTask(path, data, catalogue, enabled, context), request)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector, paused while one file is analysed: a syntax tree is
    millions of young objects, and each full collection walks all of them, so with it running
    a file's cost grew faster than its size (20,000 lines took 13-20x the time of 2,000, and a
    fifth of libcst's time went to it). What the file left behind is collected afterwards."""
    running = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if running:
            gc.enable()


def scan_job(job: Job, catalogue: Catalogue, enabled: frozenset[str]) -> FileResult:
    try:
        if not may_find_here(job, catalogue, enabled):
            return FileResult(job.display)
        if kinds.analyses_launches(job.kind):  # the project's word on its enabling writes
            launcher = kinds.load_launcher(job.kind)
            with collector_paused():
                task = FileTask(job.display, job.data, catalogue, enabled, job.context)
                return launcher.scan(task, job.analysis)
        return scan_source(job.display, job.data, job.kind, catalogue, enabled, job.context)
    except Exception as crash:  # one bad file must not end the run: report it and go on
        return FileResult(job.display, errors=(_crash(job, crash),))


def may_find_here(job: Job, catalogue: Catalogue, enabled: frozenset[str]) -> bool:
    """Whether a flagged script may have a finding in its project: where the prefilter may have
    passed it for a framework option, it is asked again with the releases the project pins for
    it (its context's), in which the option may not act (not on XLA, say). Such a file, with
    nothing else to find (most of a framework's own examples and tests), is not parsed: its
    scan finds nothing, and its rewrite changes nothing unless it is to get a recipe (which
    `rewrite_job` asks first)."""
    if job.kind not in SCRIPT_KINDS:
        return True
    escaped = job.kind == "notebook"
    if not framework_table().may_be_used(job.data, escaped):
        return True  # (its verdict was not the option's: it stands)
    pinned = dict(job.context.frameworks)
    return prefilter_for(catalogue, enabled).may_have_findings(job.kind, job.data, pinned)


# A scan made ahead of the project's decisions, with the context it was made in.
Ahead = tuple[FileContext, FileResult]


_AHEAD_PINS: dict[tuple[Path, Version | None], Pins] = {}  # a worker's, by root and override


def scan_ahead(
    job: Job,
    catalogue: Catalogue,
    enabled: frozenset[str],
    mode: str,
    root: Path,
    override: Version | None,
) -> Ahead:
    """In a worker: the scan of a file the project decides nothing for, in that context (the
    project's pins read here, as the parent reads them), with it."""
    pins = _AHEAD_PINS.get((root, override))
    if pins is None:
        pins = _AHEAD_PINS[(root, override)] = Pins(root, override)
    context = pinned_context(job, replace(STANDALONE_PROJECT, mode=mode), pins)
    return context, scan_job(replace(job, context=context), catalogue, enabled)


def rewrite_job(
    job: Job, catalogue: Catalogue, enabled: frozenset[str], request: RewriteRequest
) -> RewriteOutcome:
    try:
        context = job.context
        if context.reads_against is None and not may_find_here(job, catalogue, enabled):
            return RewriteOutcome(job.display, job.data, None)  # (no recipe to put in it)
        return rewrite_source(
            job.display, job.data, job.kind, catalogue, enabled, request, context=context
        )
    except Exception as crash:
        return RewriteOutcome(job.display, job.data, None, errors=(_crash(job, crash),))


def _crash(job: Job, crash: Exception) -> FileError:
    if isinstance(crash, RecursionError):
        return FileError(job.display, None, "could not parse: nesting too deep")
    return FileError(job.display, None, f"internal error: {type(crash).__name__}: {crash}")
