"""Files of kinds xlamigrate does not read (Jenkins pipelines, jsonnet, Terraform, JSON, TOML,
batch and PowerShell scripts): a legacy flag they name where it is used, not talked about, is
reported (XM301, manual), so that a scan never reads like full coverage while a launcher it
cannot follow sets the flag.

The rule (its data: `unreadtable.py`): a name in a comment never counts (pygments' lexer for
the file tells comments and strings apart); a name in code counts; a name inside a string counts
only where it is used as a variable there (`NAME=`, `"NAME":`, `$NAME`, `env.NAME`, `%NAME%`,
`$env:NAME`, or the whole string), never in prose (`"set XLA_USE_BF16 to 1"`). Files under a
documentation folder count for nothing."""

from __future__ import annotations

import bisect
import fnmatch
import os
import re
from typing import Any

from xlamigrate.kinds import textkind
from xlamigrate.kinds.embedded import CannotRender
from xlamigrate.kinds.textaccess import TextAnalysis, TextMention
from xlamigrate.kinds.unreadtable import (
    DOCUMENTATION_FOLDERS,
    STRING_USES,
    UNREAD_KINDS,
    UnreadKind,
)
from xlamigrate.neuronflags import NEURON_CC_FLAGS, STOCHASTIC_ROUNDING
from xlamigrate.request import FileTask, RewriteRequest
from xlamigrate.results import FileResult, RewriteOutcome

_LARGE = 2_000_000  # characters: lexing a bigger file is not worth it, every name counts
_TRACKED_ONLY = frozenset({NEURON_CC_FLAGS, STOCHASTIC_ROUNDING})  # the rewrite's, not flags


def unread_kind(file: str) -> UnreadKind | None:
    return next(
        (k for k in UNREAD_KINDS if any(fnmatch.fnmatchcase(file, p) for p in k.patterns)), None
    )


def in_documentation(path: str) -> bool:
    folders = os.path.normpath(os.path.dirname(path)).replace(os.sep, "/").split("/")
    return any(folder.lower() in DOCUMENTATION_FOLDERS for folder in folders)


def analyse_named(file: str, text: str, names: frozenset[str]) -> TextAnalysis:
    """The flags an unread file of this name uses (mentions)."""
    names = names - _TRACKED_ONLY
    if not any(name in text for name in names):
        return TextAnalysis()
    kind = unread_kind(file)
    what = kind.what if kind is not None else "a file"
    where = f"in a file xlamigrate does not read ({what})"
    pattern = re.compile(r"\b(" + "|".join(re.escape(n) for n in sorted(names)) + r")\b")
    tokens = _Tokens(text, kind.lexer if kind is not None and len(text) < _LARGE else None)
    mentions = []
    for match in pattern.finditer(text):
        if tokens.used(match.group(), match.start()):
            mentions.append(TextMention(match.group(), match.start(), match.end(), where))
    return TextAnalysis(mentions=tuple(mentions))


class _Tokens:
    """Which tokens of the file are comments and strings (pygments)."""

    def __init__(self, text: str, lexer: str | None) -> None:
        self.text = text
        self.starts: list[int] = []
        self.kinds: list[str] = []  # "comment", "string", "code"
        if lexer is None:
            return
        from pygments.lexers import get_lexer_by_name  # type: ignore[import-untyped]
        from pygments.token import Comment, String  # type: ignore[import-untyped]

        tokens: Any = get_lexer_by_name(lexer, stripnl=False, ensurenl=False)
        for index, token, _ in tokens.get_tokens_unprocessed(text):
            kind = "comment" if token in Comment else "string" if token in String else "code"
            if not self.kinds or self.kinds[-1] != kind:
                self.starts.append(index)
                self.kinds.append(kind)

    def used(self, name: str, offset: int) -> bool:
        if not self.kinds:
            return True
        at = bisect.bisect_right(self.starts, offset) - 1
        kind = self.kinds[at] if at >= 0 else "code"
        if kind != "string":
            return kind == "code"
        end = self.starts[at + 1] if at + 1 < len(self.starts) else len(self.text)
        return used_in_string(name, self.text[self.starts[at] : end])


def used_in_string(name: str, string: str) -> bool:
    """Whether `string` uses the variable `name` (`NAME=`, `$NAME`...), not just says it."""
    return any(re.search(use.format(name=re.escape(name)), string) for use in STRING_USES)


def render(syntax: str, name: str, value: str, append: bool = False) -> str:
    raise CannotRender("xlamigrate does not read this file")


def _kind(path: str) -> textkind.TextKind:
    file = os.path.basename(path)

    def analyse(text: str, names: frozenset[str]) -> TextAnalysis:
        return analyse_named(file, text, names)

    return textkind.TextKind(analyse, render)


def scan(task: FileTask) -> FileResult:
    if in_documentation(task.path):
        return FileResult(task.path)
    return _kind(task.path).scan(task)


def rewrite(task: FileTask, request: RewriteRequest) -> RewriteOutcome:
    if in_documentation(task.path):
        return RewriteOutcome(task.path, task.data, None)
    return _kind(task.path).rewrite(task, request)
