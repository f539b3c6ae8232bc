"""What an image runs: per instruction, the Python scripts started by the command of every image
that inherits its stage's environment (the stage itself and the stages built FROM it), read by
the launch model from ENTRYPOINT and CMD as Docker combines them."""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass, field

from xlamigrate.kinds.dockerfile.execform import exec_words
from xlamigrate.kinds.dockerfile.parse import Instruction, from_stage
from xlamigrate.kinds.embedded import Embedded
from xlamigrate.kinds.launch import launch
from xlamigrate.kinds.shell.analysis import launches

_SHELL = (Embedded.whole("/bin/sh"), Embedded.whole("-c"))  # what runs a shell-form command


@dataclass
class Stages:
    """The build stages of a Dockerfile: each one's base stage (FROM an earlier stage's name),
    its own CMD/ENTRYPOINT and ENV/WORKDIR instructions, and the stage of every instruction."""

    stage_of: list[int] = field(default_factory=list)
    bases: list[int | None] = field(default_factory=list)
    commands: list[dict[str, Instruction]] = field(default_factory=list)
    settings: list[list[Instruction]] = field(default_factory=list)  # ENV and WORKDIR, in order

    @classmethod
    def of(cls, instructions: Sequence[Instruction]) -> Stages:
        stages = cls()
        names: list[str] = []
        for instruction in instructions:
            if instruction.keyword == "FROM" and not instruction.onbuild:
                image, name = from_stage(instruction)
                stages.bases.append(names.index(image) if image in names else None)
                names.append(name)
                stages.commands.append({})
                stages.settings.append([])
            elif stages.commands and not instruction.onbuild:
                if instruction.keyword in ("CMD", "ENTRYPOINT"):
                    stages.commands[-1][instruction.keyword] = instruction
                elif instruction.keyword in ("ENV", "WORKDIR"):
                    stages.settings[-1].append(instruction)
            stages.stage_of.append(len(stages.commands) - 1)
        return stages

    def effective(self, stage: int, keyword: str) -> Instruction | None:
        """The CMD or ENTRYPOINT an image of `stage` runs (its own, or its base's)."""
        own = self.commands[stage]
        if keyword in own:
            return own[keyword]
        if keyword == "CMD" and "ENTRYPOINT" in own:
            return None  # a stage's ENTRYPOINT resets the CMD it inherits
        base = self.bases[stage]
        return None if base is None else self.effective(base, keyword)

    def inherits(self, stage: int, ancestor: int) -> bool:
        base: int | None = stage
        while base is not None:
            if base == ancestor:
                return True
            base = self.bases[base]
        return False

    def inherited_settings(self, stage: int) -> list[Instruction]:
        """The ENV and WORKDIR instructions an image of `stage` has, its bases' first."""
        base = self.bases[stage]
        return [*(self.inherited_settings(base) if base is not None else ()), *self.settings[stage]]


def image_scripts(instructions: Sequence[Instruction]) -> list[tuple[str, ...]]:
    """Per instruction, the scripts its stage's environment reaches."""
    stages = Stages.of(instructions)
    count = len(stages.commands)
    runs = [
        _scripts(stages.effective(s, "ENTRYPOINT"), stages.effective(s, "CMD"))
        for s in range(count)
    ]
    per_stage = [
        tuple(
            dict.fromkeys(
                script
                for other in range(count)
                if stages.inherits(other, stage)
                for script in runs[other]
            )
        )
        for stage in range(count)
    ]
    return [per_stage[stage] if stage >= 0 else () for stage in stages.stage_of]


def workdirs(instructions: Sequence[Instruction]) -> list[str | None]:
    """Per instruction, the working directory a RUN there runs in (its stage's WORKDIR so far,
    its bases' first; None where a variable sets it)."""
    stages = Stages.of(instructions)
    current: list[str | None] = []
    out: list[str | None] = []
    for index, instruction in enumerate(instructions):
        stage = stages.stage_of[index]
        if instruction.keyword == "FROM" and not instruction.onbuild:
            base = stages.bases[stage]
            current.append(current[base] if base is not None else "/")
        elif instruction.keyword == "WORKDIR" and not instruction.onbuild and stage >= 0:
            current[stage] = moved(current[stage], instruction.args.text.strip())
        out.append(current[stage] if stage >= 0 else None)
    return out


def moved(workdir: str | None, written: str) -> str | None:
    """The WORKDIR after `WORKDIR written` from `workdir` (None: not known, or a variable)."""
    if "$" in written or not written:
        return None
    if written.startswith("/"):
        return posixpath.normpath(written)
    return None if workdir is None else posixpath.normpath(posixpath.join(workdir, written))


def image_argv(
    entrypoint: Instruction | None, command: Instruction | None, arguments: Sequence[str] = ()
) -> list[str]:
    """The argv of a container of the image, as Docker combines ENTRYPOINT and CMD (`arguments`,
    given to `docker run`, replace CMD); a shell form runs under `/bin/sh -c`."""
    tail = list(arguments) if arguments else [w.text for w in _argv(command)] if command else []
    if entrypoint is None:
        return tail
    words = [word.text for word in _argv(entrypoint)]
    return words + tail if exec_words(entrypoint.args) is not None else words


def _scripts(entrypoint: Instruction | None, command: Instruction | None) -> tuple[str, ...]:
    """The scripts of ENTRYPOINT + CMD: an exec-form ENTRYPOINT takes CMD as its arguments (and
    an entrypoint script usually ends with `exec "$@"`, so CMD's own launch counts too); a
    shell-form one ignores CMD."""
    if entrypoint is None:
        return _python_scripts(_argv(command)) if command is not None else ()
    words = _argv(entrypoint)
    if exec_words(entrypoint.args) is None or command is None:
        return _python_scripts(words)
    arguments = _argv(command)
    return (*_python_scripts([*words, *arguments]), *_python_scripts(arguments))


def _argv(instruction: Instruction) -> list[Embedded]:
    words = exec_words(instruction.args)
    return list(words) if words is not None else [*_SHELL, instruction.args]


def _python_scripts(words: Sequence[Embedded]) -> tuple[str, ...]:
    """The Python scripts a command runs, through the shell strings it hands to a shell."""
    made = launch([word.text for word in words])
    found = [made, *(inner for index in made.shell_strings for inner in launches(words[index]))]
    return tuple(m.python_script for m in found if m.python_script is not None)
