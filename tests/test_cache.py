"""The cache of earlier results (xlamigrate/cache.py): a run that reuses it reports exactly what a
run without it does (cold, warm, and warm after one file changed), an unchanged file that names
no flag is not read again, and a damaged, foreign or concurrent cache is a miss, never an error."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES
from xlamigrate import cache as cache_module
from xlamigrate import engine
from xlamigrate.apitable import Version
from xlamigrate.cache import (
    CACHE_DIRECTORY,
    DISABLE_VARIABLE,
    MISS,
    RunCache,
    open_for_run,
    stable_digest,
)
from xlamigrate.catalogue import Catalogue
from xlamigrate.config import Settings, load_settings
from xlamigrate.discover import SourceFile
from xlamigrate.engine import rewrite_paths, scan_paths
from xlamigrate.report import renderer
from xlamigrate.request import RewriteRequest
from xlamigrate.results import FileError, FileResult, Finding, Fix, Span

PROJECTS = FIXTURES / "projects"
CASES = sorted(p for p in PROJECTS.iterdir() if (p / "before").is_dir())
# What one edit appends to a file of each kind: a new write of a flag (a launcher's changes
# what the project decides for the scripts it starts, so their contexts change too).
APPENDED = {
    ".py": '\nimport os\nos.environ["XLA_DOWNCAST_BF16"] = "1"\n',
    ".sh": "\nexport XLA_USE_BF16=0\n",
    ".yaml": "\n# XLA_USE_BF16 is set by the launcher\n",
    "Dockerfile": "\nENV XLA_USE_BF16=0\n",
}


def scanned_json(catalogue: Catalogue, use_cache: bool) -> str:
    """The scan's full JSON output for the tree in the cwd, as the CLI prints it."""
    settings = load_settings([Path(".")], catalogue)
    report = scan_paths([Path(".")], settings, catalogue, jobs=1, use_cache=use_cache)
    return renderer("json")(report, catalogue)


def rewritten(catalogue: Catalogue, use_cache: bool, mode: str) -> str:
    """Every plan of a rewrite of the tree in the cwd (the edits and what is left)."""
    settings = load_settings([Path(".")], catalogue)
    report = rewrite_paths(
        [Path(".")], settings, catalogue, RewriteRequest(mode), jobs=1, use_cache=use_cache
    )
    return repr(report)


def first_of_kind(root: Path, ending: str) -> Path | None:
    matches = sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith(ending))
    return matches[0] if matches else None


def append(path: Path, ending: str) -> None:
    with path.open("a", encoding="utf-8") as stream:
        stream.write(APPENDED[ending])


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_scan_json_is_the_same_cold_warm_and_after_one_file_changed(
    case: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue
) -> None:
    shutil.copytree(case / "before", tmp_path / "project")
    (tmp_path / "project" / ".git").mkdir()  # a repository's root: where the cache is kept
    monkeypatch.chdir(tmp_path / "project")
    uncached = scanned_json(catalogue, use_cache=False)
    assert not Path(CACHE_DIRECTORY).exists()
    assert scanned_json(catalogue, use_cache=True) == uncached  # cold
    assert Path(CACHE_DIRECTORY).is_dir()
    assert scanned_json(catalogue, use_cache=True) == uncached  # warm
    for ending in APPENDED:  # then warm after one file of each kind changed
        path = first_of_kind(Path("."), ending)
        if path is None:
            continue
        append(path, ending)
        changed = scanned_json(catalogue, use_cache=False)
        assert scanned_json(catalogue, use_cache=True) == changed, path
        assert scanned_json(catalogue, use_cache=True) == changed, path


@pytest.mark.parametrize("case", CASES[::4], ids=[c.name for c in CASES[::4]])
def test_rewrite_plans_are_the_same_with_the_cache(
    case: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue
) -> None:
    shutil.copytree(case / "before", tmp_path / "project")
    (tmp_path / "project" / ".git").mkdir()  # a repository's root: where the cache is kept
    monkeypatch.chdir(tmp_path / "project")
    for mode in ("full-bf16", "fp32-copy"):
        uncached = rewritten(catalogue, use_cache=False, mode=mode)
        assert rewritten(catalogue, use_cache=True, mode=mode) == uncached
        assert rewritten(catalogue, use_cache=True, mode=mode) == uncached
    for ending in (".py", ".sh"):
        path = first_of_kind(Path("."), ending)
        if path is not None:
            append(path, ending)
            uncached = rewritten(catalogue, use_cache=False, mode="fp32-copy")
            assert rewritten(catalogue, use_cache=True, mode="fp32-copy") == uncached


def clean_tree(root: Path, files: int = 20) -> None:
    (root / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (root / "train.py").write_text('import os\nos.environ["XLA_USE_BF16"] = "1"\n')
    for index in range(files):
        (root / f"module_{index}.py").write_text(f"VALUE = {index}\n")
    an_hour_ago = time.time_ns() - 3600 * 10**9  # (written before: not racily clean)
    for path in root.iterdir():
        os.utime(path, ns=(an_hour_ago, an_hour_ago))


def reads_recorder(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    read: list[str] = []
    real = engine.read_file

    def recording(source: SourceFile) -> bytes | FileError:
        read.append(source.display)
        return real(source)

    monkeypatch.setattr(engine, "read_file", recording)
    return read


def test_an_unchanged_file_that_names_no_flag_is_not_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue
) -> None:
    monkeypatch.chdir(tmp_path)
    clean_tree(tmp_path)
    read = reads_recorder(monkeypatch)
    first = scanned_json(catalogue, use_cache=True)
    assert "module_3.py" in read
    read.clear()
    assert scanned_json(catalogue, use_cache=True) == first
    assert read == ["train.py"]  # read for its findings (which the cache has for its bytes)
    read.clear()
    (tmp_path / "module_3.py").write_text("VALUE = 'changed'\n")
    assert scanned_json(catalogue, use_cache=True) == first
    assert sorted(read) == ["module_3.py", "train.py"]


def test_a_file_rewritten_within_its_mtime_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue
) -> None:
    """A file changed just before a run may change again within the same mtime tick (as git's
    racily clean entries): it is known by its hash, not its stat."""
    monkeypatch.chdir(tmp_path)
    clean_tree(tmp_path, files=1)
    module = tmp_path / "module_0.py"
    module.write_text('NAME = "XLA_USE_BF17"\n')
    before = os.stat(module)
    first = scanned_json(catalogue, use_cache=True)
    module.write_text('NAME = "XLA_USE_BF16"\n')  # the same size
    os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns))
    changed = scanned_json(catalogue, use_cache=False)
    assert changed != first
    assert scanned_json(catalogue, use_cache=True) == changed


def test_the_cache_folder_is_never_walked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue
) -> None:
    """As ruff's .ruff_cache: skipped whatever ignore files say (its own .gitignore gone)."""
    monkeypatch.chdir(tmp_path)
    clean_tree(tmp_path, files=1)
    expected = scanned_json(catalogue, use_cache=True)
    folder = tmp_path / CACHE_DIRECTORY
    (folder / ".gitignore").unlink()
    (folder / "stray.py").write_text('import os\nos.environ["XLA_USE_BF16"] = "1"\n')
    assert scanned_json(catalogue, use_cache=False) == expected


def test_cache_folder_is_tagged_and_ignored_by_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue
) -> None:
    monkeypatch.chdir(tmp_path)
    clean_tree(tmp_path, files=1)
    scanned_json(catalogue, use_cache=True)
    folder = tmp_path / CACHE_DIRECTORY
    assert (folder / ".gitignore").read_text().splitlines()[-1] == "*"
    assert (
        (folder / "CACHEDIR.TAG")
        .read_text()
        .startswith("Signature: 8a477f597d28d172789f06886806bc55")
    )
    git = shutil.which("git")
    if git is not None:
        subprocess.run([git, "init", "-q", "."], check=True)
        status = subprocess.run(
            [git, "status", "--porcelain", "--untracked-files=all"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        assert CACHE_DIRECTORY not in status


def run_cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "xlamigrate.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )
    assert result.returncode in (0, 1), result.stderr
    return result.stdout


@pytest.mark.parametrize("command", [["scan", "-f", "json"], ["rewrite", "--diff"]])
def test_no_cache_option_and_variable_leave_no_cache(tmp_path: Path, command: list[str]) -> None:
    clean_tree(tmp_path, files=2)
    environment = {DISABLE_VARIABLE: ""}
    plain = run_cli(*command, "--no-cache", ".", cwd=tmp_path, env=environment)
    assert not (tmp_path / CACHE_DIRECTORY).exists()
    assert run_cli(*command, ".", cwd=tmp_path, env={DISABLE_VARIABLE: "1"}) == plain
    assert not (tmp_path / CACHE_DIRECTORY).exists()
    assert run_cli(*command, ".", cwd=tmp_path, env=environment) == plain
    assert (tmp_path / CACHE_DIRECTORY).is_dir()
    assert run_cli(*command, ".", cwd=tmp_path, env=environment) == plain


def test_loose_files_outside_any_project_get_no_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text('import os\nos.environ["XLA_USE_BF16"] = "1"\n')
    scanned_json(catalogue, use_cache=True)
    assert list(tmp_path.iterdir()) == [tmp_path / "train.py"]


def cache_files(root: Path) -> list[Path]:
    """Every file of the run caches: each index, its result shards, its kept decision."""
    return sorted((root / CACHE_DIRECTORY).rglob("*.pickle"))


def index_file(root: Path) -> Path:
    """The one run cache's index (the files' states, the project's answers)."""
    (index,) = [path for path in cache_files(root) if "." not in path.stem]
    return index


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: b"",
        lambda data: data[: len(data) // 2],
        lambda data: b"not a pickle at all",
        lambda data: pickle.dumps(["a list", "not a dict"]),
        lambda data: data.replace(b"xlamigrate.results", b"xlamigrate.modex"),
    ],
    ids=["empty", "truncated", "garbage", "foreign", "renamed-class"],
)
def test_a_damaged_cache_is_a_miss(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    catalogue: Catalogue,
    damage: Callable[[bytes], bytes],
) -> None:
    monkeypatch.chdir(tmp_path)
    clean_tree(tmp_path, files=3)
    expected = scanned_json(catalogue, use_cache=True)
    for path in cache_files(tmp_path):
        path.write_bytes(damage(path.read_bytes()))
    assert scanned_json(catalogue, use_cache=True) == expected
    assert scanned_json(catalogue, use_cache=True) == expected


class _Exploit:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("touch pwned",))


def test_a_cache_naming_other_code_runs_none_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue
) -> None:
    """A cache is a file in the project (one could be committed): loading it must not call
    anything it names beyond xlamigrate's own value types."""
    monkeypatch.chdir(tmp_path)
    clean_tree(tmp_path, files=1)
    expected = scanned_json(catalogue, use_cache=True)
    shards = [path for path in cache_files(tmp_path) if ".results-" in path.name]
    assert shards
    for path in shards:
        entries = pickle.loads(path.read_bytes())
        entries["results"] = {key: (0, pickle.dumps(_Exploit())) for key in entries["results"]}
        path.write_bytes(pickle.dumps(entries))
    assert scanned_json(catalogue, use_cache=True) == expected
    for path in cache_files(tmp_path):
        path.write_bytes(pickle.dumps(_Exploit()))
    assert scanned_json(catalogue, use_cache=True) == expected
    assert not (tmp_path / "pwned").exists()


def test_concurrent_runs_leave_a_cache_that_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue
) -> None:
    monkeypatch.chdir(tmp_path)
    clean_tree(tmp_path, files=5)
    expected = scanned_json(catalogue, use_cache=False)
    settings = load_settings([Path(".")], catalogue)
    enabled = catalogue.select((), ())
    writers = []
    for index in range(8):
        run = open_for_run(settings, enabled)
        assert run is not None
        run.put(f"key-{index}", FileResult(f"file-{index}.py"))
        writers.append(threading.Thread(target=run.save))
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    path = index_file(tmp_path)
    assert not list(path.parent.glob("*.tmp"))
    assert scanned_json(catalogue, use_cache=True) == expected


def test_the_key_follows_settings_rules_and_the_tool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".git").mkdir()
    settings = Settings(root=tmp_path)
    enabled = catalogue.select((), ())

    def cache_path(settings: Settings, enabled: frozenset[str]) -> Path:
        run = open_for_run(settings, enabled)
        assert run is not None
        return run.path

    first = cache_path(settings, enabled)
    assert first.parent == tmp_path / CACHE_DIRECTORY / cache_module.__version__
    assert cache_path(settings, enabled) == first
    assert cache_path(replace(settings, mode="autocast"), enabled) != first
    assert cache_path(replace(settings, signal="PRECISION"), enabled) != first
    assert cache_path(replace(settings, target="tpu"), enabled) != first
    assert cache_path(settings, catalogue.select((), ("XM5",))) != first
    (tmp_path / "elsewhere" / ".git").mkdir(parents=True)
    assert cache_path(replace(settings, root=tmp_path / "elsewhere"), enabled).name == first.name
    monkeypatch.setattr(cache_module, "__version__", "99.0")
    assert cache_path(settings, enabled) != first


def test_a_result_is_keyed_by_the_file_context_and_the_task(tmp_path: Path) -> None:
    run = RunCache(tmp_path / "cache.pickle", tmp_path, {})
    key = run.key("scan", "a.py", "python", b"data", {"mode": "full-bf16"})
    assert key is not None
    assert run.key("scan", "a.py", "python", b"data", {"mode": "autocast"}) != key
    assert run.key("plan", "a.py", "python", b"data", {"mode": "full-bf16"}) != key
    assert run.key("scan", "a.py", "python", b"dat4", {"mode": "full-bf16"}) != key
    assert run.key("scan", "a.py", "python", b"data", object()) is None  # not keyable: not kept
    assert run.get(key) is MISS


def test_a_file_whose_stat_is_unchanged_is_not_hashed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (as ruff: size and mtime, trusted where the file had not just changed when remembered)
    old, new = tmp_path / "old.py", tmp_path / "new.py"
    for path in (old, new):
        path.write_bytes(b"XLA_USE_BF16")
    past = time.time_ns() - 10 * 10**9
    os.utime(old, ns=(past, past))
    first = RunCache(tmp_path / "c.pickle", tmp_path, {})
    for path in (old, new):
        assert not first.known_unflagged(path, "python")
        assert first.flagged(path, "python", path.read_bytes(), lambda: True)
    first.save()
    hashed: list[bytes] = []
    digest = cache_module.content_digest
    monkeypatch.setattr(cache_module, "content_digest", lambda d: hashed.append(d) or digest(d))
    again = RunCache.open_file(tmp_path / "c.pickle", tmp_path)
    data = {path: path.read_bytes() for path in (old, new)}
    for path in (old, new):
        assert not again.known_unflagged(path, "python")  # (flagged: read, not skipped)
        assert again.flagged(path, "python", data[path], lambda: pytest.fail("decided again"))
    assert len(hashed) == 1  # new.py, racy when remembered: compared by its bytes
    keys = [again.key("scan", str(path), "python", data[path], None) for path in (old, new)]
    assert len(hashed) == 1  # (the keys reuse the digests the prefilter's step knew)
    assert keys[0] == RunCache(tmp_path / "d.pickle", tmp_path, {}).key(
        "scan", str(old), "python", data[old], None
    )


def test_stable_digest_does_not_depend_on_hash_randomisation() -> None:
    code = (
        "from xlamigrate.cache import stable_digest;"
        "print(stable_digest(frozenset({'a', 'b', 'c'}), {'x': {1, 2}, 'y': ('z',)}))"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(digests) == 1
    assert stable_digest((1,)) != stable_digest([1, ()])
    assert stable_digest("1") != stable_digest(1)


def test_results_round_trip_through_the_cache(tmp_path: Path) -> None:
    finding = Finding(
        "XM101", "a.py", Span(1, 1, 1, 5), "warning", "m", fix=Fix("safe"), access="write"
    )
    result = FileResult("a.py", (finding,), (FileError("a.py", 2, "bad"),))
    run = RunCache(tmp_path / "c.pickle", tmp_path, {})
    run.put("k", result)
    run.save()
    again = RunCache.open_file(tmp_path / "c.pickle", tmp_path)
    assert again.get("k") == result


def test_the_cache_is_bounded() -> None:
    results = {f"k{i}": (i, b"x" * 100) for i in range(10)}
    kept = cache_module._bounded(results, budget=450)
    assert sorted(kept) == ["k6", "k7", "k8", "k9"]  # the most recently used


# The pre-commit run: files named from the root, the project walked and modelled whole. What a
# run remembers beyond each file's results (the root's walk, which names each file holds, what
# each file imports) gives the output a run without the cache gives.


def scanned_named(catalogue: Catalogue, use_cache: bool, *names: str) -> str:
    """The JSON a scan of these files prints, run from the project's root (as pre-commit)."""
    paths = [Path(name) for name in names]
    settings = load_settings(paths, catalogue)
    report = scan_paths(paths, settings, catalogue, jobs=1, use_cache=use_cache)
    return renderer("json")(report, catalogue)


def named_files(root: Path) -> list[str]:
    """A Python file and a launcher of the tree (what a commit names, one at a time)."""
    found = [first_of_kind(root, ".py"), first_of_kind(root, ".sh"), first_of_kind(root, ".yaml")]
    return [str(path.relative_to(root)) for path in found if path is not None]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_named_file_scans_the_same_cold_warm_and_after_other_files_changed(
    case: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue
) -> None:
    shutil.copytree(case / "before", tmp_path / "project")
    (tmp_path / "project" / ".git").mkdir()
    monkeypatch.chdir(tmp_path / "project")
    for name in named_files(Path(".")):
        uncached = scanned_named(catalogue, False, name)
        assert scanned_named(catalogue, True, name) == uncached, name  # cold
        assert scanned_named(catalogue, True, name) == uncached, name  # warm
    for ending in APPENDED:  # a launcher, a script, a config changed: the graph may change
        path = first_of_kind(Path("."), ending)
        if path is None:
            continue
        append(path, ending)
        for name in named_files(Path(".")):
            changed = scanned_named(catalogue, False, name)
            assert scanned_named(catalogue, True, name) == changed, (path, name)
            assert scanned_named(catalogue, True, name) == changed, (path, name)


def launched_tree(root: Path) -> None:
    """A launcher in scripts/ that starts train.py with the flag, train.py importing a module
    (in a repository: no .gitignore above it applies)."""
    clean_tree(root, files=3)
    (root / ".git").mkdir()
    script = (PROJECTS / "case_launcher" / "before" / "train_clm.py").read_text()
    (root / "train.py").write_text(
        script.replace("import argparse\n", "import argparse\nimport module_0\n")
    )
    (root / "scripts").mkdir()
    (root / "scripts" / "run.sh").write_text(
        'export XLA_USE_BF16=1\ncd "$(dirname "$0")/.."\npython3 train.py\n'
    )
    an_hour_ago = time.time_ns() - 3600 * 10**9
    for path in (root, root / "scripts", root / "scripts" / "run.sh", root / "train.py"):
        os.utime(path, ns=(an_hour_ago, an_hour_ago))


def walks_recorder(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The folders the walks of the run list (a kept walk lists none)."""
    from xlamigrate import walkcache

    listed: list[str] = []
    real = walkcache.discover

    def recording(paths: Any, settings: Any, witness: Any = None, found: Any = None) -> Any:
        listed.extend(str(path) for path in paths)
        return real(paths, settings, witness, found)

    monkeypatch.setattr(walkcache, "discover", recording)
    return listed


def test_a_kept_walk_is_reused_until_a_folder_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue
) -> None:
    monkeypatch.chdir(tmp_path)
    launched_tree(tmp_path)
    walked = walks_recorder(monkeypatch)
    first = scanned_named(catalogue, True, "train.py")
    assert walked and scanned_named(catalogue, False, "train.py") == first
    walked.clear()
    assert scanned_named(catalogue, True, "train.py") == first
    assert walked == []  # every folder as it was: the root is not walked again
    (tmp_path / "module_1.py").write_text("VALUE = 'edited'\n")  # a file's bytes: the same walk
    assert scanned_named(catalogue, True, "train.py") == first
    assert walked == []
    (tmp_path / "scripts" / "run.sh").unlink()  # the launcher gone: train.py is on its own
    alone = scanned_named(catalogue, False, "train.py")
    walked.clear()
    assert alone != first
    assert scanned_named(catalogue, True, "train.py") == alone
    assert walked == [str(tmp_path)]


def test_a_changed_gitignore_walks_again_though_no_folder_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue
) -> None:
    monkeypatch.chdir(tmp_path)
    launched_tree(tmp_path)
    ignore = tmp_path / ".gitignore"
    ignore.write_text("nothing/\n")
    an_hour_ago = time.time_ns() - 3600 * 10**9
    for path in (ignore, tmp_path):
        os.utime(path, ns=(an_hour_ago, an_hour_ago))
    first = scanned_named(catalogue, True, "train.py")
    ignore.write_text("scripts/\n")  # (an edit in place: the root's mtime stays)
    os.utime(tmp_path, ns=(an_hour_ago, an_hour_ago))
    ignored = scanned_named(catalogue, False, "train.py")
    assert ignored != first  # the launcher is ignored now
    assert scanned_named(catalogue, True, "train.py") == ignored


def test_a_folder_changed_within_its_mtime_is_compared_by_its_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue
) -> None:
    """A folder changed just before a walk may change again within the same mtime tick: the
    walk keeps its listing, and a listing that differs is a miss whatever the mtime says."""
    monkeypatch.chdir(tmp_path)
    launched_tree(tmp_path)
    scripts = tmp_path / "scripts"
    (scripts / "notes.txt").write_text("a change just before the run\n")  # (racy now)
    before = os.stat(scripts)
    first = scanned_named(catalogue, True, "train.py")
    (scripts / "run.sh").unlink()
    os.utime(scripts, ns=(before.st_atime_ns, before.st_mtime_ns))  # the same tick
    alone = scanned_named(catalogue, False, "train.py")
    assert alone != first
    assert scanned_named(catalogue, True, "train.py") == alone


def test_a_damaged_walk_is_a_miss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue
) -> None:
    monkeypatch.chdir(tmp_path)
    launched_tree(tmp_path)
    expected = scanned_named(catalogue, True, "train.py")
    walks = sorted((tmp_path / CACHE_DIRECTORY).rglob("*.walk"))
    assert walks
    for damage in (b"", b"garbage", pickle.dumps({"files": [1], "states": {}, "racy": {}})):
        for path in walks:
            path.write_bytes(damage)
        assert scanned_named(catalogue, True, "train.py") == expected


def test_unchanged_files_are_not_read_for_the_names_they_hold_or_their_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue
) -> None:
    """Which launched scripts a file names, and what a script imports, are kept for its
    bytes: a warm run reads only the files that may have findings."""
    monkeypatch.chdir(tmp_path)
    launched_tree(tmp_path)
    read = reads_recorder(monkeypatch)
    first = scanned_named(catalogue, True, "train.py")
    assert "module_2.py" in read  # (read for the names it holds)
    read.clear()
    assert scanned_named(catalogue, True, "train.py") == first
    assert sorted(read) == ["train.py"]  # (the project's decision is kept: no launcher read)
    read.clear()
    (tmp_path / "module_0.py").write_text('import os\nos.environ.get("XLA_USE_BF16")\n')
    changed = scanned_named(catalogue, False, "train.py")
    assert scanned_named(catalogue, True, "train.py") == changed
    (tmp_path / "module_2.py").write_text("# starts train.py\n")  # names the launched script
    changed = scanned_named(catalogue, False, "train.py")
    assert scanned_named(catalogue, True, "train.py") == changed


def test_the_project_questions_are_asked_alike_in_every_process(tmp_path: Path) -> None:
    """Two runs with other hash seeds ask the same question of each file (the words in one
    order), so the second finds the first's answers instead of adding its own."""
    launched_tree(tmp_path)
    (tmp_path / "scripts" / "eval.sh").write_text(
        'export XLA_USE_BF16=1\ncd "$(dirname "$0")/.."\npython3 tests.py\n'
    )
    shutil.copy(tmp_path / "train.py", tmp_path / "tests.py")
    an_hour_ago = time.time_ns() - 3600 * 10**9  # (no file is racily clean: none rehashed)
    for path in (tmp_path / "tests.py", tmp_path / "scripts" / "eval.sh", tmp_path / "scripts"):
        os.utime(path, ns=(an_hour_ago, an_hour_ago))
    run_cli("scan", "-f", "json", "train.py", cwd=tmp_path, env={"PYTHONHASHSEED": "0"})
    cache_file = index_file(tmp_path)
    written = os.stat(cache_file)
    for seed in ("1", "2", "3", "4"):  # (two names of one length: in either order by chance)
        for decision in (tmp_path / CACHE_DIRECTORY).rglob("*.decision.pickle"):
            decision.unlink()  # (the project decided again: its questions asked again)
        run_cli("scan", "-f", "json", "train.py", cwd=tmp_path, env={"PYTHONHASHSEED": seed})
    assert os.stat(cache_file).st_ino == written.st_ino  # nothing new to keep: not rewritten


def test_scan_of_the_root_keeps_its_walk_and_sees_a_new_launcher(tmp_path: Path) -> None:
    """`scan .` from the root is the project's walk: kept, and walked again once a folder
    gains a file (a launcher that starts the script now)."""
    launched_tree(tmp_path)
    (tmp_path / "scripts" / "run.sh").unlink()
    an_hour_ago = time.time_ns() - 3600 * 10**9
    os.utime(tmp_path / "scripts", ns=(an_hour_ago, an_hour_ago))
    plain = run_cli("scan", "-f", "json", "--no-cache", ".", cwd=tmp_path)
    assert run_cli("scan", "-f", "json", ".", cwd=tmp_path) == plain
    assert sorted((tmp_path / CACHE_DIRECTORY).rglob("*.walk"))
    assert run_cli("scan", "-f", "json", ".", cwd=tmp_path) == plain
    launcher = (PROJECTS / "case_launcher" / "before" / "pretrain.sh").read_text()
    (tmp_path / "scripts" / "run.sh").write_text(
        launcher.replace("python3 train_clm.py", 'cd "$(dirname "$0")/.."\npython3 train.py')
    )
    launched = run_cli("scan", "-f", "json", "--no-cache", ".", cwd=tmp_path)
    assert launched != plain
    assert run_cli("scan", "-f", "json", ".", cwd=tmp_path) == launched


def test_pin_files_are_read_once_for_their_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (a warm run neither parses requirements again nor imports `packaging` to)
    from xlamigrate.project import frameworkpins, pins

    (tmp_path / "requirements.txt").write_text("torch==2.1.0\nlightning==2.4.0\n")
    script = tmp_path / "jobs" / "train.py"
    script.parent.mkdir()
    plain = pins.Pins(tmp_path)
    expected = (plain.floor(script), plain.frameworks(script))
    assert expected[0] == Version.parse("2.1") and dict(expected[1])["lightning"].bounded
    first = RunCache(tmp_path / "c.pickle", tmp_path, {})
    remembered = pins.Pins(tmp_path, remember=first.answer)
    assert (remembered.floor(script), remembered.frameworks(script)) == expected
    first.save()
    again = RunCache.open_file(tmp_path / "c.pickle", tmp_path)
    monkeypatch.setattr(pins, "_pinned", lambda data: pytest.fail("parsed again"))
    monkeypatch.setattr(frameworkpins, "requirement_releases", lambda *a: pytest.fail("again"))
    warm = pins.Pins(tmp_path, remember=again.answer)
    assert (warm.floor(script), warm.frameworks(script)) == expected
    (tmp_path / "requirements.txt").write_text("torch==2.2.0\n")  # other bytes: read anew
    with pytest.raises(pytest.fail.Exception):
        pins.Pins(tmp_path, remember=again.answer).floor(script)
