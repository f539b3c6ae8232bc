"""The runtime that migrated scripts import installs for a training image with torch as its only
dependency: its own distribution (runtime/pyproject.toml), nothing of the CLI's. A migrated
project runs in an environment that holds torch, torch-xla and that distribution alone, and, with
`--runtime vendor`, with no runtime installed at all.

The environment is a fresh venv (no pip, no site-packages of ours) that sees the installed
distributions torch-xla needs, their dependencies as their metadata lists them, and nothing
else: what `pip install torch-xla` gives a training image, without downloading 4 GB again."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import ROOT, needs_torch_xla_platform

CLI_MODULES = ("xlamigrate", "libcst", "rich", "pathspec", "tree_sitter")


@pytest.fixture(scope="module")
def runtime_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("runtime-wheel")
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(folder)],
        cwd=ROOT / "runtime", check=True, capture_output=True,
    )  # fmt: skip
    (wheel,) = folder.glob("xlamigrate_runtime-*.whl")
    return wheel


def test_the_runtime_distribution_requires_torch_alone(runtime_wheel: Path) -> None:
    archive = zipfile.ZipFile(runtime_wheel)
    (meta,) = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
    headers = Parser().parsestr(archive.read(meta).decode())
    assert headers["Name"] == "xlamigrate-runtime"
    assert headers.get_all("Requires-Dist") == ["torch>=2.1"]
    cli = tomllib_load(ROOT / "pyproject.toml")["project"]["dependencies"]
    cli_names = {canonicalize_name(Requirement(item).name) for item in cli}
    assert "torch" not in cli_names  # (so "torch alone" shares nothing with the CLI's list)


def test_the_runtime_imports_nothing_but_the_standard_library_torch_and_itself(
    runtime_wheel: Path,
) -> None:
    archive = zipfile.ZipFile(runtime_wheel)
    modules = [name for name in archive.namelist() if name.endswith(".py")]
    assert "xlamigrate_runtime/neuronflags.py" in modules  # shared with the CLI, shipped whole
    assert "xlamigrate_runtime/optimizer_facts.py" in modules
    assert "xlamigrate_runtime/native/stochastic_rounding.c" in archive.namelist()
    imported = set()
    for name in modules:
        for node in ast.walk(ast.parse(archive.read(name))):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    allowed = {*sys.stdlib_module_names, "torch", "torch_xla", "xlamigrate_runtime"}
    assert imported and imported <= allowed, imported - allowed
    # The files the CLI links to are the very bytes the runtime ships.
    for shared in ("neuronflags.py", "optimizer_facts.py"):
        cli_copy = (ROOT / "xlamigrate" / shared).read_bytes()
        assert archive.read(f"xlamigrate_runtime/{shared}") == cli_copy


def tomllib_load(path: Path) -> dict[str, object]:
    import tomllib

    return tomllib.loads(path.read_text())


def _closure(*names: str) -> list[metadata.Distribution]:
    """The installed distributions `names` need, following their requirements' markers."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in found:
            continue
        found[name] = distribution = metadata.distribution(name)
        for text in distribution.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return list(found.values())


def _environment(folder: Path) -> Path:
    """A venv that sees the installed closure of torch and torch-xla, nothing else; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    shared = folder / "torch-xla-closure"
    shared.mkdir()
    for distribution in _closure("torch", "torch-xla"):  # (torch-xla does not list torch)
        base = Path(str(distribution.locate_file("")))
        for top in {Path(str(file)).parts[0] for file in distribution.files or []}:
            if top in ("..", "__pycache__", "bin") or top.endswith(".pth"):
                continue
            link = shared / top
            if not link.exists() and (base / top).exists():
                link.symlink_to(base / top)
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    Path(purelib, "torch-xla-closure.pth").write_text(f"{shared}\n")
    return python


def _migrated(tmp: Path, name: str, *options: str) -> Path:
    project = tmp / name
    shutil.copytree(ROOT / "examples", project)
    result = subprocess.run(
        [sys.executable, "-m", "xlamigrate.cli", "rewrite", "--mode", "fp32-copy", *options, "."],
        cwd=project, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return project


def _train(python: Path, project: Path) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", str(project)),
        "PJRT_DEVICE": "CPU",
        "BF16_RECIPE": "1",  # what run_pretrain.sh BF16 now sets in place of XLA_USE_BF16
        "XLAMIGRATE_CACHE_DIR": str(project / ".cache"),
    }
    return subprocess.run(
        [str(python), "-E", "-s", "train.py", "--steps", "3"],  # no PYTHON*, no user site
        cwd=project, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@needs_torch_xla_platform
def test_a_migrated_example_trains_with_torch_xla_and_the_runtime_alone(
    runtime_wheel: Path, tmp_path: Path
) -> None:
    python = _environment(tmp_path / "venv")
    probe = "import importlib.util as u, json, sys; print(json.dumps({m: bool(u.find_spec(m)) for m in sys.argv[1:]}))"  # noqa: E501
    found = subprocess.run(
        [str(python), "-I", "-c", probe, "torch", "torch_xla", "xlamigrate_runtime", *CLI_MODULES],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    visible = json.loads(found.stdout)
    assert visible.pop("torch") and visible.pop("torch_xla")
    assert not any(visible.values()), visible  # no runtime yet, none of the CLI's packages

    # --runtime vendor: the package is in the project, nothing to install (the script's own
    # folder comes first on sys.path, as with `python train.py` and torchrun).
    vendored = _migrated(tmp_path, "vendored", "--runtime", "vendor")
    assert (vendored / "xlamigrate_runtime" / "optim.py").is_file()
    assert "xlamigrate-runtime" not in (vendored / "requirements.txt").read_text()
    run = _train(python, vendored)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "training in bf16" in run.stdout and "step 2 loss" in run.stdout

    # The distribution: pip finds torch (>=2.1) installed and adds the runtime alone.
    wheels = runtime_wheel.parent
    report = tmp_path / "install.json"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index"]
    subprocess.run(
        [*pip, "--find-links", str(wheels), "--report", str(report), "xlamigrate-runtime"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    installed = [item["metadata"]["name"] for item in json.loads(report.read_text())["install"]]
    assert installed == ["xlamigrate-runtime"]
    packaged = _migrated(tmp_path, "packaged")
    assert "xlamigrate-runtime>=0.1.0" in (packaged / "requirements.txt").read_text()
    assert "from xlamigrate_runtime import" in (packaged / "train.py").read_text()
    run = _train(python, packaged)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "training in bf16" in run.stdout and "step 2 loss" in run.stdout


@needs_torch_xla_platform
def test_verify_runs_import_the_cli_s_own_copy_where_the_runtime_is_not_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`xlamigrate verify` runs rewrites that import the runtime: with the CLI installed alone,
    its runs get the copy the CLI carries for `--runtime vendor`."""
    import importlib.util

    from xlamigrate.project.dependencies import runtime_source
    from xlamigrate.verify.runs import install_shim

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *rest: None if name == "xlamigrate_runtime" else real(name, *rest),
    )
    shim = install_shim(tmp_path / "shim")
    python = _environment(tmp_path / "venv")
    code = "import xlamigrate_runtime as r; print(r.__file__); print(r.FP32ParamsCopy.__name__)"
    result = subprocess.run(
        [str(python), "-s", "-c", code],
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(shim)},
        capture_output=True, text=True, check=True, cwd=tmp_path,
    )  # fmt: skip
    location, name = result.stdout.split()
    assert name == "FP32ParamsCopy"
    assert Path(location).resolve().parent == runtime_source().resolve()
