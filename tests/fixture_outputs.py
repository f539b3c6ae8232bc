"""Every output the engine gives for the fixtures, one per file and command: what the tests of
finding texts check (tests/test_finding_texts.py). Scan of the fixture cases in every mode and
their rewrite in the modes they have snapshots of, the torch-xla API fixtures, and the project,
framework and NxDT trees."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from tests import snapshots
from tests.conftest import FIXTURES, RECIPE_APPLIED, fixture_kind
from xlamigrate.catalogue import Catalogue
from xlamigrate.config import load_settings
from xlamigrate.engine import rewrite_paths, rewrite_source, scan_paths, scan_source
from xlamigrate.kinds.python.rewrite import MODES
from xlamigrate.request import FileContext, RewriteRequest
from xlamigrate.results import Finding

TREES = ("projects", "frameworks", "nxdt")  # folders of small projects (`before/` where per mode)


@dataclass(frozen=True)
class Output:
    """The findings one command printed for one file."""

    command: str  # "scan" or "rewrite --mode M"
    path: str  # the fixture, relative to tests/fixtures/
    findings: tuple[Finding, ...]


def fixture_outputs(catalogue: Catalogue) -> list[Output]:
    every = catalogue.select()
    outputs: list[Output] = []
    for folder in ("cases", "xla-apis"):
        for case in sorted((FIXTURES / folder).iterdir()):
            kind = fixture_kind(case)
            if kind is None or ".out." in case.name:
                continue
            name, data = f"{folder}/{case.name}", case.read_bytes()
            for mode in MODES:
                found = scan_source(name, data, kind, catalogue, every, FileContext(mode=mode))
                outputs.append(Output(f"scan (mode {mode})", name, found.findings))
            rewritten = [
                mode for mode in MODES if folder == "xla-apis" or _has_snapshot(case, mode)
            ]
            for mode in rewritten:
                done = rewrite_source(
                    name, data, kind, catalogue, every, mode, context=RECIPE_APPLIED
                )
                outputs.append(Output(f"rewrite --mode {mode}", name, done.fixed + done.remaining))
    for tree in TREES:
        for case in sorted(path for path in (FIXTURES / tree).iterdir() if path.is_dir()):
            root = case / "before" if (case / "before").is_dir() else case
            outputs += _tree_outputs(root, f"{tree}/{case.name}", catalogue)
    return outputs


def _has_snapshot(case: Path, mode: str) -> bool:
    return snapshots.snapshot_path(snapshots.case_name(case), mode).exists()


def _tree_outputs(root: Path, name: str, catalogue: Catalogue) -> Iterator[Output]:
    with _inside(root):
        settings = load_settings([Path(".")], catalogue)
        for mode in MODES:
            moded = replace(settings, mode=mode)
            scanned = scan_paths([Path(".")], moded, catalogue, jobs=1)
            for path in sorted({f.path for f in scanned.findings}):
                found = tuple(f for f in scanned.findings if f.path == path)
                yield Output(f"scan (mode {mode})", f"{name}/{path}", found)
            report = rewrite_paths([Path(".")], settings, catalogue, RewriteRequest(mode), jobs=1)
            for outcome in report.outcomes:
                found = outcome.fixed + outcome.remaining
                yield Output(f"rewrite --mode {mode}", f"{name}/{outcome.path}", found)


@contextmanager
def _inside(folder: Path) -> Iterator[None]:
    """In a copy of `folder`, outside this repository (whose root would be the project's)."""
    before = Path.cwd()
    with tempfile.TemporaryDirectory() as work:
        copy = Path(work) / folder.name
        shutil.copytree(folder, copy)
        os.chdir(copy)
        try:
            yield
        finally:
            os.chdir(before)
