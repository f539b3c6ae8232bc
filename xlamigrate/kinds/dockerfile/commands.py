"""RUN, CMD and ENTRYPOINT. The shell text Docker hands to the shell (shell form, the script of
`RUN <<EOF` or `RUN bash <<EOF`, the `bash -c` string of exec form) is read by the one shell
engine, its findings and edits mapped back to the Dockerfile; exec form's own `env X=1 cmd`
settings come from the launch model."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence

from xlamigrate.flagvalue import FlagValue
from xlamigrate.kinds.dockerfile.execform import exec_words
from xlamigrate.kinds.dockerfile.parse import Instruction, tail
from xlamigrate.kinds.embedded import Embedded
from xlamigrate.kinds.launch import EnvSetting, Launch, launch, program_named
from xlamigrate.kinds.shell.analysis import analyse_source, launches
from xlamigrate.kinds.textaccess import TextAccess, TextAnalysis, TextMention
from xlamigrate.neuronflags import NEURON_CC_FLAGS, STOCHASTIC_ROUNDING

COMMANDS = frozenset({"RUN", "CMD", "ENTRYPOINT"})
_RUN_FLAG = re.compile(r"--[A-Za-z][A-Za-z0-9-]*(?:=\S*)?(?:[ \t]+|$)")  # RUN --mount=...
_SOURCING = frozenset({".", "source"})  # shells by role that read a file, not their stdin
_EXEC_NOTE = " (exec form: no shell to rewrite it, edit the list by hand)"


def command_analysis(
    instruction: Instruction, names: frozenset[str], note: str, shell: Sequence[str] = ()
) -> TextAnalysis:
    """The accesses of a RUN, CMD or ENTRYPOINT; `shell` is the stage's SHELL instruction (its
    exec-form words), empty for the default `/bin/sh -c`."""
    words = exec_words(instruction.args)
    if words is not None:
        return _exec_form(instruction, words, names, note)
    program = os.path.basename(shell[0]) if shell else "sh"
    known = program_named(program)
    if known is None or known.role != "shell":
        where = f"in a `{program}` command (not a POSIX shell: check it by hand)"
        return TextAnalysis(mentions=_mentions(instruction.args, names, where))
    return _shell_form(instruction, names, note)


def shell_command(instruction: Instruction) -> Embedded:
    """The command of a shell-form instruction: its text without RUN's own `--mount=...`."""
    args = instruction.args
    start = 0
    if instruction.keyword == "RUN":
        while flag := _RUN_FLAG.match(args.text, start):
            start = flag.end()
    return tail(args, start) if start else args


def _shell_form(instruction: Instruction, names: frozenset[str], note: str) -> TextAnalysis:
    command = shell_command(instruction)
    run = instruction.keyword == "RUN"
    heredocs = instruction.heredocs
    if not heredocs:
        return _read(instruction, command, names, note, whole=run, keep_command=not run)
    offset = len(instruction.args.text) - len(command.text)
    start, end = (index - offset for index in heredocs[0].marker)
    line = _without(command, start, end)
    made = launches(line)
    if not run or len(heredocs) != 1 or len(made) > 1 or (made and not _bare_shell(made[0])):
        # `cat <<EOF > file`, `python3 <<EOF`: Docker runs the line and its heredocs as one script
        script = _with_heredocs(instruction, command)
        return _read(instruction, script, names, note, whole=run, keep_command=not run)
    # `RUN <<EOF` or `RUN bash <<EOF`: the heredoc is the script itself (alone, run as its `#!`
    # line says)
    body = heredocs[0].body
    interpreter = None if made else _shebang(body.text)
    if interpreter is not None:
        where = f"in a `{interpreter}` script (check it by hand)"
        return _joined(
            _read(instruction, line, names, note),
            TextAnalysis(mentions=_mentions(body, names, where)),
        )
    return _joined(
        _read(instruction, line, names, note), _read(instruction, body, names, note, whole=True)
    )


def _read(
    instruction: Instruction,
    source: Embedded,
    names: frozenset[str],
    note: str,
    *,
    whole: bool = False,
    keep_command: bool = False,
) -> TextAnalysis:
    """The engine's reading of one shell text. With `whole`, removing the text's only command
    removes the instruction (a RUN); with `keep_command` (a CMD, an ENTRYPOINT) it becomes `:`."""
    if not any(name in source.text for name in names):
        return TextAnalysis()
    found = analyse_source(
        source,
        names,
        note=note,
        may_be_empty=not keep_command,
        whole=instruction.removal if whole else None,
    )
    problems = tuple(problem.within(instruction.keyword) for problem in found.problems)
    return TextAnalysis(found.accesses, problems, found.mentions)


def _exec_form(
    instruction: Instruction, words: Sequence[Embedded], names: frozenset[str], note: str
) -> TextAnalysis:
    """`["env", "X=1", "python", "t.py"]`: no shell expands a value here, so a setting is left to
    the user (the recipe's variable cannot be appended); `["bash", "-c", S]`: S is shell."""
    made = launch([word.text for word in words])
    scripts = (made.python_script,) if made.python_script else ()
    accesses = [
        _setting(words[setting.index], setting, scripts, note)
        for setting in made.env
        if setting.name in names and setting.index < len(words)
    ]
    results = [TextAnalysis(tuple(accesses))]
    for index in made.shell_strings:
        results.append(_read(instruction, words[index], names, note))
    covered = {s.index for s in made.env if s.name in names} | set(made.shell_strings)
    program = os.path.basename(words[0].text) if words else ""
    where = f"in an argument of `{program}` (exec form: no shell reads it)"
    for index, word in enumerate(words):
        if index not in covered:
            results.append(TextAnalysis(mentions=_mentions(word, names, where)))
    return _joined(*results)


def _setting(
    word: Embedded, setting: EnvSetting, scripts: tuple[str, ...], note: str
) -> TextAccess:
    start, end = word.span(setting.name_offset, setting.name_offset + len(setting.name))
    unset = setting.action == "unset"
    return TextAccess(
        variable=setting.name,
        kind="delete" if unset else "write",
        form="env-command",
        value=None if unset else FlagValue(None if setting.value is None else (setting.value,)),
        start=start,
        end=end,
        launched=() if unset else scripts,
        note=note + _EXEC_NOTE,
        applicability="manual",
    )


def _bare_shell(made: Launch) -> bool:
    """A shell that reads its script from stdin: `bash`, `sh -e`."""
    if not made.programs or made.programs[-1] in _SOURCING:
        return False
    program = program_named(made.programs[-1])
    shell = program is not None and program.role == "shell"
    return shell and made.script is None and not made.shell_strings


def _shebang(script: str) -> str | None:
    """The interpreter of a script whose `#!` line names one that is not a shell."""
    if not script.startswith("#!"):
        return None
    words = script[2:].partition("\n")[0].split()
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
    if not words:
        return None
    name = os.path.basename(words[0])
    program = program_named(name)
    return None if program is not None and program.role == "shell" else name


def _without(text: Embedded, start: int, end: int) -> Embedded:
    """`text` without its characters start..end (the `<<EOF` of a script's command line)."""
    kept = [i for i in range(len(text.text)) if not start <= i < end]
    if not kept:
        return Embedded.slice(text.host, text.start_of(0), text.start_of(0), text.encodings)
    pieces = [(text.text[i], text.start_of(i), text.end_of(i + 1)) for i in kept]
    return Embedded.mapped(text.host, pieces, text.encodings)


def _with_heredocs(instruction: Instruction, command: Embedded) -> Embedded:
    """The command line, then its heredocs as the file holds them: the script Docker runs."""
    host = command.host
    body_start = instruction.heredocs[0].body.start_of(0)
    pieces = [
        (command.text[i], command.start_of(i), command.end_of(i + 1))
        for i in range(len(command.text))
    ]
    pieces.append(("\n", body_start - 1, body_start))
    pieces.extend((host[o], o, o + 1) for o in range(body_start, instruction.stop))
    return Embedded.mapped(host, pieces, command.encodings)


def _mentions(source: Embedded, names: Iterable[str], where: str) -> tuple[TextMention, ...]:
    """A flag's name in text no reader follows, reported for review."""
    found = []
    for name in sorted(set(names) - {NEURON_CC_FLAGS, STOCHASTIC_ROUNDING}):
        pattern = rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])"
        for match in re.finditer(pattern, source.text):
            start, end = source.span(match.start(), match.end())
            found.append(TextMention(name, start, end, where))
    return tuple(found)


def _joined(*analyses: TextAnalysis) -> TextAnalysis:
    return TextAnalysis(
        tuple(a for analysis in analyses for a in analysis.accesses),
        tuple(p for analysis in analyses for p in analysis.problems),
        tuple(m for analysis in analyses for m in analysis.mentions),
    )
