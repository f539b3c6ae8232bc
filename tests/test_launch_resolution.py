"""A launched path is resolved as the launcher's process would: a GitHub Actions step from the
checkout (its working-directory applied), a container from the files its image's Dockerfile
copies (WORKDIR, COPY, ADD), a shell script from its folder, then the project root; never as
the one file whose path ends the same way. A path found nowhere keeps the write, manual, and
the finding says which path and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import FIXTURES, PRECISION_IGNORE
from xlamigrate.catalogue import Catalogue
from xlamigrate.config import load_settings
from xlamigrate.engine import scan_paths
from xlamigrate.kinds.launch import IMAGE, REPOSITORY_ROOT
from xlamigrate.model import Finding
from xlamigrate.project.images import image_of
from xlamigrate.project.resolve import ScriptResolver

# a training script the recipes apply to (the Kubernetes fixture's)
TRAIN = (FIXTURES / "projects/kubernetes_jobs/before/train_clm.py").read_text()

WORKFLOW = """\
name: train
on: push
{defaults}jobs:
  train:
    runs-on: ubuntu-latest
{job_defaults}    steps:
      - uses: actions/checkout@v4
      - name: train
{step_options}        env:
          XLA_USE_BF16: "1"
        run: python train.py --steps 10
"""

JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: train
spec:
  template:
    spec:
      containers:
        - name: train
          image: 123456789012.dkr.ecr.us-west-2.amazonaws.com/train:latest
{working_dir}          command: ["torchrun", "--nproc_per_node=2", "{script}"]
          env:
            - name: XLA_USE_BF16
              value: "1"
"""


def scan_writes(files: dict[str, str], tmp: Path, catalogue: Catalogue) -> list[Finding]:
    """The XM101 findings of launcher files in a project of `files` (scanned whole)."""
    for name, text in files.items():
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_text(text)
    settings = load_settings([Path(".")], catalogue).with_overrides(ignore=PRECISION_IGNORE)
    report = scan_paths([Path(".")], settings, catalogue, jobs=1)
    return [f for f in report.findings if f.code == "XM101" and not f.path.endswith(".py")]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def is_manual(finding: Finding) -> bool:
    return finding.fix is not None and finding.fix.applicability == "manual"


# GitHub Actions ---------------------------------------------------------------------------------


def test_an_actions_step_runs_from_the_checkout_not_from_a_file_ending_the_same_way(
    project: Path, catalogue: Catalogue
) -> None:
    workflow = WORKFLOW.format(defaults="", job_defaults="", step_options="")
    files = {".github/workflows/train.yml": workflow, "launch/train.py": TRAIN}
    (finding,) = scan_writes(files, project, catalogue)
    assert is_manual(finding)
    assert "it reaches train.py, which is not a Python file of this project" in finding.message
    assert "from the repository root, which holds no train.py" in finding.message
    assert "launch/train.py" not in finding.message


@pytest.mark.parametrize(
    ("defaults", "job_defaults", "step_options"),
    [
        ("", "", "        working-directory: launch\n"),
        ("", "    defaults:\n      run:\n        working-directory: launch\n", ""),
        ("defaults:\n  run:\n    working-directory: launch\n", "", ""),
    ],
    ids=["step", "job-defaults", "workflow-defaults"],
)
def test_an_actions_step_runs_from_its_working_directory(
    project: Path, catalogue: Catalogue, defaults: str, job_defaults: str, step_options: str
) -> None:
    workflow = WORKFLOW.format(
        defaults=defaults, job_defaults=job_defaults, step_options=step_options
    )
    files = {".github/workflows/train.yml": workflow, "launch/train.py": TRAIN}
    (finding,) = scan_writes(files, project, catalogue)
    assert not is_manual(finding), finding.message
    assert "launch/train.py" in finding.message


def test_an_actions_step_finds_the_script_at_the_repository_root(
    project: Path, catalogue: Catalogue
) -> None:
    workflow = WORKFLOW.format(defaults="", job_defaults="", step_options="")
    files = {".github/workflows/train.yml": workflow, "train.py": TRAIN, "old/train.py": TRAIN}
    (finding,) = scan_writes(files, project, catalogue)
    assert not is_manual(finding) and "it starts train.py" in finding.message


# Kubernetes and Dockerfiles ---------------------------------------------------------------------


def test_a_job_path_no_dockerfile_copies_is_not_a_project_file(
    project: Path, catalogue: Catalogue
) -> None:
    job = JOB.format(working_dir="", script="/app/train.py")
    (finding,) = scan_writes({"k8s/job.yaml": job, "launch/train.py": TRAIN}, project, catalogue)
    assert is_manual(finding)
    assert "it reaches /app/train.py, which is not a Python file of this project" in finding.message
    assert "no Dockerfile of the project copies a file to /app/train.py" in finding.message


@pytest.mark.parametrize(
    ("dockerfile", "working_dir", "script"),
    [
        ("COPY launch/ /app/\n", "", "/app/train.py"),
        ("WORKDIR /app\nCOPY launch/train.py .\n", "", "train.py"),
        ("WORKDIR /app\nCOPY launch .\n", "", "/app/train.py"),
        ("COPY launch/*.py /app/\n", "          workingDir: /app\n", "train.py"),
        ("ADD launch/train.py /app/train.py\n", "", "/app/train.py"),
    ],
    ids=["folder", "workdir-file", "workdir-folder", "glob-workingdir", "add-file"],
)
def test_a_job_runs_the_file_the_dockerfile_copies_to_its_path(
    project: Path, catalogue: Catalogue, dockerfile: str, working_dir: str, script: str
) -> None:
    files = {
        "k8s/job.yaml": JOB.format(working_dir=working_dir, script=script),
        "Dockerfile": "FROM python:3.11\n" + dockerfile,
        "launch/train.py": TRAIN,
        "other/train.py": TRAIN,
    }
    (finding,) = scan_writes(files, project, catalogue)
    assert not is_manual(finding), finding.message
    assert "it starts launch/train.py" in finding.message


def test_two_dockerfiles_that_copy_different_files_there_leave_the_job_manual(
    project: Path, catalogue: Catalogue
) -> None:
    files = {
        "k8s/job.yaml": JOB.format(working_dir="", script="/app/train.py"),
        "a/Dockerfile": "FROM python:3.11\nCOPY train.py /app/\n",
        "b/Dockerfile": "FROM python:3.11\nCOPY train.py /app/\n",
        "a/train.py": TRAIN,
        "b/train.py": TRAIN,
    }
    (finding,) = scan_writes(files, project, catalogue)
    assert is_manual(finding)
    assert "a/Dockerfile, b/Dockerfile copy different files there" in finding.message


def test_a_dockerfile_command_runs_what_it_copied_under_its_workdir(
    project: Path, catalogue: Catalogue
) -> None:
    dockerfile = (
        "FROM python:3.11\nWORKDIR /opt/code\nCOPY src/ ./\nENV XLA_USE_BF16=1\n"
        'CMD ["python", "train.py"]\n'
    )
    files = {"docker/Dockerfile": dockerfile, "docker/src/train.py": TRAIN, "train.py": TRAIN}
    (finding,) = scan_writes(files, project, catalogue)
    assert not is_manual(finding) and "it starts docker/src/train.py" in finding.message


def test_a_dockerfile_that_copies_nothing_there_keeps_its_write(
    project: Path, catalogue: Catalogue
) -> None:
    dockerfile = 'FROM python:3.11\nWORKDIR /app\nENV XLA_USE_BF16=1\nCMD ["python", "train.py"]\n'
    (finding,) = scan_writes({"Dockerfile": dockerfile, "train.py": TRAIN}, project, catalogue)
    assert is_manual(finding)
    assert "this Dockerfile copies no file of the project to /app/train.py" in finding.message


# The resolver alone ------------------------------------------------------------------------------


def test_a_build_context_above_the_dockerfile_is_the_folder_holding_its_sources(
    project: Path,
) -> None:
    (project / "docker").mkdir()
    (project / "src").mkdir()
    (project / "src/train.py").write_text(TRAIN)
    (project / "docker/Dockerfile").write_text("FROM python:3.11\nCOPY src/train.py /app/\n")
    resolver = ScriptResolver(
        Path("."), {"src/train.py": Path("src/train.py")}, ["docker/Dockerfile"]
    )
    assert resolver("k8s/job.yaml", f"{IMAGE}/app/train.py") == "src/train.py"


def test_a_later_copy_wins_and_a_stage_copied_from_is_not_the_context() -> None:
    image = image_of(
        "Dockerfile",
        "FROM python AS build\nCOPY a.py /app/train.py\n"
        "FROM python\nCOPY --from=build /app /app\nWORKDIR /srv\nCOPY b.py c.py ./\n",
    )
    assert image.workdir == "/srv"
    files = {"a.py", "b.py", "c.py"}
    assert image.source_of("/srv/b.py", files.__contains__, lambda _: False) == "b.py"
    assert image.source_of("/app/train.py", files.__contains__, lambda _: False) is None


def test_a_shell_launcher_names_no_file_by_its_ending(project: Path) -> None:
    resolver = ScriptResolver(Path("."), {"nxd/llama/train.py": Path("nxd/llama/train.py")})
    assert resolver("run.sh", "train.py") is None
    assert "neither" in resolver.unresolved("scripts/run.sh", "train.py")
    assert resolver("nxd/llama/run.sh", "train.py") == "nxd/llama/train.py"
    assert resolver("run.sh", "/workspace/nxd/llama/train.py") is None


def test_a_checkout_path_is_taken_from_the_folder_holding_github(project: Path) -> None:
    files = {"svc/train.py": Path("svc/train.py")}
    resolver = ScriptResolver(Path("."), files)
    workflow = "svc/.github/workflows/ci.yml"
    assert resolver(workflow, f"{REPOSITORY_ROOT}/train.py") == "svc/train.py"
    assert resolver(".github/workflows/ci.yml", f"{REPOSITORY_ROOT}/train.py") is None


def test_a_dockerfile_script_another_file_names_is_gated_and_its_edge_reads_as_written(
    project: Path, catalogue: Catalogue
) -> None:
    """An image's script is known by its file name to the other files that may launch it (so
    a launch xlamigrate did not see keeps it flag-free: the recipe goes under the signal), and
    the launch graph names it as the Dockerfile wrote it, without an anchor."""
    dockerfile = "FROM python:3.11\nWORKDIR /app\nCOPY train.py .\nENV XLA_USE_BF16=1\n"
    files = {
        "Dockerfile": dockerfile + 'CMD ["python", "train.py"]\n',
        "train.py": TRAIN,
        "eval.sh": "#!/bin/sh\npython train.py --eval\n",
    }
    for name, text in files.items():
        (project / name).write_text(text)
    settings = load_settings([Path(".")], catalogue).with_overrides(ignore=PRECISION_IGNORE)
    report = scan_paths([Path(".")], settings, catalogue, jobs=1)
    (edge,) = report.launches
    assert (edge.launcher, edge.reaches, edge.scripts) == (
        "Dockerfile",
        ("train.py",),
        ("train.py",),
    )
    assert edge.migrated and edge.signal is not None
