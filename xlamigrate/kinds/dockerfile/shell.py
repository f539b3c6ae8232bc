"""The shell commands of RUN, CMD and ENTRYPOINT (and of `RUN <<EOF` scripts): which of them
write, export or unset a flag, and how to cut each out so the rest still runs. Simple word logic
(quotes, substitutions, operators, redirections), enough for what Dockerfiles hold. Used by
`dockerfile.py`."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from xlamigrate.flagvalue import FlagValue
from xlamigrate.kinds.dockerfile.parse import Text, Unparsable, item_removals, unquote
from xlamigrate.kinds.textaccess import TextAccess, TextEdit, line_removal
from xlamigrate.neuronflags import NEURON_CC_FLAGS

SHELL_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_REDIRECT = re.compile(r"&>>?|[0-9]*(?:<<<|<<-|<<|>>|<>|>&|<&|>\||<|>)")
_OPERATORS = ("&&", "||", ";;", ";", "|", "&", "(", ")", "\n")
_CHAINS = frozenset({"&&", ";", "\n"})  # a command between these can be cut out with one
_RESERVED = frozenset({"if", "then", "else", "elif", "do", "while", "until", "!", "{", "time"})
_SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh"})


@dataclass(frozen=True)
class Context:
    """What every access found in one instruction shares."""

    text: str
    names: frozenset[str]
    escape: str
    form: str
    note: str = ""


@dataclass(frozen=True)
class _Word:
    start: int  # indices into the Text's chars
    end: int
    raw: str
    value: str | None  # quotes removed; None when it expands something

    def scripts(self) -> list[str]:
        return py_scripts(self.value)


@dataclass(frozen=True)
class _Command:
    words: tuple[_Word, ...]
    start: int
    end: int
    before: str  # the operator before it ("" at the start)
    after: str  # the operator after it ("" at the end)
    reserved: bool  # begins with `if`, `then`, `do`...: not cut out on its own


def runs_heredoc(args: Text) -> bool:
    """`RUN <<EOF` or `RUN bash <<EOF`: the heredoc is the script itself."""
    try:
        tokens = shell_tokens(args.chars)
    except Unparsable:
        return False
    commands = _commands(args.chars, tokens, docker_flags=True)
    if not commands:
        return True
    head = commands[0].words[0].value or ""
    return len(commands) == 1 and head.rsplit("/", 1)[-1] in _SHELLS


def shell_accesses(
    text: Text, context: Context, whole: TextEdit | None, docker_flags: bool = False
) -> list[TextAccess]:
    """Writes and unsets in shell commands. `whole` removes the instruction when its only
    command goes; None (a heredoc body) removes that command's lines."""
    commands = _commands(text.chars, shell_tokens(text.chars), docker_flags)
    solos = [_solo(command, context.names) for command in commands]
    accesses: list[TextAccess] = []
    for index, command in enumerate(commands):
        later = [s for c in commands[index + 1 :] for w in c.words for s in w.scripts()]
        cut_command = partial(_command_removal, context.text, text, commands, solos, index, whole)
        accesses.extend(_command_accesses(text, context, command.words, later, cut_command))
    return accesses


def _command_accesses(
    text: Text,
    context: Context,
    words: Sequence[_Word],
    later: list[str],
    cut_command: Callable[[], TextEdit | None],
) -> list[TextAccess]:
    names = context.names
    count = 0
    while count < len(words) and SHELL_ASSIGNMENT.match(words[count].raw):
        count += 1
    prefix, rest = words[:count], words[count:]
    found: list[tuple[_Word, TextEdit | None, list[str]]] = []
    deletes: list[tuple[_Word, int, TextEdit | None]] = []
    if not rest:  # shell variables, seen by the rest of the script
        removable = [_name(w) in names and _name(w) != NEURON_CC_FLAGS for w in prefix]
        spans = [(w.start, w.end) for w in prefix]
        removals = item_removals(text, spans, removable, None, None)
        if len(prefix) == 1:
            removals = [cut_command()]
        found.extend((w, r, later) for w, r in zip(prefix, removals, strict=True))
    else:
        scripts = [s for w in rest for s in w.scripts()]
        found.extend(
            (w, TextEdit(text.at(w.start), text.at(words[i + 1].start), ""), scripts)
            for i, w in enumerate(prefix)
        )
        head = (rest[0].value or "").rsplit("/", 1)[-1]
        arguments = [(i, w) for i, w in enumerate(rest) if i and not w.raw.startswith("-")]
        if head == "export":
            for i, word in arguments:
                if SHELL_ASSIGNMENT.match(word.raw):
                    removal = cut_command() if len(arguments) == 1 else _gap_before(text, rest, i)
                    found.append((word, removal, later))
        elif head == "unset":
            for i, word in arguments:
                removal = cut_command() if len(arguments) == 1 else _gap_before(text, rest, i)
                deletes.append((word, 0, removal))
        elif head == "env":
            found_env, deletes_env = _env_command(text, rest)
            found.extend(found_env)
            deletes.extend(deletes_env)
    accesses = []
    for word, removal, launched in found:
        name = _name(word)
        if name not in names:
            continue
        value = _shell_value(word.raw[len(name) + 1 :])
        value_start = word.start + len(name) + 1
        accesses.append(
            TextAccess(
                variable=name,
                kind="write",
                form=context.form,
                value=FlagValue((value,) if value is not None else None),
                start=text.at(word.start),
                end=text.after(word.start + len(name)),
                assignment=(text.at(word.start), text.after(word.end)),
                value_range=(text.after(value_start), text.after(word.end)),
                removal=removal,
                syntax="shell",
                launched=tuple(dict.fromkeys(launched)),
                note=context.note,
            )
        )
    for word, skip, removal in deletes:
        name = word.raw[skip:]
        if name not in names:
            continue
        accesses.append(
            TextAccess(
                variable=name,
                kind="delete",
                form=context.form,
                value=None,
                start=text.at(word.start + skip),
                end=text.after(word.end),
                removal=removal,
                syntax="shell",
                note=context.note,
            )
        )
    return accesses


def _env_command(
    text: Text, words: Sequence[_Word]
) -> tuple[
    list[tuple[_Word, TextEdit | None, list[str]]], list[tuple[_Word, int, TextEdit | None]]
]:
    """`env [-i] [-u NAME] [NAME=VALUE]... [command]`."""
    found: list[tuple[_Word, TextEdit | None, list[str]]] = []
    deletes: list[tuple[_Word, int, TextEdit | None]] = []
    index = 1
    while index < len(words) and words[index].raw.startswith("-"):
        raw = words[index].raw
        if raw in ("-u", "--unset") and index + 1 < len(words):
            cut = TextEdit(text.after(words[index - 1].end), text.after(words[index + 1].end), "")
            deletes.append((words[index + 1], 0, cut))
            index += 1
        elif raw.startswith(("-u", "--unset=")):
            skip = 2 if raw.startswith("-u") else len("--unset=")
            deletes.append((words[index], skip, _gap_before(text, words, index)))
        index += 1
    while index < len(words) and SHELL_ASSIGNMENT.match(words[index].raw):
        scripts = [s for w in words[index + 1 :] for s in w.scripts()]
        found.append((words[index], _gap_before(text, words, index), scripts))
        index += 1
    return found, deletes


def _gap_before(text: Text, words: Sequence[_Word], index: int) -> TextEdit:
    return TextEdit(text.after(words[index - 1].end), text.after(words[index].end), "")


def _name(word: _Word) -> str:
    return word.raw.partition("=")[0]


def _solo(command: _Command, names: frozenset[str]) -> bool:
    """A command that is nothing but one removable write or unset (`export X=1`, `unset X`)."""
    words = [w for w in command.words if not w.raw.startswith("-")]
    if command.reserved or not words:
        return False
    if len(words) == 2 and words[0].value in ("export", "unset"):
        words = words[1:]
    name = words[0].raw.partition("=")[0]
    return len(words) == 1 and name in names and name != NEURON_CC_FLAGS


def _command_removal(
    source: str,
    text: Text,
    commands: Sequence[_Command],
    solos: Sequence[bool],
    index: int,
    whole: TextEdit | None,
) -> TextEdit | None:
    """Cuts one command out of an `a && b; c` list with one of its operators (see
    `item_removals` for which side); the only command goes with `whole`, or with its lines."""
    command = commands[index]
    if command.reserved:
        return None
    if len(commands) == 1:
        if whole is not None:
            return whole
        return line_removal(source, text.at(command.start), text.after(command.end))
    anchor = next((i for i, solo in enumerate(solos) if not solo), 0)
    if index < anchor or index == anchor == 0:
        following = commands[index + 1]
        if command.after in _CHAINS and following.before == command.after:
            return TextEdit(text.at(command.start), text.at(following.start), "")
        return None
    previous = commands[index - 1]
    if command.before in _CHAINS and previous.after == command.before:
        return TextEdit(text.after(previous.end), text.after(command.end), "")
    return None


def shell_tokens(chars: str) -> list[tuple[str, int, int]]:
    """("word" | "op" | "redirect" | "duplicate", start, end) tokens of a shell script, comments
    left out. A "redirect" takes the next word as its target; a "duplicate" (`2>&1`) does not."""
    tokens = []
    index = 0
    while index < len(chars):
        char = chars[index]
        if char in " \t\r" or (char == "\\" and chars[index + 1 : index + 2] == "\n"):
            index += 1 if char != "\\" else 2
            continue
        if char == "#":
            newline = chars.find("\n", index)
            index = len(chars) if newline == -1 else newline
            continue
        redirect = _REDIRECT.match(chars, index)
        if redirect:
            end = redirect.end()
            digits = re.match(r"[0-9]+-?|-", chars[end:]) if chars[end - 1] == "&" else None
            kind = "redirect"  # its target is the next word
            if digits:
                end += digits.end()
                kind = "duplicate"  # `2>&1`: complete in itself
            tokens.append((kind, index, end))
            index = end
            continue
        operator = next((op for op in _OPERATORS if chars.startswith(op, index)), None)
        if operator:
            tokens.append(("op", index, index + len(operator)))
            index += len(operator)
            continue
        start = index
        while index < len(chars) and chars[index] not in " \t\r\n;&|()<>":
            index = _skip(chars, index)
        tokens.append(("word", start, index))
    return tokens


def _skip(chars: str, index: int) -> int:
    """The index past one character, quoted string, escape or substitution of a word."""
    char = chars[index]
    if char == "\\":
        return min(index + 2, len(chars))
    if char == "'":
        close = chars.find("'", index + 1)
        if close == -1:
            raise Unparsable("unterminated ' quote")
        return close + 1
    if char == '"':
        index += 1
        while index < len(chars) and chars[index] != '"':
            index = _skip(chars, index) if chars[index] in "\\$`" else index + 1
        if index >= len(chars):
            raise Unparsable('unterminated " quote')
        return index + 1
    if char == "`":
        index += 1
        while index < len(chars) and chars[index] != "`":
            index += 2 if chars[index] == "\\" else 1
        if index >= len(chars):
            raise Unparsable("unterminated ` substitution")
        return index + 1
    if chars.startswith(("$(", "${"), index):
        opening = chars[index + 1]
        closing = ")" if opening == "(" else "}"
        depth = 1
        index += 2
        while index < len(chars):
            if chars[index] == opening:
                depth += 1
            elif chars[index] == closing:
                depth -= 1
                if depth == 0:
                    return index + 1
            elif chars[index] in "'\"`\\$":
                index = _skip(chars, index)
                continue
            index += 1
        raise Unparsable(f"unterminated ${opening} substitution")
    return index + 1


def shell_words(chars: str, tokens: Sequence[tuple[str, int, int]]) -> list[_Word]:
    return [_word(chars, s, e) for kind, s, e in tokens if kind == "word"]


def _word(chars: str, start: int, end: int) -> _Word:
    raw = chars[start:end]
    return _Word(start, end, raw, _shell_value(raw))


def _commands(
    chars: str, tokens: Sequence[tuple[str, int, int]], docker_flags: bool = False
) -> list[_Command]:
    """Simple commands split at operators; redirections and their targets left out.
    `docker_flags` drops RUN's own leading `--mount=...` options."""
    commands: list[_Command] = []
    words: list[_Word] = []
    bounds: list[int] = []
    before = ""
    target = False
    at_start = docker_flags
    for kind, start, end in tokens:
        if kind == "op":
            if bounds:
                commands.append(_command(words, bounds, before, chars[start:end]))
            words, bounds, before = [], [], chars[start:end]
            at_start = False
            continue
        if at_start and kind == "word" and chars.startswith("--", start):
            continue
        at_start = False
        bounds.extend((start, end))
        if kind in ("redirect", "duplicate"):
            target = kind == "redirect"
        elif target:
            target = False
        else:
            words.append(_word(chars, start, end))
    if bounds:
        commands.append(_command(words, bounds, before, ""))
    return [command for command in commands if command.words]


def _command(words: list[_Word], bounds: list[int], before: str, after: str) -> _Command:
    reserved = False
    while words and words[0].raw in _RESERVED:
        words = words[1:]
        reserved = True
    return _Command(tuple(words), min(bounds), max(bounds), before, after, reserved)


def _shell_value(raw: str) -> str | None:
    return unquote(raw, "\\", frozenset('"$`\\\n'), backticks=True)


def py_scripts(value: str | None) -> list[str]:
    if value is None:
        return []
    return [part for part in value.split() if part.endswith(".py") and not part.startswith("-")]
