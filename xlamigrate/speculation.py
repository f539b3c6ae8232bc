"""Work done ahead of knowing it is wanted, in a pool's idle time.

A large tree's scan decides its project (launchers read, scripts planned) before it scans: the
scan of a file depends on what the project decides for it. Most files get no decision at all,
and their scans can start early, each with the context such a file gets, while the parent
decides; the scan takes those whose context turned out the same and scans the others.

The pool stays free for the work known to be wanted: the early tasks are submitted a few at a
time (one more than the workers), so work submitted meanwhile (the scripts' plans) waits for at
most those few, and none while `paused()`. A callback of each finished task submits the next.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import Executor, Future, wait
from typing import Generic, TypeVar

_Job = TypeVar("_Job")
_Result = TypeVar("_Result")


class Speculation(Generic[_Job, _Result]):
    """`task` of each job, largest first as given, a few at a time in `pool`."""

    def __init__(
        self,
        pool: Executor,
        task: Callable[[_Job], _Result],
        jobs: Sequence[_Job],
        key: Callable[[_Job], Hashable],
        in_flight: int,
    ) -> None:
        self._pool, self._task, self._key, self._most = pool, task, key, in_flight
        self._lock = threading.RLock()  # (a future done already calls back at once)
        self._queue: deque[_Job] = deque(jobs)
        self._running: dict[Future[_Result], _Job] = {}
        self._done: dict[Hashable, tuple[_Job, _Result]] = {}
        self._paused = 0
        self._stopped = False
        with self._lock:
            self._feed()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No task submitted meanwhile (those submitted already run on)."""
        with self._lock:
            self._paused += 1
        try:
            yield
        finally:
            with self._lock:
                self._paused -= 1
                self._feed()

    def taken(self) -> dict[Hashable, tuple[_Job, _Result]]:
        """Each job done, by its key, with its result: no task is submitted any more, those
        running are waited for; a job not started is not in it. A task that raised is left
        out (the caller runs it again, and says what went wrong)."""
        with self._lock:
            self._stopped = True
            self._queue.clear()
            running = list(self._running)
        wait(running)
        with self._lock:
            return dict(self._done)

    def _feed(self) -> None:
        while (
            not self._stopped
            and not self._paused
            and self._queue
            and len(self._running) < self._most
        ):
            job = self._queue.popleft()
            try:
                future = self._pool.submit(self._task, job)
            except RuntimeError:  # (the pool shut down, or broke: nothing more is run ahead)
                self._stopped = True
                return
            self._running[future] = job
            future.add_done_callback(self._finished)

    def _finished(self, future: Future[_Result]) -> None:
        with self._lock:
            job = self._running.pop(future)
            if not future.cancelled() and future.exception() is None:
                self._done[self._key(job)] = (job, future.result())
            self._feed()
