"""The engine's worker processes: one pool for a whole run (started when a phase first has enough
to parse, serving the phases after it: the launchers' analyses, the launched scripts' plans, the
scan), and the same report as in one process."""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES
from xlamigrate import engine, jobs, workers
from xlamigrate.catalogue import Catalogue
from xlamigrate.config import load_settings

PROJECT = FIXTURES / "projects" / "precision_switch_launcher" / "before"


@pytest.fixture
def big_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The precision-switch project copied four times, and a pool worth starting for a few
    hundred bytes: every phase (launchers, launched scripts, the scan) has enough for one."""
    for index in range(4):
        shutil.copytree(PROJECT, tmp_path / f"copy{index}")
    monkeypatch.setattr(workers, "POOL_MIN_BYTES", 256)
    return tmp_path


def test_a_run_starts_one_pool_for_all_its_phases(
    big_project: Path, catalogue: Catalogue, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[Any] = []
    real = concurrent.futures.ProcessPoolExecutor

    def counted(*args: Any, **kwargs: Any) -> Any:
        started.append(kwargs)
        return real(*args, **kwargs)

    # (the engine imports the pool class where it first starts one: a run that never needs a
    # pool does not import it)
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", counted)
    monkeypatch.chdir(big_project)
    settings = load_settings([Path(".")], catalogue)
    pooled = engine.scan_paths([Path(".")], settings, catalogue, jobs=2)
    assert len(started) == 1
    alone = engine.scan_paths([Path(".")], settings, catalogue, jobs=1)
    assert len(started) == 1  # one process: no pool
    assert pooled.findings == alone.findings
    assert pooled.launches == alone.launches
    assert any(f.code == "XM101" for f in pooled.findings)


def test_the_workers_prefilter_a_large_tree_and_analyse_its_launchers(
    big_project: Path, catalogue: Catalogue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past _PREFILTER_POOL_BYTES, the pool reads each file's verdict (the bytes inherited at
    the fork, not sent) and analyses the flagged launchers meanwhile: the launchers are not
    analysed again, and the report is the one process's, with the run cache too."""
    for index in range(40):  # (files that name nothing: decided, never flagged)
        (big_project / f"plain{index}.py").write_text(f"print({index})\n" * 50)
    monkeypatch.setattr(workers, "_PREFILTER_POOL_BYTES", 1024)
    analysed: list[str] = []
    real = workers.Workers.run

    def run(self: workers.Workers, work: list[Any], task: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(task, "func", None) is jobs.analyse_job:
            known = kwargs.get("known") or {}
            analysed.extend(job.display for job in work if job.display not in known)
        return real(self, work, task, *args, **kwargs)

    monkeypatch.setattr(workers.Workers, "run", run)
    monkeypatch.chdir(big_project)
    settings = load_settings([Path(".")], catalogue)
    alone = engine.scan_paths([Path(".")], settings, catalogue, jobs=1)
    launchers = list(analysed)
    assert launchers, "one process analyses the launchers in the layout"
    analysed.clear()
    pooled = engine.scan_paths([Path(".")], settings, catalogue, jobs=2)
    assert analysed == []  # all made by the workers that prefiltered them
    assert pooled.findings == alone.findings
    assert pooled.launches == alone.launches
    cached = engine.scan_paths([Path(".")], settings, catalogue, jobs=2, use_cache=True)
    again = engine.scan_paths([Path(".")], settings, catalogue, jobs=2, use_cache=True)
    assert cached.findings == again.findings == alone.findings


def test_slices_cut_the_bytes_evenly() -> None:
    assert workers._slices([10, 10, 10, 10], 2) == [(0, 2), (2, 4)]
    assert workers._slices([100, 1, 1, 1], 4) == [(0, 1), (1, 4)]
    assert workers._slices([], 4) == []
    assert workers._slices([0, 0], 2) == [(0, 2)]  # (no bytes: one run)


def _prefetched_scan(
    tree: Path, catalogue: Catalogue, jobs: int, after: int
) -> tuple[Any, workers.Prefetch | None]:
    """A scan of the tree's root as the CLI runs it: its walk handing each file it finds to a
    Prefetch (which starts its workers once the walk has found `after` files)."""
    from xlamigrate.selection import named_files

    settings = load_settings([Path(".")], catalogue)
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(workers, "_PREFETCH_AFTER_FILES", after)
        patched.setattr(workers, "_PREFETCH_BATCH", 5)
        with workers.prefetching(catalogue, settings, False, jobs) as prefetch:
            assert prefetch is not None
            discovery = named_files([Path(".")], settings, False, prefetch.found)
            report = engine.scan_paths(
                [Path(".")], settings, catalogue, jobs=jobs, discovery=discovery,
                prefetch=prefetch,
            )  # fmt: skip
    return report, prefetch


def test_the_workers_read_a_large_trees_files_as_its_walk_finds_them(
    big_project: Path, catalogue: Catalogue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the walk has found _PREFETCH_AFTER_FILES files, the workers read, prefilter and
    analyse them in batches as it goes on: the run reads none itself, and reports as one
    process does (a file that cannot be read too)."""
    for index in range(40):
        (big_project / f"plain{index}.py").write_text(f"print({index})\n" * 50)
    if hasattr(os, "mkfifo"):  # (a file no one can read: a FIFO is no regular file)
        os.mkfifo(big_project / "pipe.py")
    monkeypatch.chdir(big_project)
    settings = load_settings([Path(".")], catalogue)
    alone = engine.scan_paths([Path(".")], settings, catalogue, jobs=1)
    read_here: list[str] = []
    real_read = engine.read_file

    def reading(source: Any) -> Any:
        read_here.append(source.display)
        return real_read(source)

    monkeypatch.setattr(engine, "read_file", reading)  # (the parent's; the workers have theirs)
    made: list[Any] = []
    real_results = workers.Prefetch.results

    def results(self: workers.Prefetch) -> Any:
        found = real_results(self)
        made.append(found)
        return found

    monkeypatch.setattr(workers.Prefetch, "results", results)
    pooled, _ = _prefetched_scan(big_project, catalogue, jobs=2, after=10)
    assert made[0] is not None and len(made[0]) == alone.files_scanned
    assert not [d for d in read_here if d.endswith(".sh")]  # (the launchers: read there)
    assert pooled.findings == alone.findings
    assert pooled.launches == alone.launches
    assert pooled.errors == alone.errors
    assert not hasattr(os, "mkfifo") or any(e.path == "pipe.py" for e in pooled.errors)


# A large tree's scan as the CLI runs it, in a process of its own: which of the planner's
# modules that process loaded, and what it found.
_SCANNED_APART = """
import json, sys
from pathlib import Path
from tests.test_engine_workers import _prefetched_scan
from xlamigrate.catalogue import load_catalogue
report, _ = _prefetched_scan(Path("."), load_catalogue(), jobs=2, after=10)
planner = [m for m in sys.modules if m.startswith("xlamigrate.kinds.python.plan")]
print(json.dumps({"planner": planner, "findings": [f.sort_key for f in report.findings]}))
"""


def test_the_workers_plan_the_launched_scripts_of_a_large_tree(
    big_project: Path, catalogue: Catalogue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the walk has started the workers, the launched scripts are planned there, however
    few their bytes: the run's own process never loads the planner (some 0.1 s of imports a
    process), and finds what one process finds."""
    for index in range(10):  # (enough files for the walk to start the workers)
        (big_project / f"plain{index}.py").write_text(f"print({index})\n")
    monkeypatch.chdir(big_project)
    settings = load_settings([Path(".")], catalogue)
    alone = engine.scan_paths([Path(".")], settings, catalogue, jobs=1)
    assert any(f.code == "XM101" for f in alone.findings)  # (a launched script, planned)
    root = Path(__file__).resolve().parent.parent
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    result = subprocess.run(
        [sys.executable, "-c", _SCANNED_APART], capture_output=True, text=True, env=env,
        check=True,
    )  # fmt: skip
    scanned = json.loads(result.stdout)
    assert scanned["planner"] == []
    assert scanned["findings"] == json.loads(json.dumps([f.sort_key for f in alone.findings]))


def test_a_small_tree_is_read_by_the_run_itself(
    big_project: Path, catalogue: Catalogue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(big_project)
    settings = load_settings([Path(".")], catalogue)
    alone = engine.scan_paths([Path(".")], settings, catalogue, jobs=1)
    report, prefetch = _prefetched_scan(big_project, catalogue, jobs=2, after=10_000)
    assert prefetch is not None and prefetch.results() is None  # (no workers started)
    assert report.findings == alone.findings
    one, prefetch = _prefetched_scan(big_project, catalogue, jobs=1, after=10)
    assert prefetch is not None and prefetch.results() is None  # (one worker: none started)
    assert one.findings == alone.findings


def test_a_run_that_keeps_a_cache_prefetches_nothing(
    big_project: Path, catalogue: Catalogue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(the cache knows unchanged files by their stat: a warm run reads none of them)"""
    (big_project / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    monkeypatch.chdir(big_project)
    settings = load_settings([Path(".")], catalogue)
    with workers.prefetching(catalogue, settings, True, 2) as prefetch:
        assert prefetch is None


def test_the_walk_hands_on_each_file_it_keeps_once(big_project: Path, catalogue: Catalogue) -> None:
    from xlamigrate.discover import discover

    (big_project / "link.py").symlink_to(big_project / "copy0" / "train_clm.py")  # (one file)
    settings = load_settings([big_project], catalogue)
    found: list[Any] = []
    discovery = discover([big_project], settings, found=found.append)
    assert sorted(found, key=lambda source: source.display) == list(discovery.files)


def test_the_files_found_before_the_workers_start_go_in_batches(
    catalogue: Catalogue, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from xlamigrate.discover import SourceFile

    sizes: list[int] = []

    class Recording(concurrent.futures.Executor):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            sizes.append(len(args[0]))
            return concurrent.futures.Future()

    monkeypatch.setattr(workers, "_PREFETCH_AFTER_FILES", 10)
    monkeypatch.setattr(workers, "_PREFETCH_BATCH", 4)
    monkeypatch.setattr(workers.Workers, "_started", lambda self: Recording())
    prefetch = workers.Prefetch(catalogue, load_settings([tmp_path], catalogue), 2)
    for index in range(17):
        prefetch.found(SourceFile(f"/x/{index}.py", f"{index}.py", "python"))
    assert sizes == [4, 4, 2, 4]  # (the first ten in batches; then one each four found)
