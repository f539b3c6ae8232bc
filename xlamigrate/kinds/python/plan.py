"""A rewrite plan, made on the standard library's `ast` (planner.py): the edits, keyed by the ast
nodes (and training.py's lines and blocks) they change, with the code they put in as text. ast
nodes, lines and blocks compare by identity, so they key the plan as they key a dict.

Planning decides; applying only executes (apply.py)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from xlamigrate.kinds.python.astwalk import DictItem
from xlamigrate.kinds.python.training import Statement

Element = DictItem | ast.keyword  # a dict entry, a keyword argument


@dataclass
class Plan:
    # A simple statement removed from its line; a line left empty disappears (or becomes `pass`).
    removed: set[ast.stmt] = field(default_factory=set)
    # Statements (code) put in place of a simple statement's line (the first removed one on it).
    replacements: dict[ast.stmt, list[str]] = field(default_factory=dict)
    # Statements (code) put before or after a statement of a block (compound ones too).
    before: dict[Statement, list[str]] = field(default_factory=dict)
    after: dict[Statement, list[str]] = field(default_factory=dict)
    # Runs of consecutive statements (first, last) of one block, wrapped in `with <item>:`.
    wraps: list[tuple[Statement, Statement, str]] = field(default_factory=list)
    removed_elements: set[Element] = field(default_factory=set)
    # An `if` that goes, leaving its body (True) or its else's (False) in its place.
    collapsed: dict[ast.If, bool] = field(default_factory=dict)
    # An expression's code (its own parentheses included) replaced by other code.
    swapped: dict[ast.AST, str] = field(default_factory=dict)
    imports: set[tuple[str, str | None]] = field(default_factory=set)
    aliased: set[tuple[str, str]] = field(default_factory=set)  # `import module as alias`

    def is_empty(self) -> bool:
        return not (
            self.removed
            or self.replacements
            or self.before
            or self.after
            or self.wraps
            or self.removed_elements
            or self.swapped
            or self.collapsed
        )

    def insert_before(self, statement: Statement, code: list[str]) -> None:
        self.before.setdefault(statement, []).extend(code)

    def insert_after(self, statement: Statement, code: list[str]) -> None:
        self.after.setdefault(statement, []).extend(code)
