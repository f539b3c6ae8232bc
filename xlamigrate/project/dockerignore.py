"""Which files of a build context a `.dockerignore` leaves out, with Docker's own pattern rules
(not gitignore's): each pattern is a path from the context's root (`*.py` is the root's only),
`*` and `?` stay within a folder, `**` spans folders, a pattern that matches a folder leaves out
everything in it, `!` takes a path back in, and the last pattern that matches decides."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class DockerIgnore:
    """The patterns of one ignore file: (regex, a `!` exception) in their order."""

    patterns: tuple[tuple[re.Pattern[str], bool], ...] = ()
    path: str = ".dockerignore"  # where it is (display path)

    def ignores(self, path: str) -> bool:
        """Whether the context-relative `path` is left out of the build context."""
        parts = posixpath.normpath(path).split("/")
        candidates = ["/".join(parts[: index + 1]) for index in range(len(parts))]
        ignored = False
        for pattern, exception in self.patterns:
            if any(pattern.fullmatch(candidate) for candidate in candidates):
                ignored = not exception
        return ignored


def parse_dockerignore(text: str, path: str = ".dockerignore") -> DockerIgnore:
    patterns = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        line = line[1:].strip() if exception else line
        cleaned = posixpath.normpath(line.lstrip("/")) if line.lstrip("/") else "."
        if cleaned == ".":
            continue
        patterns.append((re.compile(_regex(cleaned)), exception))
    return DockerIgnore(tuple(patterns), path)


def _regex(pattern: str) -> str:
    out = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if pattern.startswith("**", index):
            index += 2
            if pattern.startswith("/", index):  # `**/`: any folders, none too
                out.append("(?:.*/)?")
                index += 1
            else:
                out.append(".*")
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = pattern.find("]", index + 1)
            if end == -1:
                out.append(re.escape(char))
            else:
                body = pattern[index + 1 : end]
                body = "^" + body[1:] if body.startswith("!") else body
                out.append(f"[{body.replace(chr(92), chr(92) * 2)}]")
                index = end
        elif char == "\\" and index + 1 < len(pattern):
            index += 1
            out.append(re.escape(pattern[index]))
        else:
            out.append(re.escape(char))
        index += 1
    return "".join(out)
