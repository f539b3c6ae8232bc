"""How verify reads what a Kubernetes/compose YAML file or a Dockerfile runs (no torch needed):
the container's argv and environment, as a shell launcher the launch shims can intercept."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from xlamigrate.verify.manifest import (
    ContainerCommand,
    ManifestError,
    launcher_text,
    manifest_commands,
    select,
    unmapped_scripts,
)

JOBS = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: lm-bf16
spec:
  template:
    spec:
      containers:
        - name: train
          workingDir: /workspace
          command: ["torchrun", "--nproc_per_node=32", "train.py"]
          args: ["--steps", "$(STEPS)", "--tag", "$$(not expanded)", "--rank", "$(MISSING)"]
          env:
            - name: STEPS
              value: "1000"
            - name: XLA_USE_BF16
              value: "1"
            - name: RUN
              value: "run-$(STEPS)"
            - name: POD_UID
              valueFrom:
                fieldRef: {fieldPath: metadata.uid}
          envFrom:
            - configMapRef: {name: settings}
        - name: sidecar
          command: ["sleep", "infinity"]
---
apiVersion: batch/v1
kind: Job
metadata:
  name: lm-fp32
spec:
  template:
    spec:
      containers:
        - name: train
          command: ["python3", "/opt/app/src/train.py"]
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_kubernetes_containers_with_their_env_and_references_expanded(tmp_path: Path) -> None:
    commands = manifest_commands(write(tmp_path, "k8s/jobs.yaml", JOBS))
    assert [c.name for c in commands] == ["lm-bf16/train", "lm-bf16/sidecar", "lm-fp32/train"]
    train = commands[0]
    assert train.argv == (
        "torchrun", "--nproc_per_node=32", "train.py",
        "--steps", "1000", "--tag", "$(not expanded)", "--rank", "$(MISSING)",
    )  # fmt: skip
    assert train.env == (("STEPS", "1000"), ("XLA_USE_BF16", "1"), ("RUN", "run-1000"))
    assert train.unknown == ("POD_UID", "envFrom")  # set by the cluster: not known here
    assert train.workdir == "/workspace"


def test_a_container_is_selected_by_its_full_name_its_job_or_its_own_name(tmp_path: Path) -> None:
    commands = manifest_commands(write(tmp_path, "jobs.yaml", JOBS))
    assert select(commands, ["lm-bf16/train"], "jobs.yaml").name == "lm-bf16/train"
    assert select(commands, ["sidecar"], "jobs.yaml").name == "lm-bf16/sidecar"
    assert select(commands, ["lm-fp32"], "jobs.yaml").name == "lm-fp32/train"
    with pytest.raises(ManifestError, match="'train' names several containers; one of: lm-bf16"):
        select(commands, ["train"], "jobs.yaml")
    with pytest.raises(ManifestError, match="'nope' is not a container of it"):
        select(commands, ["nope"], "jobs.yaml")
    with pytest.raises(ManifestError, match="runs several containers; name one after `--`"):
        select(commands, [], "jobs.yaml")
    assert select(commands[2:], [], "jobs.yaml").name == "lm-fp32/train"  # the only one


def test_compose_services_map_and_list_environments(tmp_path: Path) -> None:
    compose = """\
services:
  train:
    command: ["python", "train.py", "--price", "$$5"]
    environment:
      XLA_DOWNCAST_BF16: "1"
      HOST_VALUE:
  eval:
    entrypoint: ["python"]
    command: ["eval.py"]
    environment: ["MODE=eval", "PASSED_ON"]
    env_file: .env
"""
    train, evaluate = manifest_commands(write(tmp_path, "compose.yaml", compose))
    assert (train.name, train.argv) == ("train", ("python", "train.py", "--price", "$5"))
    assert train.env == (("XLA_DOWNCAST_BF16", "1"),) and train.unknown == ("HOST_VALUE",)
    assert (evaluate.name, evaluate.argv) == ("eval", ("python", "eval.py"))
    assert evaluate.env == (("MODE", "eval"),)
    assert evaluate.unknown == ("PASSED_ON", "env_file")


DOCKERFILE = """\
FROM python:3.11 AS base
ENV XLA_USE_BF16=1 LD_LIBRARY_PATH="${LD_LIBRARY_PATH}:/opt/lib"
ENV GREETING hello world
WORKDIR /app
FROM base AS train
ENV NEURON_CC_FLAGS="--model-type transformer"
WORKDIR src
ENTRYPOINT ["torchrun", "--nproc_per_node=2"]
CMD ["train.py", "--steps", "10"]
"""


def test_the_final_image_runs_entrypoint_and_cmd_with_its_stages_env(tmp_path: Path) -> None:
    (image,) = manifest_commands(write(tmp_path, "Dockerfile", DOCKERFILE))
    assert image.argv == ("torchrun", "--nproc_per_node=2", "train.py", "--steps", "10")
    assert image.env == (
        ("XLA_USE_BF16", "1"),
        ("LD_LIBRARY_PATH", '"${LD_LIBRARY_PATH}:/opt/lib"'),  # the shell expands it, as Docker
        ("GREETING", "'hello world'"),
        ("NEURON_CC_FLAGS", "'--model-type transformer'"),
    )
    assert image.workdir == "/app/src"
    (replaced,) = manifest_commands(tmp_path / "Dockerfile", ["other.py"])  # `docker run IMG ARGS`
    assert replaced.argv == ("torchrun", "--nproc_per_node=2", "other.py")


def test_a_shell_form_command_runs_under_sh_and_an_image_without_one_is_refused(
    tmp_path: Path,
) -> None:
    (image,) = manifest_commands(write(tmp_path, "Dockerfile", "FROM x\nCMD python train.py\n"))
    assert image.argv == ("/bin/sh", "-c", "python train.py")
    with pytest.raises(ManifestError, match="no CMD or ENTRYPOINT"):
        manifest_commands(write(tmp_path, "Dockerfile", "FROM x\nENV A=1\n"))


def test_image_paths_are_mapped_to_the_projects_files(tmp_path: Path) -> None:
    write(tmp_path, "src/train.py", "")
    write(tmp_path, "scripts/run.sh", "")
    command = ContainerCommand(
        "job/train",
        ("bash", "-c", "cd /x && torchrun /opt/app/src/train.py && /opt/app/scripts/run.sh"),
        (("XLA_USE_BF16", "1"),),
    )
    text = launcher_text(command, tmp_path, "k8s/job.yaml")
    assert text.splitlines()[2:] == [
        f"cd {tmp_path}",
        "export XLA_USE_BF16=1",
        "exec bash -c 'cd /x && torchrun src/train.py && scripts/run.sh'",
    ]
    # a script named relative to the image's working directory: run from the folder holding it
    relative = ContainerCommand("image", ("python", "train.py"), (), workdir="/app/src")
    assert launcher_text(relative, tmp_path, "Dockerfile").splitlines()[2:] == [
        f"cd {tmp_path / 'src'}",
        "exec python train.py",
    ]
    mpi = ContainerCommand(
        "job/mpi", ("mpirun", "-np", "4", "./run.sh", "/opt/app/src/train.py"), ()
    )
    assert launcher_text(mpi, tmp_path, "mpijob.yaml").splitlines()[2:] == [
        f"cd {tmp_path / 'scripts'}",
        "exec mpirun -np 4 ./run.sh ../src/train.py",
    ]
    script = ContainerCommand("image", ("/opt/app/scripts/run.sh", "--fast"), ())
    assert launcher_text(script, tmp_path, "Dockerfile").endswith(  # not executable here
        "exec bash scripts/run.sh --fast\n"
    )
    write(tmp_path, "scripts/entry.sh", "")  # COPY scripts/* /, WORKDIR /, CMD ["/entry.sh"]
    copied = ContainerCommand("image", ("/entry.sh",), (), workdir="/")
    assert launcher_text(copied, tmp_path, "Dockerfile").splitlines()[2:] == [
        f"cd {tmp_path / 'scripts'}",
        "exec bash entry.sh",
    ]
    unknown = ContainerCommand("job/x", ("python", "/opt/other/eval.py"), ())
    assert unmapped_scripts(unknown, tmp_path) == ["/opt/other/eval.py"]
    assert unmapped_scripts(command, tmp_path) == []


@pytest.mark.skipif(shutil.which("sh") is None, reason="the launcher is a sh script")
def test_the_written_launcher_runs_the_container_command(tmp_path: Path) -> None:
    write(tmp_path, "app/show.py", "import os, sys; print(sys.argv[1:], os.environ['GREETING'])")
    (image,) = manifest_commands(
        write(
            tmp_path,
            "Dockerfile",
            'FROM x\nENV GREETING="a b"\nCMD ["python3", "/srv/app/show.py", "--x"]\n',
        )
    )
    launcher = write(tmp_path.parent / "work", "launch.sh", launcher_text(image, tmp_path, "D"))
    env = {key: value for key, value in os.environ.items() if key != "GREETING"}
    result = subprocess.run(
        ["sh", str(launcher)], env=env, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "['--x'] a b"
