"""What an image runs: per instruction, the Python scripts started by the command of every image
that inherits its stage's environment (the stage itself and the stages built FROM it), read by
the launch model from ENTRYPOINT and CMD as Docker combines them."""

from __future__ import annotations

from collections.abc import Sequence

from xlamigrate.kinds.dockerfile.execform import exec_words
from xlamigrate.kinds.dockerfile.parse import Instruction, from_stage
from xlamigrate.kinds.embedded import Embedded
from xlamigrate.kinds.launch import launch
from xlamigrate.kinds.shell.analysis import launches

_SHELL = (Embedded.whole("/bin/sh"), Embedded.whole("-c"))  # what runs a shell-form command


def image_scripts(instructions: Sequence[Instruction]) -> list[tuple[str, ...]]:
    """Per instruction, the scripts its stage's environment reaches."""
    stage_of: list[int] = []
    names: list[str] = []
    bases: list[int | None] = []
    commands: list[dict[str, Instruction]] = []
    for instruction in instructions:
        if instruction.keyword == "FROM" and not instruction.onbuild:
            image, name = from_stage(instruction)
            bases.append(names.index(image) if image in names else None)
            names.append(name)
            commands.append({})
        elif instruction.keyword in ("CMD", "ENTRYPOINT") and commands and not instruction.onbuild:
            commands[-1][instruction.keyword] = instruction
        stage_of.append(len(commands) - 1)

    def effective(stage: int, keyword: str) -> Instruction | None:
        own = commands[stage]
        if keyword in own:
            return own[keyword]
        if keyword == "CMD" and "ENTRYPOINT" in own:
            return None  # a stage's ENTRYPOINT resets the CMD it inherits
        base = bases[stage]
        return None if base is None else effective(base, keyword)

    def inherits(stage: int, ancestor: int) -> bool:
        base: int | None = stage
        while base is not None:
            if base == ancestor:
                return True
            base = bases[base]
        return False

    runs = [_scripts(effective(s, "ENTRYPOINT"), effective(s, "CMD")) for s in range(len(commands))]
    per_stage = [
        tuple(
            dict.fromkeys(
                script
                for other in range(len(commands))
                if inherits(other, stage)
                for script in runs[other]
            )
        )
        for stage in range(len(commands))
    ]
    return [per_stage[stage] if stage >= 0 else () for stage in stage_of]


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
