"""Verifying a launcher configuration (`xlamigrate verify run.sh -- BF16`): the launcher runs as
it is, with its launch commands intercepted, on torch-xla's CPU device.

A folder of shims goes first on PATH: `torchrun` drops its own options (`--nproc_per_node=8`...)
and runs the script with verify's interpreter as one process with torchrun's environment for a
single worker (RANK=0, WORLD_SIZE=1, MASTER_ADDR/PORT), so one worker trains where the launcher
would start many; `python` and `python3` are verify's interpreter too (the one with
torch-xla); the wrappers that spread a command over many processes or hosts (`mpirun`, `srun`,
`neuron_parallel_compile`) run the command they wrap once, with the variables they set for it,
as the launch model reads their words. Each shim appends the command it was given to a log: a
configuration that never set a legacy flag must launch the same commands before and after the
migration.

The migrated project is a copy of the project (the current folder, where the launcher is inside
it, else the launcher's folder), rewritten in the mode by `xlamigrate rewrite` itself (launchers,
manifests and scripts together, as a user would), then run the same way; the recorder shim
observes the training process in both. A Kubernetes or compose YAML file or a Dockerfile is run
through the shell launcher `manifest.py` writes for the container it names.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

LAUNCH_LOG = "XLAMIGRATE_VERIFY_LAUNCHES"

# One line per intercepted command: the program, then its arguments.
_TORCHRUN = """#!/bin/sh
# torchrun, reduced to one local process: drops torchrun's own options, runs the script.
printf 'torchrun %s\\n' "$*" >> "${log}"
while [ $# -gt 0 ]; do
    case "$1" in
        -m|--module) break ;;
        --*=*|-?*=*) shift ;;
        --standalone|--no-python|--no_python|--run-path|--run_path) shift ;;
        -*) shift; [ $# -gt 0 ] && shift ;;
        *) break ;;
    esac
done
# what torchrun gives its one worker
export RANK=0 LOCAL_RANK=0 GROUP_RANK=0 ROLE_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1
export ROLE_WORLD_SIZE=1 MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
export MASTER_PORT="${MASTER_PORT:-$((20000 + $$ % 20000))}"
exec "{python}" "$@"
"""
_PYTHON = """#!/bin/sh
printf '{name} %s\\n' "$*" >> "${log}"
exec "{python}" "$@"
"""
_PYTHONS = ("python", "python3")
_WRAPPER = """#!{python} -I
# {name}, reduced to the command it wraps, run once (xlamigrate verify)
import sys
from xlamigrate.verify.launcher import run_wrapped
run_wrapped("{name}", sys.argv[1:])
"""
_WRAPPERS = ("mpirun", "mpiexec", "srun", "neuron_parallel_compile")
# Folders a migrated copy of the project leaves out: caches and environments, never sources.
_NOT_COPIED = (".git", "__pycache__", ".venv", "venv", "node_modules", ".mypy_cache", ".tox")


@dataclass(frozen=True)
class LauncherCopy:
    """A migrated copy of the launcher's folder: where it is, and what the rewrite said."""

    mode: str
    launcher: Path
    cwd: Path
    output: str
    root: Path  # the copy of the project


def is_launcher(script: Path) -> bool:
    """Whether verify is given a launcher (a shell script, a Kubernetes or compose YAML file, a
    Dockerfile) rather than a Python script."""
    from xlamigrate.discover import classify

    return classify(script) in ("shell", "yaml", "dockerfile")


def project_root(launcher: Path) -> Path:
    """The folder a migration copies: the current one where the launcher is inside it (a Job in
    `k8s/` runs the project's scripts), else the launcher's own."""
    here = Path.cwd().resolve()
    return here if here in launcher.parents else launcher.parent


def install_launch_shims(folder: Path) -> Path:
    """Writes the `torchrun`, `python` and `python3` shims into `folder`; returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    log = "$" + LAUNCH_LOG
    shims = {"torchrun": _TORCHRUN.replace("{python}", sys.executable).replace("${log}", log)}
    for name in _PYTHONS:
        text = _PYTHON.replace("{python}", sys.executable).replace("{name}", name)
        shims[name] = text.replace("${log}", log)
    for name in _WRAPPERS:
        shims[name] = _WRAPPER.replace("{python}", sys.executable).replace("{name}", name)
    for name, text in shims.items():
        path = folder / name
        path.write_text(text, encoding="utf-8")
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return folder


def launch_environment(env: dict[str, str], shims: Path, log: Path) -> dict[str, str]:
    """`env` with the launch shims first on PATH and the log they append to."""
    launched = dict(env)
    launched["PATH"] = os.pathsep.join(p for p in (str(shims), env.get("PATH", "")) if p)
    launched[LAUNCH_LOG] = str(log)
    return launched


def migrated_copy(launcher: Path, mode: str, work: Path, target: str) -> LauncherCopy:
    """Copies the project into `work/mode` and migrates it with `xlamigrate rewrite` (exit 1,
    findings left for manual work, still gives a copy to run)."""
    root = project_root(launcher)
    copy = work / mode / root.name
    copy_project(root, copy)
    completed = subprocess.run(
        [sys.executable, "-m", "xlamigrate.cli", "rewrite", "--mode", mode, "--target", target,
         "."],
        cwd=copy, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if completed.returncode not in (0, 1):
        raise RuntimeError(f"xlamigrate rewrite --mode {mode} failed: {completed.stderr.strip()}")
    here = Path.cwd().resolve()
    inside = here == root or root in here.parents
    cwd = copy / here.relative_to(root) if inside else copy
    migrated = copy / launcher.relative_to(root)
    return LauncherCopy(mode, migrated, cwd, completed.stdout + completed.stderr, copy)


def copy_project(root: Path, copy: Path) -> None:
    """The project at `copy`, for a migration that must not reach the original. A link to a
    file or folder of the project becomes a link to its copy, relative as links in a tree are
    (the rewrite edits a link's target and keeps the link, as in the project); a link that
    leads out of the project is replaced by a copy of what it leads to, so the copy runs as
    the project does. Nothing the migration writes in `copy` lands outside it (an absolute
    link into the project would have led back to the original)."""
    shutil.copytree(root, copy, symlinks=True, ignore=shutil.ignore_patterns(*_NOT_COPIED))
    project = root.resolve()
    for folder, folders, files in os.walk(copy):
        for name in [*folders, *files]:
            link = Path(folder) / name
            if not link.is_symlink():
                continue
            target = (root / link.relative_to(copy)).resolve()
            link.unlink()
            if target == project or project in target.parents:
                link.symlink_to(os.path.relpath(copy / target.relative_to(project), link.parent))
            elif target.is_dir():
                shutil.copytree(target, link, ignore=shutil.ignore_patterns(*_NOT_COPIED))
            elif target.exists():
                shutil.copy2(target, link)
            else:  # a dangling link stays as the project has it
                link.symlink_to(os.readlink(root / link.relative_to(copy)))


def run_wrapped(name: str, arguments: list[str]) -> None:
    """The wrapper shim: logs the command line, then runs what it wraps in this process's place
    with the variables the wrapper sets (`mpirun -x A=1`); a script that is not executable runs
    under the interpreter its suffix names."""
    words = [name, *arguments]
    with open(os.environ[LAUNCH_LOG], "a", encoding="utf-8") as log:
        log.write(" ".join(words) + "\n")
    from xlamigrate.kinds.launch import script_language, wrapped_command

    start, settings = wrapped_command(words)
    if start is None:
        sys.exit(f"xlamigrate verify: cannot tell the command `{' '.join(words)}` runs")
    for setting in settings:
        if setting.action == "set" and setting.value is not None:
            os.environ[setting.name] = setting.value
        elif setting.action == "unset":
            os.environ.pop(setting.name, None)
    command = words[start:]
    language = script_language(command[0])
    if language is not None and not os.access(command[0], os.X_OK):
        command = [sys.executable if language == "python" else "bash", *command]
    os.execvp(command[0], command)


def launch_lines(log: Path) -> tuple[str, ...]:
    try:
        return tuple(log.read_text(encoding="utf-8").splitlines())
    except OSError:
        return ()
