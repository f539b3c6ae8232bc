"""scan_paths(): discovery, a byte prefilter, a process pool for the files to parse, ordering.

Callable from Python without the CLI. Heavy modules (libcst) are imported only once some file
passes the prefilter, so a scan of files that never mention a flag never loads the parser.
"""

from __future__ import annotations

import multiprocessing
import os
import re
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from xlamigrate.catalogue import Catalogue
from xlamigrate.config import Settings
from xlamigrate.discover import Discovery, SourceFile, discover
from xlamigrate.model import FileError, FileResult, ScanReport

# Below this many files to parse, a pool's start-up costs more than it saves.
_POOL_THRESHOLD = 8


@dataclass(frozen=True)
class _Job:
    display: str
    data: bytes


def flag_prefilter(catalogue: Catalogue) -> re.Pattern[bytes]:
    """Matches the bytes of any flag name: files without a match cannot have a finding."""
    names = sorted(catalogue.flags, key=len, reverse=True)
    return re.compile(b"|".join(re.escape(name.encode("ascii")) for name in names))


def scan_paths(
    paths: Sequence[Path],
    settings: Settings,
    catalogue: Catalogue,
    jobs: int | None = None,
    discovery: Discovery | None = None,
) -> ScanReport:
    discovery = discovery if discovery is not None else discover(paths, settings)
    enabled = catalogue.select(settings.select, settings.ignore)
    prefilter = flag_prefilter(catalogue)
    work: list[_Job] = []
    results: list[FileResult] = []
    for source in discovery.files:
        read = _read(source)
        if isinstance(read, FileError):
            results.append(FileResult(source.display, errors=(read,)))
        elif prefilter.search(read):
            work.append(_Job(source.display, read))
    results.extend(_run(work, catalogue, enabled, jobs))
    return _report(len(discovery.files), len(work), results)


def _read(source: SourceFile) -> bytes | FileError:
    try:
        return source.path.read_bytes()
    except OSError as error:
        reason = error.strerror or str(error)
        return FileError(source.display, None, f"could not read: {reason}")


def _run(
    work: list[_Job], catalogue: Catalogue, enabled: frozenset[str], jobs: int | None
) -> list[FileResult]:
    task = partial(_scan_job, catalogue=catalogue, enabled=enabled)
    workers = min(jobs or os.cpu_count() or 1, len(work))
    if workers <= 1 or len(work) < _POOL_THRESHOLD:
        return [task(job) for job in work]
    context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    if context.get_start_method() == "fork":
        import xlamigrate.python.scan  # noqa: F401  # loaded once here, inherited by every worker
    chunksize = max(1, len(work) // (workers * 4))
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        return list(pool.map(task, work, chunksize=chunksize))


def _scan_job(job: _Job, catalogue: Catalogue, enabled: frozenset[str]) -> FileResult:
    from xlamigrate.python.scan import scan_python  # libcst: only when a file needs parsing

    try:
        return scan_python(job.display, job.data, catalogue, enabled)
    except RecursionError:
        error = FileError(job.display, None, "could not parse: nesting too deep")
    except Exception as crash:  # one bad file must not end the run: report it and go on
        error = FileError(job.display, None, f"internal error: {type(crash).__name__}: {crash}")
    return FileResult(job.display, errors=(error,))


def _report(files_scanned: int, files_parsed: int, results: Sequence[FileResult]) -> ScanReport:
    findings = sorted((f for r in results for f in r.findings), key=lambda f: f.sort_key)
    errors = sorted((e for r in results for e in r.errors), key=lambda e: (e.path, e.line or 0))
    return ScanReport(
        files_scanned=files_scanned,
        findings=tuple(findings),
        errors=tuple(errors),
        files_parsed=files_parsed,
    )
