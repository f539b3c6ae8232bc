"""The access model for files that are not Python (shell, Dockerfile, YAML, .env): where in the
text a flag is written or read, and the edits that remove it or turn it into another variable.

Each kind module (`dotenv.py`, `shell.py`, `dockerfile.py`, `yaml_env.py`) exposes
`analyse(text, names) -> TextAnalysis` and `render(syntax, name, value) -> str`; `textkind.py`
turns that into findings and rewrites for every kind alike.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from xlamigrate.flagvalue import FlagValue
from xlamigrate.results import Access, Applicability, Span, Target

# Where a statement sits among conditional code: the (construct, arm) pairs around it, outermost
# first, each a host offset (an `if` and its `elif` clause, a `case` and its item, a loop, a
# function, the commands after `&&`/`||`). Two places under different arms of one construct
# never run in the same configuration; a place whose branch starts with another's runs whenever
# that one does (if later).
Branch = tuple[tuple[int, int], ...]


def runs_with(outer: Branch, inner: Branch) -> bool:
    """Whether code at `outer` ran whenever code at `inner` runs (`outer` coming first): the
    arms around `outer` are all around `inner` too."""
    return inner[: len(outer)] == outer


def exclusive(first: Branch, second: Branch) -> bool:
    """Whether the two places are in different arms of one construct (never both run)."""
    for a, b in zip(first, second, strict=False):
        if a != b:
            return a[0] == b[0]
    return False


@dataclass(frozen=True)
class TextEdit:
    """Replace text[start:end] (character offsets) with `replacement`."""

    start: int
    end: int
    replacement: str


@dataclass(frozen=True)
class TextAccess:
    variable: str
    kind: Access
    form: str  # "export", "prefix", "ENV", "ARG", "dotenv", "yaml-map", "yaml-list", ...
    value: FlagValue | None  # writes only
    start: int  # the reported construct (the `NAME=VALUE` word, the YAML key...)
    end: int
    # The whole `NAME=VALUE` assignment, replaceable by render(syntax, other_name, other_value).
    assignment: tuple[int, int] | None = None
    value_range: tuple[int, int] | None = None  # the value's text, quotes included
    removal: TextEdit | None = None  # removes the write cleanly; None: it cannot be removed alone
    # Removes the whole construct (an `ENV A=1 B=1` instruction) when all its accesses go, where
    # removing each alone would leave it empty and invalid.
    container: TextEdit | None = None
    syntax: str = ""  # how this construct spells an assignment (passed to the kind's render)
    # Python scripts the same command runs, as written; where the kind knows the working
    # directory, anchored to it (`<image>train.py`: kinds/launch.py; as_written for messages)
    launched: tuple[str, ...] = ()
    target: Target = "process"
    via: str | None = None
    note: str = ""  # said after the finding's subject ("accelerate sets the flag for you")
    applicability: Applicability | None = None  # at most this fixable (e.g. "manual")
    # The rule that reports the write where not the flag's own write rule (XM105: a framework
    # sets the flag from its own option).
    rule: str | None = None
    # NEURON_CC_FLAGS whose value is not a literal (`"$NEURON_CC_FLAGS -O1"`, `+=`): the edit that
    # makes the value end with --auto-cast=none, its expansions kept (None: the kind cannot).
    auto_cast_none: tuple[TextEdit, ...] | None = None
    # The conditional arms around the write (see `Branch`): () at the file's top level.
    branch: Branch = ()
    # The shell variable a write copies (`XLA_USE_BF16=$USE_BF16`): its value is that variable's,
    # `value` its literal assignments where the file makes them all.
    value_from: str | None = None


@dataclass(frozen=True)
class LaunchSite:
    """A command that runs a Python script: the script as written, where, under which arms."""

    script: str
    start: int
    branch: Branch = ()
    # run for its output (`NODES=$(python3 helper.py)`): a helper, not a training process, so
    # the session's writes before it are not taken to be for it
    captured: bool = False


@dataclass(frozen=True)
class TextMention:
    """A flag's name where no access accounts for it (a Python one-liner in a shell string, a
    config a here-document writes): reported for review (XM301), never edited."""

    variable: str
    start: int
    end: int
    note: str = ""


@dataclass(frozen=True)
class Problem:
    """What could not be read, in the parser's words, and where it stopped (1-based, in the
    file; None where the parser does not say)."""

    line: int | None
    message: str
    column: int | None = None

    def within(self, label: str) -> Problem:
        """The problem as the construct holding the text it was found in names it."""
        return replace(self, message=f"{label}: {self.message}")


@dataclass(frozen=True)
class TextAnalysis:
    accesses: tuple[TextAccess, ...] = ()
    problems: tuple[Problem, ...] = ()  # what could not be read
    mentions: tuple[TextMention, ...] = ()
    launches: tuple[LaunchSite, ...] = ()


class LineIndex:
    """Character offset -> 1-based (line, column)."""

    def __init__(self, text: str) -> None:
        self.starts = [0]
        for index, char in enumerate(text):
            if char == "\n":
                self.starts.append(index + 1)

    def position(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.starts, offset) - 1
        return line + 1, offset - self.starts[line] + 1

    def problem(self, offset: int, message: str) -> Problem:
        """`message` about the text at `offset`."""
        line, column = self.position(offset)
        return Problem(line, message, column)

    def span(self, start: int, end: int) -> Span:
        line, column = self.position(start)
        end_line, end_column = self.position(end)
        return Span(line, column, end_line, end_column)


def apply_edits(text: str, edits: Iterable[TextEdit]) -> str:
    """Applies non-overlapping edits (any order); an edit inside an earlier one is dropped."""
    result = []
    position = 0
    for edit in sorted(edits, key=lambda e: (e.start, e.end)):
        if edit.start < position:
            continue
        result.append(text[position : edit.start])
        result.append(edit.replacement)
        position = edit.end
    result.append(text[position:])
    return "".join(result)


def hash_comments(text: str) -> Sequence[tuple[int, str]]:
    """(line, comment) for `#` comments that start a line or follow whitespace (shell, YAML,
    Dockerfile and .env all write comments so)."""
    comments = []
    for number, line in enumerate(text.splitlines(), start=1):
        index = line.find("#")
        while index != -1:
            if index == 0 or line[index - 1] in " \t":
                comments.append((number, line[index:]))
                break
            index = line.find("#", index + 1)
    return comments


def line_removal(text: str, start: int, end: int) -> TextEdit:
    """Removes the lines holding text[start:end], newline included, if nothing else is on them;
    otherwise just that text and the blanks after it."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end == -1 else line_end + 1
    before, after = text[line_start:start], text[end:line_end]
    if not before.strip() and (not after.strip() or after.strip().startswith("#")):
        return TextEdit(line_start, line_end, "")
    stop = end
    while stop < len(text) and text[stop] in " \t":
        stop += 1
    return TextEdit(start, stop, "")
