"""The engine's worker processes: one pool for a whole run (started when a phase first has enough
to parse, serving the phases after it: the launchers' analyses, the launched scripts' plans, the
scan), and the same report as in one process."""

from __future__ import annotations

import concurrent.futures
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES
from xlamigrate import engine
from xlamigrate.catalogue import Catalogue
from xlamigrate.config import load_settings

PROJECT = FIXTURES / "projects" / "precision_switch_launcher" / "before"


@pytest.fixture
def big_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The precision-switch project copied four times, and a pool worth starting for a few
    hundred bytes: every phase (launchers, launched scripts, the scan) has enough for one."""
    for index in range(4):
        shutil.copytree(PROJECT, tmp_path / f"copy{index}")
    monkeypatch.setattr(engine, "_POOL_MIN_BYTES", 256)
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
