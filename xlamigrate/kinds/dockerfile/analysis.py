"""Dockerfiles: `ENV` and `ARG` assignments (`ENV A=1 B=2`, legacy `ENV A 1`) and their
`${X}` expansions, read here; the commands of `RUN`, `CMD` and `ENTRYPOINT` (see `commands.py`),
read by the shell engine; and the Python scripts the image's command launches with the
environment (see `image.py`). The text is read into instructions by `parse.py`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from xlamigrate.flagvalue import FlagValue
from xlamigrate.kinds.dockerfile.commands import COMMANDS, command_analysis
from xlamigrate.kinds.dockerfile.execform import exec_words
from xlamigrate.kinds.dockerfile.image import image_scripts, workdirs
from xlamigrate.kinds.dockerfile.parse import (
    KEYWORDS,
    Instruction,
    Unparsable,
    docker_value,
    docker_words,
    from_stage,
    item_removals,
    parse,
)
from xlamigrate.kinds.launch import in_image
from xlamigrate.kinds.shell.auto_cast import auto_cast_none_edits
from xlamigrate.kinds.textaccess import (
    LineIndex,
    Problem,
    TextAccess,
    TextAnalysis,
    TextEdit,
    TextMention,
)
from xlamigrate.neuronflags import NEURON_CC_FLAGS

# Values written without quotes (the legacy ENV form also takes single spaces between words).
_BARE = re.compile(r"[A-Za-z0-9_./:=,+@%-]*")
_BARE_WORDS = re.compile(r"[A-Za-z0-9_./:=,+@%-]+(?: [A-Za-z0-9_./:=,+@%-]+)*")
_ONBUILD_NOTE = " in an ONBUILD instruction (images built from this one get it)"
_ARG_NOTE = " as a build argument (only RUN steps see it, not the image's command)"


@dataclass(frozen=True)
class _Context:
    """What every access found in one ENV or ARG instruction shares."""

    names: frozenset[str]
    escape: str
    form: str
    note: str = ""


def analyse(text: str, names: frozenset[str]) -> TextAnalysis:
    parsed = parse(text)
    accesses: list[TextAccess] = []
    mentions: list[TextMention] = []
    problems: list[Problem] = list(parsed.problems)
    shells = _shells(parsed.instructions)
    launched_by: list[tuple[str, ...]] | None = None
    run_in: list[str | None] | None = None
    for index, instruction in enumerate(parsed.instructions):
        if not instruction.mentions(text, names):
            continue
        keyword = instruction.keyword
        if keyword not in KEYWORDS:
            first = text[instruction.start : instruction.keyword_end]
            at = instruction.keyword_end - len(first.lstrip(" \t"))
            problems.append(LineIndex(text).problem(at, f"unknown instruction {keyword}"))
            continue
        note = _ONBUILD_NOTE * instruction.onbuild
        if keyword in COMMANDS:
            found = command_analysis(instruction, names, note, shells[index])
            if keyword == "RUN":
                if run_in is None:
                    run_in = workdirs(parsed.instructions)
                accesses.extend(_in_image(found.accesses, run_in[index] or "$WORKDIR"))
            else:
                accesses.extend(_in_image(found.accesses))
            mentions.extend(found.mentions)
            problems.extend(found.problems)
            continue
        try:
            written = _assignments(instruction, names, parsed.escape, note)
        except Unparsable as error:
            at = instruction.args.start_of(error.at or 0)  # else where its arguments start
            problems.append(LineIndex(text).problem(at, f"{keyword}: {error}"))
            written = []
        if keyword == "ENV" and not instruction.onbuild and written:
            if launched_by is None:
                launched_by = image_scripts(parsed.instructions)
            written = [replace(a, launched=launched_by[index]) for a in written]
        accesses.extend(_in_image(written))
        accesses.extend(_reads(instruction, names, parsed.escape))
    accesses.sort(key=lambda access: (access.start, access.end))
    return TextAnalysis(
        tuple(accesses),
        tuple(sorted(problems, key=lambda p: (p.line or 0, p.column or 0))),
        tuple(sorted(mentions, key=lambda m: m.start)),
    )


def _in_image(accesses: Sequence[TextAccess], workdir: str | None = None) -> list[TextAccess]:
    """The accesses, the scripts they reach as paths of the image (relative ones from `workdir`,
    a RUN's; None: the image's WORKDIR, where its command runs)."""
    return [
        replace(a, launched=tuple(in_image(s, workdir) for s in a.launched)) if a.launched else a
        for a in accesses
    ]


def render(syntax: str, name: str, value: str, append: bool = False) -> str:
    """`NAME=VALUE` (or the legacy `NAME VALUE`) as an ENV or ARG instruction spells it; `append`
    adds `value` to what the environment already holds. (A RUN command's assignments are the
    shell engine's to spell.)"""
    options = syntax.split()[1:]
    escape = next((o.removeprefix("escape=") for o in options if o.startswith("escape=")), "\\")
    quoted = _docker_escape(value, escape)
    if "legacy" in options:
        if append:
            return f"{name} ${{{name}}} {quoted}"
        return f"{name} {value}" if _BARE_WORDS.fullmatch(value) else f'{name} "{quoted}"'
    if append:
        return f'{name}="${{{name}}} {quoted}"'
    return f"{name}={value}" if _BARE.fullmatch(value) else f'{name}="{quoted}"'


def _docker_escape(value: str, escape: str) -> str:
    return "".join(escape + c if c in ('"', "$", escape) else c for c in value)


def _shells(instructions: Sequence[Instruction]) -> list[tuple[str, ...]]:
    """Per instruction, its stage's SHELL (exec-form words; empty for the default `/bin/sh`),
    inherited from the stage it is built FROM."""
    by_stage: dict[str, tuple[str, ...]] = {}
    current: tuple[str, ...] = ()
    name = ""
    out = []
    for instruction in instructions:
        if instruction.keyword == "FROM" and not instruction.onbuild:
            image, name = from_stage(instruction)
            current = by_stage.get(image, ())
        elif instruction.keyword == "SHELL" and not instruction.onbuild:
            shell = exec_words(instruction.args)
            current = tuple(w.text for w in shell) if shell else current
        if name:
            by_stage[name] = current
        out.append(current)
    return out


def _assignments(
    instruction: Instruction, names: frozenset[str], escape: str, note: str
) -> list[TextAccess]:
    """`ENV A=1 B=2`, legacy `ENV A 1`, `ARG A=1 B`."""
    form = instruction.keyword
    context = _Context(names, escape, form, note + _ARG_NOTE * (form == "ARG"))
    args = instruction.args
    spans = docker_words(args.text, context.escape)
    if not spans:
        return []
    if context.form == "ENV" and "=" not in args.text[spans[0][0] : spans[0][1]]:
        return _legacy_env(instruction, context)
    items: list[tuple[int, int, str]] = []
    for start, end in spans:
        raw = args.text[start:end]
        if raw.startswith("#"):
            break  # a trailing comment (for a suppression): Docker rejects it, the user meant one
        if "=" not in raw and context.form == "ENV":
            raise Unparsable(f"expected NAME=VALUE, found {raw!r}", start)
        items.append((start, end, raw.partition("=")[0]))
    removable = [name in context.names and name != NEURON_CC_FLAGS for _, _, name in items]
    removals = item_removals(
        args, [(s, e) for s, e, _ in items], removable, instruction.keyword_end, instruction.removal
    )
    accesses = []
    for (start, end, name), removal in zip(items, removals, strict=True):
        if name not in context.names:
            continue
        raw = args.text[start:end]
        has_value = "=" in raw
        value_start = start + len(name) + 1
        value = (
            docker_value(raw[len(name) + 1 :], context.escape, value_start) if has_value else None
        )
        auto_cast = None
        if name == NEURON_CC_FLAGS and has_value and value is None:  # `"${NEURON_CC_FLAGS} -O1"`
            merges = [
                args.edit(TextEdit(value_start + a, value_start + b, text))
                for a, b, text in auto_cast_none_edits(raw[len(name) + 1 :])
            ]
            auto_cast = tuple(e for e in merges if e is not None)
            auto_cast = auto_cast if len(auto_cast) == len(merges) else None
        accesses.append(
            TextAccess(
                variable=name,
                kind="write",
                form=context.form,
                value=FlagValue((value,) if value is not None else None),
                start=args.start_of(start),
                end=args.end_of(start + len(name)),
                assignment=(args.start_of(start), args.end_of(end)),
                value_range=(args.end_of(value_start), args.end_of(end)) if has_value else None,
                removal=removal,
                container=instruction.removal if all(removable) else None,
                syntax=_syntax(context.form, context.escape),
                note=context.note,
                auto_cast_none=auto_cast,
            )
        )
    return accesses


def _legacy_env(instruction: Instruction, context: _Context) -> list[TextAccess]:
    """`ENV NAME the rest of the line`: one variable, its value everything after the name."""
    args = instruction.args
    match = re.match(r"[ \t]*(\S+)[ \t]*(.*?)[ \t]*$", args.text)
    assert match is not None  # the caller found a first word
    name = match.group(1)
    if name not in context.names:
        return []
    if not match.group(2):
        raise Unparsable(f"{name} has no value (ENV NAME VALUE or ENV NAME=VALUE)", match.start(1))
    value = docker_value(match.group(2), context.escape, match.start(2))
    return [
        TextAccess(
            variable=name,
            kind="write",
            form="ENV",
            value=FlagValue((value,) if value is not None else None),
            start=args.start_of(match.start(1)),
            end=args.end_of(match.end(1)),
            assignment=(args.start_of(match.start(1)), args.end_of(match.end(2))),
            value_range=(args.start_of(match.start(2)), args.end_of(match.end(2))),
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
        for match in re.finditer(r"\$(\{?)([A-Za-z_][A-Za-z0-9_]*)", text.text):
            name = match.group(2)
            escaped = match.start() > 0 and text.text[match.start() - 1] in (escape, "\\")
            if name not in names or escaped:
                continue
            end = match.end()
            if match.group(1):
                closing = text.text.find("}", end)
                end = end if closing == -1 else closing + 1
            reads.append(
                TextAccess(
                    variable=name,
                    kind="read",
                    form="expansion",
                    value=None,
                    start=text.start_of(match.start()),
                    end=text.end_of(end),
                )
            )
    return reads
