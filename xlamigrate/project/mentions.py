"""Whether a file's bytes hold any of a few words (launched scripts' file names, the signal's
name), asked of every file of the tree: one search per distinct ending of the words, not one
per word (script names share ".py", so a file is passed over in one scan, and a file that holds
".py" is checked only where it does)."""

from __future__ import annotations

from collections.abc import Iterable

_ENDING = 3  # bytes: ".py", ".sh", "IPE"
# Occurrences of an ending looked at one by one before searching for each word instead (an
# ending as common as "ing" would make the walk slower than the searches).
_MAX_VISITS = 64


class Words:
    def __init__(self, words: Iterable[bytes]) -> None:
        self.words = tuple(sorted({word for word in words if word}))
        by_ending: dict[bytes, dict[int, set[bytes]]] = {}
        for word in self.words:
            lengths = by_ending.setdefault(word[-_ENDING:], {})
            lengths.setdefault(len(word), set()).add(word)
        self._by_ending = by_ending

    def any_in(self, data: bytes) -> bool:
        """Whether one of the words occurs in `data` (as `any(word in data ...)` tells)."""
        return any(
            self._ends_in(data, ending, lengths) for ending, lengths in self._by_ending.items()
        )

    def _ends_in(self, data: bytes, ending: bytes, lengths: dict[int, set[bytes]]) -> bool:
        at = data.find(ending)
        visits = 0
        while at >= 0:
            end = at + len(ending)
            for length, words in lengths.items():
                if length <= end and data[end - length : end] in words:
                    return True
            visits += 1
            if visits > _MAX_VISITS:
                return any(word in data for words in lengths.values() for word in words)
            at = data.find(ending, at + 1)
        return False
