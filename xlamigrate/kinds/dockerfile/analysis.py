"""Dockerfiles: `ENV` and `ARG` assignments (`ENV A=1 B=2`, legacy `ENV A 1`), `RUN`, `CMD`
and `ENTRYPOINT` commands that set a flag (`X=1 cmd`, `export X=1`, `env X=1 cmd`; see
`dockerfile_shell.py`), `$X` reads, and the Python scripts the image's command launches with
that environment. The text is read into instructions by `dockerfile_parse.py`."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace

from xlamigrate.flagvalue import FlagValue
from xlamigrate.kinds.dockerfile.parse import (
    KEYWORDS,
    Instruction,
    Text,
    Unparsable,
    docker_value,
    docker_words,
    item_removals,
    parse,
)
from xlamigrate.kinds.dockerfile.shell import (
    SHELL_ASSIGNMENT,
    Context,
    py_scripts,
    runs_heredoc,
    shell_accesses,
    shell_tokens,
    shell_words,
)
from xlamigrate.kinds.textaccess import TextAccess, TextAnalysis
from xlamigrate.neuronflags import NEURON_CC_FLAGS

# Values written without quotes (the legacy ENV form also takes single spaces between words).
_BARE = re.compile(r"[A-Za-z0-9_./:=,+@%-]*")
_BARE_WORDS = re.compile(r"[A-Za-z0-9_./:=,+@%-]+(?: [A-Za-z0-9_./:=,+@%-]+)*")


def analyse(text: str, names: frozenset[str]) -> TextAnalysis:
    parsed = parse(text)
    launched_by = _image_scripts(parsed.instructions)
    accesses: list[TextAccess] = []
    problems = list(parsed.problems)
    for index, instruction in enumerate(parsed.instructions):
        if not instruction.mentions(text, names):
            continue
        if instruction.keyword not in KEYWORDS:
            problems.append((instruction.line, f"unknown instruction {instruction.keyword}"))
            continue
        try:
            found = _instruction_accesses(text, instruction, names, parsed.escape)
        except Unparsable as error:
            problems.append((instruction.line, f"{instruction.keyword}: {error}"))
            found = []
        if instruction.keyword == "ENV" and not instruction.onbuild:
            found = [replace(a, launched=launched_by[index]) for a in found]
        accesses.extend(found)
        accesses.extend(_reads(instruction, names, parsed.escape))
    accesses.sort(key=lambda access: (access.start, access.end))
    return TextAnalysis(tuple(accesses), tuple(sorted(problems, key=lambda p: p[0] or 0)))


def render(syntax: str, name: str, value: str, append: bool = False) -> str:
    """`NAME=VALUE` (or the legacy `NAME VALUE`) as the instruction spells it; `append` adds
    `value` to what the environment already holds."""
    form, *options = syntax.split()
    escape = next((o.removeprefix("escape=") for o in options if o.startswith("escape=")), "\\")
    if form == "shell":
        if append:
            return f'{name}="${{{name}}} {_shell_escape(value)}"'
        return f"{name}={_shell_quote(value)}"
    quoted = _docker_escape(value, escape)
    if "legacy" in options:
        if append:
            return f"{name} ${{{name}}} {quoted}"
        return f"{name} {value}" if _BARE_WORDS.fullmatch(value) else f'{name} "{quoted}"'
    if append:
        return f'{name}="${{{name}}} {quoted}"'
    return f"{name}={value}" if _BARE.fullmatch(value) else f'{name}="{quoted}"'


def _shell_quote(value: str) -> str:
    if _BARE.fullmatch(value):
        return value
    return f'"{_shell_escape(value)}"'


def _shell_escape(value: str) -> str:
    return re.sub(r'(["$`\\])', r"\\\1", value)


def _docker_escape(value: str, escape: str) -> str:
    return "".join(escape + c if c in ('"', "$", escape) else c for c in value)


def _image_scripts(instructions: Sequence[Instruction]) -> list[tuple[str, ...]]:
    """Per instruction: the Python scripts launched by the CMD/ENTRYPOINT of every image that
    inherits its stage's environment (the stage itself and the stages built FROM it)."""
    stage_of: list[int] = []
    names: list[str] = []
    bases: list[int | None] = []
    commands: list[dict[str, tuple[str, ...]]] = []
    for instruction in instructions:
        if instruction.keyword == "FROM" and not instruction.onbuild:
            words = [w for w in instruction.args.chars.split() if not w.startswith("--")]
            image = words[0].lower() if words else ""
            bases.append(names.index(image) if image in names else None)
            names.append(words[2].lower() if len(words) >= 3 and words[1].lower() == "as" else "")
            commands.append({})
        elif instruction.keyword in ("CMD", "ENTRYPOINT") and commands and not instruction.onbuild:
            commands[-1][instruction.keyword] = _launch_scripts(instruction.args.chars)
        stage_of.append(len(commands) - 1)

    def effective(stage: int, keyword: str) -> tuple[str, ...]:
        base = bases[stage]
        if keyword in commands[stage] or base is None:
            return commands[stage].get(keyword, ())
        return effective(base, keyword)

    def inherits(stage: int, ancestor: int) -> bool:
        base: int | None = stage
        while base is not None:
            if base == ancestor:
                return True
            base = bases[base]
        return False

    per_stage = []
    for stage in range(len(commands)):
        scripts = [
            script
            for other in range(len(commands))
            if inherits(other, stage)
            for keyword in ("ENTRYPOINT", "CMD")
            for script in effective(other, keyword)
        ]
        per_stage.append(tuple(dict.fromkeys(scripts)))
    return [per_stage[stage] if stage >= 0 else () for stage in stage_of]


def _launch_scripts(args: str) -> tuple[str, ...]:
    """The `.py` scripts of a CMD or ENTRYPOINT, exec form (`["python", "x.py"]`) or shell."""
    words: list[str | None]
    try:
        parsed = json.loads(args) if args.lstrip().startswith("[") else None
    except ValueError:
        parsed = None
    if isinstance(parsed, list) and all(isinstance(word, str) for word in parsed):
        words = list(parsed)
    else:
        try:
            words = [w.value for w in shell_words(args, shell_tokens(args))]
        except Unparsable:
            return ()
    return tuple(script for word in words for script in py_scripts(word))


def _instruction_accesses(
    text: str, instruction: Instruction, names: frozenset[str], escape: str
) -> list[TextAccess]:
    keyword = instruction.keyword
    note = " in an ONBUILD instruction (images built from this one get it)" * instruction.onbuild
    if keyword in ("ENV", "ARG"):
        if keyword == "ARG":
            note += " as a build argument (only RUN steps see it, not the image's command)"
        return _assignments(instruction, Context(text, names, escape, keyword, note))
    if keyword not in ("RUN", "CMD", "ENTRYPOINT"):
        return []
    context = Context(text, names, escape, keyword, note)
    if instruction.args.chars.lstrip().startswith("["):
        try:
            exec_form = json.loads(instruction.args.chars)
        except ValueError:
            exec_form = None
        if isinstance(exec_form, list):
            return _exec_form(instruction.args, context)
    accesses = shell_accesses(instruction.args, context, instruction.removal, docker_flags=True)
    if keyword == "RUN" and len(instruction.heredocs) == 1 and runs_heredoc(instruction.args):
        accesses.extend(shell_accesses(instruction.heredocs[0].body, context, None))
    return accesses


def _assignments(instruction: Instruction, context: Context) -> list[TextAccess]:
    """`ENV A=1 B=2`, legacy `ENV A 1`, `ARG A=1 B`."""
    args = instruction.args
    spans = docker_words(args.chars, context.escape)
    if not spans:
        return []
    if context.form == "ENV" and "=" not in args.chars[spans[0][0] : spans[0][1]]:
        return _legacy_env(instruction, context)
    items: list[tuple[int, int, str]] = []
    for start, end in spans:
        raw = args.chars[start:end]
        if raw.startswith("#"):
            break  # a trailing comment (for a suppression): Docker rejects it, the user meant one
        if "=" not in raw and context.form == "ENV":
            raise Unparsable(f"expected NAME=VALUE, found {raw!r}")
        items.append((start, end, raw.partition("=")[0]))
    removable = [name in context.names and name != NEURON_CC_FLAGS for _, _, name in items]
    removals = item_removals(
        args, [(s, e) for s, e, _ in items], removable, instruction.keyword_end, instruction.removal
    )
    accesses = []
    for (start, end, name), removal in zip(items, removals, strict=True):
        if name not in context.names:
            continue
        raw = args.chars[start:end]
        has_value = "=" in raw
        value = docker_value(raw[len(name) + 1 :], context.escape) if has_value else None
        value_start = start + len(name) + 1
        accesses.append(
            TextAccess(
                variable=name,
                kind="write",
                form=context.form,
                value=FlagValue((value,) if value is not None else None),
                start=args.at(start),
                end=args.after(start + len(name)),
                assignment=(args.at(start), args.after(end)),
                value_range=(args.after(value_start), args.after(end)) if has_value else None,
                removal=removal,
                container=instruction.removal if all(removable) else None,
                syntax=_syntax(context.form, context.escape),
                note=context.note,
            )
        )
    return accesses


def _legacy_env(instruction: Instruction, context: Context) -> list[TextAccess]:
    """`ENV NAME the rest of the line`: one variable, its value everything after the name."""
    args = instruction.args
    match = re.match(r"[ \t]*(\S+)[ \t]*(.*?)[ \t]*$", args.chars)
    assert match is not None  # the caller found a first word
    name = match.group(1)
    if name not in context.names:
        return []
    if not match.group(2):
        raise Unparsable(f"{name} has no value (ENV NAME VALUE or ENV NAME=VALUE)")
    value = docker_value(match.group(2), context.escape)
    return [
        TextAccess(
            variable=name,
            kind="write",
            form="ENV",
            value=FlagValue((value,) if value is not None else None),
            start=args.at(match.start(1)),
            end=args.after(match.end(1)),
            assignment=(args.at(match.start(1)), args.after(match.end(2))),
            value_range=(args.at(match.start(2)), args.after(match.end(2))),
            removal=instruction.removal,
            syntax=_syntax("ENV", context.escape, "legacy"),
            note=context.note,
        )
    ]


def _syntax(form: str, escape: str, *options: str) -> str:
    escaped = () if escape == "\\" else (f"escape={escape}",)
    return " ".join((form, *options, *escaped))


def _reads(instruction: Instruction, names: frozenset[str], escape: str) -> list[TextAccess]:
    """`$NAME` and `${NAME...}` expansions, in the instruction and the heredocs that expand."""
    texts = [instruction.args]
    texts.extend(h.body for h in instruction.heredocs if h.expands)
    reads = []
    for text in texts:
        for match in re.finditer(r"\$(\{?)([A-Za-z_][A-Za-z0-9_]*)", text.chars):
            name = match.group(2)
            escaped = match.start() > 0 and text.chars[match.start() - 1] in (escape, "\\")
            if name not in names or escaped:
                continue
            end = match.end()
            if match.group(1):
                closing = text.chars.find("}", end)
                end = end if closing == -1 else closing + 1
            reads.append(
                TextAccess(
                    variable=name,
                    kind="read",
                    form="expansion",
                    value=None,
                    start=text.at(match.start()),
                    end=text.after(end),
                )
            )
    return reads


def _exec_form(args: Text, context: Context) -> list[TextAccess]:
    """`["env", "X=1", "python", "train.py"]`: no shell to expand a value, so a write here is
    left to the user (removing it alone is easy, but the recipe's variable cannot be appended)."""
    strings = list(re.finditer(r'"(?:[^"\\]|\\.)*"', args.chars))
    try:
        values = [str(json.loads(match.group())) for match in strings]
    except ValueError:
        return []
    if not values or values[0].rsplit("/", 1)[-1] != "env":
        return []
    accesses = []
    for position, (match, value) in enumerate(zip(strings, values, strict=True)):
        if position == 0 or value.startswith("-"):
            continue
        if not SHELL_ASSIGNMENT.match(value):
            break
        name = value.partition("=")[0]
        if name in context.names and match.group().startswith(f'"{name}='):
            start = match.start() + 1
            accesses.append(
                TextAccess(
                    variable=name,
                    kind="write",
                    form=context.form,
                    value=FlagValue((value.partition("=")[2],)),
                    start=args.at(start),
                    end=args.after(start + len(name)),
                    launched=tuple(s for v in values[position + 1 :] for s in py_scripts(v)),
                    note=context.note,
                )
            )
    return accesses
