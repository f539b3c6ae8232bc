"""The launch model: which script a command line runs, through every launcher and wrapper, with
the environment the command sets for it (rules/launchers.toml is the data)."""

from __future__ import annotations

import shlex

import pytest

from xlamigrate.kinds.launch import OWN_FOLDER, launch


@pytest.mark.parametrize(
    ("command", "script"),
    [
        ("python train.py --epochs 3", "train.py"),
        ("python3 -u scripts/train.py", "scripts/train.py"),
        ("python3.11 -W ignore -X dev train.py", "train.py"),
        ("torchrun --nproc_per_node 32 --nnodes 2 train.py --bf16", "train.py"),
        ("torchrun --nproc-per-node=2 --master_port 29500 train.py", "train.py"),
        ("python -m torch.distributed.run --nproc_per_node 2 train.py", "train.py"),
        ("python -m torch.distributed.launch --use_env --nproc_per_node=8 train.py", "train.py"),
        ("accelerate launch --config_file cfg.yaml --num_processes 8 train.py", "train.py"),
        ("neuron_parallel_compile python train.py", "train.py"),
        ("neuron_parallel_compile --num_parallel 4 torchrun --nproc_per_node=32 t.py", "t.py"),
        ("srun --ntasks 2 --kill-on-bad-exit=1 torchrun train.py", "train.py"),
        ("mpirun -np 4 --mca btl tcp,self --bind-to none python train.py", "train.py"),
        ("deepspeed --num_gpus 8 train.py --deepspeed ds.json", "train.py"),
        ("python -m torch_xla.distributed.xla_dist --tpu=$TPU -- python3 train.py", "train.py"),
        ("nohup nice -n 10 timeout 2h taskset -c 0-7 python train.py", "train.py"),
        ("exec numactl --cpunodebind=0 --membind 0 python train.py", "train.py"),
        ("time env XLA_USE_BF16=1 torchrun train.py", "train.py"),
        (  # (a path of the image the container runs)
            "docker run --rm -e A=1 -v /data:/data image:tag python /app/train.py",
            "<image named=image:tag>/app/train.py",
        ),
        ("./train.py --fast", "./train.py"),
        (
            "torchrun $DISTRIBUTED_ARGS $SCRIPT_DIR/tp_pretrain.py --steps 10",
            "$SCRIPT_DIR/tp_pretrain.py",
        ),
    ],
)
def test_the_python_script_a_command_runs(command: str, script: str) -> None:
    words = shlex.split(command)
    values = [None if "$" in word else word for word in words]
    assert launch(values, words).python_script == script


@pytest.mark.parametrize(
    "command",
    ["python -c 'print(1)'", "cat train.py", "python -m mypkg.train", "$LAUNCHER train.py", ""],
)
def test_commands_that_run_no_python_script(command: str) -> None:
    words = shlex.split(command)
    values = [None if w.startswith("$") else w for w in words]
    assert launch(values, words).python_script is None


def test_python_m_names_the_module() -> None:
    assert launch(shlex.split("python -m mypkg.train --lr 1")).module == "mypkg.train"
    assert launch(shlex.split("torchrun --nproc_per_node 2 -m mypkg.train")).module == (
        "mypkg.train"
    )


def test_shell_scripts_are_launches_of_their_own() -> None:
    assert launch(["bash", "run.sh", "BF16"]).script == "run.sh"
    assert launch(["bash", "run.sh", "BF16"]).language == "shell"
    assert launch(["sbatch", "--nodes=2", "job.slurm"]).script == "job.slurm"
    assert launch(["source", "training.env"]).script == "training.env"


def test_the_words_after_a_c_string_are_its_arguments_not_a_script() -> None:
    made = launch(["bash", "-e", "-c", "python t.py", "arg0"])
    assert (made.script, made.shell_strings) == (None, (3,))


def test_the_programs_a_command_goes_through() -> None:
    made = launch(shlex.split("srun env X=1 python -m torch.distributed.run train.py"))
    assert made.programs == ("srun", "env", "python", "torchrun")


def test_environment_set_for_the_command() -> None:
    made = launch(shlex.split("env -u XLA_USE_FP16 XLA_USE_BF16=1 -i python t.py"))
    assert [(e.name, e.value, e.action, e.via) for e in made.env] == [
        ("XLA_USE_FP16", None, "unset", "env"),
        ("XLA_USE_BF16", "1", "set", "env"),
    ]
    assert made.python_script is None  # after `env X=1`, `-i` is the command (as env reads it)
    unset = launch(["env", "-uXLA_USE_BF16", "python", "t.py"]).env[0]
    assert (unset.index, unset.name_offset, unset.action) == (1, 2, "unset")


def test_mpirun_and_docker_pass_variables_with_options() -> None:
    mpi = launch(shlex.split("mpirun -np 2 -x XLA_USE_BF16=1 -x PATH python t.py"))
    assert [(e.index, e.name, e.value, e.action) for e in mpi.env] == [
        (4, "XLA_USE_BF16", "1", "set"),
        (6, "PATH", None, "pass"),
    ]
    docker = launch(shlex.split("docker run --env=XLA_DOWNCAST_BF16=1 img python t.py"))
    (setting,) = docker.env
    assert (setting.name, setting.value, setting.name_offset) == ("XLA_DOWNCAST_BF16", "1", 6)
    assert docker.python_script == "<image named=img>t.py"  # (from the image's WORKDIR)


@pytest.mark.parametrize(
    ("command", "index", "remote"),
    [
        ("bash -c 'export X=1; python t.py'", 2, False),
        ("bash -lc 'python t.py'", 2, False),
        ("srun --nodes 2 sh -c 'python t.py'", 5, False),
        ("sbatch --wrap 'python t.py'", 2, False),
        ("sbatch --wrap='python t.py'", 1, False),
        ("env -S 'X=1 python t.py'", 2, False),
        ("ssh -i key.pem worker-1 'python t.py'", 4, True),
        ("gcloud compute tpus tpu-vm ssh tpu --worker=all --command='python t.py'", 7, False),
        ("docker run img sh -c 'python t.py'", 5, False),
    ],
)
def test_words_that_are_shell_command_lines(command: str, index: int, remote: bool) -> None:
    made = launch(shlex.split(command))
    assert made.shell_strings == (index,)
    assert made.remote is remote


@pytest.mark.parametrize(
    ("command", "script"),
    [
        ('torchrun --nproc_per_node=1 "$SCRIPT_DIR/train.py" --steps 20', '"$SCRIPT_DIR/train.py"'),
        (
            'torchrun --nproc_per_node=1 "${SCRIPT_DIR}"/train.py --steps 20',
            '"${SCRIPT_DIR}"/train.py',
        ),
        ('torchrun --nproc_per_node=1 "$SCRIPT" --steps 20', '"$SCRIPT"'),
        ("torchrun $DISTRIBUTED_ARGS $SCRIPT --steps 20", "$SCRIPT"),
        ("python3 -u $SCRIPT 20", "$SCRIPT"),
    ],
)
def test_an_argument_of_the_script_is_never_taken_for_the_script(command: str, script: str) -> None:
    """The script is the first positional after the launcher's options, even when a variable
    names it: what follows are its arguments (`--steps 20` once made the flag "reach 20")."""
    written = command.split()
    values = [None if "$" in word else word for word in written]
    made = launch(values, written)
    assert made.script == script
    assert made.arguments[-1] == "20"


def test_the_launchers_own_folder_in_a_script_path_is_a_script_like_any_other() -> None:
    made = launch(["torchrun", "--nproc_per_node=2", f"{OWN_FOLDER}/train.py", "--steps", "20"])
    assert made.python_script == f"{OWN_FOLDER}/train.py"
    assert made.arguments == ("--steps", "20")


@pytest.mark.parametrize(
    "command",
    [
        "neuron_parallel_compile XLA_DOWNCAST_BF16=1 torchrun --nproc_per_node=32 train.py",
        "neuron_parallel_compile --num_parallel 8 XLA_DOWNCAST_BF16=1 python3 ./train.py",
        "neuron_parallel_compile --command collect XLA_DOWNCAST_BF16=1 torchrun train.py",
    ],
)
def test_neuron_parallel_compile_passes_the_assignments_before_its_command_on(command: str) -> None:
    """The Neuron tutorials write `neuron_parallel_compile XLA_DOWNCAST_BF16=1 torchrun ...`:
    the assignment is the trial run's environment, as after `env`."""
    made = launch(shlex.split(command))
    assert made.python_script is not None and made.python_script.endswith("train.py")
    (setting,) = made.env
    assert (setting.name, setting.value, setting.action, setting.option) == (
        "XLA_DOWNCAST_BF16",
        "1",
        "set",
        False,
    )


def test_a_variable_an_option_sets_is_told_from_an_assignment_word() -> None:
    assert [s.option for s in launch(shlex.split("env -i A=1 python t.py")).env] == [False]
    assert [s.option for s in launch(shlex.split("mpirun -x A=1 python t.py")).env] == [True]
