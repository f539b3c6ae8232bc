"""scan_paths(), rewrite_paths(): discovery, a byte prefilter, a process pool, ordering.

Callable from Python without the CLI. Heavy modules (libcst) are imported only once some file
passes the prefilter, so a scan of files that never mention a flag never loads the parser.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, TypeVar, Unpack, cast

from xlamigrate import decidedcache, kinds
from xlamigrate.apitable import Version
from xlamigrate.cache import MISS, RunCache, is_project_root, open_for_run
from xlamigrate.catalogue import Catalogue
from xlamigrate.config import Settings
from xlamigrate.discover import Discovery, SourceFile
from xlamigrate.fileread import regular_file_bytes
from xlamigrate.findings import worded_outcome, worded_report
from xlamigrate.flagvalue import RECIPE_FLAGS
from xlamigrate.frameworktable import framework_table
from xlamigrate.kinds.textaccess import TextAnalysis
from xlamigrate.prefilter import Prefilter
from xlamigrate.progress import SILENT, Progress
from xlamigrate.project.launchers import launches_with_flag
from xlamigrate.project.model import Analysed, Project
from xlamigrate.project.pins import Pins
from xlamigrate.project.units import split_units, together, units
from xlamigrate.request import DEFAULT_MODE, STANDALONE, FileContext, FileTask, RewriteRequest
from xlamigrate.results import (
    FileError,
    FileResult,
    Finding,
    LaunchEdge,
    RewriteOutcome,
    RewriteReport,
    ScanReport,
)
from xlamigrate.selection import Selection, select

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

    from xlamigrate.project.build import ProjectBuilder
    from xlamigrate.speculation import Speculation

# A file of the project the project decided nothing about: its enabling writes start no
# script of the project it could follow.
STANDALONE_PROJECT = FileContext()

_PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent exits
_PARENT_POLL_SECONDS = 0.5

# A pool's start-up (~50-90 ms: fork, imports first used in each worker, pickling) pays off
# once the files to parse hold this many bytes: Python is analysed (and planned) at some
# 0.5-2 MB/s per core on `ast`, shell and YAML launchers at some 1-2 MB/s.
_POOL_MIN_BYTES = 64 * 1024
_KEPT_BYTES = 256 << 20  # the tree's bytes kept from the first read, for the project (MiB: 256)
_Result = TypeVar("_Result")
_T = TypeVar("_T")
_SCRIPT_KINDS = ("python", "notebook")  # planned before the launchers (they may get a recipe)


# The kinds of files that may build an image a launcher names (`docker build -t NAME`).
_IMAGE_BUILDERS = frozenset({"shell", "makefile", "yaml"})


@dataclass(frozen=True)
class _Job:
    display: str
    data: bytes
    kind: str = "python"
    context: FileContext = STANDALONE
    analysis: TextAnalysis | None = None  # a launcher's, made for the project already


class RunOptions(TypedDict, total=False):
    """How a scan or a rewrite runs; what it finds is the same whatever they are.
    `jobs`: worker processes (None: one per core, where the files are worth a pool);
    `discovery`: the named paths', where the caller made it; `use_cache`: reuse what earlier
    runs found for unchanged files (cache.py); `selection`: the files named, where the caller
    made it; `overlay`: files (by display path) read as these bytes, not as on disk (an
    editor's buffer, `--stdin-filename`); `prefetch`: the files read and prefiltered as the
    walk of the discovery found them, and its workers (`Prefetch`)."""

    jobs: int | None
    discovery: Discovery | None
    progress: Progress
    use_cache: bool
    selection: Selection | None
    overlay: Mapping[str, bytes] | None
    prefetch: Prefetch | None


@dataclass(frozen=True)
class _Run:
    """What a scan and a rewrite start from: the files named within the project, the rules
    enabled, the run's cache, and the flagged files read."""

    selection: Selection
    enabled: frozenset[str]
    cache: RunCache | None
    read: _Read
    progress: Progress

    @classmethod
    def start(
        cls,
        paths: Sequence[Path],
        settings: Settings,
        catalogue: Catalogue,
        run: RunOptions,
        workers: _Workers,
    ) -> _Run:
        use_cache = run.get("use_cache", False)
        selection = run.get("selection") or select(
            paths, settings, run.get("discovery"), use_cache=use_cache
        )
        enabled = catalogue.select(settings.select, settings.ignore)
        cache = open_for_run(settings, enabled) if use_cache else None
        workers.cache = cache
        prefetch = run.get("prefetch")
        prefetched = prefetch.results() if prefetch is not None and cache is None else None
        read = _flagged_files(
            selection.project, catalogue, enabled, cache, run.get("overlay") or {}, workers,
            prefetched,
        )  # fmt: skip
        workers.kinds = sorted(read.kinds)  # (what a pool started from here on preloads)
        return cls(selection, enabled, cache, read, run.get("progress", SILENT))


@contextlib.contextmanager
def _started(
    paths: Sequence[Path], settings: Settings, catalogue: Catalogue, run: RunOptions
) -> Iterator[tuple[_Run, _Workers]]:
    """The run started (its files read) and its workers, shut down when it is done."""
    prefetch = run.get("prefetch")
    with prefetch.workers if prefetch is not None else _Workers(run.get("jobs")) as workers:
        yield _Run.start(paths, settings, catalogue, run, workers), workers


def scan_paths(
    paths: Sequence[Path], settings: Settings, catalogue: Catalogue, **run: Unpack[RunOptions]
) -> ScanReport:
    """Scans the named files (and those under named folders) as part of the project below
    `settings.root`: its launch graph is built over all of it, so a file gets the findings a
    scan of the whole root gives it, whatever else is named (how it runs: `RunOptions`)."""
    # The launchers' findings say what `rewrite` (in the configured mode) would do with them.
    request = RewriteRequest(settings.mode or DEFAULT_MODE, target=settings.target)
    with _started(paths, settings, catalogue, run) as (started, workers):
        selection, enabled, cache, read = (
            started.selection, started.enabled, started.cache, started.read
        )  # fmt: skip
        discovery, selected, progress = selection.project, selection.displays, started.progress
        pins = _pins(settings, cache)
        reuse = not run.get("overlay") and not read.unreadable
        task = partial(_scan_job, catalogue=catalogue, enabled=enabled)
        ahead = partial(
            _scan_ahead, catalogue=catalogue, enabled=enabled, mode=request.mode,
            root=settings.root, override=settings.torch_xla_version,
        )  # fmt: skip
        workers.speculate(_undecided_likely(read, selected), ahead)  # (while it is decided)
        decided = _decided(
            discovery, settings, catalogue, request, workers, read, enabled, pins, reuse
        )
        progress.start(len(read.flagged), "scanning")
        work = [
            replace(job, analysis=decided.analyses.get(job.display)) for job in read.work(selected)
        ]
        contextual = _contextual(work, decided.contexts, pins, request.mode)
        speculated = workers.speculated()
        made = {  # (a Python file's scan reads no launcher analysis: the context decides)
            job.display: speculated[job.display][1]
            for job in contextual
            if job.display in speculated and speculated[job.display][0] == job.context
        }
        scanned = [
            decided.result_with_problems(r)
            for r in workers.run(contextual, task, progress, memo="scan", known=made)
        ]
        listed = {r.path for r in scanned}
        scanned += [  # a launched script that names no flag: only its failed recipe's findings
            FileResult(path, findings)
            for path, findings in sorted(decided.problems.items())
            if findings and path in selected and path not in listed
        ]
    if cache is not None:
        cache.save()
    unreadable = _about(read.unreadable, selection)
    results = [FileResult(e.path, errors=(e,)) for e in unreadable] + scanned
    report = _report(len(selection.named.files), len(work), results)
    return replace(worded_report(report, catalogue), launches=decided.edges_of(selected))


def rewrite_paths(
    paths: Sequence[Path],
    settings: Settings,
    catalogue: Catalogue,
    request: RewriteRequest,
    **run: Unpack[RunOptions],
) -> RewriteReport:
    """Plans the rewrite of every flagged file named (or under a named folder) and of every
    script of them a launcher of the project starts with a legacy flag; writes nothing (the
    caller decides), and changes no file outside the selection.

    Scripts are planned first: a launcher's write goes only once the recipe went into every
    script it reaches, so a script whose recipe cannot go in whole is planned again without
    it, and the writes that reach it stay. A launcher's write, the scripts it reaches and the
    modules they import change together: where some of them are not selected, none does."""
    with _started(paths, settings, catalogue, run) as (started, workers):
        selection, enabled, cache, read = (
            started.selection, started.enabled, started.cache, started.read
        )  # fmt: skip
        discovery, selected, progress = selection.project, selection.displays, started.progress
        work, unreadable = read.work(), _about(read.unreadable, selection)
        layout = _Layout.of(
            work, discovery, settings, catalogue, request, workers, read.kept, enabled,
            made=read.analysed,
        )  # fmt: skip
        layout.pins = _pins(settings, cache)
        task = partial(_rewrite_job, catalogue=catalogue, enabled=enabled, request=request)
        scripts = layout.python_jobs(work, unreadable, selected)
        others = [j for j in work if j.kind not in _SCRIPT_KINDS and j.display in selected]
        progress.start(len(scripts) + len(others), "rewriting")
        memo = ("rewrite", request)
        planned = layout.settle(scripts, task, workers, progress, memo)
        planned = layout.hold(selected, scripts, planned, task, workers, memo)
        planned = [outcome for outcome in planned if outcome.path in selected]
        planned += workers.run(layout.with_contexts(others), task, progress, memo)
    if cache is not None:
        cache.save()
    outcomes = [
        worded_outcome(outcome, catalogue)
        for outcome in _with_runtime(planned, selection, settings, catalogue, request, enabled)
    ]
    errors = [*unreadable, *(e for outcome in outcomes for e in outcome.errors)]
    return RewriteReport(
        files_scanned=len(selection.named.files),
        outcomes=tuple(outcomes),
        errors=tuple(sorted(errors, key=lambda e: (e.path, e.line or 0))),
        launches=layout.edges(selected),
    )


def _about(errors: list[FileError], selection: Selection) -> list[FileError]:
    """The errors a run reports: its selected files', and its named folders' that could not
    be listed (the rest of the project goes unreported, as it goes unchecked)."""
    files = {source.display for source in selection.project.files}
    chosen = selection.displays
    return [error for error in errors if error.path in chosen or error.path not in files]


def _with_runtime(
    planned: list[RewriteOutcome],
    selection: Selection,
    settings: Settings,
    catalogue: Catalogue,
    request: RewriteRequest,
    enabled: frozenset[str],
) -> list[RewriteOutcome]:
    """The outcomes, with the project's dependency list declaring the runtime that rewritten
    scripts import (or XM409 naming what to edit), or with the runtime copied beside them."""
    from xlamigrate.project import dependencies

    sources = {source.display: source.path for source in selection.project.files}
    if request.runtime == "vendor":
        added = dependencies.vendor_runtime(planned, sources)
    else:
        report = dependencies.RUNTIME_NOT_DECLARED in enabled
        planned, added = dependencies.declare_runtime(
            planned, sources, settings.root, catalogue, report, selection.covers
        )
    return sorted([*planned, *added], key=lambda outcome: outcome.path)


@dataclass
class _Layout:
    """The project as the engine uses it: the launcher analyses it was built from, and the
    context each file's plan gets."""

    analysed: list[Analysed]
    builder: ProjectBuilder | None
    contexts: dict[str, FileContext]
    project: Project = field(default_factory=Project)
    pins: Pins | None = None  # the oldest torch-xla each Python file runs on
    failed: dict[str, str] = field(default_factory=dict)  # scripts without their recipe: why
    # the findings of a failed script that say why (its launchers' findings cite the first):
    # listed with the script's own, planned without the recipe, which no longer has them
    problems: dict[str, tuple[Finding, ...]] = field(default_factory=dict)
    enabled: frozenset[str] | None = None  # the rules selected (None: every one)

    @classmethod
    def of(
        cls,
        work: list[_Job],
        discovery: Discovery,
        settings: Settings,
        catalogue: Catalogue,
        request: RewriteRequest,
        workers: _Workers,
        kept: dict[str, bytes] | None = None,
        enabled: frozenset[str] | None = None,  # None: every rule
        recorder: decidedcache.Recorder | None = None,  # hears what deciding asks
        made: Mapping[str, Analysed | None] | None = None,  # the launchers analysed already
    ) -> _Layout:
        if not _asks_precision(catalogue, enabled):
            return cls([], None, {})
        launchers = [job for job in work if kinds.analyses_launches(job.kind)]
        analyse = partial(_analyse_job, catalogue=catalogue)
        done = workers.run(launchers, analyse, memo="analyse", known=made)
        analysed = [a for a in done if a is not None]
        if not any(launches_with_flag(a.analysis) for a in analysed):
            return cls(analysed, None, {})
        from xlamigrate.project.build import ProjectBuilder  # (a run that builds the project)
        from xlamigrate.project.resolve import ScriptResolver

        files = {f.display: f.location for f in discovery.files}
        python = {f.display for f in discovery.files if f.kind == "python"}
        builder = ProjectBuilder(
            resolver=ScriptResolver(
                settings.root,
                python,
                dockerfiles=[f.display for f in discovery.files if f.kind == "dockerfile"],
                builders=[f.display for f in discovery.files if f.kind in _IMAGE_BUILDERS],
            ),
            read=partial(_read_display, files, kept or {}),
            others=[f.display for f in discovery.files],
            signal=settings.signal or request.signal,
            signal_configured=settings.signal is not None,
            target=request.target or settings.target,
        )
        if workers.cache is not None:
            builder.remembered = partial(_remembered, workers.cache, files)
        if recorder is not None:
            builder.read = recorder.reading(builder.read)
            builder.remembered = recorder.remembering(builder.remembered)
            builder.resolver.disk = recorder.disk()
        layout = cls(analysed, builder, {}, enabled=enabled)
        layout.decide({})
        return layout

    def decide(self, failed: dict[str, str]) -> None:
        if self.builder is None:
            return
        project, signal, platforms = self.builder.build(self.analysed, failed)
        self.project = project
        default = self.builder.target or "neuron"
        contexts = {
            path: FileContext(
                writes=decisions, platform=platforms.get(path, default), signal=signal
            )
            for path, decisions in project.writes.items()
        }
        for path, recipe in project.scripts.items():
            writes = contexts[path].writes if path in contexts else {}  # (it launches itself)
            contexts[path] = FileContext(
                writes=writes, recipe=recipe, platform=recipe.platform, signal=signal
            )
        for path, recipe in self.builder.modules_of(project).items():
            contexts.setdefault(
                path, FileContext(imported_by=recipe, platform=recipe.platform, signal=signal)
            )
        self.contexts = contexts

    def settle(
        self,
        scripts: list[_Job],
        task: Callable[[_Job], RewriteOutcome],
        workers: _Workers,
        progress: Progress = SILENT,
        memo: object = None,
    ) -> list[RewriteOutcome]:
        """Plans the scripts; while some launched script cannot take its recipe whole, decides
        again without it (its launchers' writes stay) and replans the scripts that changed.
        Each round only takes recipes away, so it ends."""
        failed = self.failed
        planned = workers.run(self.with_contexts(scripts), task, progress, memo)
        while True:
            launched = self.project.scripts
            newly = {o.path: why for o in planned if (why := _unapplied(o, launched)) is not None}
            newly = {path: why for path, why in newly.items() if path not in failed}
            if not newly:
                return [self.with_problems(o) for o in planned]
            self.problems.update(
                {o.path: _recipe_problems(o, self.enabled) for o in planned if o.path in newly}
            )
            failed.update(newly)
            before = self.contexts
            self.decide(failed)
            changed = [j for j in scripts if self.contexts.get(j.display) != before.get(j.display)]
            replanned = workers.run(self.with_contexts(changed), task, memo=memo)
            redone = {o.path: o for o in replanned}
            planned = [redone.get(o.path, o) for o in planned]

    def with_problems(self, outcome: RewriteOutcome) -> RewriteOutcome:
        """The outcome with the failed recipe's findings its file lacks."""
        merged = _listed(self.problems, outcome.path, outcome.remaining)
        return outcome if merged is None else replace(outcome, remaining=merged)

    def hold(
        self,
        selected: frozenset[str],
        scripts: list[_Job],
        planned: list[RewriteOutcome],
        task: Callable[[_Job], RewriteOutcome],
        workers: _Workers,
        memo: object = None,
    ) -> list[RewriteOutcome]:
        """Takes the recipes away from the units of the project the selection splits (their
        launchers' writes stay), replans the selected files that changed, and says in what
        they leave for later which command migrates their unit whole."""
        if self.builder is None:
            return planned
        held: dict[str, str] = {}  # a file of a split unit -> the command that migrates it
        for unit in split_units(units(self.project, self.builder.imports_of), selected):
            held.update(dict.fromkeys(unit, together(unit)))
        if not held:
            return planned
        self.failed.update(
            {
                script: f"not every file it migrates with is named: `{held[script]}` migrates"
                " them together, or `--project` the whole project"
                for script in self.project.scripts
                if script in held
            }
        )
        before = self.contexts
        self.decide(self.failed)
        changed = [
            job
            for job in scripts
            if job.display in selected and self.contexts.get(job.display) != before.get(job.display)
        ]
        redone = {o.path: o for o in workers.run(self.with_contexts(changed), task, memo=memo)}
        return [
            _pointed(redone[o.path], o, held[o.path]) if o.path in redone else o for o in planned
        ]

    def edges(self, selected: frozenset[str] | None = None) -> tuple[LaunchEdge, ...]:
        """Every enabling write the project decided on, with the scripts it reaches (with
        `selected`: the selected launchers' writes, and those that reach selected scripts)."""
        if self.builder is None:
            return ()
        from xlamigrate.kinds.launch import as_written

        edges = []
        for launcher in self.builder.launchers(self.analysed):
            decisions = self.project.decisions_for(launcher.path)
            for write in launcher.writes:
                decision = decisions.get(write.start)
                if decision is None:
                    continue
                edges.append(
                    LaunchEdge(
                        launcher.path,
                        write.line,
                        write.variable,
                        tuple(as_written(script) for script in write.launched),
                        decision.scripts,
                        decision.migrated,
                        decision.signal,
                        decision.reason,
                    )
                )
        if selected is not None:
            edges = [e for e in edges if e.launcher in selected or set(e.scripts) & selected]
        return tuple(sorted(edges, key=lambda edge: (edge.launcher, edge.line)))

    def script_jobs(self, work: list[_Job]) -> list[_Job]:
        """The launched scripts alone (what a scan needs planned to know its launchers' fate),
        with the bytes the run read of those among `work`."""
        return self.python_jobs(work, [], selected=frozenset())

    def python_jobs(
        self,
        work: list[_Job],
        unreadable: list[FileError],
        selected: frozenset[str] | None = None,  # None: every file
    ) -> list[_Job]:
        """The flagged Python files and notebooks selected, and the launched scripts (read
        here): one not selected is planned too, to learn whether it takes its recipe."""

        def chosen(path: str) -> bool:
            return selected is None or path in selected

        launched = self.project.scripts
        jobs = [
            job
            for job in work
            if job.kind in _SCRIPT_KINDS and (chosen(job.display) or job.display in launched)
        ]
        known = {job.display for job in work}
        for path in sorted(launched):
            if path in known:
                continue
            read = _read(SourceFile(path, path, "python"))
            if not isinstance(read, FileError):
                jobs.append(_Job(path, read, "python"))
            elif chosen(path):
                unreadable.append(read)
        return jobs

    def with_contexts(self, jobs: list[_Job], mode: str | None = None) -> list[_Job]:
        """The jobs with their files' contexts (worded for `mode`, for a scan)."""
        return _contextual(jobs, self.contexts, self.pins, mode)

    def decided(self) -> _Decided:
        """What a scan uses of the project once it is decided."""
        return _Decided(
            self.contexts,
            self.problems,
            self.edges(),
            {a.path: a.analysis for a in self.analysed},
        )


@dataclass
class _Decided:
    """The project as a scan uses it once decided: each file's context, the findings of the
    recipes that failed (listed with their scripts'), the launch edges, and the analyses of
    the launchers this run made."""

    contexts: dict[str, FileContext]
    problems: dict[str, tuple[Finding, ...]]
    edges: tuple[LaunchEdge, ...]
    analyses: dict[str, TextAnalysis] = field(default_factory=dict)

    def result_with_problems(self, result: FileResult) -> FileResult:
        """The scan result with the failed recipe's findings its file lacks."""
        merged = _listed(self.problems, result.path, result.findings)
        return result if merged is None else replace(result, findings=merged)

    def edges_of(self, selected: frozenset[str]) -> tuple[LaunchEdge, ...]:
        """The selected launchers' edges, and those that reach selected scripts."""
        return tuple(e for e in self.edges if e.launcher in selected or set(e.scripts) & selected)


def _listed(
    problems: Mapping[str, tuple[Finding, ...]], path: str, have: Sequence[Finding]
) -> tuple[Finding, ...] | None:
    """`have` with the failed recipe's findings of the file it lacks (None: it lacks none)."""
    known = {(f.code, f.cell, f.span) for f in have}
    missing = [f for f in problems.get(path, ()) if (f.code, f.cell, f.span) not in known]
    if not missing:
        return None
    return tuple(sorted([*have, *missing], key=lambda f: f.sort_key))


def _unapplied(outcome: RewriteOutcome, scripts: Collection[str]) -> str | None:
    """Why a launched script did not take its recipe: it could not (a rule says why), or its
    plan failed (a file that does not parse, an internal error)."""
    if outcome.unapplied is not None:
        return outcome.unapplied
    if outcome.errors and outcome.path in scripts:
        first = outcome.errors[0]
        where = f" at line {first.line}" if first.line else ""
        return f"{first.code}{where}: {first.message}"
    return None


def _undecided_likely(read: _Read, selected: Collection[str]) -> list[_Job]:
    """The selected flagged Python files the project is unlikely to decide anything about:
    those naming no legacy flag (a launched script reads one, a launcher writes one)."""
    flags = read.prefilter.flag_names
    return [
        _Job(source.display, data, source.kind)
        for source, data in read.flagged
        if source.kind == "python"
        and data is not None
        and source.display in selected
        and not flags.found_in(data)
    ]


def _contextual(
    jobs: list[_Job],
    contexts: Mapping[str, FileContext],
    pins: Pins | None,
    mode: str | None = None,
) -> list[_Job]:
    """The jobs with their files' contexts (worded for `mode`, for a scan), with the releases
    the project pins where a file names them."""
    chosen = [contexts.get(job.display, STANDALONE_PROJECT) for job in jobs]
    if mode is not None:
        chosen = [replace(context, mode=mode) for context in chosen]
    if pins is not None:
        chosen = [_pinned(job, context, pins) for job, context in zip(jobs, chosen, strict=True)]
    return [replace(job, context=context) for job, context in zip(jobs, chosen, strict=True)]


def _pinned(job: _Job, context: FileContext, pins: Pins) -> FileContext:
    """The context with the torch-xla the file runs on (for a Python file naming it)."""
    if job.kind == "yaml" and b"precision" in job.data:  # an NxDT config's release (XM105)
        return replace(context, frameworks=pins.frameworks(Path(job.display)))
    if job.kind not in _SCRIPT_KINDS:
        return context
    if framework_table().may_be_used(job.data, escaped=job.kind == "notebook"):  # (XM104)
        context = replace(context, frameworks=pins.frameworks(Path(job.display)))
    if b"torch_xla" not in job.data:
        return context
    return replace(context, torch_xla=pins.floor(Path(job.display)))


def _decided(
    discovery: Discovery,
    settings: Settings,
    catalogue: Catalogue,
    request: RewriteRequest,
    workers: _Workers,
    read: _Read,
    enabled: frozenset[str],
    pins: Pins,
    reuse: bool,
) -> _Decided:
    """The project as a scan uses it: kept from an earlier run where nothing deciding it asked
    has another answer (decidedcache.py), else decided (the launched scripts planned, to
    learn which take their recipe) and kept for the next run."""
    cache = workers.cache
    where = None
    if cache is not None and reuse and _asks_precision(catalogue, enabled):
        where = decidedcache.Kept(cache)
    inputs: dict[str, decidedcache.Input] = {}
    if where is not None and cache is not None:
        for source in discovery.files:
            digest = cache.digest_of(source.location)
            if digest is None:  # (a file the run does not know: nothing is kept)
                where = None
                break
            inputs[source.display] = (source.kind, digest)
    files = {source.display: source.location for source in discovery.files}
    if where is not None:
        kept = where.load()
        if kept is not None:
            reused = _reused(kept, inputs, files, read, workers, catalogue, enabled, request, pins)
            if reused is not None:
                where.save_changed(kept, inputs)
                return reused
    recorder = decidedcache.Recorder(inputs) if where is not None else None
    work = read.work()
    layout = _Layout.of(
        work, discovery, settings, catalogue, request, workers, read.kept, enabled, recorder,
        read.analysed,
    )  # fmt: skip
    layout.pins = pins
    if layout.project.scripts:
        planning = replace(request, plan_only=True)
        plan = partial(_rewrite_job, catalogue=catalogue, enabled=enabled, request=planning)
        layout.settle(layout.script_jobs(work), plan, workers, memo=("plan", planning))
    decided = layout.decided()
    if where is not None and recorder is not None:
        analysed = {a.path: a for a in layout.analysed}
        recorder.journal.launchers = {
            job.display: decidedcache.launcher_summary(analysed.get(job.display))
            for job in work
            if kinds.analyses_launches(job.kind)
        }
        decision = decidedcache.Decision(
            inputs,
            read.names,
            recorder.journal,
            frozenset(layout.project.scripts),
            frozenset(layout.failed),
            replace(decided, analyses={}),
        )
        where.save(decision)
    return decided


def _reused(
    kept: decidedcache.Decision,
    inputs: Mapping[str, decidedcache.Input],
    files: dict[str, str],
    read: _Read,
    workers: _Workers,
    catalogue: Catalogue,
    enabled: frozenset[str],
    request: RewriteRequest,
    pins: Pins,
) -> _Decided | None:
    """The kept decision, where the files changed since answer all it asked alike: a changed
    launcher's analysis summarised the same, a changed launched script still taking its
    recipe; None where something decides again."""
    decided = kept.decided
    changed = kept.changed(inputs)
    if (
        not isinstance(decided, _Decided)
        or changed is None
        or read.names != kept.flagged
        or not kept.disk_unchanged()
    ):
        return None
    flagged = dict(read.names)
    jobs = {display: read.job(display) for display in changed if display in flagged}
    scripts = []
    for display in changed:
        if kept.undecidable(display):
            return None
        job = jobs.get(display)
        data = job.data if job is not None else _read_display(files, read.kept, display)
        if not kept.answers_hold(display, data):
            return None
        if display in kept.scripts and data is not None:
            scripts.append(job or _Job(display, data, "python"))
    launchers = [job for d, job in jobs.items() if d in kept.journal.launchers and job is not None]
    analyse = partial(_analyse_job, catalogue=catalogue)
    fresh = workers.run(launchers, analyse, memo="analyse")
    for job, analysed in zip(launchers, fresh, strict=True):
        if decidedcache.launcher_summary(analysed) != kept.journal.launchers[job.display]:
            return None
    if scripts:
        planning = replace(request, plan_only=True)
        plan = partial(_rewrite_job, catalogue=catalogue, enabled=enabled, request=planning)
        jobs_in_context = _contextual(scripts, decided.contexts, pins)
        planned = workers.run(jobs_in_context, plan, memo=("plan", planning))
        if any(_unapplied(outcome, kept.scripts) is not None for outcome in planned):
            return None
    return replace(decided, analyses={a.path: a.analysis for a in fresh if a is not None})


def _asks_precision(catalogue: Catalogue, enabled: frozenset[str] | None) -> bool:
    """Whether the rules selected (None: every one) ask for the precision migration."""
    recipe_rules = {catalogue.flags[flag].write_rule for flag in RECIPE_FLAGS}
    return enabled is None or bool(enabled & recipe_rules)


def _pins(settings: Settings, cache: RunCache | None) -> Pins:
    """The project's pins, each pin file's read remembered for its bytes where a cache is kept."""
    if cache is None:
        return Pins(settings.root, settings.torch_xla_version)
    return Pins(settings.root, settings.torch_xla_version, cache.answer)


def _read_display(files: dict[str, str], kept: dict[str, bytes], display: str) -> bytes | None:
    """A discovered file's bytes: as the scan read them, else read again."""
    if display in kept:
        return kept[display]
    path = files.get(display)
    if path is None:
        return None
    read = _read(SourceFile(path, display, ""))
    return None if isinstance(read, FileError) else read


def _remembered(
    cache: RunCache, files: dict[str, str], question: str, display: str, answer: Callable[[], _T]
) -> _T:
    """A file's answer to one of the project's questions (which names it holds, what it
    imports), remembered in the cache for the file's bytes: an unchanged file is not read."""
    path = files.get(display)
    return answer() if path is None else cast("_T", cache.piece(question, path, answer))


def _analyse_job(job: _Job, catalogue: Catalogue) -> Analysed | None:
    try:
        with _collector_paused():
            launcher = kinds.load_launcher(job.kind)
            analysis = launcher.analyse_file(job.display, job.data, catalogue)
    except Exception:  # the file's own plan reports the problem
        return None
    if analysis is None:
        return None
    text = job.data.decode("utf-8", "replace")
    return Analysed(job.display, job.kind, text, analysis)


@dataclass
class _Read:
    """What reading the discovered files gave: the files that mention a flag, those that
    could not be read, and the bytes of all kept for the project's questions about them
    (which files name a launched script) up to _KEPT_BYTES, so they are not read twice.
    A flagged file the cache knows unchanged by its stat is read when a job of it is asked
    for (a warm run that reuses the project's decision reads only the files it scans)."""

    flagged: list[tuple[SourceFile, bytes | None]]  # (None: not read yet)
    unreadable: list[FileError]
    kept: dict[str, bytes]
    prefilter: Prefilter
    cache: RunCache | None = None
    analysed: dict[str, Analysed | None] = field(default_factory=dict)  # launchers, by the pool
    _jobs: dict[str, _Job | None] = field(default_factory=dict)

    @property
    def names(self) -> tuple[tuple[str, str], ...]:
        """The flagged files' display paths and kinds, in the discovery's order."""
        return tuple((source.display, source.kind) for source, _ in self.flagged)

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset(source.kind for source, _ in self.flagged)

    def work(self, chosen: Collection[str] | None = None) -> list[_Job]:
        """The jobs of the flagged files (of those `chosen`; None: all), read where needed."""
        jobs = (
            self._job(source, data)
            for source, data in self.flagged
            if chosen is None or source.display in chosen
        )
        return [job for job in jobs if job is not None]

    def job(self, display: str) -> _Job | None:
        found = next(((s, d) for s, d in self.flagged if s.display == display), None)
        return None if found is None else self._job(*found)

    def _job(self, source: SourceFile, data: bytes | None) -> _Job | None:
        if source.display in self._jobs:
            return self._jobs[source.display]
        job = None
        if data is not None:
            job = _Job(source.display, data, source.kind)
        else:  # (known unchanged and flagged: still flagged, unless it changed since)
            read = _read(source)
            if isinstance(read, FileError):
                self.unreadable.append(read)
            else:
                decide = partial(self.prefilter.may_have_findings, source.kind, read)
                cache = self.cache
                if cache is None or cache.flagged(source.location, source.kind, read, decide):
                    job = _Job(source.display, read, source.kind)
        self._jobs[source.display] = job
        return job


def _flagged_files(
    discovery: Discovery,
    catalogue: Catalogue,
    enabled: frozenset[str] = frozenset(),
    cache: RunCache | None = None,
    overlay: Mapping[str, bytes] | None = None,
    workers: _Workers | None = None,
    prefetched: Mapping[str, _Prefetched] | None = None,
) -> _Read:
    """The files that mention a flag or a torch-xla API of the table, and those that could not
    be read. A file the cache knows unchanged is not read here: not at all where it was not
    flagged, when its job is asked for where it was. Where many bytes are to be read, the
    workers read them (`_Workers.prefiltered`), and analyse the flagged launchers meanwhile;
    `prefetched`: what they made of each file as the walk found it (`Prefetch`)."""
    prefilter = Prefilter(catalogue, enabled)
    unreadable = [
        FileError(folder, None, f"could not read the folder: {reason}")
        for folder, reason in discovery.unlisted
    ]
    if prefetched is not None and not overlay and cache is None:
        return _prefetched_read(discovery, prefetched, prefilter, unreadable)
    kept: dict[str, bytes] = {}
    budget = _KEPT_BYTES
    overlay = overlay or {}
    on_disk = [s for s in discovery.files if s.display not in overlay]
    known = iter(  # (bytes given for a file are not the disk's: the cache has no verdict)
        cache.known_verdicts([(s.location, s.kind) for s in on_disk]) if cache is not None else ()
    )
    # Each file with its bytes (None: not read) and its verdict (None: not decided yet).
    files: list[tuple[SourceFile, bytes | None, bool | None]] = []
    for source in discovery.files:
        given = overlay.get(source.display)
        if given is None and cache is not None:
            verdict = next(known)
            if verdict is not None:
                if verdict:
                    files.append((source, None, True))
                continue
        read = _read(source) if given is None else given
        if isinstance(read, FileError):
            unreadable.append(read)
            continue
        if len(read) <= budget:
            kept[source.display] = read
            budget -= len(read)
        # (bytes given, not on disk: decided here, the cache does not remember them)
        now = prefilter.may_have_findings(source.kind, read) if given is not None else None
        files.append((source, read, now))
    undecided = [(s, data) for s, data, verdict in files if verdict is None and data is not None]
    analyse = _asks_precision(catalogue, enabled)
    done = workers.prefiltered(undecided, catalogue, enabled, analyse) if workers else None
    decided = (
        {} if done is None else dict(zip((s.display for s, _ in undecided), done, strict=True))
    )
    flagged: list[tuple[SourceFile, bytes | None]] = []
    analysed: dict[str, Analysed | None] = {}
    for source, data, verdict in files:
        if verdict is None and data is not None:
            if source.display in decided:
                verdict, made = decided[source.display]
                if verdict and kinds.analyses_launches(source.kind):
                    analysed[source.display] = made
                decide: Callable[[], bool] = partial(bool, verdict)
            else:
                decide = partial(prefilter.may_have_findings, source.kind, data)
            verdict = (
                cache.flagged(source.location, source.kind, data, decide) if cache else decide()
            )
        if verdict:
            flagged.append((source, data))
    return _Read(flagged, unreadable, kept, prefilter, cache, analysed)


def _prefetched_read(
    discovery: Discovery,
    prefetched: Mapping[str, _Prefetched],
    prefilter: Prefilter,
    unreadable: list[FileError],
) -> _Read:
    """The run's reading of the discovered files, as the workers made it while the walk went
    on (a file they did not get to is read and prefiltered here). The bytes of the files not
    flagged are not kept: the project's questions read them again."""
    kept: dict[str, bytes] = {}
    flagged: list[tuple[SourceFile, bytes | None]] = []
    analysed: dict[str, Analysed | None] = {}
    for source in discovery.files:
        made = prefetched.get(source.display)
        if made is None:
            read = _read(source)
            verdict = not isinstance(read, FileError) and prefilter.may_have_findings(
                source.kind, read
            )
            made = (read, verdict, None, False)
        data, verdict, analysis, analysed_there = made
        if isinstance(data, FileError):
            unreadable.append(data)
            continue
        if not verdict:
            continue
        assert data is not None
        kept[source.display] = data
        flagged.append((source, data))
        if analysed_there:
            analysed[source.display] = analysis
    return _Read(flagged, unreadable, kept, prefilter, None, analysed)


def _read(source: SourceFile) -> bytes | FileError:
    try:
        data = regular_file_bytes(source.location)
    except OSError as error:
        reason = error.strerror or str(error)
        return FileError(source.display, None, f"could not read: {reason}")
    if data is None:
        return FileError(source.display, None, "could not read: not a regular file")
    return data


# What the workers made of a file the walk found: its bytes (where flagged; None where not)
# or why it could not be read, the prefilter's verdict, the launcher analysis and whether one
# was made (a flagged launcher's, where the run asks for the project).
_Prefetched = tuple[bytes | FileError | None, bool, "Analysed | None", bool]
# A walk that has found this many files starts the workers reading them (a smaller tree is
# read in this process: a pool costs more than it saves), in batches of this many.
_PREFETCH_AFTER_FILES = 1000
_PREFETCH_BATCH = 96


class Prefetch:
    """A large tree's files read, prefiltered and (the flagged launchers) analysed by the
    workers as the walk finds them (`found`, the walk's hook), instead of once it is done:
    the walk, in this process, and the reading, in the workers, overlap. The workers are
    started once the walk has found `_PREFETCH_AFTER_FILES` files; the run goes on with them
    (`workers`). `results` waits for them: None where none was started."""

    def __init__(self, catalogue: Catalogue, settings: Settings, jobs: int | None) -> None:
        enabled = catalogue.select(settings.select, settings.ignore)
        self.workers = _Workers(jobs)
        self._task = partial(
            _prefetched_slice,
            catalogue=catalogue,
            enabled=enabled,
            analyse=_asks_precision(catalogue, enabled),
        )
        self._pending: list[SourceFile] = []
        self._submitted: list[tuple[list[str], Future[list[_Prefetched]]]] = []
        self._pool: ProcessPoolExecutor | None = None
        self._off = False  # (no pool to be had: one worker, or no fork)

    def found(self, source: SourceFile) -> None:
        if self._off:
            return
        self._pending.append(source)
        if self._pool is None:
            if len(self._pending) < _PREFETCH_AFTER_FILES:
                return
            if (self.workers.jobs or os.cpu_count() or 1) <= 1 or "fork" not in _start_methods():
                self._off, self._pending = True, []
                return
            self._pool = self.workers._started()
        if len(self._pending) >= _PREFETCH_BATCH:
            self._submit()

    def results(self) -> dict[str, _Prefetched] | None:
        if self._pool is None:
            return None
        if self._pending:
            self._submit()
        made: dict[str, _Prefetched] = {}
        for displays, future in self._submitted:
            with contextlib.suppress(Exception):  # (a batch that failed is read by the run)
                made.update(zip(displays, future.result(), strict=True))
        self._submitted = []
        return made

    def _submit(self) -> None:
        """The files found and not yet sent, in batches (the first thousand: several)."""
        assert self._pool is not None
        pending, self._pending = self._pending, []
        for start in range(0, len(pending), _PREFETCH_BATCH):
            chunk = pending[start : start + _PREFETCH_BATCH]
            batch = [(s.display, s.location, s.kind) for s in chunk]
            try:
                future = self._pool.submit(self._task, batch)
            except (RuntimeError, OSError):  # (a broken pool, a failed fork: the run reads
                return  # these itself)
            self._submitted.append(([display for display, _, _ in batch], future))


@contextlib.contextmanager
def prefetching(
    catalogue: Catalogue, settings: Settings, use_cache: bool, jobs: int | None
) -> Iterator[Prefetch | None]:
    """A `Prefetch` for a scan's walk, its workers shut down when done; None where the run
    keeps a cache (which knows unchanged files by their stat: they are not read at all)."""
    if use_cache and is_project_root(settings):
        yield None
        return
    prefetch = Prefetch(catalogue, settings, jobs)
    with prefetch.workers:
        yield prefetch


def _prefetched_slice(
    batch: list[tuple[str, str, str]],
    catalogue: Catalogue,
    enabled: frozenset[str],
    analyse: bool,
) -> list[_Prefetched]:
    """In a worker: each file of the batch read, prefiltered and, a flagged launcher, analysed
    where `analyse` (a flagged file's bytes go back to the run; another's do not)."""
    made: list[_Prefetched] = []
    for display, location, kind in batch:
        data = _read(SourceFile(location, display, kind))
        if isinstance(data, FileError):
            made.append((data, False, None, False))
            continue
        verdict, analysis, analysed = _prefiltered(display, kind, data, catalogue, enabled, analyse)
        made.append((data if verdict else None, verdict, analysis, analysed))
    return made


class _Workers:
    """The worker processes of one run: started when a phase first has enough to parse (or,
    in a large tree, to prefilter), and kept for the phases after it (a pool costs 50-90 ms to
    start). What the run's flagged kinds need for both tasks is imported before forking, so
    every worker inherits it; a pool started to prefilter imports it in each worker."""

    def __init__(
        self, jobs: int | None, kinds: Collection[str] = (), cache: RunCache | None = None
    ) -> None:
        self.jobs = jobs
        self.cache = cache
        self.kinds = sorted(kinds)
        self._pool: ProcessPoolExecutor | None = None
        self._speculation: Speculation[_Job, _Ahead] | None = None

    def __enter__(self) -> _Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            # Not waiting for the workers to exit (some 80 ms of a large tree's scan, their
            # heaps unmapped): they have nothing left to do, and the command's process ends
            # with os._exit, which takes them along (`_exit_with`).
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def run(
        self,
        work: list[_Job],
        task: Callable[[_Job], _Result],
        progress: Progress = SILENT,
        memo: object = None,
        known: Mapping[str, _Result] | None = None,
    ) -> list[_Result]:
        """`task` of every job: in this process, or in the pool when there is enough to
        parse. `progress` hears of each job done. With `memo` (what the task is, beyond the
        job: its name, its request), results are looked up in the cache and kept there.
        `known`: results of the task made already, by the jobs' display paths."""
        if known:
            computed = iter(
                self.run([j for j in work if j.display not in known], task, progress, memo)
            )
            made = [job for job in work if job.display in known]
            if memo is not None and self.cache is not None:  # (kept as those computed are)
                for job in made:
                    key = self.cache.key(memo, job.display, job.kind, job.data, job.context)
                    if key is not None and not _crashed(known[job.display]):
                        self.cache.put(key, known[job.display])
            progress.advance(len(made))
            return [known[j.display] if j.display in known else next(computed) for j in work]
        if memo is None or self.cache is None:
            return self._computed(work, task, progress)
        cache = self.cache
        keys = [cache.key(memo, job.display, job.kind, job.data, job.context) for job in work]
        found = [MISS if key is None else cache.get(key) for key in keys]
        progress.advance(sum(value is not MISS for value in found))
        missing = [job for job, value in zip(work, found, strict=True) if value is MISS]
        computed = iter(self._computed(missing, task, progress))
        results: list[_Result] = []
        for key, value in zip(keys, found, strict=True):
            if value is MISS:
                value = next(computed)
                if key is not None and not _crashed(value):
                    cache.put(key, value)
            results.append(cast("_Result", value))
        return results

    def prefiltered(
        self,
        files: list[tuple[SourceFile, bytes]],
        catalogue: Catalogue,
        enabled: frozenset[str],
        analyse: bool,
    ) -> list[tuple[bool, Analysed | None]] | None:
        """Each file's prefilter verdict and, for a flagged launcher, its analysis (`analyse`:
        whether the run asks for it), decided by the workers; None where this process is to
        decide (too few bytes to be worth a pool, one job, or no fork to hand the bytes to
        the workers without sending them: the pool is started here, its workers inherit
        them)."""
        workers = self.jobs or os.cpu_count() or 1
        total = sum(len(data) for _, data in files)
        if workers <= 1 or total < _PREFILTER_POOL_BYTES or self._pool is not None:
            return None
        if "fork" not in _start_methods():  # (multiprocessing imported only for a large tree)
            return None
        global _INHERITED
        _INHERITED = [(s.display, s.kind, data) for s, data in files]
        try:
            pool = self._started()
            task = partial(_prefilter_slice, catalogue=catalogue, enabled=enabled, analyse=analyse)
            slices = _slices([len(data) for _, data in files], workers * 16)
            return [found for part in pool.map(task, slices) for found in part]
        finally:
            _INHERITED = []  # (the workers keep theirs)

    def speculate(self, jobs: list[_Job], task: Callable[[_Job], _Ahead]) -> None:
        """Starts `task` of these jobs in the pool a large tree's prefilter started, in the
        time the project's deciding leaves it idle (`speculated` takes the results); nothing
        where no pool was started."""
        if self._pool is None or not jobs:
            return
        from xlamigrate.speculation import Speculation

        workers = self.jobs or os.cpu_count() or 1
        largest_first = sorted(jobs, key=lambda job: -len(job.data))
        self._speculation = Speculation(
            self._pool, task, largest_first, key=_display, in_flight=workers + 1
        )

    def speculated(self) -> dict[str, _Ahead]:
        """The results `speculate` got done, by display path (the jobs it did not start are
        left to be run)."""
        if self._speculation is None:
            return {}
        taken, self._speculation = self._speculation.taken(), None
        return {cast("str", display): result for display, (_, result) in taken.items()}

    def _computed(
        self, work: list[_Job], task: Callable[[_Job], _Result], progress: Progress
    ) -> list[_Result]:
        workers = min(self.jobs or os.cpu_count() or 1, len(work))
        if workers <= 1 or sum(len(job.data) for job in work) < _POOL_MIN_BYTES:
            return [_advanced(task(job), progress) for job in work]
        pool = self._started()
        # The largest files first, in small chunks: no worker is left with a large file while
        # the other waits (results come back in the work's order).
        order = sorted(range(len(work)), key=lambda index: -len(work[index].data))
        chunksize = max(1, len(work) // (workers * 16))
        results: list[_Result | None] = [None] * len(work)
        speculating = self._speculation
        with speculating.paused() if speculating is not None else contextlib.nullcontext():
            done = pool.map(task, [work[index] for index in order], chunksize=chunksize)
            for index, result in zip(order, done, strict=True):
                results[index] = _advanced(result, progress)
        return cast("list[_Result]", results)

    def _started(self) -> ProcessPoolExecutor:
        """The pool (its processes start as work needs them, up to `jobs`)."""
        if self._pool is None:
            import multiprocessing  # (a run whose files are few never starts a pool)
            from concurrent.futures import ProcessPoolExecutor

            context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
            if context.get_start_method() == "fork":
                for kind in self.kinds:
                    for name in ("scan", "rewrite"):
                        kinds.preload(kind, name)  # loaded once here, inherited
            self._pool = ProcessPoolExecutor(
                max_workers=self.jobs or os.cpu_count() or 1,
                mp_context=context,
                initializer=_exit_with,
                initargs=(os.getpid(),),
            )
        return self._pool


# The files the workers prefilter, as this process read them: set before the pool forks, so
# the workers inherit the bytes instead of being sent them (`_Workers.prefiltered`).
_INHERITED: list[tuple[str, str, bytes]] = []
# A tree's bytes worth prefiltering in the pool (the prefilter reads some 150 MB/s a core).
_PREFILTER_POOL_BYTES = 8 << 20
_PREFILTERS: dict[frozenset[str], Prefilter] = {}  # a process's, by the rules enabled


def _display(job: _Job) -> str:
    return job.display


def _prefilter_slice(
    bounds: tuple[int, int], catalogue: Catalogue, enabled: frozenset[str], analyse: bool
) -> list[tuple[bool, Analysed | None]]:
    """In a worker: the verdicts of the inherited files in [start, stop), with the analysis
    of each flagged launcher where `analyse`."""
    found: list[tuple[bool, Analysed | None]] = []
    for display, kind, data in _INHERITED[bounds[0] : bounds[1]]:
        verdict, made, _ = _prefiltered(display, kind, data, catalogue, enabled, analyse)
        found.append((verdict, made))
    return found


def _prefiltered(
    display: str,
    kind: str,
    data: bytes,
    catalogue: Catalogue,
    enabled: frozenset[str],
    analyse: bool,
) -> tuple[bool, Analysed | None, bool]:
    """In a worker: a file's prefilter verdict and, a flagged launcher where `analyse`, its
    analysis (and whether one was made)."""
    if not _prefilter(catalogue, enabled).may_have_findings(kind, data):
        return False, None, False
    if not (analyse and kinds.analyses_launches(kind)):
        return True, None, False
    return True, _analyse_job(_Job(display, data, kind), catalogue), True


def _prefilter(catalogue: Catalogue, enabled: frozenset[str]) -> Prefilter:
    """The process's prefilter for the rules enabled (made once)."""
    prefilter = _PREFILTERS.get(enabled)
    if prefilter is None:
        prefilter = _PREFILTERS[enabled] = Prefilter(catalogue, enabled)
    return prefilter


def _slices(sizes: list[int], count: int) -> list[tuple[int, int]]:
    """[start, stop) bounds cutting the items into about `count` runs of equal bytes."""
    target = max(1, sum(sizes) // count)
    slices, start, held = [], 0, 0
    for index, size in enumerate(sizes):
        held += size
        if held >= target:
            slices.append((start, index + 1))
            start, held = index + 1, 0
    if start < len(sizes):
        slices.append((start, len(sizes)))
    return slices


def _start_methods() -> list[str]:
    import multiprocessing

    return multiprocessing.get_all_start_methods()


def _crashed(result: object) -> bool:
    """Whether the task crashed on the file (a result not worth keeping: it may not again)."""
    errors = getattr(result, "errors", ())
    return any(error.message.startswith("internal error") for error in errors)


def _advanced(result: _Result, progress: Progress) -> _Result:
    progress.advance()
    return result


def _exit_with(parent: int) -> None:
    """In a worker: exit once `parent` is gone (a CI timeout's SIGKILL leaves no chance to shut
    the pool down). Linux asks the kernel for a signal; elsewhere a thread watches the parent."""
    import signal  # (here: a start-up cost only the workers pay)
    import threading

    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
                if os.getppid() != parent:  # it died before the request took effect
                    os._exit(1)
                return
        except (OSError, AttributeError):
            pass
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(_PARENT_POLL_SECONDS)
    os._exit(1)


def scan_source(
    path: str,
    data: bytes,
    kind: str,
    catalogue: Catalogue,
    enabled: frozenset[str],
    context: FileContext = STANDALONE,
) -> FileResult:
    """Scans one file's bytes as the given kind ("python", "shell", "dotenv"...)."""
    with _collector_paused():
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
    with _collector_paused():
        return kinds.load(kind).rewrite(FileTask(path, data, catalogue, enabled, context), request)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
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


def _scan_job(job: _Job, catalogue: Catalogue, enabled: frozenset[str]) -> FileResult:
    try:
        if not _may_find_here(job, catalogue, enabled):
            return FileResult(job.display)
        if kinds.analyses_launches(job.kind):  # the project's word on its enabling writes
            launcher = kinds.load_launcher(job.kind)
            with _collector_paused():
                task = FileTask(job.display, job.data, catalogue, enabled, job.context)
                return launcher.scan(task, job.analysis)
        return scan_source(job.display, job.data, job.kind, catalogue, enabled, job.context)
    except Exception as crash:  # one bad file must not end the run: report it and go on
        return FileResult(job.display, errors=(_crash(job, crash),))


def _may_find_here(job: _Job, catalogue: Catalogue, enabled: frozenset[str]) -> bool:
    """Whether a flagged script may have a finding in its project: where the prefilter may have
    passed it for a framework option, it is asked again with the releases the project pins for
    it (its context's), in which the option may not act (not on XLA, say). Such a file, with
    nothing else to find (most of a framework's own examples and tests), is not parsed: its
    scan finds nothing, and its rewrite changes nothing unless it is to get a recipe (which
    `_rewrite_job` asks first)."""
    if job.kind not in _SCRIPT_KINDS:
        return True
    escaped = job.kind == "notebook"
    if not framework_table().may_be_used(job.data, escaped):
        return True  # (its verdict was not the option's: it stands)
    pinned = dict(job.context.frameworks)
    return _prefilter(catalogue, enabled).may_have_findings(job.kind, job.data, pinned)


# A scan made ahead of the project's decisions, with the context it was made in.
_Ahead = tuple[FileContext, FileResult]
_AHEAD_PINS: dict[tuple[Path, Version | None], Pins] = {}  # a worker's, by root and override


def _scan_ahead(
    job: _Job,
    catalogue: Catalogue,
    enabled: frozenset[str],
    mode: str,
    root: Path,
    override: Version | None,
) -> _Ahead:
    """In a worker: the scan of a file the project decides nothing for, in that context (the
    project's pins read here, as the parent reads them), with it."""
    pins = _AHEAD_PINS.get((root, override))
    if pins is None:
        pins = _AHEAD_PINS[(root, override)] = Pins(root, override)
    context = _pinned(job, replace(STANDALONE_PROJECT, mode=mode), pins)
    return context, _scan_job(replace(job, context=context), catalogue, enabled)


def _rewrite_job(
    job: _Job, catalogue: Catalogue, enabled: frozenset[str], request: RewriteRequest
) -> RewriteOutcome:
    try:
        context = job.context
        if context.reads_against is None and not _may_find_here(job, catalogue, enabled):
            return RewriteOutcome(job.display, job.data, None)  # (no recipe to put in it)
        return rewrite_source(
            job.display, job.data, job.kind, catalogue, enabled, request, context=context
        )
    except Exception as crash:
        return RewriteOutcome(job.display, job.data, None, errors=(_crash(job, crash),))


def _pointed(outcome: RewriteOutcome, whole: RewriteOutcome, command: str) -> RewriteOutcome:
    """A selected file's outcome without its unit's migration: what the plan of the whole unit
    (`whole`) fixed and this one leaves says which command migrates the unit."""
    fixed = {(f.code, f.cell, f.span) for f in whole.fixed}
    remaining = tuple(
        replace(f, message=f"{f.message} (its recipe migrates with files not named: `{command}`)")
        if (f.code, f.cell, f.span) in fixed and command not in f.message
        else f
        for f in outcome.remaining
    )
    return replace(outcome, remaining=remaining)


def _recipe_problems(
    outcome: RewriteOutcome, enabled: frozenset[str] | None
) -> tuple[Finding, ...]:
    """What kept a script's recipe from going in whole (no model found, no forward pass), of
    the rules selected."""
    from xlamigrate.kinds.python.planner import RECIPE_PROBLEMS

    return tuple(
        f
        for f in outcome.remaining
        if f.code in RECIPE_PROBLEMS and (enabled is None or f.code in enabled)
    )


def _crash(job: _Job, crash: Exception) -> FileError:
    if isinstance(crash, RecursionError):
        return FileError(job.display, None, "could not parse: nesting too deep")
    return FileError(job.display, None, f"internal error: {type(crash).__name__}: {crash}")


def _report(files_scanned: int, files_parsed: int, results: Sequence[FileResult]) -> ScanReport:
    findings = sorted((f for r in results for f in r.findings), key=lambda f: f.sort_key)
    errors = sorted((e for r in results for e in r.errors), key=lambda e: (e.path, e.line or 0))
    return ScanReport(
        files_scanned=files_scanned,
        findings=tuple(findings),
        errors=tuple(errors),
        files_parsed=files_parsed,
    )
