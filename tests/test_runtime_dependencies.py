"""A rewrite that makes a script import `xlamigrate_runtime` declares the runtime where the project
declares its dependencies, exactly once, or names the file to edit (XM409); `--runtime vendor`
copies the runtime package next to the script instead."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import snapshots
from tests.conftest import ROOT
from xlamigrate.project.dependencies import RUNTIME_REQUIREMENT, runtime_files, runtime_source

SCRIPT = snapshots.case_input("flag_at_top_float_mlp").read_text()
LINE = f"{RUNTIME_REQUIREMENT}\n"


def rewrite(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xlamigrate.cli", "rewrite", "--ignore", "XM5", *args],
        cwd=cwd, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def project(root: Path, files: dict[str, str | bytes]) -> Path:
    (root / "pyproject.toml").write_text("[tool.xlamigrate]\n")  # the project's root
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


def findings(result: subprocess.CompletedProcess[str], code: str = "XM409") -> list[str]:
    """Each finding of `code` the rewrite left: its first line with its help:/note: lines."""
    blocks: list[list[str]] = []
    for line in result.stdout.splitlines():
        if line.startswith(" ") and blocks:
            blocks[-1].append(line)
        else:
            blocks.append([line])
    return ["\n".join(block) for block in blocks if f" {code} " in block[0]]


@pytest.mark.parametrize("mode", ["full-bf16", "fp32-copy"])
def test_requirements_txt_gets_the_runtime_once_and_a_second_rewrite_changes_nothing(
    tmp_path: Path, mode: str
) -> None:
    project(tmp_path, {"requirements.txt": "torch-neuronx==2.1.2.2.3.0\n", "train.py": SCRIPT})
    first = rewrite(tmp_path, "--mode", mode, ".")
    assert first.returncode == 0, first.stdout + first.stderr
    assert (tmp_path / "requirements.txt").read_text() == "torch-neuronx==2.1.2.2.3.0\n" + LINE
    assert "from xlamigrate_runtime import" in (tmp_path / "train.py").read_text()
    second = rewrite(tmp_path, "--mode", mode, ".")
    assert second.returncode == 0, second.stdout + second.stderr
    assert (tmp_path / "requirements.txt").read_text().count("xlamigrate-runtime") == 1
    assert "0 files rewritten" in second.stderr


def test_the_autocast_recipe_imports_nothing_and_declares_nothing(tmp_path: Path) -> None:
    project(tmp_path, {"requirements.txt": "torch-xla\n", "train.py": SCRIPT})
    result = rewrite(tmp_path, "--mode", "autocast", ".")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "xlamigrate_runtime" not in (tmp_path / "train.py").read_text()
    assert (tmp_path / "requirements.txt").read_text() == "torch-xla\n"


def test_crlf_and_a_missing_final_newline_are_kept_in_the_file_s_style(tmp_path: Path) -> None:
    project(tmp_path, {"requirements.txt": b"torch-xla\r\nnumpy", "train.py": SCRIPT})
    assert rewrite(tmp_path, "--mode", "fp32-copy", ".").returncode == 0
    expected = b"torch-xla\r\nnumpy\r\n" + RUNTIME_REQUIREMENT.encode() + b"\r\n"
    assert (tmp_path / "requirements.txt").read_bytes() == expected


def test_a_requirement_already_there_in_any_spelling_is_left_alone(tmp_path: Path) -> None:
    requirements = "torch-xla\nXlamigrate_Runtime[extra]==0.1.0  # pinned by hand\n"
    project(tmp_path, {"requirements.txt": requirements, "train.py": SCRIPT})
    assert rewrite(tmp_path, "--mode", "fp32-copy", ".").returncode == 0
    assert (tmp_path / "requirements.txt").read_text() == requirements


def test_scripts_of_several_folders_share_the_nearest_list_and_it_is_edited_once(
    tmp_path: Path,
) -> None:
    project(
        tmp_path,
        {
            "requirements.txt": "torch-neuronx\n",
            "pretrain/train.py": SCRIPT,
            "finetune/train.py": SCRIPT,
            "finetune/nested/deeper.py": SCRIPT,
        },
    )
    result = rewrite(tmp_path, "--mode", "fp32-copy", "--diff", ".")
    assert result.returncode == 1  # changes pending
    assert result.stdout.count("+++ b/requirements.txt") == 1
    assert rewrite(tmp_path, "--mode", "fp32-copy", ".").returncode == 0
    assert (tmp_path / "requirements.txt").read_text() == "torch-neuronx\n" + LINE


def test_a_folder_s_own_list_is_the_one_its_scripts_get(tmp_path: Path) -> None:
    """Examples in one repository often carry their own requirements."""
    project(
        tmp_path,
        {
            "requirements.txt": "pytest\n",
            "examples/llama/requirements.txt": "torch-neuronx\n",
            "examples/llama/train.py": SCRIPT,
        },
    )
    result = rewrite(tmp_path, "--mode", "fp32-copy", "examples")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "examples/llama/requirements.txt").read_text() == "torch-neuronx\n" + LINE
    assert (tmp_path / "requirements.txt").read_text() == "pytest\n"


def test_of_several_requirements_files_the_one_naming_torch_is_chosen(tmp_path: Path) -> None:
    project(
        tmp_path,
        {
            "requirements-dev.txt": "pytest\nruff\n",
            "requirements-train.txt": "torch-xla==2.9.0\n",
            "train.py": SCRIPT,
        },
    )
    assert rewrite(tmp_path, "--mode", "fp32-copy", ".").returncode == 0
    assert (tmp_path / "requirements-train.txt").read_text() == "torch-xla==2.9.0\n" + LINE
    assert (tmp_path / "requirements-dev.txt").read_text() == "pytest\nruff\n"


def test_two_requirements_files_that_could_each_be_the_image_s_are_named(tmp_path: Path) -> None:
    files = {"requirements-cpu.txt": "torch\n", "requirements-trn.txt": "torch-neuronx\n"}
    project(tmp_path, {**files, "train.py": SCRIPT})
    result = rewrite(tmp_path, "--mode", "fp32-copy", ".")
    assert result.returncode == 1  # left for manual work
    [finding] = findings(result)
    assert finding.startswith("train.py:1:1: XM409 ")
    assert "one of requirements-cpu.txt, requirements-trn.txt" in finding
    for name, text in files.items():
        assert (tmp_path / name).read_text() == text


PYPROJECT = """\
[project]
name = "trainer"
version = "0.1"
dependencies = [
    "torch-neuronx>=2.1",  # the Neuron build of torch
    "transformers"
]

[tool.xlamigrate]
mode = "fp32-copy"
"""


def test_pyproject_dependencies_get_the_runtime_as_their_last_item(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "train.py").write_text(SCRIPT)
    result = rewrite(tmp_path, ".")
    assert result.returncode == 0, result.stdout + result.stderr
    expected = PYPROJECT.replace(
        '    "transformers"\n]', f'    "transformers",\n    "{RUNTIME_REQUIREMENT}",\n]'
    )
    assert (tmp_path / "pyproject.toml").read_text() == expected
    assert rewrite(tmp_path, ".").returncode == 0
    assert (tmp_path / "pyproject.toml").read_text() == expected


@pytest.mark.parametrize(
    ("files", "named"),
    [
        ({"setup.py": "from setuptools import setup\nsetup(install_requires=['torch'])\n"},
         "setup.py declares the dependencies"),
        ({"Dockerfile": "FROM python:3.11\nRUN pip install torch-neuronx transformers\n"},
         "Dockerfile line 2 installs the training's packages"),
        ({}, "no requirements.txt or pyproject.toml dependencies"),
    ],
)  # fmt: skip
def test_where_it_edits_no_list_a_finding_names_the_file(
    tmp_path: Path, files: dict[str, str], named: str
) -> None:
    project(tmp_path, {**files, "train.py": SCRIPT})
    result = rewrite(tmp_path, "--mode", "full-bf16", ".")
    assert result.returncode == 1, result.stdout + result.stderr
    [finding] = findings(result)
    assert finding.startswith("train.py:1:1: XM409 ") and named in finding
    assert "--runtime vendor" in finding
    assert "from xlamigrate_runtime import" in (tmp_path / "train.py").read_text()  # applied
    for name, text in files.items():
        assert (tmp_path / name).read_text() == text
    ignored = rewrite(tmp_path, "--mode", "full-bf16", "--ignore", "XM409", ".")
    assert ignored.returncode == 0 and not findings(ignored)


def test_vendor_copies_the_runtime_package_next_to_the_script_once(tmp_path: Path) -> None:
    project(tmp_path, {"requirements.txt": "torch-xla\n", "jobs/train.py": SCRIPT})
    preview = rewrite(tmp_path, "--mode", "fp32-copy", "--runtime", "vendor", "--diff", ".")
    assert "--- /dev/null\n+++ b/jobs/xlamigrate_runtime/__init__.py" in preview.stdout
    result = rewrite(tmp_path, "--mode", "fp32-copy", "--runtime", "vendor", ".")
    assert result.returncode == 0, result.stdout + result.stderr
    package = dict(runtime_files(runtime_source()))
    assert f"1 file rewritten (1 fix), {len(package)} created" in result.stderr
    assert "jobs/xlamigrate_runtime/optim.py: created (the runtime" in result.stdout
    assert {"__init__.py", "optim.py", "native/stochastic_rounding.c"} <= package.keys()
    copied = tmp_path / "jobs" / "xlamigrate_runtime"
    assert dict(runtime_files(copied)) == package
    assert (tmp_path / "requirements.txt").read_text() == "torch-xla\n"  # nothing to declare
    again = rewrite(tmp_path, "--mode", "fp32-copy", "--runtime", "vendor", ".")
    assert again.returncode == 0 and "0 files rewritten" in again.stderr


def test_runtime_vendor_from_the_configuration_and_a_bad_value(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.xlamigrate]\nruntime = "vendor"\n')
    (tmp_path / "train.py").write_text(SCRIPT)
    result = rewrite(tmp_path, "--mode", "fp32-copy", ".")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "xlamigrate_runtime" / "__init__.py").is_file()
    (tmp_path / "pyproject.toml").write_text('[tool.xlamigrate]\nruntime = "copy"\n')
    bad = rewrite(tmp_path, ".")
    assert bad.returncode == 2 and "runtime must be one of package, vendor" in bad.stderr
    option = rewrite(tmp_path, "--runtime", "vendored", ".")
    assert option.returncode == 2 and "did you mean 'vendor'" in option.stderr


@pytest.mark.parametrize("mode", ["full-bf16", "fp32-copy"])
def test_the_example_project_declares_the_runtime_in_its_requirements_once(
    tmp_path: Path, mode: str
) -> None:
    examples = tmp_path / "examples"
    shutil.copytree(ROOT / "examples", examples)
    before = (examples / "requirements.txt").read_text()
    for _ in range(2):
        result = rewrite(examples, "--mode", mode, ".")
        assert result.returncode == 0, result.stdout + result.stderr
        assert (examples / "requirements.txt").read_text() == before + LINE
    assert "0 files rewritten" in result.stderr  # the second run: a fixed point
    # The image installs requirements.txt: the Dockerfile needs no line of its own.
    assert "pip install --no-cache-dir -r requirements.txt" in (examples / "Dockerfile").read_text()


def test_a_finding_names_the_file_from_where_the_user_named_the_script(tmp_path: Path) -> None:
    project(
        tmp_path,
        {
            "trainer/setup.py": "from setuptools import setup\nsetup()\n",
            "trainer/jobs/t.py": SCRIPT,
        },
    )
    result = rewrite(tmp_path, "--mode", "fp32-copy", "trainer")
    [finding] = findings(result)
    assert finding.startswith("trainer/jobs/t.py:1:1: XM409 ")
    assert "trainer/setup.py declares the dependencies" in finding
