"""The project's decision kept between runs (xlamigrate/decidedcache.py): reused while every
file deciding it asked answers alike (a comment added to the launched script, to its launcher,
to any file), decided again where one answers otherwise; and whatever file of a project changes,
however, a run with the cache reports what a run without it does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

from tests.test_cache import PROJECTS, launched_tree, scanned_json, scanned_named
from xlamigrate import decidedcache, engine
from xlamigrate.cache import CACHE_DIRECTORY
from xlamigrate.catalogue import Catalogue

CASES = sorted(p for p in PROJECTS.iterdir() if (p / "before").is_dir())
_COMMENTED = (".py", ".sh", ".yaml", ".yml", ".txt", ".toml", ".cfg", ".ini", ".env", "Dockerfile")


def comment(path: Path, text: str) -> None:
    """Appends a comment line to a file whose kind has `#` comments (others: left alone)."""
    if path.name.endswith(_COMMENTED):
        with path.open("a", encoding="utf-8") as stream:
            stream.write(f"\n# {text}\n")


def edits(root: Path) -> list[tuple[str, Path]]:
    """Every file of the tree, each edited three ways in turn: a comment that names nothing,
    a comment naming every Python file of the tree (another file now names a launched script),
    and the file emptied (a launcher without its writes, a script without its training)."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and CACHE_DIRECTORY not in p.parts)
    return [(how, path) for path in files for how in ("comment", "names", "emptied")]


def edit(how: str, path: Path, root: Path) -> None:
    if how == "comment":
        comment(path, "edited, nothing named")
    elif how == "names":
        comment(path, " ".join(sorted(p.name for p in root.rglob("*.py"))))
    else:
        path.write_bytes(b"")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_whatever_file_changes_a_warm_scan_reports_what_an_uncached_one_does(
    case: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue
) -> None:
    root = tmp_path / "project"
    shutil.copytree(case / "before", root)
    (root / ".git").mkdir()
    monkeypatch.chdir(root)
    assert scanned_json(catalogue, use_cache=True) == scanned_json(catalogue, use_cache=False)
    for how, path in edits(Path(".")):
        edit(how, path, Path("."))
        expected = scanned_json(catalogue, use_cache=False)
        assert scanned_json(catalogue, use_cache=True) == expected, (how, str(path))


def deciding(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the runs that decide the project (not reusing a kept decision)."""
    decided: list[int] = []
    real = engine._Layout.of

    def counted(*args: object, **kwargs: object) -> engine._Layout:
        decided.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(engine._Layout, "of", counted)
    return decided


def decides_again(catalogue: Catalogue, decided: list[int]) -> bool:
    """Scans train.py without the cache, then with it: the same JSON (asserted), and whether
    the run with the cache decided the project again."""
    expected = scanned_named(catalogue, False, "train.py")
    decided.clear()
    assert scanned_named(catalogue, True, "train.py") == expected
    return bool(decided)


def test_a_comment_in_the_launched_script_or_its_launcher_keeps_the_decision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue
) -> None:
    monkeypatch.chdir(tmp_path)
    launched_tree(tmp_path)
    decided = deciding(monkeypatch)
    first = scanned_named(catalogue, True, "train.py")
    assert len(decided) == 1
    for name in ("train.py", "scripts/run.sh", "module_0.py", "module_2.py"):
        comment(tmp_path / name, "a comment")
        assert not decides_again(catalogue, decided), name  # (its answers the same)
    assert scanned_named(catalogue, True, "train.py") == first


def test_a_change_that_answers_otherwise_decides_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue
) -> None:
    monkeypatch.chdir(tmp_path)
    launched_tree(tmp_path)
    decided = deciding(monkeypatch)
    scanned_named(catalogue, True, "train.py")
    changes = {
        "module_2.py": "# starts train.py\n",  # another file names the launched script
        "scripts/run.sh": 'export XLA_USE_BF16=1\ncd "$(dirname "$0")/.."\npython3 module_1.py\n',
        "train.py": "print('no training here')\n",  # the launched script: planned again
    }
    for name, text in changes.items():
        (tmp_path / name).write_text(text)
        assert decides_again(catalogue, decided), name
    (tmp_path / "new.sh").write_text("export XLA_USE_BF16=1\npython3 train.py\n")  # a new file
    assert decides_again(catalogue, decided)


def test_a_damaged_decision_is_decided_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue
) -> None:
    monkeypatch.chdir(tmp_path)
    launched_tree(tmp_path)
    expected = scanned_named(catalogue, True, "train.py")
    (kept,) = (tmp_path / CACHE_DIRECTORY).rglob("*.decision.pickle")
    for damage in (b"", b"garbage", kept.read_bytes()[:100]):
        kept.write_bytes(damage)
        assert scanned_named(catalogue, True, "train.py") == expected


def test_what_the_resolver_asked_of_the_disk_is_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue
) -> None:
    """A `.dockerignore` is no file xlamigrate checks, but whether the image holds the
    launched script depends on it: changed, the project is decided again."""
    from tests.test_launch_resolution import JOB, TRAIN

    monkeypatch.chdir(tmp_path)
    (tmp_path / ".git").mkdir()
    files = {
        "k8s/job.yaml": JOB.format(working_dir="", script="/app/launch/train.py"),
        "Dockerfile": "FROM python:3.11\nCOPY . /app/\n",
        ".dockerignore": "# nothing left out\n",
        "launch/train.py": TRAIN,
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    decided = deciding(monkeypatch)
    resolved = scanned_named(catalogue, True, "k8s/job.yaml")
    (tmp_path / ".dockerignore").write_text("launch/\n")
    left_out = scanned_named(catalogue, False, "k8s/job.yaml")
    assert left_out != resolved
    decided.clear()
    assert scanned_named(catalogue, True, "k8s/job.yaml") == left_out
    assert decided


def test_a_reused_decision_is_amended_not_written_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue
) -> None:
    """The files found changed alike go to a small file beside the decision (a warm run
    writes that, not the whole decision), until there are too many of them."""
    monkeypatch.chdir(tmp_path)
    launched_tree(tmp_path)
    decided = deciding(monkeypatch)
    scanned_named(catalogue, True, "train.py")
    (kept,) = (tmp_path / CACHE_DIRECTORY).rglob("*.decision.pickle")
    written = os.stat(kept)
    for edit_number in range(3):
        comment(tmp_path / "module_2.py", f"edit {edit_number}")
        assert not decides_again(catalogue, decided)
    assert os.stat(kept).st_ino == written.st_ino  # (amended, not written again)
    assert list((tmp_path / CACHE_DIRECTORY).rglob("*.decision-changes.pickle"))
    monkeypatch.setattr(decidedcache, "_MAX_CHANGES", 0)
    comment(tmp_path / "module_2.py", "one more")
    assert not decides_again(catalogue, decided)
    assert os.stat(kept).st_ino != written.st_ino  # (the changes folded into the decision)
    assert not list((tmp_path / CACHE_DIRECTORY).rglob("*.decision-changes.pickle"))


# What builds the project (the resolver, the launch tables, the decision) and parses launchers
# or rewrites: none of it is needed where the decision is reused and the file changed is
# neither a launcher nor a launched script.
_BUILDING = (
    "xlamigrate.project.build",
    "xlamigrate.project.decide",
    "xlamigrate.project.resolve",
    "xlamigrate.kinds.launch",
    "xlamigrate.kinds.shell",
    "xlamigrate.kinds.python.planner",
    "libcst",
    "tree_sitter",
    "ruamel",
    "yaml",
    "importlib.resources",  # (with tempfile, shutil, lzma: importlib.abc at run time)
    "tempfile",
    "hashlib",  # (the cache hashes with blake2b alone: hashlib loads OpenSSL)
)
_PROBE = """
import contextlib, io, json, sys
from xlamigrate.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
print(json.dumps({"out": out.getvalue(), "modules": sorted(sys.modules)}))
"""


def test_a_warm_scan_of_an_edited_module_imports_nothing_that_builds_the_project(
    tmp_path: Path,
) -> None:
    """A pre-commit run that reuses the decision pays for the file it scans, not for importing
    what would build the project again (the warm run's start-up is most of its time)."""
    launched_tree(tmp_path)
    edited = tmp_path / "module_2.py"
    edited.write_text('import os\nCAST = os.environ.get("XLA_DOWNCAST_BF16")\n')
    # `-S` with this interpreter's path: as a hook's own venv runs it, without the start-up
    # hooks (.pth files) of the environment the tests run in, which import modules of their own
    command = [sys.executable, "-S", "-c", _PROBE, "scan", "--format", "json", "module_2.py"]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    run = partial(subprocess.run, cwd=tmp_path, env=environment, capture_output=True, check=True)
    run(command)  # (cold: decides)
    comment(edited, "edited")
    result = run(command, text=True)
    probe = json.loads(result.stdout)
    assert json.loads(probe["out"])["findings"][0]["variable"] == "XLA_DOWNCAST_BF16"
    imported = {m for m in probe["modules"] if m.startswith(_BUILDING)}
    assert not imported, result.stderr
