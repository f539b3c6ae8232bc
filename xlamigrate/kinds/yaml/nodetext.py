"""Where a YAML node's text lies in the file, and the edits that take one entry out of a
collection so the rest still reads the same (comments and quoting untouched)."""

from __future__ import annotations

import re

from xlamigrate.kinds.textaccess import TextEdit, line_removal
from xlamigrate.kinds.yaml.nodes import Node, is_null


class Positions:
    """Offsets of the nodes of one file's text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def span(self, node: Node) -> tuple[int, int]:
        """A scalar's text, quotes and block indicators included."""
        start: int = node.start_mark.index
        if node.style in ("|", ">"):
            return start, self.block_end(node)
        end: int = node.end_mark.index
        return start, end

    def block_end(self, node: Node) -> int:
        """The end of a block scalar's last content line (its end mark lies past the blank and
        comment lines that follow it)."""
        text = self.text
        stop: int = node.end_mark.index
        end = text.find("\n", node.start_mark.index, stop)
        if end == -1:
            return stop
        end = end - 1 if text[end - 1] == "\r" else end
        indent: int | None = None
        position = end + 1
        while position < stop:
            line_end = text.find("\n", position, stop)
            line_end = stop if line_end == -1 else line_end
            line = text[position:line_end].rstrip("\r")
            if line.strip():
                width = len(line) - len(line.lstrip(" "))
                if indent is None:
                    indent = width
                elif width < indent:
                    break
                end = position + len(line)
            position = line_end + 1
        return end

    def content_end(self, node: Node) -> int:
        """Where a node's own text ends (a block collection's end mark is the next token's)."""
        if node.id == "scalar":
            return self.span(node)[1]
        if node.flow_style or not node.value:
            end: int = node.end_mark.index
            return end
        last = node.value[-1]
        if node.id == "sequence":
            return self.content_end(last)
        name, value = last
        return self.span(name)[1] if is_null(value) else self.content_end(value)

    def range(self, first: Node, second: Node) -> tuple[int, int]:
        spans = (self.span(first), self.span(second))
        return min(s for s, _ in spans), max(e for _, e in spans)

    def entries(self, collection: Node) -> list[tuple[int, int]]:
        """Each entry's text: a block sequence item from its `-`, a mapping entry from its key."""
        entries = []
        for entry in collection.value:
            if collection.id == "mapping":
                name, value = entry
                start: int = name.start_mark.index
                end = self.span(name)[1] if is_null(value) else self.content_end(value)
            else:
                start = entry.start_mark.index
                if not collection.flow_style:
                    start = self.dash(start)
                end = self.content_end(entry)
            entries.append((start, end))
        return entries

    def dash(self, start: int) -> int:
        position = start - 1
        while position >= 0 and self.text[position] in " \t\r\n":
            position -= 1
        return position if position >= 0 and self.text[position] == "-" else start

    def removal(self, collection: Node, index: int, key: Node | None) -> TextEdit | None:
        """Removes one entry: its lines in a block collection (an only entry leaves `[]`/`{}`, so
        that `environment:` does not become null), its text and comma in a flow one."""
        entries = self.entries(collection)
        start, end = entries[index]
        if collection.flow_style:
            if len(entries) == 1:
                return TextEdit(start, end, "")
            if index + 1 < len(entries):
                return TextEdit(start, entries[index + 1][0], "")
            return TextEdit(entries[index - 1][1], end, "")
        if collection.id == "sequence" and self.text[start] != "-":
            return None  # an item whose dash could not be found (an anchor, a tag)
        edit = line_removal(self.text, start, end)
        whole_lines = edit.start == self.text.rfind("\n", 0, start) + 1 and (
            edit.end == len(self.text) or self.text[edit.end - 1] == "\n"
        )
        if not whole_lines:
            return None  # `- NAME: v` or `? NAME`: what would be left is not the user's to guess
        if len(entries) > 1 or key is None:
            return edit
        insert = self.after_key(key)
        if insert is None or insert > edit.start:
            return edit
        empty = " []" if collection.id == "sequence" else " {}"
        return TextEdit(insert, edit.end, empty + self.text[insert : edit.start])

    def after_key(self, key: Node) -> int | None:
        """Where an empty flow collection goes on a key's line: after the colon and any anchor or
        tag, before a comment."""
        text = self.text
        colon = self.span(key)[1]
        while colon < len(text) and text[colon] in " \t":
            colon += 1
        if colon >= len(text) or text[colon] != ":":
            return None
        line_end = text.find("\n", colon)
        line = text[colon + 1 : len(text) if line_end == -1 else line_end]
        match = re.match(r"(?:[ \t]+[^\s#][^\s]*)*", line)
        return colon + 1 + (match.end() if match else 0)
