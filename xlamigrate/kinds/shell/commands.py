"""One simple command's words as flag accesses (`export X=1`, `X=1 cmd`, `env X=1 -u Y`,
`declare -x`, `unset`, `mpirun -x`), each with the edit that removes it so the script stays
valid where the command sits: its lines, its operator in a list, or a `:` in a body that must
keep a command. Used by the shell engine (`analysis.py`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xlamigrate.flagvalue import FlagValue
from xlamigrate.kinds.embedded import shell_syntax
from xlamigrate.kinds.launch import Launch
from xlamigrate.kinds.shell.auto_cast import auto_cast_none_edits
from xlamigrate.kinds.shell.syntax import Node
from xlamigrate.kinds.shell.words import literal
from xlamigrate.kinds.textaccess import TextAccess, TextEdit, line_removal
from xlamigrate.neuronflags import NEURON_CC_FLAGS, STOCHASTIC_ROUNDING
from xlamigrate.results import Access, Applicability

if TYPE_CHECKING:
    from xlamigrate.kinds.shell.analysis import ScriptReader

RECIPE_VARIABLES = frozenset({NEURON_CC_FLAGS, STOCHASTIC_ROUNDING})
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ASSIGNMENT = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<append>\+?)=")
_ERROR_NOTE = " (next to a syntax error on line {line}: edit it by hand)"

# A value that copies one shell variable: `$USE_BF16`, `${USE_BF16}`, `"$USE_BF16"`.
_COPIED = re.compile(r'(?P<q>"?)\$(?P<b>\{)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?(b)\})(?P=q)')


@dataclass(frozen=True)
class Word:
    start: int  # offsets in the script's text
    end: int
    raw: str
    assignment: bool  # a `NAME=VALUE` in assignment position (a prefix, a plain assignment)
    node: Node = field(default=None, compare=False, repr=False)

    @property
    def value(self) -> str:
        """The word as the command sees it (quotes removed; the raw text if it expands)."""
        text = literal(self.raw)
        return self.raw if text is None else text

    @property
    def known(self) -> str | None:
        return literal(self.raw)


@dataclass(frozen=True)
class Place:
    """Where a simple command sits: what removing it whole must keep intact."""

    may_be_empty: bool = True
    sole: bool = True  # the only command of its list
    in_pipeline: bool = False
    top: bool = False  # a command of the script's own top level
    prev_op: str = ""
    prev_end: int | None = None  # the end of the command before
    prev_op_end: int | None = None
    next_op: str = ""
    next_start: int | None = None  # the start of the command after


@dataclass
class Command:
    """Turns one simple command's words into accesses."""

    reader: ScriptReader
    words: list[Word]
    span: tuple[int, int]
    place: Place

    @property
    def names(self) -> frozenset[str]:
        return self.reader.analyser.names

    @property
    def legacy(self) -> frozenset[str]:
        return self.names - RECIPE_VARIABLES

    def note_and_applicability(self, start: int) -> tuple[str, Applicability | None]:
        note = self.reader.script.note
        line = self.reader.error_line(start)
        if line is not None:
            return note + _ERROR_NOTE.format(line=line), "manual"
        if not self.reader.source.editable:
            return note, "manual"
        return note, None

    def host_edit(self, edit: TextEdit | None) -> TextEdit | None:
        if edit is None:
            return None
        if isinstance(edit, HostEdit):
            return TextEdit(edit.start, edit.end, edit.replacement)
        return self.reader.source.edit(edit)

    def syntax(self, form: str) -> str:
        return shell_syntax(form, self.reader.source.encodings)

    def write(
        self,
        word: Word,
        form: str,
        removal: TextEdit | None,
        syntax: str,
        launched: tuple[str, ...] = (),
        container: TextEdit | None = None,
        name_offset: int = 0,
    ) -> None:
        raw = word.raw[name_offset:]
        match = ASSIGNMENT.match(raw)
        if match is None:
            return
        raw_value = raw[match.end() :]
        value = None if match.group("append") or raw_value.startswith("(") else literal(raw_value)
        if form in ("assignment", "export", "declare"):  # what the shell variable may hold
            assigned = self.reader.analyser.assigned.setdefault(match.group("name"), [])
            assigned.append((value, self.reader.branch))
        copied = _COPIED.fullmatch(raw_value) if not match.group("append") else None
        start = word.start + name_offset
        note, applicability = self.note_and_applicability(start)
        source = self.reader.source
        host_start, host_end = source.span(start, word.end)
        auto_cast = None
        if match.group("name") == NEURON_CC_FLAGS and value is None and applicability is None:
            value_start = start + match.end()
            merges = [
                self.host_edit(TextEdit(value_start + a, value_start + b, text))
                for a, b, text in auto_cast_none_edits(raw_value)
            ]
            auto_cast = tuple(e for e in merges if e is not None)
            auto_cast = auto_cast if len(auto_cast) == len(merges) else None
        self.reader.analyser.add(
            TextAccess(
                variable=match.group("name"),
                kind="write",
                form=form,
                value=FlagValue(None if value is None else (value,)),
                start=host_start,
                end=host_end,
                assignment=(host_start, host_end) if source.editable else None,
                value_range=source.span(start + match.end(), word.end),
                removal=self.host_edit(removal),
                container=self.host_edit(container),
                syntax=self.syntax(syntax),
                launched=launched,
                branch=self.reader.branch,
                note=note,
                applicability=applicability,
                auto_cast_none=auto_cast,
                value_from=copied.group("name") if copied else None,
            ),
            self.reader.script.id,
            start,
        )

    def other(
        self,
        word: Word,
        kind: Access,
        form: str,
        removal: TextEdit | None,
        name_offset: int = 0,
        container: TextEdit | None = None,
    ) -> None:
        """A bare `export X` (a write of what X holds) or an `unset X`."""
        start = word.start + name_offset
        name = word.raw[name_offset:]
        if "=" in name:
            name = name.partition("=")[0]
        note, applicability = self.note_and_applicability(start)
        host_start, host_end = self.reader.source.span(start, start + len(name))
        self.reader.analyser.add(
            TextAccess(
                variable=name,
                kind=kind,
                form=form,
                value=FlagValue(None) if kind == "write" else None,
                start=host_start,
                end=host_end,
                assignment=(host_start, host_end) if kind == "write" else None,
                removal=self.host_edit(removal),
                container=self.host_edit(container),
                syntax=self.syntax(form),
                branch=self.reader.branch,
                note=note,
                applicability=applicability,
            ),
            self.reader.script.id,
            start,
            bare_export=kind == "write",
        )

    def container(self, group: list[Word]) -> TextEdit | None:
        """The whole command, for when every word of `group` (all accesses) is removed."""
        if len(group) > 1 and all(self.is_access(w) for w in group):
            return self.drop_command()
        return None

    # -- the forms ----------------------------------------------------------------------------

    def assignments(self, words: list[Word]) -> None:
        """`X=1` alone (or `A=1 X=1`): shell variables, exported when they already were."""
        container = self.container(words)
        removals = self.word_removals(words, prefer_after=False)
        for index, word in enumerate(words):
            removal = self.drop_command() if len(words) == 1 else removals.get(index)
            alone = len(words) == 1 and word.raw.split("=")[0] in self.legacy
            syntax = "statement" if alone else "assignment"
            self.write(word, "assignment", removal, syntax, container=container)

    def word_removals(self, words: list[Word], prefer_after: bool) -> dict[int, TextEdit]:
        """Removals for the access words among `words`, each taking the blanks on one side
        (after it when `prefer_after` or it leads, else before), never blanks another took."""
        taken: set[int] = set()  # blank k lies between words k and k + 1
        removals = {}
        for index, word in enumerate(words):
            if not self.is_access(word):
                continue
            after = index if index + 1 < len(words) and index not in taken else None
            before = index - 1 if index > 0 and index - 1 not in taken else None
            first, second = (after, before) if prefer_after or index == 0 else (before, after)
            gap = first if first is not None else second
            if gap is None:
                removals[index] = TextEdit(word.start, word.end, "")
                continue
            taken.add(gap)
            if gap == index:
                removals[index] = TextEdit(word.start, words[index + 1].start, "")
            else:
                removals[index] = TextEdit(words[index - 1].end, word.end, "")
        return removals

    def prefixes(self, prefixes: list[Word], command: Word, scripts: tuple[str, ...]) -> None:
        removals = self.word_removals([*prefixes, command], prefer_after=True)
        for index, word in enumerate(prefixes):
            self.write(word, "prefix", removals.get(index), "prefix", scripts)

    def declaration(
        self, keyword: Word, arguments: list[Word], form: str, exported: bool | None
    ) -> None:
        """`export`/`declare` arguments: `X=1` writes; a bare `X` exported (True) writes what X
        holds, unexported (False: `export -n X`, `declare +x X`) deletes it for children."""
        if any(w.value.startswith("-") and "f" in w.value for w in arguments):
            return  # functions, not variables
        names = [w for w in arguments if not w.value.startswith(("-", "+"))]
        container = self.container(names)
        removals = self.word_removals([keyword, *arguments], prefer_after=False)
        for word in names:
            index = arguments.index(word) + 1
            removal = self.drop_command() if len(names) == 1 else removals.get(index)
            if ASSIGNMENT.match(word.raw):
                self.write(word, form, removal, form, container=container)
            elif exported is not None and NAME.fullmatch(word.raw):
                kind: Access = "write" if exported else "delete"
                self.other(word, kind, form, removal, container=container)

    def unset(self, keyword: Word, arguments: list[Word]) -> None:
        if any(w.value.startswith("-") and "f" in w.value for w in arguments):
            return  # functions
        names = [w for w in arguments if NAME.fullmatch(w.raw)]
        container = self.container(names)
        removals = self.word_removals([keyword, *arguments], prefer_after=False)
        for word in names:
            removal = (
                self.drop_command() if len(names) == 1 else removals.get(arguments.index(word) + 1)
            )
            self.other(word, "delete", "unset", removal, container=container)

    def launch_environment(self, words: list[Word], made: Launch, scripts: tuple[str, ...]) -> None:
        """What the programs of a command line set for what they run: `env X=1 -u Y`, bash's
        `time X=1`, `sudo X=1`, `mpirun -x X=1`, `docker run -e X=1`."""
        removals = self.word_removals(words, prefer_after=True)
        for setting in made.env:
            if setting.index >= len(words) or setting.name not in self.names:
                continue
            word = words[setting.index]
            if setting.action == "set" and not setting.option:  # env X=1, time X=1
                removal = removals.get(setting.index)
                self.write(word, "env-command", removal, "env-command", scripts)
                continue
            removal = self.option_removal(words, setting.index, setting.name_offset)
            if setting.action == "unset":
                self.other(word, "delete", "env-command", removal, setting.name_offset)
            elif setting.action == "set":
                self.write(
                    word, "option", removal, "env-command", scripts, name_offset=setting.name_offset
                )
            else:  # `-x NAME`: passes this shell's value on
                self.other(word, "write", "option", removal, setting.name_offset)

    def option_removal(self, words: list[Word], index: int, name_offset: int) -> TextEdit:
        """Removes an option with its value: `-u NAME`, `-x NAME=1` or one word `-uNAME`."""
        first = index if name_offset else index - 1
        if index + 1 < len(words):
            return TextEdit(words[first].start, words[index + 1].start, "")
        return TextEdit(words[first - 1].end, words[index].end, "")

    def slurm(self, words: list[Word], scripts: tuple[str, ...]) -> None:
        for index, word in enumerate(words):
            if word.raw.startswith("--export="):
                self.reader.slurm_list(word.start, word.raw, scripts)
            elif word.raw == "--export" and index + 1 < len(words):
                following = words[index + 1]
                self.reader.slurm_list(following.start - 1, "=" + following.raw, scripts)

    def is_access(self, word: Word) -> bool:
        """A word that names a tracked variable (`X=1`, or a bare `X`)."""
        match = ASSIGNMENT.match(word.raw)
        return (match.group("name") if match else word.raw) in self.names

    # -- removing a whole command -------------------------------------------------------------

    def drop_command(self) -> TextEdit | None:
        """Removes the command so the script stays valid: its lines when it is alone on them,
        its operator with it in a list, `:` where a body must keep a command."""
        text = self.reader.text
        start, end = self.span
        place = self.place
        if place.in_pipeline:
            return None
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", end)
        line_end = len(text) if line_end == -1 else line_end
        before, after = text[line_start:start], text[end:line_end]
        alone = not before.strip() and re.fullmatch(r"[ \t\r]*;?[ \t\r]*(#.*)?", after) is not None
        whole = self.reader.script.whole
        if place.top and place.sole and whole is not None:
            return HostEdit(whole.start, whole.end, whole.replacement)
        if alone:
            if place.sole and not place.may_be_empty:
                return TextEdit(start, end, ":")
            return line_removal(text, start, end + len(after.split("#")[0].rstrip()))
        if place.sole:
            if not place.may_be_empty:
                return TextEdit(start, end, ":")
            stop = end
            while stop < len(text) and text[stop] in " \t":
                stop += 1
            return TextEdit(start, stop, "")
        if place.prev_op == "&&" and place.prev_end is not None:
            return TextEdit(place.prev_end, end, "")
        last_on_line = place.next_start is None or place.next_op == "\n"
        if last_on_line and place.prev_op == ";" and place.prev_end is not None:
            return TextEdit(place.prev_end, end, "")
        if last_on_line and place.prev_op == "&" and place.prev_op_end is not None:
            return TextEdit(place.prev_op_end, end, "")
        opens = place.prev_op in ("", ";", "\n", "&")
        if opens and place.next_op in (";", "&&") and place.next_start is not None:
            return TextEdit(start, place.next_start, "")
        return TextEdit(start, end, ":")


class HostEdit(TextEdit):
    """An edit already in host offsets (the host's removal of the whole construct)."""


def prefix_count(words: Sequence[Word]) -> int:
    count = 0
    while count < len(words) and words[count].assignment:
        count += 1
    return count
