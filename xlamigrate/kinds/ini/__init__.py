"""INI files (`tox.ini`, `pytest.ini`, `setup.cfg`, any `*.ini`/`*.cfg`), read with iniconfig
(pytest's own reader): a variable set in tox's `setenv` or pytest-env's `env` is a write at its
own line and column; a flag named anywhere else outside comments is named for review (XM301).
A tox.ini, setup.cfg or pytest.ini that iniconfig cannot read is XM901 (tox and pytest refuse
it too); any other file that does not read as INI only names its flags (XM301).
The rewrite does not edit INI files: every finding is manual and says what to do."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from functools import partial

from xlamigrate.flagvalue import FlagValue
from xlamigrate.kinds import textkind
from xlamigrate.kinds.embedded import CannotRender
from xlamigrate.kinds.ini.settings import (
    EnvironmentSetting,
    entry,
    read_by_its_tool,
    setting_for,
)
from xlamigrate.kinds.textaccess import Problem, TextAccess, TextAnalysis, TextMention
from xlamigrate.kinds.unread import used_in_string
from xlamigrate.neuronflags import NEURON_CC_FLAGS, STOCHASTIC_ROUNDING
from xlamigrate.request import FileTask, RewriteRequest
from xlamigrate.results import FileResult, RewriteOutcome

_TRACKED_ONLY = frozenset({NEURON_CC_FLAGS, STOCHASTIC_ROUNDING})  # the rewrite's, not flags
_BY_HAND = (
    "; xlamigrate does not rewrite {file}: once the code these tests run has its recipe, set the"
    " variable it reads for the recipe here instead (BF16_RECIPE=1 unless [tool.xlamigrate]"
    " signal names another), or remove this line where the tests need no bf16"
)
_DEFAULT_ONLY = " (only where the environment has none: D:)"
_COMMENT = re.compile(r"(?:^|\s)[#;]")


def analyse_file_text(file: str, text: str, names: frozenset[str]) -> TextAnalysis:
    """The writes and mentions of an INI file named `file` (its base name picks the settings)."""
    if not any(name in text for name in names):
        return TextAnalysis()
    import iniconfig

    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    try:
        config = iniconfig.IniConfig(file, data=text)
    except iniconfig.ParseError as error:
        if read_by_its_tool(file):  # XM901, where iniconfig stopped
            return TextAnalysis(problems=(_problem(lines, error.lineno, error.msg),))
        unreadable = f"in a file that does not read as INI (line {error.lineno + 1}: {error.msg})"
        return TextAnalysis(mentions=_mentions(lines, starts, names, set(), lambda _: unreadable))
    accesses: list[TextAccess] = []
    read_lines: set[int] = set()
    keys: list[tuple[int, str]] = []  # (0-based line, "[section] key")
    for section in config:
        for key in section:
            first = section.lineof(key)
            assert first is not None
            keys.append((first - 1, f"[{section.name}] {key}"))
            setting = setting_for(file, section.name, key)
            if setting is None:
                continue
            for number in _value_lines(lines, first - 1):
                access = _write(file, setting, lines[number], starts[number], names)
                if access is not None:
                    accesses.append(access)
                    read_lines.add(number)
    keys.sort()

    def where(number: int) -> str:
        owner = next((label for line, label in reversed(keys) if line <= number), "a section name")
        return f"in {owner}, a setting xlamigrate does not read"

    mentions = _mentions(lines, starts, names - _TRACKED_ONLY, read_lines, where)
    return TextAnalysis(tuple(accesses), mentions=mentions)


def _problem(lines: list[str], number: int, message: str) -> Problem:
    """iniconfig's words about 0-based line `number`, at the line's first character that is not
    blank (iniconfig names a line, not a column)."""
    if not 0 <= number < len(lines):
        return Problem(number + 1, message)
    line = lines[number]
    return Problem(number + 1, message, len(line) - len(line.lstrip()) + 1)


def _value_lines(lines: list[str], first: int) -> list[int]:
    """The lines a key's value is written on: its own (after `=`), then the indented ones."""
    found = [first]
    for number in range(first + 1, len(lines)):
        line = lines[number]
        if line.strip() and not line[0].isspace():
            break
        found.append(number)
    return found


def _write(
    file: str, setting: EnvironmentSetting, line: str, start: int, names: frozenset[str]
) -> TextAccess | None:
    text = line.rstrip("\r\n")
    offset = 0
    if (
        text.strip() and not text[:1].isspace()
    ):  # the key's own line: its value starts after `=` (or `:`)
        offset = min(i for i in (text.find("="), text.find(":")) if i >= 0) + 1
    body = text[offset:]
    stripped = body.strip()
    if not stripped or stripped[0] in "#;":
        return None
    found = entry(setting.tool, stripped)
    if found is None or found.name not in names:
        return None
    at = start + offset + body.index(stripped)
    value = FlagValue((found.value,)) if found.known else FlagValue.unknown()
    note = f" in {setting.what}" + (_DEFAULT_ONLY if found.default_only else "")
    return TextAccess(
        variable=found.name,
        kind="write",
        form=setting.tool,
        value=value,
        start=at + found.name_at,
        end=at + found.value_at + len(found.value),
        value_range=(at + found.value_at, at + found.value_at + len(found.value)),
        note=note + _BY_HAND.format(file=os.path.basename(file)),
        applicability="manual",
    )


def _mentions(
    lines: list[str],
    starts: list[int],
    names: frozenset[str],
    read_lines: set[int],
    where: Callable[[int], str],
) -> tuple[TextMention, ...]:
    """Each flag used outside comments on a line no setting read (a value is a string: a name
    in it counts where it is used as a variable, as in files xlamigrate does not read)."""
    found = []
    pattern = re.compile(r"\b(" + "|".join(re.escape(n) for n in sorted(names)) + r")\b")
    for number, line in enumerate(lines):
        if number in read_lines:
            continue
        comment = _COMMENT.search(line)
        code = line[: comment.start()] if comment else line
        value = code.split("=", 1)[-1] if code[:1].strip() else code
        for match in pattern.finditer(code):
            if not any(used_in_string(match.group(), text.strip()) for text in (code, value)):
                continue  # prose (a description): the rule of files xlamigrate does not read
            start = starts[number] + match.start()
            found.append(
                TextMention(match.group(), start, start + len(match.group()), where(number))
            )
    return tuple(found)


def render(syntax: str, name: str, value: str, append: bool = False) -> str:
    raise CannotRender("xlamigrate does not rewrite INI files")


def scan(task: FileTask) -> FileResult:
    return _kind(task.path).scan(task)


def rewrite(task: FileTask, request: RewriteRequest) -> RewriteOutcome:
    return _kind(task.path).rewrite(task, request)


def _kind(path: str) -> textkind.TextKind:
    """Which settings an INI file has depends on its name (tox.ini, setup.cfg, pytest.ini)."""
    file = os.path.basename(path)
    return textkind.TextKind(partial(analyse_file_text, file), render)
