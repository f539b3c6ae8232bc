"""scan_paths(), rewrite_paths(): a run over the named paths as part of their project:
discovery, the byte prefilter, the project decided (its launchers read, the scripts they start
planned), then each selected file's scan or rewrite in its context, in this process or the
run's pool (workers.py; one file's work: jobs.py). scan_source() and rewrite_source(): one
file's bytes, alone.

Callable from Python without the CLI. Heavy modules (libcst) are imported only once some file
passes the prefilter, so a scan of files that never mention a flag never loads the parser.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, TypeVar, Unpack, cast

from xlamigrate import decidedcache, kinds
from xlamigrate.cache import RunCache, open_for_run
from xlamigrate.catalogue import Catalogue
from xlamigrate.config import Settings
from xlamigrate.discover import Discovery, SourceFile
from xlamigrate.findings import worded_outcome, worded_report
from xlamigrate.jobs import (
    SCRIPT_KINDS,
    STANDALONE_PROJECT,
    Job,
    analyse_job,
    asks_precision,
    pinned_context,
    read_file,
    rewrite_job,
    scan_ahead,
    scan_job,
)
from xlamigrate.jobs import rewrite_source as rewrite_source  # (the API: one file, alone)
from xlamigrate.jobs import scan_source as scan_source
from xlamigrate.kinds.textaccess import TextAnalysis
from xlamigrate.prefilter import Prefilter
from xlamigrate.progress import SILENT, Progress
from xlamigrate.project.launchers import launches_with_flag
from xlamigrate.project.model import Analysed, Project
from xlamigrate.project.pins import Pins
from xlamigrate.project.units import split_units, together, units
from xlamigrate.recipeproblems import RECIPE_PROBLEMS
from xlamigrate.request import DEFAULT_MODE, FileContext, RewriteRequest
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
from xlamigrate.workers import Prefetch, Prefetched, Workers

if TYPE_CHECKING:
    from xlamigrate.project.build import ProjectBuilder


_KEPT_BYTES = 256 << 20  # the tree's bytes kept from the first read, for the project (MiB: 256)
_T = TypeVar("_T")


# The kinds of files that may build an image a launcher names (`docker build -t NAME`).
_IMAGE_BUILDERS = frozenset({"shell", "makefile", "yaml"})


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
        workers: Workers,
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
) -> Iterator[tuple[_Run, Workers]]:
    """The run started (its files read) and its workers, shut down when it is done."""
    prefetch = run.get("prefetch")
    with prefetch.workers if prefetch is not None else Workers(run.get("jobs")) as workers:
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
        task = partial(scan_job, catalogue=catalogue, enabled=enabled)
        ahead = partial(
            scan_ahead, catalogue=catalogue, enabled=enabled, mode=request.mode,
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
        task = partial(rewrite_job, catalogue=catalogue, enabled=enabled, request=request)
        scripts = layout.python_jobs(work, unreadable, selected)
        others = [j for j in work if j.kind not in SCRIPT_KINDS and j.display in selected]
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
        work: list[Job],
        discovery: Discovery,
        settings: Settings,
        catalogue: Catalogue,
        request: RewriteRequest,
        workers: Workers,
        kept: dict[str, bytes] | None = None,
        enabled: frozenset[str] | None = None,  # None: every rule
        recorder: decidedcache.Recorder | None = None,  # hears what deciding asks
        made: Mapping[str, Analysed | None] | None = None,  # the launchers analysed already
    ) -> _Layout:
        if not asks_precision(catalogue, enabled):
            return cls([], None, {})
        launchers = [job for job in work if kinds.analyses_launches(job.kind)]
        analyse = partial(analyse_job, catalogue=catalogue)
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
        scripts: list[Job],
        task: Callable[[Job], RewriteOutcome],
        workers: Workers,
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
        scripts: list[Job],
        planned: list[RewriteOutcome],
        task: Callable[[Job], RewriteOutcome],
        workers: Workers,
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

    def script_jobs(self, work: list[Job]) -> list[Job]:
        """The launched scripts alone (what a scan needs planned to know its launchers' fate),
        with the bytes the run read of those among `work`."""
        return self.python_jobs(work, [], selected=frozenset())

    def python_jobs(
        self,
        work: list[Job],
        unreadable: list[FileError],
        selected: frozenset[str] | None = None,  # None: every file
    ) -> list[Job]:
        """The flagged Python files and notebooks selected, and the launched scripts (read
        here): one not selected is planned too, to learn whether it takes its recipe."""

        def chosen(path: str) -> bool:
            return selected is None or path in selected

        launched = self.project.scripts
        jobs = [
            job
            for job in work
            if job.kind in SCRIPT_KINDS and (chosen(job.display) or job.display in launched)
        ]
        known = {job.display for job in work}
        for path in sorted(launched):
            if path in known:
                continue
            read = read_file(SourceFile(path, path, "python"))
            if not isinstance(read, FileError):
                jobs.append(Job(path, read, "python"))
            elif chosen(path):
                unreadable.append(read)
        return jobs

    def with_contexts(self, jobs: list[Job], mode: str | None = None) -> list[Job]:
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


def _undecided_likely(read: _Read, selected: Collection[str]) -> list[Job]:
    """The selected flagged Python files the project is unlikely to decide anything about:
    those naming no legacy flag (a launched script reads one, a launcher writes one)."""
    flags = read.prefilter.flag_names
    return [
        Job(source.display, data, source.kind)
        for source, data in read.flagged
        if source.kind == "python"
        and data is not None
        and source.display in selected
        and not flags.found_in(data)
    ]


def _contextual(
    jobs: list[Job],
    contexts: Mapping[str, FileContext],
    pins: Pins | None,
    mode: str | None = None,
) -> list[Job]:
    """The jobs with their files' contexts (worded for `mode`, for a scan), with the releases
    the project pins where a file names them."""
    chosen = [contexts.get(job.display, STANDALONE_PROJECT) for job in jobs]
    if mode is not None:
        chosen = [replace(context, mode=mode) for context in chosen]
    if pins is not None:
        chosen = [
            pinned_context(job, context, pins) for job, context in zip(jobs, chosen, strict=True)
        ]
    return [replace(job, context=context) for job, context in zip(jobs, chosen, strict=True)]


def _decided(
    discovery: Discovery,
    settings: Settings,
    catalogue: Catalogue,
    request: RewriteRequest,
    workers: Workers,
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
    if cache is not None and reuse and asks_precision(catalogue, enabled):
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
        plan = partial(rewrite_job, catalogue=catalogue, enabled=enabled, request=planning)
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
    workers: Workers,
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
            scripts.append(job or Job(display, data, "python"))
    launchers = [job for d, job in jobs.items() if d in kept.journal.launchers and job is not None]
    analyse = partial(analyse_job, catalogue=catalogue)
    fresh = workers.run(launchers, analyse, memo="analyse")
    for job, analysed in zip(launchers, fresh, strict=True):
        if decidedcache.launcher_summary(analysed) != kept.journal.launchers[job.display]:
            return None
    if scripts:
        planning = replace(request, plan_only=True)
        plan = partial(rewrite_job, catalogue=catalogue, enabled=enabled, request=planning)
        jobs_in_context = _contextual(scripts, decided.contexts, pins)
        planned = workers.run(jobs_in_context, plan, memo=("plan", planning))
        if any(_unapplied(outcome, kept.scripts) is not None for outcome in planned):
            return None
    return replace(decided, analyses={a.path: a.analysis for a in fresh if a is not None})


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
    read = read_file(SourceFile(path, display, ""))
    return None if isinstance(read, FileError) else read


def _remembered(
    cache: RunCache, files: dict[str, str], question: str, display: str, answer: Callable[[], _T]
) -> _T:
    """A file's answer to one of the project's questions (which names it holds, what it
    imports), remembered in the cache for the file's bytes: an unchanged file is not read."""
    path = files.get(display)
    return answer() if path is None else cast("_T", cache.piece(question, path, answer))


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
    _jobs: dict[str, Job | None] = field(default_factory=dict)

    @property
    def names(self) -> tuple[tuple[str, str], ...]:
        """The flagged files' display paths and kinds, in the discovery's order."""
        return tuple((source.display, source.kind) for source, _ in self.flagged)

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset(source.kind for source, _ in self.flagged)

    def work(self, chosen: Collection[str] | None = None) -> list[Job]:
        """The jobs of the flagged files (of those `chosen`; None: all), read where needed."""
        jobs = (
            self._job(source, data)
            for source, data in self.flagged
            if chosen is None or source.display in chosen
        )
        return [job for job in jobs if job is not None]

    def job(self, display: str) -> Job | None:
        found = next(((s, d) for s, d in self.flagged if s.display == display), None)
        return None if found is None else self._job(*found)

    def _job(self, source: SourceFile, data: bytes | None) -> Job | None:
        if source.display in self._jobs:
            return self._jobs[source.display]
        job = None
        if data is not None:
            job = Job(source.display, data, source.kind)
        else:  # (known unchanged and flagged: still flagged, unless it changed since)
            read = read_file(source)
            if isinstance(read, FileError):
                self.unreadable.append(read)
            else:
                decide = partial(self.prefilter.may_have_findings, source.kind, read)
                cache = self.cache
                if cache is None or cache.flagged(source.location, source.kind, read, decide):
                    job = Job(source.display, read, source.kind)
        self._jobs[source.display] = job
        return job


def _flagged_files(
    discovery: Discovery,
    catalogue: Catalogue,
    enabled: frozenset[str] = frozenset(),
    cache: RunCache | None = None,
    overlay: Mapping[str, bytes] | None = None,
    workers: Workers | None = None,
    prefetched: Mapping[str, Prefetched] | None = None,
) -> _Read:
    """The files that mention a flag or a torch-xla API of the table, and those that could not
    be read. A file the cache knows unchanged is not read here: not at all where it was not
    flagged, when its job is asked for where it was. Where many bytes are to be read, the
    workers read them (`Workers.prefiltered`), and analyse the flagged launchers meanwhile;
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
        read = read_file(source) if given is None else given
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
    analyse = asks_precision(catalogue, enabled)
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
    prefetched: Mapping[str, Prefetched],
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
            read = read_file(source)
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
    return tuple(
        f
        for f in outcome.remaining
        if f.code in RECIPE_PROBLEMS and (enabled is None or f.code in enabled)
    )


def _report(files_scanned: int, files_parsed: int, results: Sequence[FileResult]) -> ScanReport:
    findings = sorted((f for r in results for f in r.findings), key=lambda f: f.sort_key)
    errors = sorted((e for r in results for e in r.errors), key=lambda e: (e.path, e.line or 0))
    return ScanReport(
        files_scanned=files_scanned,
        findings=tuple(findings),
        errors=tuple(errors),
        files_parsed=files_parsed,
    )
