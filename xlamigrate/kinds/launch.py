"""The one model of a launch: from a command's words, "this runs that script, with this
environment and these arguments", through any chain of wrappers (`srun env X=1 torchrun
train.py`, `python -m torch.distributed.run ... train.py`, `neuron_parallel_compile python
train.py`). Shell scripts, Dockerfile CMD/ENTRYPOINT, YAML command/args lists and notebooks all
use it; the programs and their options are data (`rules/launchers.toml`).
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

from xlamigrate.rulesdata import LAUNCHERS_FILE, read_toml, rules_directory

Role = Literal["python", "launcher", "wrapper", "shell", "batch", "remote"]
Language = Literal["python", "shell"]
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VARIABLE_WORD = re.compile(r'"?\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))"?')
_SCRIPT_SUFFIXES: dict[str, Language] = {".py": "python", ".sh": "shell", ".bash": "shell"}
# How a launcher's own folder is spelled in a script's path (the shell engine's value of
# `$(dirname "$0")/train.py`, of `$SCRIPT_DIR/train.py` where SCRIPT_DIR holds that folder):
# such a path names a file below the launcher's folder, whatever the working directory.
OWN_FOLDER = "<launcher folder>"
# Where a launch's path starts where the launcher's kind knows its working directory: a CI
# step's checkout (`<repository root>/train.py`, its working-directory applied), or the image a
# container runs (`<image>/app/train.py`; `<image>train.py`: relative to the image's WORKDIR).
REPOSITORY_ROOT = "<repository root>"
IMAGE = "<image>"
# Which image, where the launcher says: `<image built=CONTEXT;DOCKERFILE>` (a compose `build:`,
# from the launcher's folder), `<image named=NAME>` (an `image:` the project may build).
_IMAGE_SPEC = "<image "
BUILT = "built="
NAMED = "named="
# Where a launch's path starts after its shell moved to a folder not known statically
# (`cd "$WORK_DIR"`): `<folder not known: WHY>/train.py`, WHY saying which move.
UNKNOWN_FOLDER = "<folder not known: "
_UNKNOWN_END = ">/"
_ANCHORS = (OWN_FOLDER, REPOSITORY_ROOT, IMAGE)
# How a launch that runs a function of a Python file is written (a Ray Train worker loop, a
# Metaflow step): `train.py::train_func`. Its process starts in that function, not at the
# file's top: the recipe goes there.
_FUNCTION_MARK = "::"


def in_function(script: str, function: str) -> str:
    """A launch of `function` in `script`, as the project writes it."""
    return f"{script}{_FUNCTION_MARK}{function}"


def described(written: str, script: str) -> str:
    """A launch as messages name it: the script (the project's path), or the function of it the
    process starts in (`train_func` in train.py)."""
    function = split_function(written)[1]
    return f"`{function}` in {script}" if function else script


def in_checkout(folder: str | None, script: str) -> str:
    """A script a CI step runs from `folder` of the checkout (None: its root); an absolute
    path is left as written (a path of the runner, not of the project)."""
    if script.startswith(("/", "<")):
        return script
    return posixpath.join(REPOSITORY_ROOT, folder or "", script)


def in_image(script: str, workdir: str | None = None, image: str | None = None) -> str:
    """A script a container runs, from `workdir` (None: the image's WORKDIR) where relative;
    `image`: which image (`BUILT` or `NAMED` and its words; None: not known)."""
    if script.startswith("<"):
        return script
    if workdir and not script.startswith("/"):
        script = posixpath.join(workdir, script)
    if image is not None and ">" not in image:
        return f"{_IMAGE_SPEC}{image}>{script}"
    return IMAGE + script


def variable_reference(written: str) -> str | None:
    """The shell variable a word is as a whole, as written (`$IMAGE`, `"${IMAGE}"`); else None."""
    match = _VARIABLE_WORD.fullmatch(written)
    if match is None or written.startswith('"') != written.endswith('"'):
        return None
    return match.group(1) or match.group(2)


def image_spec(written: str) -> str | None:
    """Which image a container's launch names (`BUILT...`, `NAMED...`; None: not known)."""
    if not written.startswith(_IMAGE_SPEC):
        return None
    return written[len(_IMAGE_SPEC) :].partition(">")[0]


def in_unknown_folder(why: str, script: str) -> str:
    """A script launched from a folder not known here; `why` says which move made it so."""
    if script.startswith(("/", "<")):
        return script
    return f"{UNKNOWN_FOLDER}{why.replace(_UNKNOWN_END, '> /')}{_UNKNOWN_END}{script}"


def unknown_folder(written: str) -> str | None:
    """Why a launch's folder is not known (None: it is, or the launcher's own)."""
    if not written.startswith(UNKNOWN_FOLDER):
        return None
    return written[len(UNKNOWN_FOLDER) :].partition(_UNKNOWN_END)[0]


def anchored(written: str) -> tuple[str | None, str]:
    """(anchor, path) of a launch's script as the project writes it (anchor None: as the
    launcher wrote it, from its own working directory)."""
    if written.startswith(UNKNOWN_FOLDER):
        return UNKNOWN_FOLDER, written.partition(_UNKNOWN_END)[2]
    if written.startswith(_IMAGE_SPEC):
        return IMAGE, written.partition(">")[2]
    for anchor in _ANCHORS:
        if written.startswith(anchor):
            return anchor, written[len(anchor) :].removeprefix("/" if anchor != IMAGE else "")
    return None, written


def as_written(written: str) -> str:
    """The script's path as its launcher wrote it (for messages)."""
    anchor, path = anchored(written)
    return path if anchor in (REPOSITORY_ROOT, IMAGE, UNKNOWN_FOLDER) else written


def split_function(written: str) -> tuple[str, str | None]:
    """(script, function) of a launch as written (function None: the script's top)."""
    script, mark, function = written.partition(_FUNCTION_MARK)
    return (script, function) if mark and function else (written, None)


@dataclass(frozen=True)
class Program:
    """One row of the table: how a program's words read."""

    name: str
    role: Role
    value_options: frozenset[str] = frozenset()
    pair_options: frozenset[str] = frozenset()
    env_options: frozenset[str] = frozenset()
    unset_options: frozenset[str] = frozenset()
    shell_options: frozenset[str] = frozenset()
    module_options: frozenset[str] = frozenset()
    code_options: frozenset[str] = frozenset()
    modules: tuple[tuple[str, str], ...] = ()
    positionals: int = 0
    subcommands: frozenset[str] = frozenset()
    assignments: bool = False
    separator: str | None = None
    only_options: bool = False
    container: bool = False  # runs the command in a container (`docker run IMAGE`)
    workdir_options: frozenset[str] = frozenset()  # the container's working folder

    def knows(self, option: str) -> bool:
        return bool(self.takes(option)) or option in self.code_options

    def takes(self, option: str) -> int:
        """How many following words `option` consumes as its value."""
        if option in self.pair_options:
            return 2
        consumers = (
            self.value_options
            | self.env_options
            | self.unset_options
            | self.shell_options
            | self.module_options
        )
        return 1 if option in consumers else 0


@dataclass(frozen=True)
class EnvSetting:
    """A variable a command sets or removes for the program it runs."""

    index: int  # the word that holds the name
    name: str
    value: str | None  # None: not known statically (or passed on from the caller)
    action: Literal["set", "unset", "pass"]
    via: str  # the program that applies it: "env", "mpirun", "docker"...
    name_offset: int = 0  # where the name starts in its word (`-uNAME`, `--unset=NAME`)
    option: bool = False  # the value of an option (`-x X=1`), not a word of its own (`env X=1`)


@dataclass(frozen=True)
class Launch:
    """What one command line runs, as far as its words tell."""

    programs: tuple[str, ...] = ()  # the chain, outermost first: ("srun", "torchrun")
    script: str | None = None  # as written
    script_index: int | None = None
    language: Language | None = None
    module: str | None = None  # python -m MODULE (not a launcher's own module)
    arguments: tuple[str | None, ...] = ()
    env: tuple[EnvSetting, ...] = ()
    shell_strings: tuple[int, ...] = ()  # words that are shell command lines (bash -c STRING)
    remote: bool = False  # runs on another machine (ssh): its environment is not this one's

    @property
    def python_script(self) -> str | None:
        return self.script if self.language == "python" else None


@dataclass
class _Reading:
    programs: list[str] = field(default_factory=list)
    env: list[EnvSetting] = field(default_factory=list)
    shell_strings: list[int] = field(default_factory=list)
    module: str | None = None
    remote: bool = False
    # the command runs in a container: the image (`NAMED` and its name; None: not known) and
    # the folder its command starts in (None: the image's WORKDIR)
    container: tuple[str | None, str | None] | None = None

    written: Sequence[str] = ()

    def done(
        self,
        words: Sequence[str | None],
        script: int | None = None,
        language: Language | None = None,
    ) -> Launch:
        name = None
        if script is not None:
            name = words[script]
            if name is None and script < len(self.written):
                name = self.written[script]
        if name is not None and self.container is not None:
            image, workdir = self.container
            name = in_image(name, workdir, image)
        return Launch(
            programs=tuple(self.programs),
            script=name,
            script_index=script,
            language=language if script is not None else None,
            module=self.module,
            arguments=tuple(words[script + 1 :]) if script is not None else (),
            env=tuple(self.env),
            shell_strings=tuple(self.shell_strings),
            remote=self.remote,
        )


def launch(words: Sequence[str | None], written: Sequence[str] = ()) -> Launch:
    """What the command of `words` runs. A word is its value after quote removal, None when it
    expands something (`$ARGS`, `$DIR/train.py`); `written` has the words as written, for a
    script named through a variable. An unknown program ends the reading."""
    reading = _Reading(written=written)
    index = 0
    while index < len(words):
        word = words[index]
        if word is None:
            return reading.done(words)
        program = program_named(os.path.basename(word))
        if program is None:
            language = script_language(word)
            return reading.done(words, index if language else None, language)
        reading.programs.append(program.name)
        next_command = _read_program(program, words, index + 1, reading)
        if isinstance(next_command, Launch):
            return next_command
        if next_command is None:
            return reading.done(words)
        index = next_command
    return reading.done(words)


def wrapped_command(words: Sequence[str]) -> tuple[int | None, tuple[EnvSetting, ...]]:
    """For a wrapper's command line (`mpirun -np 4 -x A=1 ./run.sh`): the index of the word
    that starts the command it runs (None: not known) and the variables it sets for it."""
    program = program_named(os.path.basename(words[0])) if words else None
    if program is None or program.role != "wrapper":
        return None, ()
    reading = _Reading(written=words)
    start = _read_program(program, words, 1, reading)
    return (start if isinstance(start, int) and start < len(words) else None), tuple(reading.env)


def _read_program(
    program: Program, words: Sequence[str | None], index: int, reading: _Reading
) -> int | Launch | None:
    """Reads one program's own words from `index`: the index where the command it runs starts
    (a wrapper), the Launch it makes (a script), or None (nothing more to know)."""
    subcommand = None
    if program.subcommands:
        if index >= len(words) or words[index] not in program.subcommands:
            return None
        subcommand = words[index]
        index += 1
    if program.container:
        reading.container = (None, None)
    positionals = program.positionals
    assigned = False  # after `env X=1`, a word is the command, even one that starts with -
    unknown: int | None = None  # the last word read as options from a variable
    while index < len(words):
        word = words[index]
        if word is None:
            if positionals:
                if program.container and subcommand == "run" and reading.container is not None:
                    written = reading.written[index] if index < len(reading.written) else ""
                    variable = variable_reference(written)  # (`docker run "$IMAGE" ...`)
                    named = f"{NAMED}${variable}" if variable is not None else None
                    reading.container = (named, reading.container[1])
                positionals -= 1
                index += 1
                continue
            if program.role in ("python", "launcher") and _named_script(words, index, reading):
                break
            if program.role in ("python", "launcher") or _program_later(words, index):
                unknown = index  # options from a variable (`torchrun $DISTRIBUTED_ARGS train.py`)
                index += 1
                continue
            return None  # the command itself comes from a variable: nothing more is known
        if program.separator is not None:
            if word == program.separator:
                return index + 1
            index += 1
            continue
        if program.assignments and _ASSIGNMENT.match(word):
            name, _, value = word.partition("=")
            reading.env.append(EnvSetting(index, name, value, "set", program.name))
            assigned = True
            index += 1
            continue
        if assigned:
            break
        if word == "--":
            index += 1
            break
        if word.startswith(("-", "+")) and len(word) > 1:
            consumed = _option(program, words, index, reading)
            if isinstance(consumed, Launch):
                return consumed
            index = consumed
            continue
        if positionals or program.only_options:
            if program.role == "remote":
                reading.remote = True
            if program.container and subcommand == "run" and reading.container is not None:
                named = f"{NAMED}{word}" if "$" not in word and ";" not in word else None
                reading.container = (named, reading.container[1])
            positionals = max(0, positionals - 1)
            index += 1
            continue
        break
    if program.only_options:
        return None
    if program.role == "wrapper":
        return index
    if index >= len(words):
        return None
    if program.role == "remote":
        reading.remote = True
        if index == len(words) - 1:
            reading.shell_strings.append(index)
        return None
    if program.role in ("shell", "batch"):
        return reading.done(words, index, "shell")
    return reading.done(words, _script_word(words, index, reading.written, unknown), "python")


def _option(
    program: Program, words: Sequence[str | None], index: int, reading: _Reading
) -> int | Launch:
    """Reads the option at `index`; the index after it and its values (or the Launch it ends)."""
    word = words[index]
    assert word is not None
    raw_name, equals, attached = word.partition("=")
    option = _normal(raw_name)
    if not equals and not option.startswith("--"):
        short = _attached_short(program, option)
        if short is not None:  # -uNAME, -mmodule
            option, attached, equals = short, word[len(short) :], "="
        elif len(option) > 2 and option[1:].isalpha() and program.knows("-" + option[-1]):
            option = "-" + option[-1]  # a bundle of flags whose last one takes a value: -lc
    value_index = index if equals else index + 1
    value = attached if equals else (words[index + 1] if index + 1 < len(words) else None)
    offset = len(word) - len(attached) if equals else 0
    if option in program.workdir_options and reading.container is not None and value:
        reading.container = (reading.container[0], value)
    if option in program.env_options or option in program.unset_options:
        if value is not None:
            name, has_value, setting = value.partition("=")
            if _NAME.fullmatch(name):
                action: Literal["set", "unset", "pass"] = (
                    "unset" if option in program.unset_options else "set" if has_value else "pass"
                )
                reading.env.append(
                    EnvSetting(
                        value_index,
                        name,
                        setting if has_value else None,
                        action,
                        program.name,
                        offset,
                        option=True,
                    )
                )
    elif option in program.shell_options:
        if value_index < len(words):
            reading.shell_strings.append(value_index)
        if program.role == "shell":  # bash -c STRING [NAME [ARGS]]: the string is the command
            return reading.done(words)
    elif option in program.code_options:
        return reading.done(words)  # python -c: code, not a script
    elif option in program.module_options:
        if value is None:
            return reading.done(words)
        launcher = dict(program.modules).get(value)
        if launcher is not None:  # python -m torch.distributed.run: that launcher's words follow
            reading.programs.append(launcher)
            following = _read_program(_table()[launcher], words, value_index + 1, reading)
            if isinstance(following, int):
                return launch_tail(words, following, reading)
            return following if isinstance(following, Launch) else reading.done(words)
        reading.module = value
        return reading.done(words)
    if equals:
        return index + 1
    return index + 1 + program.takes(option)


def launch_tail(words: Sequence[str | None], index: int, reading: _Reading) -> Launch:
    """The launch of the command that starts at `index`, after what `reading` has read."""
    tail = launch(words[index:], reading.written[index:])
    shift = index
    return Launch(
        programs=(*reading.programs, *tail.programs),
        script=tail.script,
        script_index=tail.script_index + shift if tail.script_index is not None else None,
        language=tail.language,
        module=tail.module,
        arguments=tail.arguments,
        env=(*reading.env, *(_shifted(e, shift) for e in tail.env)),
        shell_strings=(*reading.shell_strings, *(i + shift for i in tail.shell_strings)),
        remote=reading.remote or tail.remote,
    )


def _shifted(setting: EnvSetting, shift: int) -> EnvSetting:
    return EnvSetting(
        setting.index + shift,
        setting.name,
        setting.value,
        setting.action,
        setting.via,
        setting.name_offset,
        setting.option,
    )


def _attached_short(program: Program, option: str) -> str | None:
    """`-uNAME`: the short option that takes a value, when one starts the word."""
    if len(option) <= 2 or program.knows(option):
        return None
    head = option[:2]
    takes_value = program.takes(head) or head in program.code_options
    return head if takes_value else None


def _script_word(
    words: Sequence[str | None],
    index: int,
    written: Sequence[str] = (),
    unknown: int | None = None,
) -> int | None:
    """The script among a Python launcher's words from its first positional: that word when it
    names a .py file, else the first later word that does (an option the table does not know
    may have taken a value). Where no word names one, the first positional is the script,
    unless a word before it comes from a variable (`unknown`): that word is the script then,
    and the positional one of its arguments (`torchrun "$SCRIPT" --steps 20`)."""
    for position in range(index, len(words)):
        word = words[position] if words[position] is not None else _written(written, position)
        if word == "--":
            break
        if word is not None and _names_python(word):
            return position
    if unknown is not None:
        return unknown
    first = words[index]
    return index if first is not None and not first.startswith("-") else None


def _names_python(word: str) -> bool:
    """Whether the word, as written or as its value, names a .py file (`"$DIR/train.py"`)."""
    unquoted = word.replace('"', "").replace("'", "")
    return unquoted.endswith(".py") and not unquoted.startswith("-")


def _written(written: Sequence[str], index: int) -> str | None:
    return written[index] if index < len(written) else None


def _named_script(words: Sequence[str | None], index: int, reading: _Reading) -> bool:
    """Whether the unknown word at `index` is the script, named through a variable."""
    name = _written(reading.written, index)
    return name is not None and _names_python(name)


def _program_later(words: Sequence[str | None], index: int) -> bool:
    """Whether a known program follows: an unknown word before it is a wrapper's options."""
    return any(w is not None and program_named(os.path.basename(w)) for w in words[index + 1 :])


def script_language(word: str) -> Language | None:
    """A script run by its own name (`./train.py`, `scripts/run.sh`)."""
    return _SCRIPT_SUFFIXES.get(os.path.splitext(word)[1])


def program_named(name: str) -> Program | None:
    table = _table()
    program = table.get(name)
    if program is None:
        versioned = re.fullmatch(r"(python)[0-9][0-9.]*", name)
        program = table.get(versioned.group(1)) if versioned else None
    return program


def _normal(option: str) -> str:
    return option.replace("_", "-") if option.startswith("--") else option


@cache
def _table() -> dict[str, Program]:
    data = read_toml(rules_directory().joinpath(LAUNCHERS_FILE))
    table: dict[str, Program] = {}
    for row in data["program"]:
        for name in row["names"]:
            table[name] = _program(name, row)
    return table


def _program(name: str, row: dict[str, Any]) -> Program:
    def options(key: str) -> frozenset[str]:
        return frozenset(_normal(option) for option in row.get(key, ()))

    return Program(
        name=name,
        role=row["role"],
        value_options=options("value_options"),
        pair_options=options("pair_options"),
        env_options=options("env_options"),
        unset_options=options("unset_options"),
        shell_options=options("shell_options"),
        module_options=options("module_options"),
        code_options=options("code_options"),
        modules=tuple(row.get("modules", {}).items()),
        positionals=row.get("positionals", 0),
        subcommands=frozenset(row.get("subcommands", ())),
        assignments=row.get("assignments", False),
        separator=row.get("separator"),
        only_options=row.get("only_options", False),
        container=row.get("container", False),
        workdir_options=options("workdir_options"),
    )
