"""The `if` tests that hold the last reads of a local variable. An `if` that goes with the body
a rewrite emptied takes its test with it; a variable a function assigned only for that test
would be left unused (ruff's F841), so that `if` stays, under `pass`."""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Sequence

from xlamigrate.kinds.python.astscopes import Scopes


def last_reads(scopes: Scopes, tests: Sequence[ast.expr]) -> set[int]:
    """The ids of the `tests` that read a variable some function assigns (not a parameter,
    not a module's name: ruff does not flag those) and hold every read of it."""
    if not tests:
        return set()
    held: dict[int, int] = {}  # the id of a name read in a test -> the test's index
    for index, test in enumerate(tests):
        held.update((id(node), index) for node in ast.walk(test) if isinstance(node, ast.Name))
    reads: Counter[tuple[int, str]] = Counter()
    in_tests: dict[int, Counter[tuple[int, str]]] = {}
    for node, scope, _ in scopes.of(ast.Name):
        if not isinstance(node, ast.Name) or isinstance(node.ctx, ast.Store):
            continue
        binder = scope.binder(node.id)
        if binder is None or binder.kind != "function" or node.id not in binder.targets:
            continue
        variable = (id(binder), node.id)
        reads[variable] += 1
        holder = held.get(id(node))
        if holder is not None:
            in_tests.setdefault(holder, Counter())[variable] += 1
    return {
        id(tests[index])
        for index, counts in in_tests.items()
        if any(reads[variable] == count for variable, count in counts.items())
    }
