"""One .gitignore file's patterns, as the walk asks them: `may_match` is a quick answer for
most paths (those no pattern can match), `ignored` the exact one (pathspec's), asked only where
the quick one says a pattern may match. pathspec compiles a regular expression per pattern (some
hundreds in a large project's .gitignore, most never matching): here the spec is built on the
first path that may match, and most patterns are answered without a regular expression at all.

The patterns are read as pathspec translates them (its regular expressions' sources, not
compiled), and sorted by the shape of that source:
- `^(?:.+/)?NAME` + end: a path component is NAME (`dist/`, `.coverage`);
- `^(?:.+/)?[^/]*SUFFIX` + end: a component ends with SUFFIX (`*.pyc`, `*.egg-info/`);
- `^(?:.+/)?PREFIX[^/]*` + end: a component starts with PREFIX (`.coverage.*`);
- `^(?:.+/)?[^/]*PART[^/]*` + end: a component holds PART (`*.so*`);
- `^PATH` + end: the path is PATH or below it (`/docs/build`);
where NAME, SUFFIX, PREFIX, PART and PATH are literals and "end" is the end of the path or a
`/`; a pattern matching below the top only (`*/**/*.pyc`) is taken for one matching anywhere.
Each is a set (or a tuple of strings) a path is looked up in. Every other pattern goes into a
regular expression: one per first folder for those starting with one (`torch/lib/*.so*`), one
for the rest. The quick answer may say "may" where no pattern matches (a NAME pattern asks for
a folder, the path's last component is a file's), never "no" where one does."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pathspec

_ANYWHERE = "^(?:.+/)?"  # the pattern matches at any depth
_BELOW_TOP = ("^[^/]+(?:/.+)?/", "^[^/]+/")  # at any depth but the top; one level down
_FIRST_FOLDER = re.compile(r"\^((?:\\.|[A-Za-z0-9_])+)(?:/|\(\?:/)")  # `^torch/`, `^test(?:/`
_ANY_NAME = "[^/]*"  # any part of one component
_ENDS = ("(?:(?P<ps_d>/)|$)", "(?P<ps_d>/)")  # end of path or a folder's `/`; a folder's `/`
_ESCAPED = re.compile(r"\\(.)")
_CLASS = re.compile(r"\[([A-Za-z0-9]+)\]")  # a class of letters and digits alone
_MOST_CLASSES = 2  # (`*.[ch][ch]`: 4 texts; more are left to a regular expression)
_GROUP = re.compile(r"\(\?P<[A-Za-z_][A-Za-z0-9_]*>")


class IgnorePatterns:
    """The patterns of one folder's .gitignore files (lines in the order git reads them)."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self._spec: pathspec.GitIgnoreSpec | None = None
        self.names: set[str] = set()
        self.paths: set[str] = set()
        literals: dict[str, list[str]] = {"suffix": [], "prefix": [], "part": []}
        others: list[str] = []
        below: dict[str, list[str]] = {}  # a first folder -> the sources starting with it
        for line in lines:
            source = _regex_source(line)
            if source is None:
                continue
            shape = _shape(source)
            if shape is not None:
                kind, texts = shape
                if kind == "name":
                    self.names.update(texts)
                elif kind == "path":
                    self.paths.update(texts)
                else:
                    literals[kind] += texts
                continue
            first = _FIRST_FOLDER.match(source)
            folder = _literal(first.group(1)) if first is not None else None
            if folder is None:
                others.append(source)
            else:
                below.setdefault(folder, []).append(source)
        self.suffixes = tuple(literals["suffix"])
        self.prefixes = tuple(literals["prefix"])
        self.parts = tuple(literals["part"])
        self.others = _joined(others)
        self.below = {folder: _joined(sources) for folder, sources in below.items()}

    def may_match(self, relative: str) -> bool:
        """Whether a pattern may match `relative` (a path below the folder, `/`-separated, a
        folder's ending in `/`)."""
        parts = relative.rstrip("/").split("/")
        if not self.names.isdisjoint(parts):
            return True
        if self.suffixes and any(part.endswith(self.suffixes) for part in parts):
            return True
        if self.prefixes and any(part.startswith(self.prefixes) for part in parts):
            return True
        if self.parts and any(literal in relative for literal in self.parts):  # (no `/` in one)
            return True
        if self.paths and self._below_path(parts):
            return True
        below = self.below.get(parts[0]) if self.below else None
        if below is not None and below(relative) is not None:
            return True
        return self.others is not None and self.others(relative) is not None

    def _below_path(self, parts: list[str]) -> bool:
        path = parts[0]
        if path in self.paths:
            return True
        for part in parts[1:]:
            path = f"{path}/{part}"
            if path in self.paths:
                return True
        return False

    def ignored(self, relative: str) -> bool | None:
        """Whether the patterns ignore `relative` (False: one re-includes it; None: no pattern
        matches it), as pathspec says."""
        if self._spec is None:
            import pathspec

            self._spec = pathspec.GitIgnoreSpec.from_lines(self.lines)
        return self._spec.check_file(relative).include


def _regex_source(line: str) -> str | None:
    """The line's pattern as pathspec translates it (None: no pattern, a comment or a blank
    line; pathspec's error for a malformed one, as the spec raises it); an empty source where
    the translation is not a text (then the pattern may match anything)."""
    source, include = _pattern_class().pattern_to_regex(line)
    if include is None:
        return None
    return source if isinstance(source, str) else ""


@cache
def _pattern_class() -> type[pathspec.RegexPattern]:
    """The pattern class GitIgnoreSpec reads lines with (pathspec names it differently from
    one release to another)."""
    import pathspec

    return type(pathspec.GitIgnoreSpec.from_lines(["x"]).patterns[0])


def _shape(source: str) -> tuple[str, list[str]] | None:
    """("name" | "suffix" | "prefix" | "part" | "path", the literals) for a source of those
    shapes (None: another)."""
    body = next((source[: -len(end)] for end in _ENDS if source.endswith(end)), None)
    if body is None:
        return None
    for head in _BELOW_TOP:  # (a superset: matching at the top too)
        if body.startswith(head):
            body = _ANYWHERE + body[len(head) :]
            break
    if body.startswith(_ANYWHERE):
        middle = body[len(_ANYWHERE) :]
        starts, ends = middle.startswith(_ANY_NAME), middle.endswith(_ANY_NAME)
        kind = {(False, False): "name", (True, False): "suffix", (False, True): "prefix"}.get(
            (starts, ends), "part"
        )
        middle = middle[len(_ANY_NAME) if starts else 0 : -len(_ANY_NAME) if ends else None]
        texts = _literals(middle)
        return None if texts is None or any("/" in t for t in texts) else (kind, texts)
    if body.startswith("^"):
        texts = _literals(body[1:])
        return None if texts is None else ("path", texts)
    return None


def _literals(escaped: str) -> list[str] | None:
    """The texts a source stands for where it is literal text but for a few classes of
    letters (`\\.py[cod]`: ".pyc", ".pyo", ".pyd"); None otherwise."""
    pieces = _CLASS.split(escaped)  # (text, letters, text, letters, ..., text)
    if len(pieces) > 2 * _MOST_CLASSES + 1:
        return None
    texts = [""]
    for index, piece in enumerate(pieces):
        if index % 2:
            texts = [text + letter for text in texts for letter in piece]
            continue
        if piece:
            literal = _literal(piece)
            if literal is None:
                return None
            texts = [text + literal for text in texts]
    return texts if all(texts) else None


def _literal(escaped: str) -> str | None:
    """The text a regular expression's source stands for where it is `re.escape`'s writing of
    a text (no operator left); None otherwise."""
    text = _ESCAPED.sub(r"\1", escaped)
    return text if text and re.escape(text) == escaped else None


def _joined(sources: list[str]) -> Callable[[str], re.Match[str] | None] | None:
    """One regular expression that matches where one of the sources does (their named groups
    made plain: they would clash); None where there is none. Patterns anchored at the start
    (as pathspec writes them all) are tried there alone. Where the sources cannot be joined (or
    one is unknown: ""), every path may match."""
    if not sources:
        return None
    if "" not in sources:
        joined = "|".join(f"(?:{_GROUP.sub('(?:', source)})" for source in sources)
        try:
            compiled = re.compile(joined)
        except re.error:
            pass
        else:
            anchored = all(source.startswith("^") for source in sources)
            return compiled.match if anchored else compiled.search
    return _anything


def _anything(relative: str) -> re.Match[str] | None:
    return re.match("", relative)
