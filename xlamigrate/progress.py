"""Progress of a scan or rewrite on a terminal: a bar on stderr once the work has run for a
second (a quick run shows nothing), gone when it ends; silent when stderr is not a terminal and
for the formats CI reads. rich is imported only when a bar may be shown."""

from __future__ import annotations

import sys
import threading
from types import TracebackType
from typing import Any, Protocol

DELAY_SECONDS = 1.0


class Progress(Protocol):
    def start(self, total: int, what: str) -> None:
        """`total` files are about to be worked on (`what`: "scanning", "rewriting")."""

    def advance(self, count: int = 1) -> None:
        """`count` more files are done."""


class Silent:
    def start(self, total: int, what: str) -> None:
        pass

    def advance(self, count: int = 1) -> None:
        pass


SILENT = Silent()


class TerminalProgress:
    """A rich progress bar on stderr, shown `delay` seconds after the work started."""

    def __init__(self, delay: float = DELAY_SECONDS, console: Any = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as Bar

        self._bar = Bar(
            TextColumn("xlamigrate: {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console or Console(stderr=True),
            transient=True,
        )
        self._task: Any = None
        self._lock = threading.Lock()
        self._shown = False
        self._due = False  # the delay has passed
        self._timer = threading.Timer(delay, self._show)
        self._timer.daemon = True

    def __enter__(self) -> TerminalProgress:
        self._timer.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._timer.cancel()
        with self._lock:
            if self._shown:
                self._bar.stop()
            self._shown = False

    @property
    def shown(self) -> bool:
        return self._shown

    def _show(self) -> None:
        with self._lock:
            self._due = True
            self._show_if_due()

    def _show_if_due(self) -> None:
        if self._due and not self._shown and self._task is not None:
            self._bar.start()
            self._shown = True

    def start(self, total: int, what: str) -> None:
        with self._lock:
            if self._task is None:
                self._task = self._bar.add_task(what, total=total)
            else:
                self._bar.update(self._task, description=what, total=total, completed=0)
            self._show_if_due()

    def advance(self, count: int = 1) -> None:
        if self._task is not None:
            self._bar.advance(self._task, count)


def for_terminal(enabled: bool) -> TerminalProgress | None:
    """A bar for this run, where stderr is a terminal and `enabled` (a human format)."""
    return TerminalProgress() if enabled and sys.stderr.isatty() else None
