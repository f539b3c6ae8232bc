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
from xlamigrate.project.images import image_of
from xlamigrate.project.resolve import ScriptResolver
from xlamigrate.results import Finding

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
    assert image.lookup("/srv/b.py", files.__contains__, lambda _: False)[0] == "b.py"
    assert image.lookup("/app/train.py", files.__contains__, lambda _: False)[0] is None


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


# A shell's own moves: cd, pushd ----------------------------------------------------------------

SHELL_LAUNCHER = "#!/bin/bash\nexport XLA_USE_BF16=1\n{moves}\n"


@pytest.mark.parametrize(
    ("launcher", "moves"),
    [
        ("run.sh", "cd launch\npython train.py"),
        ("run.sh", "cd -- launch && torchrun --nproc_per_node=2 train.py"),
        ("run.sh", "pushd launch > /dev/null\npython train.py\npopd"),
        ("run.sh", "cd launch || exit 1\npython train.py"),
        ("launch/run.sh", 'cd "$(dirname "$0")"\npython train.py'),
        ("scripts/run.sh", 'cd "$(dirname "$0")/../launch"\npython train.py'),
        (
            "scripts/run.sh",
            'SCRIPT_DIR=$(dirname "$0")\ncd "$SCRIPT_DIR/.."\npython launch/train.py',
        ),
    ],
    ids=["cd", "cd-dashdash", "pushd", "cd-or-exit", "dirname", "dirname-up", "script-dir"],
)
def test_a_shell_launcher_runs_its_script_from_the_folder_it_moved_to(
    project: Path, catalogue: Catalogue, launcher: str, moves: str
) -> None:
    files = {
        launcher: SHELL_LAUNCHER.format(moves=moves),
        "launch/train.py": TRAIN,
        "train.py": TRAIN,
        "scripts/train.py": TRAIN,
    }
    (finding,) = scan_writes(files, project, catalogue)
    assert not is_manual(finding), finding.message
    assert "it starts launch/train.py" in finding.message


@pytest.mark.parametrize(
    "moves",
    [
        "( cd launch; python other.py )\npython train.py",
        "run() {\n  cd launch\n  python other.py\n}\nrun\npython train.py",
        "pushd launch\npython other.py\npopd\npython train.py",
        "echo $(cd launch && pwd) && python launch/other.py\npython train.py",
    ],
    ids=["subshell", "function", "popd", "command-substitution"],
)
def test_a_move_inside_a_subshell_or_a_function_stays_there(
    project: Path, catalogue: Catalogue, moves: str
) -> None:
    files = {
        "run.sh": SHELL_LAUNCHER.format(moves=moves),
        "launch/other.py": TRAIN,
        "train.py": TRAIN,
    }
    (finding,) = scan_writes(files, project, catalogue)
    assert not is_manual(finding), finding.message
    assert "it starts launch/other.py, train.py" in finding.message


@pytest.mark.parametrize(
    ("moves", "why"),
    [
        (
            'cd "$WORK_DIR"\npython train.py',
            '`cd "$WORK_DIR"` at line 3 moves to a folder not known',
        ),
        ("cd\npython train.py", "`cd` at line 3 moves to the home folder"),
        ("cd ~/code\npython train.py", "`cd ~/code` at line 3 moves to a folder not known"),
        ("popd\npython train.py", "`popd` at line 3 returns to a folder not known"),
        (
            "if [ -d launch ]; then\n  cd launch\nfi\npython train.py",
            "the `if` at line 3 changes the folder in some cases only",
        ),
        ("[ -d launch ] && cd launch\npython train.py", "`cd launch` at line 3 runs in some cases"),
        (
            "for d in a b; do\n  cd launch\ndone\npython train.py",
            "the `for` at line 3 changes the folder in some cases only",
        ),
    ],
    ids=["variable", "home", "tilde", "popd-empty", "if", "test-and", "loop"],
)
def test_a_launch_after_a_move_to_a_folder_not_known_keeps_its_write(
    project: Path, catalogue: Catalogue, moves: str, why: str
) -> None:
    files = {"run.sh": SHELL_LAUNCHER.format(moves=moves), "train.py": TRAIN}
    (finding,) = scan_writes(files, project, catalogue)
    assert is_manual(finding)
    assert "it reaches train.py, which is not a Python file of this project (" in finding.message
    assert why in finding.message


def test_a_move_to_an_absolute_folder_is_outside_the_project(
    project: Path, catalogue: Catalogue
) -> None:
    files = {
        "run.sh": SHELL_LAUNCHER.format(moves="cd /opt/code\npython train.py"),
        "train.py": TRAIN,
    }
    (finding,) = scan_writes(files, project, catalogue)
    assert is_manual(finding)
    assert "it reaches /opt/code/train.py" in finding.message
    assert "an absolute path outside the project" in finding.message


def test_an_actions_step_that_moves_runs_from_that_folder_of_the_checkout(
    project: Path, catalogue: Catalogue
) -> None:
    workflow = WORKFLOW.format(defaults="", job_defaults="", step_options="").replace(
        "run: python train.py", "run: cd launch && python train.py"
    )
    files = {".github/workflows/train.yml": workflow, "launch/train.py": TRAIN, "train.py": TRAIN}
    (finding,) = scan_writes(files, project, catalogue)
    assert not is_manual(finding), finding.message
    assert "it starts launch/train.py" in finding.message


def test_a_dockerfile_run_that_moves_runs_from_that_folder_of_the_image(
    project: Path, catalogue: Catalogue
) -> None:
    dockerfile = (
        "FROM python:3.11\nCOPY launch/ /opt/code/\nCOPY other/ /srv/\n"
        "RUN cd /opt/code && XLA_USE_BF16=1 python train.py --compile-only\n"
    )
    files = {"Dockerfile": dockerfile, "launch/train.py": TRAIN, "other/train.py": TRAIN}
    for name, text in files.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    settings = load_settings([Path(".")], catalogue).with_overrides(ignore=PRECISION_IGNORE)
    report = scan_paths([Path(".")], settings, catalogue, jobs=1)
    (edge,) = report.launches
    assert edge.scripts == ("launch/train.py",)


# Which image a container runs: compose build:, docker build -t ----------------------------------

COMPOSE = """\
services:
  train:
{build}    environment:
      XLA_USE_BF16: "1"
    command: ["python", "train.py"]
"""
IMAGE_A = "FROM python:3.11\nWORKDIR /app\nCOPY a/ ./\n"
IMAGE_B = "FROM python:3.11\nWORKDIR /app\nCOPY b/ ./\n"
UNKNOWN_IMAGE = "copy different files there: which image runs is unknown"


def two_images(script: str, **more: str) -> dict[str, str]:
    """A project whose two Dockerfiles copy a/'s and b/'s train.py to /app, with a train.py
    beside its launcher scripts/train.sh (never what a container runs), which runs `script`."""
    return {
        "scripts/train.sh": f"#!/bin/sh\n{script}",
        "images/Dockerfile.a": IMAGE_A,
        "images/Dockerfile.b": IMAGE_B,
        "a/train.py": TRAIN,
        "b/train.py": TRAIN,
        "scripts/train.py": TRAIN,
        **more,
    }


def assert_starts(findings: list[Finding], expected: str | None) -> None:
    """The launcher's one write starts `expected` and goes; None: the image is not known, and
    the write stays, manual."""
    (finding,) = findings
    if expected is None:
        assert is_manual(finding)
        assert UNKNOWN_IMAGE in finding.message
        return
    assert not is_manual(finding), finding.message
    assert f"it starts {expected}" in finding.message


@pytest.mark.parametrize(
    ("compose_file", "build", "expected"),
    [
        ("compose.yaml", "    build: a\n", "a/train.py"),
        ("compose.yaml", "    build:\n      context: b\n", "b/train.py"),
        (
            "deploy/compose.yaml",
            "    build:\n      context: ..\n      dockerfile: images/Dockerfile.b\n",
            "b/train.py",
        ),
    ],
    ids=["string", "context", "context-and-dockerfile"],
)
def test_a_compose_service_runs_the_image_its_build_makes(
    project: Path, catalogue: Catalogue, compose_file: str, build: str, expected: str
) -> None:
    files = {
        compose_file: COMPOSE.format(build=build),
        "a/Dockerfile": "FROM python:3.11\nWORKDIR /app\nCOPY . ./\n",
        "b/Dockerfile": "FROM python:3.11\nWORKDIR /app\nCOPY . ./\n",
        "images/Dockerfile.b": IMAGE_B,
        "a/train.py": TRAIN,
        "b/train.py": TRAIN,
    }
    (finding,) = scan_writes(files, project, catalogue)
    assert not is_manual(finding), finding.message
    assert f"it starts {expected}" in finding.message


def test_a_compose_build_that_copies_nothing_there_keeps_the_write(
    project: Path, catalogue: Catalogue
) -> None:
    files = {
        "compose.yaml": COMPOSE.format(build="    build: .\n"),
        "Dockerfile": "FROM python:3.11\nWORKDIR /app\n",
        "images/Dockerfile.a": IMAGE_A,
        "a/train.py": TRAIN,
    }
    (finding,) = scan_writes(files, project, catalogue)
    assert is_manual(finding)
    assert "Dockerfile, which builds its image, copies no file of the project to /app/train.py" in (
        finding.message
    )


@pytest.mark.parametrize(
    ("builder", "text"),
    [
        ("build.sh", "#!/bin/sh\ndocker build -t train:latest -f images/Dockerfile.b .\n"),
        (
            "Makefile",
            "image:\n\tdocker buildx build --platform linux/amd64 --tag train"
            " -f images/Dockerfile.b .\n",
        ),
        (
            ".github/workflows/image.yml",
            "on: push\njobs:\n  image:\n    runs-on: ubuntu-latest\n    steps:\n"
            "      - run: docker build -t train:latest -f images/Dockerfile.b .\n",
        ),
        (
            "compose.yaml",
            "services:\n  train:\n    image: train:latest\n    build:\n"
            "      context: .\n      dockerfile: images/Dockerfile.b\n",
        ),
    ],
    ids=["shell", "makefile", "actions", "compose"],
)
def test_a_job_image_the_project_builds_runs_that_dockerfiles_copy(
    project: Path, catalogue: Catalogue, builder: str, text: str
) -> None:
    job = JOB.format(working_dir="", script="train.py").replace(
        "123456789012.dkr.ecr.us-west-2.amazonaws.com/train:latest", "train:latest"
    )
    files = {
        "k8s/job.yaml": job,
        builder: text,
        "images/Dockerfile.a": IMAGE_A,
        "images/Dockerfile.b": IMAGE_B,
        "a/train.py": TRAIN,
        "b/train.py": TRAIN,
    }
    (finding,) = scan_writes(files, project, catalogue)
    assert not is_manual(finding), finding.message
    assert "it starts b/train.py" in finding.message


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        ("docker run --rm -e XLA_USE_BF16=1 train:latest python train.py", "b/train.py"),
        ("podman run -e XLA_USE_BF16=1 -w /app/sub train torchrun sub.py", "b/sub/sub.py"),
        ("docker run -e XLA_USE_BF16=1 train python /app/train.py", "b/train.py"),
        ("docker run -e XLA_USE_BF16=1 train:v2 python train.py", None),  # not built here
    ],
    ids=["docker-run", "workdir", "absolute", "another-tag"],
)
def test_a_shell_docker_run_starts_the_script_of_the_image_it_names(
    project: Path, catalogue: Catalogue, run: str, expected: str | None
) -> None:
    """`docker run IMAGE python train.py` runs the image's train.py (from its WORKDIR, or the
    folder -w names), found through the Dockerfile a `docker build -t IMAGE` of the project
    builds: not a train.py beside the script. An image the project does not build is read
    against every Dockerfile (here they copy different files: the write stays)."""
    script = f"docker build -t train -f images/Dockerfile.b .\n{run}\n"
    files = two_images(script, **{"b/sub/sub.py": TRAIN})
    assert_starts(scan_writes(files, project, catalogue), expected)


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ('IMAGE=org/train:1\ndocker build -t "$IMAGE" -f images/Dockerfile.b .\n'
         'docker run -e XLA_USE_BF16=1 "$IMAGE" python train.py\n', "b/train.py"),
        ('docker build -t ${IMAGE} -f images/Dockerfile.b .\n'
         'docker run -e XLA_USE_BF16=1 ${IMAGE} python train.py\n', "b/train.py"),
        ('IMAGE=org/train:1\ndocker build -t "$IMAGE" -f images/Dockerfile.b .\n'
         'IMAGE=org/other:1\ndocker run -e XLA_USE_BF16=1 "$IMAGE" python train.py\n', None),
        ('docker build -t "$IMAGE" -f images/Dockerfile.b .\n'
         'docker run -e XLA_USE_BF16=1 "$RUNS" python train.py\n', None),
        ('docker build -t "org/train:$TAG" -f images/Dockerfile.b .\n'
         'docker run -e XLA_USE_BF16=1 "org/train:$TAG" python train.py\n', None),
    ],
    ids=["assigned", "braces", "reassigned", "another-variable", "variable-tag"],
)  # fmt: skip
def test_a_docker_run_of_the_variable_a_script_builds_starts_that_images_script(
    project: Path, catalogue: Catalogue, script: str, expected: str | None
) -> None:
    """`docker build -t "$IMAGE"` then `docker run "$IMAGE"` in one script run the image that
    build makes, whatever the variable holds, unless the script assigns it again. Any other
    image named by a variable is unknown: read against every Dockerfile the project has, from
    the context its builds give (images/Dockerfile.b is built from the root, where b/ is its
    train.py; images/Dockerfile.a, built by nothing, from the one its copies imply), they copy
    different files there and the write stays."""
    files = two_images(script)
    assert_starts(scan_writes(files, project, catalogue), expected)


def test_an_image_of_unknown_name_is_read_against_each_dockerfile_as_the_project_builds_it(
    project: Path, catalogue: Catalogue
) -> None:
    """The image a launch names by a variable is not known; the one Dockerfile that could be
    it is read from the build context the project's `docker build` gives it (the repository
    root: its COPY . puts train.py at /app), not from its own folder (which holds no
    train.py): the launch starts train.py, never a file the guess of a context would find."""
    files = {
        "run.sh": '#!/bin/sh\ndocker run -e XLA_USE_BF16=1 "$IMAGE" python train.py\n',
        "build.sh": '#!/bin/sh\ndocker build -t "$1" -f docker/Dockerfile .\n',
        "docker/Dockerfile": "FROM python:3.11\nWORKDIR /app\nCOPY . /app\n",
        "train.py": TRAIN,
    }
    (finding,) = scan_writes(files, project, catalogue)
    assert not is_manual(finding), finding.message
    assert "it starts train.py" in finding.message


def test_one_dockerfile_built_from_two_contexts_that_copy_different_files_is_unknown(
    project: Path, catalogue: Catalogue
) -> None:
    """The one Dockerfile is built from a/ and from b/: an image of unknown name holds either
    folder's train.py, so the write stays (neither build's file is picked)."""
    files = {
        "run.sh": '#!/bin/sh\ndocker run -e XLA_USE_BF16=1 "$IMAGE" python train.py\n',
        "build.sh": "#!/bin/sh\ndocker build -t one -f docker/Dockerfile a\n"
        "docker build -t two -f docker/Dockerfile b\n",
        "docker/Dockerfile": "FROM python:3.11\nWORKDIR /app\nCOPY . /app\n",
        "a/train.py": TRAIN,
        "b/train.py": TRAIN,
    }
    (finding,) = scan_writes(files, project, catalogue)
    assert is_manual(finding)
    assert UNKNOWN_IMAGE in finding.message


def test_a_job_image_no_build_names_is_read_against_every_dockerfile(
    project: Path, catalogue: Catalogue
) -> None:
    job = JOB.format(working_dir="", script="train.py")
    files = {
        "k8s/job.yaml": job,
        "build.sh": "#!/bin/sh\ndocker build -t other:latest -f images/Dockerfile.b .\n",
        "images/Dockerfile.a": IMAGE_A,
        "images/Dockerfile.b": IMAGE_B,
        "a/train.py": TRAIN,
        "b/train.py": TRAIN,
    }
    (finding,) = scan_writes(files, project, catalogue)
    assert is_manual(finding)
    assert UNKNOWN_IMAGE in finding.message


# .dockerignore --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ignore", "resolved"),
    [
        ("launch/\n", False),
        ("**/*.py\n!other.py\n", False),
        ("*.py\n", True),  # Docker's patterns start at the context's root: not launch/train.py
        ("launch\n!launch/train.py\n", True),
        ("# comment\n\nlaunch/data\n", True),
    ],
    ids=["folder", "any-depth", "root-only", "exception", "unrelated"],
)
def test_a_file_the_dockerignore_leaves_out_is_not_in_the_image(
    project: Path, catalogue: Catalogue, ignore: str, resolved: bool
) -> None:
    files = {
        "k8s/job.yaml": JOB.format(working_dir="", script="/app/train.py"),
        "Dockerfile": "FROM python:3.11\nCOPY . /app/\n",
        ".dockerignore": ignore,
        "launch/train.py": TRAIN,
    }
    files["k8s/job.yaml"] = files["k8s/job.yaml"].replace("/app/train.py", "/app/launch/train.py")
    (finding,) = scan_writes(files, project, catalogue)
    assert is_manual(finding) != resolved, finding.message
    if not resolved:
        assert ".dockerignore leaves launch/train.py out of the build context" in finding.message


def test_a_dockerfiles_own_ignore_file_comes_before_the_contexts(project: Path) -> None:
    (project / "docker").mkdir()
    (project / "launch").mkdir()
    (project / "launch/train.py").write_text(TRAIN)
    (project / ".dockerignore").write_text("")
    (project / "docker/train.Dockerfile").write_text("FROM python:3.11\nCOPY launch/ /app/\n")
    (project / "docker/train.Dockerfile.dockerignore").write_text("launch/train.py\n")
    files = {"launch/train.py": Path("launch/train.py")}
    resolver = ScriptResolver(Path("."), files, ["docker/train.Dockerfile"])
    assert resolver("k8s/job.yaml", f"{IMAGE}/app/train.py") is None
    assert "docker/train.Dockerfile.dockerignore leaves launch/train.py out" in (
        resolver.unresolved("k8s/job.yaml", f"{IMAGE}/app/train.py")
    )
