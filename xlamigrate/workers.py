"""The worker processes of a run: a pool started when a phase first has enough to parse (or, in
a large tree, to read and prefilter as the walk finds its files), kept for the phases after it,
and the tasks run in it (engine.py says what each phase asks of them; jobs.py holds one file's
work). Its workers die with the run: the command's process ends with `os._exit`, and each worker
asks to be killed when its parent goes."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from functools import partial
from typing import TYPE_CHECKING, TypeVar, cast

from xlamigrate import kinds
from xlamigrate.cache import MISS, RunCache, is_project_root
from xlamigrate.catalogue import Catalogue
from xlamigrate.config import Settings
from xlamigrate.discover import SourceFile
from xlamigrate.jobs import Ahead, Job, analyse_job, asks_precision, prefilter_for, read_file
from xlamigrate.progress import SILENT, Progress
from xlamigrate.results import FileError

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

    from xlamigrate.project.model import Analysed
    from xlamigrate.speculation import Speculation

_PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent exits
_PARENT_POLL_SECONDS = 0.5

# A pool's start-up (~50-90 ms: fork, imports first used in each worker, pickling) pays off
# once the files to parse hold this many bytes: Python is analysed (and planned) at some
# 0.5-2 MB/s per core on `ast`, shell and YAML launchers at some 1-2 MB/s.
POOL_MIN_BYTES = 64 * 1024
_Result = TypeVar("_Result")

# What the workers made of a file the walk found: its bytes (where flagged; None where not)
# or why it could not be read, the prefilter's verdict, the launcher analysis and whether one
# was made (a flagged launcher's, where the run asks for the project).
Prefetched = tuple[bytes | FileError | None, bool, "Analysed | None", bool]

# A walk that has found this many files starts the workers reading them (a smaller tree is
# read in this process: a pool costs more than it saves), in batches of this many.
_PREFETCH_AFTER_FILES = 1000
_PREFETCH_BATCH = 96

# The files the workers prefilter, as this process read them: set before the pool forks, so
# the workers inherit the bytes instead of being sent them (`Workers.prefiltered`).
_INHERITED: list[tuple[str, str, bytes]] = []

# A tree's bytes worth prefiltering in the pool (the prefilter reads some 150 MB/s a core).
_PREFILTER_POOL_BYTES = 8 << 20


class Prefetch:
    """A large tree's files read, prefiltered and (the flagged launchers) analysed by the
    workers as the walk finds them (`found`, the walk's hook), instead of once it is done:
    the walk, in this process, and the reading, in the workers, overlap. The workers are
    started once the walk has found `_PREFETCH_AFTER_FILES` files; the run goes on with them
    (`workers`). `results` waits for them: None where none was started."""

    def __init__(self, catalogue: Catalogue, settings: Settings, jobs: int | None) -> None:
        enabled = catalogue.select(settings.select, settings.ignore)
        self.workers = Workers(jobs)
        self._task = partial(
            _prefetched_slice,
            catalogue=catalogue,
            enabled=enabled,
            analyse=asks_precision(catalogue, enabled),
        )
        self._pending: list[SourceFile] = []
        self._submitted: list[tuple[list[str], Future[list[Prefetched]]]] = []
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

    def results(self) -> dict[str, Prefetched] | None:
        if self._pool is None:
            return None
        if self._pending:
            self._submit()
        made: dict[str, Prefetched] = {}
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
) -> list[Prefetched]:
    """In a worker: each file of the batch read, prefiltered and, a flagged launcher, analysed
    where `analyse` (a flagged file's bytes go back to the run; another's do not)."""
    made: list[Prefetched] = []
    for display, location, kind in batch:
        data = read_file(SourceFile(location, display, kind))
        if isinstance(data, FileError):
            made.append((data, False, None, False))
            continue
        verdict, analysis, analysed = _prefiltered(display, kind, data, catalogue, enabled, analyse)
        made.append((data if verdict else None, verdict, analysis, analysed))
    return made


class Workers:
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
        self._speculation: Speculation[Job, Ahead] | None = None

    def __enter__(self) -> Workers:
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
        work: list[Job],
        task: Callable[[Job], _Result],
        progress: Progress = SILENT,
        memo: object = None,
        known: Mapping[str, _Result] | None = None,
    ) -> list[_Result]:
        """`task` of every job: in the pool where one is started (its workers hold what the
        task loads: this process need not load it for a few files) or there is enough to
        parse, else in this process. `progress` hears of each job done. With `memo` (what the
        task is, beyond the job: its name, its request), results are looked up in the cache
        and kept there.
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

    def speculate(self, jobs: list[Job], task: Callable[[Job], Ahead]) -> None:
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

    def speculated(self) -> dict[str, Ahead]:
        """The results `speculate` got done, by display path (the jobs it did not start are
        left to be run)."""
        if self._speculation is None:
            return {}
        taken, self._speculation = self._speculation.taken(), None
        return {cast("str", display): result for display, (_, result) in taken.items()}

    def _computed(
        self, work: list[Job], task: Callable[[Job], _Result], progress: Progress
    ) -> list[_Result]:
        workers = min(self.jobs or os.cpu_count() or 1, len(work))
        if not work or (
            self._pool is None
            and (workers <= 1 or sum(len(job.data) for job in work) < POOL_MIN_BYTES)
        ):
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


def _display(job: Job) -> str:
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
    if not prefilter_for(catalogue, enabled).may_have_findings(kind, data):
        return False, None, False
    if not (analyse and kinds.analyses_launches(kind)):
        return True, None, False
    return True, analyse_job(Job(display, data, kind), catalogue), True


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
