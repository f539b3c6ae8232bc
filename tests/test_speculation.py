"""Work run ahead in a pool's idle time (xlamigrate/speculation.py): a few tasks at a time,
none while paused, the results of those done taken once wanted; and a large tree's scan that
uses them finds what it finds without them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from xlamigrate import engine, workers
from xlamigrate.catalogue import load_catalogue
from xlamigrate.config import load_settings
from xlamigrate.results import FileResult
from xlamigrate.speculation import Speculation


class _HeldExecutor(Executor):
    """Runs nothing until told: `finish(n)` completes the n oldest submitted tasks."""

    def __init__(self) -> None:
        self.submitted: list[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = []
        self.started = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self.submitted.append((future, fn, args))
        return future

    def running(self) -> int:
        return sum(not future.done() for future, _, _ in self.submitted)

    def finish(self, count: int) -> None:
        for future, fn, args in [s for s in self.submitted if not s[0].done()][:count]:
            try:
                future.set_result(fn(*args))
            except Exception as error:
                future.set_exception(error)


def test_no_more_than_in_flight_tasks_are_submitted_at_once() -> None:
    pool = _HeldExecutor()
    speculation = Speculation(pool, lambda n: n * 10, list(range(6)), key=str, in_flight=2)
    assert len(pool.submitted) == 2 and pool.running() == 2
    pool.finish(1)
    assert len(pool.submitted) == 3 and pool.running() == 2  # the next one took its place
    pool.finish(2)
    assert len(pool.submitted) == 5
    assert [args for _, _, args in pool.submitted] == [(0,), (1,), (2,), (3,), (4,)]
    del speculation


def test_nothing_is_submitted_while_paused() -> None:
    pool = _HeldExecutor()
    speculation = Speculation(pool, lambda n: n, list(range(5)), key=str, in_flight=1)
    with speculation.paused():
        pool.finish(1)
        assert len(pool.submitted) == 1 and pool.running() == 0
    assert len(pool.submitted) == 2  # resumed


def test_taken_gives_the_jobs_done_and_starts_no_more() -> None:
    pool = _HeldExecutor()
    speculation = Speculation(pool, lambda n: n * 10, list(range(5)), key=str, in_flight=2)
    pool.finish(1)  # 0 done, 1 and 2 submitted
    waiting = threading.Thread(target=lambda: pool.finish(5))
    timer = threading.Timer(0.05, waiting.start)  # (the running ones finish while taken waits)
    timer.start()
    taken = speculation.taken()
    timer.join()
    waiting.join()
    assert taken == {"0": (0, 0), "1": (1, 10), "2": (2, 20)}
    assert len(pool.submitted) == 3  # 3 and 4 were never started


def test_a_task_that_raised_is_left_out() -> None:
    def task(n: int) -> int:
        if n == 1:
            raise ValueError(n)
        return n

    with ThreadPoolExecutor(2) as pool:
        taken = Speculation(pool, task, [0, 1, 2], key=str, in_flight=3).taken()
    assert taken == {"0": (0, 0), "2": (2, 2)}


def test_a_pool_shut_down_stops_it_quietly() -> None:
    pool = ThreadPoolExecutor(1)
    pool.shutdown()
    assert Speculation(pool, lambda n: n, [0, 1], key=str, in_flight=2).taken() == {}


def test_a_large_trees_scan_finds_the_same_with_and_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tree past the pool's prefilter threshold, whose launched script and its imported
    module get the project's decisions (their early scans, where made, are not taken) and
    whose other files get none (theirs are)."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 't'\n")
    (tmp_path / "run.sh").write_text("#!/bin/bash\nXLA_USE_BF16=1 python train.py\n")
    (tmp_path / "train.py").write_text(
        "import torch\nimport torch_xla.core.xla_model as xm\nfrom helpers import step\n"
        "device = xm.xla_device()\nmodel = torch.nn.Linear(2, 2).to(device)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nstep(model, opt)\nxm.mark_step()\n"
    )
    (tmp_path / "helpers.py").write_text(
        "import os\n\ndef step(model, opt):\n    if os.environ.get('XLA_USE_BF16'):\n"
        "        pass\n    opt.step()\n"
    )
    for index in range(12):  # (API uses only: no decision, scanned ahead)
        (tmp_path / f"api_{index}.py").write_text(
            "import torch_xla.core.xla_model as xm\n\nprint(xm.xrt_world_size())\n"
        )
    (tmp_path / "data.py").write_text("# " + "x" * (9 << 20) + "\n")  # (past 8 MB)
    ahead: list[str] = []
    speculate = workers.Workers.speculate

    def speculating(self: workers.Workers, jobs: list[Any], task: Any) -> None:
        ahead.extend(job.display for job in jobs)
        speculate(self, jobs, task)

    def speculating_wrongly(self: workers.Workers, jobs: list[Any], task: Any) -> None:
        speculate(self, jobs, partial(_nothing_found, scan=task))

    monkeypatch.chdir(tmp_path)
    catalogue = load_catalogue()
    settings = load_settings([tmp_path], catalogue)

    def found() -> list[tuple[str, str, int, str]]:
        report = engine.scan_paths([Path(".")], settings, catalogue, jobs=2)
        return sorted((f.path, f.code, f.span.line, f.message) for f in report.findings)

    with monkeypatch.context() as patched:
        patched.setattr(workers.Workers, "speculate", lambda self, jobs, task: None)
        without = found()
    assert {path for path, *_ in without} >= {"api_3.py", "train.py", "helpers.py", "run.sh"}
    monkeypatch.setattr(workers.Workers, "speculate", speculating)
    assert found() == without
    assert "api_0.py" in ahead and "train.py" in ahead and "helpers.py" not in ahead
    # The early results are taken where the project decided nothing for the file, and only
    # there: train.py gets its recipe (its early scan, made without, is not taken).
    taken: list[str] = []
    take = Speculation.taken

    def taking(self: Speculation[Any, Any]) -> dict[Any, Any]:
        done = take(self)
        taken.extend(done)
        return done

    monkeypatch.setattr(workers.Workers, "speculate", speculating_wrongly)
    monkeypatch.setattr(Speculation, "taken", taking)
    wrong = found()
    assert "train.py" in taken  # (the largest, started first: those running are waited for)
    assert any(path.startswith("api_") for path in taken)
    for index in range(12):
        path = f"api_{index}.py"
        assert any(f[0] == path for f in wrong) == (path not in taken)
    assert [f for f in wrong if f[0] == "train.py"] == [f for f in without if f[0] == "train.py"]


def _nothing_found(job: Any, scan: Callable[[Any], tuple[Any, FileResult]]) -> Any:
    """The early scan's context, with a result that finds nothing (in the pool's workers: a
    module's function)."""
    context, _ = scan(job)
    return context, FileResult(job.display)
