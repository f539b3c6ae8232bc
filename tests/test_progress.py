"""The progress bar of a long scan or rewrite: on a terminal's stderr after a delay, never for a
quick run, a redirected stderr or the formats CI reads."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from xlamigrate.progress import TerminalProgress, for_terminal


def terminal() -> tuple[Console, io.StringIO]:
    screen = io.StringIO()
    return Console(file=screen, force_terminal=True, width=80), screen


def test_a_run_longer_than_the_delay_shows_the_files_done() -> None:
    console, screen = terminal()
    with TerminalProgress(delay=0.0, console=console) as progress:
        progress.start(4, "scanning")
        progress.advance(3)
        deadline = time.monotonic() + 5
        while not progress.shown and time.monotonic() < deadline:
            time.sleep(0.01)
        assert progress.shown
        time.sleep(0.2)  # a refresh of the live display
    assert "xlamigrate: scanning" in screen.getvalue()
    assert "3/4" in screen.getvalue()


def test_a_run_shorter_than_the_delay_shows_nothing() -> None:
    console, screen = terminal()
    with TerminalProgress(delay=30.0, console=console) as progress:
        progress.start(2, "rewriting")
        progress.advance(2)
    assert not progress.shown
    assert screen.getvalue() == ""


def test_the_work_announced_after_the_delay_is_shown_at_once() -> None:
    console, _ = terminal()
    with TerminalProgress(delay=0.0, console=console) as progress:
        time.sleep(0.05)  # the delay passes before the engine says what it will do
        assert not progress.shown
        progress.start(1, "scanning")
        assert progress.shown


def test_no_bar_for_a_machine_format_or_a_redirected_stderr(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert for_terminal(False) is None  # json, sarif, github, gitlab
    assert isinstance(for_terminal(True), TerminalProgress)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert for_terminal(True) is None


def test_a_scan_with_stderr_redirected_prints_no_progress(tmp_path: Path) -> None:
    for index in range(3):
        (tmp_path / f"train_{index}.py").write_text('import os\nos.environ["XLA_USE_BF16"] = "1"\n')
    result = subprocess.run(
        [sys.executable, "-m", "xlamigrate.cli", "scan", "."],
        cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert result.returncode == 1
    assert "scanning" not in result.stderr and "\x1b[" not in result.stderr
