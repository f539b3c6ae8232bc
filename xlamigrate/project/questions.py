"""The questions the project asks of every file about its bytes (which script names it holds,
what it imports), and their answers: plain values, remembered for the bytes (the cache), so a
changed file is asked again without the rest of the project (decidedcache.py). Kept apart from
the project's building, which a run that reuses its decision never imports."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from xlamigrate.project.imports import references_in
from xlamigrate.project.mentions import Words

MENTIONS = "mentions"
IMPORTS = "imports"


def answer(question: str, data: bytes | None) -> Any:
    """A file's answer to one of the project's questions about its bytes (plain values): the
    question names all the answer depends on besides them, so an answer is remembered for the
    bytes, and a changed file is asked again without the rest of the project (decidedcache)."""
    if question == IMPORTS:  # its import statements
        return references_in(data)
    topic, signal, *words = question.split("\0")
    if topic == MENTIONS:  # how often it names each word (the signal's name: under "")
        return _mentions(signal, tuple(words)).count(data)
    raise ValueError(f"not a question of the project: {question!r}")


class _Mentions:
    def __init__(self, signal: str, words: Sequence[str]) -> None:
        self.signal = signal
        longest_first = sorted(words, key=len, reverse=True)
        alternatives = "|".join(re.escape(word) for word in longest_first)
        self.pattern = re.compile(rf"(?<![\w.-])(?:{alternatives})(?![\w])".encode())
        # (a substring test first: the regex is ten times slower)
        self.named = Words(word.encode() for word in words)

    def count(self, data: bytes | None) -> tuple[tuple[str, int], ...]:
        if data is None or not self.named.any_in(data):
            return ()
        found: dict[str, int] = {}
        for match in self.pattern.finditer(data):
            if not _copied(data, match.start()):
                word = match.group().decode()
                key = "" if word == self.signal else word
                found[key] = found.get(key, 0) + 1
        return tuple(found.items())


@functools.lru_cache(maxsize=8)
def _mentions(signal: str, words: tuple[str, ...]) -> _Mentions:
    return _Mentions(signal, words)


def _copied(data: bytes, at: int) -> bool:
    """Whether the name stands on a Dockerfile COPY/ADD line (a file copied, not launched)."""
    line = data[data.rfind(b"\n", 0, at) + 1 : at].lstrip().upper()
    return line.startswith((b"COPY ", b"ADD "))
