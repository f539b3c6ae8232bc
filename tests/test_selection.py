"""One answer whatever paths are named: scan and rewrite find the project's root from the paths
(the nearest folder up with .git, a pyproject.toml or the configuration), build the launch graph
over all of it, and report on and edit the named files alone. A named file gets the findings a
scan of the whole root gives it; a rewrite of some files writes no other, and leaves a launcher
and its script unmigrated together where only one of them is named."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests import snapshots
from tests.clirunner import invoke
from tests.conftest import FIXTURES, PRECISION_IGNORE, ROOT
from xlamigrate.catalogue import Catalogue
from xlamigrate.config import Settings, find_root, load_settings
from xlamigrate.discover import discover
from xlamigrate.engine import rewrite_paths, scan_paths
from xlamigrate.request import RewriteRequest
from xlamigrate.results import Finding, RewriteReport

PROJECTS = sorted(p for p in (FIXTURES / "projects").iterdir() if (p / "before").is_dir())
MARKERS = (".git", "pyproject.toml")
SIGNALS = (b"BF16_RECIPE",)  # the default signal, and the fallback that contains it


def project_copy(case: Path, tmp_path: Path, marker: str) -> Path:
    """The case's `before` tree in a folder of its own with a root marker, the cwd's child
    (as a checkout of a repository is)."""
    work = tmp_path / "checkout"
    shutil.copytree(case / "before", work)
    marker_path = work / marker
    if marker == ".git":
        marker_path.mkdir()
    elif not marker_path.exists():
        marker_path.write_text('[project]\nname = "case"\nversion = "0"\n')
    return work


def files_of(work: Path) -> list[str]:
    """The files xlamigrate checks in the copy, relative to it."""
    found = discover([work], Settings(root=work)).files
    return sorted(Path(source.path).relative_to(work).as_posix() for source in found)


def scanned(paths: list[str], catalogue: Catalogue) -> dict[str, list[tuple[object, ...]]]:
    """Per file: each finding's code, position, message and fix applicability."""
    targets = [Path(path) for path in paths]
    settings = load_settings(targets, catalogue).with_overrides(ignore=PRECISION_IGNORE)
    report = scan_paths(targets, settings, catalogue, jobs=1)
    found: dict[str, list[tuple[object, ...]]] = {}
    for finding in report.findings:
        found.setdefault(finding.path, []).append(described(finding))
    return found


def described(finding: Finding) -> tuple[object, ...]:
    fix = finding.fix.applicability if finding.fix is not None else None
    return (finding.code, finding.cell, finding.span, finding.message, fix)


def rewritten(paths: list[str], catalogue: Catalogue, mode: str = "full-bf16") -> RewriteReport:
    """Rewrites the paths (relative to the cwd) as the CLI does: writes every changed file."""
    targets = [Path(path) for path in paths]
    settings = load_settings(targets, catalogue).with_overrides(ignore=PRECISION_IGNORE)
    report = rewrite_paths(targets, settings, catalogue, RewriteRequest(mode), jobs=1)
    for outcome in report.outcomes:
        if outcome.changed and outcome.rewritten is not None:
            Path(outcome.path).write_bytes(outcome.rewritten)
    return report


def tree(folder: Path) -> dict[str, bytes]:
    return {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not {".git", ".xlamigrate_cache"} & set(path.parts)
    }


def changed_files(work: Path) -> list[str]:
    """A pre-commit style list of changed files: every other file the project has."""
    return files_of(work)[::2]


@pytest.mark.parametrize("marker", MARKERS)
@pytest.mark.parametrize("case", PROJECTS, ids=lambda p: p.name)
def test_a_named_file_gets_the_findings_of_a_scan_of_the_whole_root(
    case: Path, marker: str, catalogue: Catalogue, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = project_copy(case, tmp_path, marker)
    monkeypatch.chdir(tmp_path)
    whole = scanned(["checkout"], catalogue)
    files = [f"checkout/{name}" for name in files_of(work)]
    for path in files:
        assert scanned([path], catalogue).get(path, []) == whole.get(path, []), path
    subset = [f"checkout/{name}" for name in changed_files(work)]
    found = scanned(subset, catalogue)
    assert set(found) <= set(subset)
    for path in subset:
        assert found.get(path, []) == whole.get(path, []), path


@pytest.mark.parametrize("case", PROJECTS, ids=lambda p: p.name)
def test_a_rewrite_of_some_files_writes_no_other_and_never_half_a_migration(
    case: Path, catalogue: Catalogue, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each file alone, and a pre-commit style subset: the files not named keep their bytes;
    and the signal a launcher sets goes into a file only where the rewrite of the whole root
    puts it into every file of that launch (no script reads a signal nobody sets)."""
    work = project_copy(case, tmp_path / "whole", ".git")
    monkeypatch.chdir(tmp_path / "whole")
    before = tree(work)
    rewritten(["checkout"], catalogue)
    migrated = tree(work)
    with_signal = {name for name, data in migrated.items() if _adds_signal(before, name, data)}
    names = files_of(work)
    for index, chosen in enumerate([[name] for name in names] + [changed_files(work)]):
        part = project_copy(case, tmp_path / f"part{index}", ".git")
        monkeypatch.chdir(tmp_path / f"part{index}")
        rewritten([f"checkout/{name}" for name in chosen], catalogue)
        after = tree(part)
        for name, data in before.items():
            if name not in chosen:
                assert after[name] == data, (chosen, name)
        signalled = {name for name, data in after.items() if _adds_signal(before, name, data)}
        assert signalled <= with_signal, chosen
        assert len(signalled) != 1 or signalled == with_signal, chosen  # a setter and a reader


def _adds_signal(before: dict[str, bytes], name: str, data: bytes) -> bool:
    return any(signal in data and signal not in before.get(name, b"") for signal in SIGNALS)


LAUNCHER_AND_SCRIPT = FIXTURES / "projects" / "precision_switch_launcher"


def test_rewriting_a_script_alone_leaves_its_recipe_with_the_command_that_migrates_it(
    catalogue: Catalogue, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """examples/train.py reads the flag that run_pretrain.sh and the Kubernetes Job set: named
    alone, its read stays (manual), saying which files migrate with it."""
    work = tmp_path / "examples"
    shutil.copytree(ROOT / "examples", work)
    monkeypatch.chdir(work)
    report = rewritten(["train.py"], catalogue)
    assert tree(work) == tree(ROOT / "examples")
    left = [f for outcome in report.outcomes for f in outcome.remaining]
    assert [(f.path, f.code) for f in left] == [("train.py", "XM201")]
    assert left[0].fix is not None and left[0].fix.applicability == "manual"
    command = "`xlamigrate rewrite k8s/pretrain-job.yaml run_pretrain.sh train.py`"
    assert command in left[0].message
    scan = scanned(["train.py"], catalogue)["train.py"]
    assert [fix for *_, fix in scan] == ["safe"]  # as a scan of the whole project says


def test_rewriting_the_launcher_alone_keeps_its_writes_and_names_the_script(
    catalogue: Catalogue, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = project_copy(LAUNCHER_AND_SCRIPT, tmp_path, ".git")
    monkeypatch.chdir(work)
    report = rewritten(["run_clm.sh"], catalogue)
    assert tree(work) == tree(LAUNCHER_AND_SCRIPT / "before")
    left = [f for outcome in report.outcomes for f in outcome.remaining]
    assert {(f.path, f.code) for f in left} == {("run_clm.sh", "XM101"), ("run_clm.sh", "XM102")}
    for finding in left:
        assert finding.fix is not None and finding.fix.applicability == "manual"
        assert "`xlamigrate rewrite run_clm.sh train_clm.py`" in finding.message


def test_naming_the_launcher_and_its_script_migrates_them_as_the_whole_project_does(
    catalogue: Catalogue, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = project_copy(LAUNCHER_AND_SCRIPT, tmp_path, ".git")
    monkeypatch.chdir(work)
    rewritten(["run_clm.sh", "train_clm.py", "requirements.txt"], catalogue)
    assert tree(work) == snapshots.project_tree(LAUNCHER_AND_SCRIPT, "full-bf16")


def test_the_dependency_list_is_edited_only_when_named(
    catalogue: Catalogue, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = project_copy(LAUNCHER_AND_SCRIPT, tmp_path, ".git")
    monkeypatch.chdir(work)
    targets = [Path("run_clm.sh"), Path("train_clm.py")]
    settings = load_settings(targets, catalogue).with_overrides(ignore=("XM5",))
    report = rewrite_paths(targets, settings, catalogue, RewriteRequest("full-bf16"), jobs=1)
    assert [o.path for o in report.outcomes if o.changed] == ["run_clm.sh", "train_clm.py"]
    left = [f for outcome in report.outcomes for f in outcome.remaining]
    assert [(f.path, f.code) for f in left] == [("train_clm.py", "XM409")]
    assert "requirements.txt, which declares the dependencies, is not among" in left[0].message


def test_the_cli_rewrites_the_whole_project_with_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = project_copy(LAUNCHER_AND_SCRIPT, tmp_path, ".git")
    monkeypatch.chdir(work)
    result = invoke("rewrite", "--project", "--ignore", "XM5", "--ignore", "XM409", "train_clm.py")
    assert result.exit_code == 0, result.output
    assert tree(work) == snapshots.project_tree(LAUNCHER_AND_SCRIPT, "full-bf16")


def test_the_root_is_the_nearest_folder_with_git_or_pyproject_else_the_paths_common_folder(
    tmp_path: Path,
) -> None:
    (tmp_path / "repo" / "src" / "deep").mkdir(parents=True)
    (tmp_path / "repo" / ".git").mkdir()
    (tmp_path / "repo" / "src" / "deep" / "train.py").write_text("")
    assert find_root([tmp_path / "repo" / "src" / "deep" / "train.py"]) == tmp_path / "repo"
    (tmp_path / "repo" / "src" / "pyproject.toml").write_text("")
    assert find_root([tmp_path / "repo" / "src" / "deep"]) == tmp_path / "repo" / "src"
    (tmp_path / "loose" / "a").mkdir(parents=True)
    (tmp_path / "loose" / "b").mkdir()
    found = find_root([tmp_path / "loose" / "a", tmp_path / "loose" / "b"])
    above = any((found / marker).exists() for marker in MARKERS)  # (a marker above the tmp dir)
    assert found == tmp_path / "loose" or above


@pytest.mark.parametrize("command", ["scan", "rewrite"])
def test_an_empty_selection_warns_as_ruff_does_and_exits_clean(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "empty").mkdir()
    (tmp_path / "train.py").write_text('import os\nos.environ["XLA_USE_BF16"] = "1"\n')
    monkeypatch.chdir(tmp_path)
    result = invoke(command, "empty")
    assert result.exit_code == 0, result.output
    assert "warning: No files to check under the given path(s)" in result.output
    assert "XM101" not in result.output


@pytest.mark.parametrize("case", PROJECTS, ids=lambda p: p.name)
def test_an_editor_s_buffer_gets_the_answer_its_file_gets(
    case: Path, catalogue: Catalogue, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `--stdin-filename NAME`: NAME judged in its project (the launch graph over the root), the
    # buffer's bytes for the file's: the findings and the rewrite `scan NAME`/`rewrite NAME` give
    work = project_copy(case, tmp_path, ".git")
    monkeypatch.chdir(tmp_path)
    options = ("--no-cache", "--ignore", ",".join(PRECISION_IGNORE))
    whole = scanned(["checkout"], catalogue)
    assert whole, "the case has findings"
    for path in sorted(whole):
        data = Path(path).read_bytes()
        on_disk = invoke("scan", "-f", "json", *options, path)
        buffer = invoke("scan", "-f", "json", *options, "--stdin-filename", path, stdin=data)
        assert (buffer.exit_code, buffer.stdout) == (on_disk.exit_code, on_disk.stdout), path
        piped = invoke("rewrite", *options, "--stdin-filename", path, stdin=data)
        assert Path(path).read_bytes() == data  # (the buffer's rewrite is printed, not written)
        invoke("rewrite", *options, path)
        assert piped.stdout == Path(path).read_text(encoding="utf-8"), path
        Path(path).write_bytes(data)
    assert tree(work) == tree(case / "before")
