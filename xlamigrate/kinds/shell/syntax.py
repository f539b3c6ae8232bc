"""Shell text parsed by tree-sitter-bash, imported on first use: the tree with character offsets,
the regions it could not read, and whether bash itself accepts the text (asked only when the tree
has an error, since tree-sitter also marks some valid bash)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

Node = Any  # tree_sitter.Node (the module is imported lazily)
_BASH_ERROR = re.compile(r"line (\d+): (.*)")
_NEAR_TOKEN = re.compile(r"near unexpected token `(.+)'$")
_NEVER_CLOSED = re.compile(r"looking for matching `(.)'$")
_OPENERS = {")": "(", "}": "{", "]": "["}


@cache
def _parser() -> Any:
    import tree_sitter_bash
    from tree_sitter import Language, Parser

    return Parser(Language(tree_sitter_bash.language()))


@dataclass(frozen=True)
class Parsed:
    """A parse of `text`; node positions are character offsets into it."""

    text: str
    root: Node
    chars: array[int] | None  # byte offset -> character offset; None for ASCII text

    def start(self, node: Node) -> int:
        offset: int = node.start_byte
        return offset if self.chars is None else self.chars[offset]

    def end(self, node: Node) -> int:
        offset: int = node.end_byte
        return offset if self.chars is None else self.chars[offset]

    def raw(self, node: Node) -> str:
        return self.text[self.start(node) : self.end(node)]


def parse(text: str) -> Parsed:
    data = text.encode("utf-8", "surrogatepass")
    tree = _parser().parse(data)
    return Parsed(text, tree.root_node, None if text.isascii() else _char_offsets(text))


def _char_offsets(text: str) -> array[int]:
    offsets = array("l")
    for index, char in enumerate(text):
        width = len(char.encode("utf-8", "surrogatepass"))
        offsets.extend([index] * width)
    offsets.append(len(text))
    return offsets


def walk(node: Node) -> Iterator[Node]:
    """Every node under `node` (itself included), in document order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def error_nodes(root: Node) -> list[Node]:
    """The ERROR nodes and the MISSING tokens tree-sitter recovered around."""
    if not root.has_error:
        return []
    found = []
    for node in walk(root):
        if node.is_error or node.is_missing:
            found.append(node)
    return found


def bash_rejects(text: str) -> tuple[int, str] | None:
    """(line, message) of bash's syntax error for `text`, None when `bash -n` accepts it.
    OSError (no bash here) or TimeoutError: the caller falls back to tree-sitter's own error."""
    bash = shutil.which("bash")
    if bash is None:
        raise FileNotFoundError("bash")
    environment = {"PATH": os.environ.get("PATH", ""), "LC_ALL": "C"}  # no BASH_ENV is sourced
    try:
        result = subprocess.run(
            [bash, "--norc", "--noprofile", "-n"],
            input=text.encode("utf-8", "surrogatepass"),
            capture_output=True,
            env=environment,
            timeout=30,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        raise TimeoutError("bash -n did not answer in 30 s") from error
    if result.returncode == 0:
        return None
    message = result.stderr.decode("utf-8", "replace").strip().splitlines()
    for line in message:
        match = _BASH_ERROR.search(line)
        if match:
            return int(match.group(1)), match.group(2).strip()
    return 1, message[0] if message else "bash -n rejects the script"


def rejected_at(text: str, start: int, message: str) -> int | None:
    """Where in the line of `text` starting at `start` bash's syntax error `message` points: at
    the unexpected token; at the quote or bracket never closed (the end of the text, where bash
    stopped, when that line does not show it); at the end of the text for an unexpected end of
    file. None where the message names nothing the line shows."""
    end = text.find("\n", start)
    end = len(text) if end == -1 else end
    token = _NEAR_TOKEN.search(message)
    if token:
        if token.group(1) == "newline":
            return end
        found = text.find(token.group(1), start, end)
        return found if found != -1 else None
    never_closed = _NEVER_CLOSED.search(message)
    if never_closed:
        opener = _OPENERS.get(never_closed.group(1), never_closed.group(1))
        found = text.rfind(opener, start, end)
        return found if found != -1 else len(text)
    if "unexpected end of file" in message:
        return len(text)
    return None
