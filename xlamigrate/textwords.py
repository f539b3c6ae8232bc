"""Names in a file's bytes as its code can hold them: whole words, not parts of longer
identifiers (`xla_device` is not in `xla_device_hw`). The prefilter's tests: each may pass a
file that holds nothing (a name in a comment or a string), never fail one that does.

Each looks for the name's bytes and checks the bytes around a match: a regex starting with a
look-behind is tried at every position of the file (5-10x slower over a tree)."""

from __future__ import annotations

import re
from collections.abc import Iterable

# A byte that continues an identifier. A non-ASCII byte is taken for none (the name may go on
# in a non-ASCII letter: the tests pass more, never less).
_IDENTIFIER = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
# Between a keyword argument's name and its `=`, what Python allows there: spaces, line
# continuations and, in a call's brackets, comments and newlines.
_TO_EQUALS = re.compile(rb"(?:[\s\\]|#[^\n]*)*=(?!=)")


def has_word(data: bytes, word: bytes) -> bool:
    """Whether `word` stands in `data` as a whole word."""
    return _word_ends(data, word, first=True) != []


def has_keyword_argument(data: bytes, name: bytes) -> bool:
    """Whether `name` stands in `data` as a keyword argument (`mixed_precision="bf16"`)."""
    return any(_TO_EQUALS.match(data, end) for end in _word_ends(data, name, first=False))


def _word_ends(data: bytes, word: bytes, first: bool) -> list[int]:
    """Where each whole-word occurrence of `word` ends (the first only, with `first`)."""
    ends: list[int] = []
    start = data.find(word)
    while start >= 0:
        end = start + len(word)
        before = data[start - 1] if start else None
        after = data[end] if end < len(data) else None
        if before not in _IDENTIFIER and after not in _IDENTIFIER:
            ends.append(end)
            if first:
                break
        start = data.find(word, start + 1)
    return ends


class Substrings:
    """Whether bytes hold any of some names, as substrings. Names sharing their first four
    bytes are looked for by their common start first (`XLA_` for every legacy flag): a file
    holding none of them is searched once per group, not once per name (each search reads
    the whole file; most files hold no name at all)."""

    def __init__(self, names: Iterable[bytes]) -> None:
        groups: dict[bytes, list[bytes]] = {}
        for name in sorted(set(names)):
            groups.setdefault(name[:4], []).append(name)
        self.groups = tuple((_common_start(members), tuple(members)) for members in groups.values())

    def __bool__(self) -> bool:
        return bool(self.groups)

    def found_in(self, data: bytes) -> bool:
        return any(
            start in data and (len(members) == 1 or any(name in data for name in members))
            for start, members in self.groups
        )


def _common_start(names: list[bytes]) -> bytes:
    """The longest start every name has (that of the first and the last in sorted order)."""
    first, last = min(names), max(names)
    size = 0
    while size < len(first) and first[size] == last[size]:
        size += 1
    return first[:size]
