"""A module's code made statement by statement (kinds/python/cstcode.py) is libcst's own,
for every Python fixture, before and after an edit, with and without a final newline."""

from __future__ import annotations

import ast
import itertools

import libcst as cst
import pytest

from tests.conftest import FIXTURES
from xlamigrate.kinds.python.cstcode import ModuleCode

SOURCES = [path for path in sorted(FIXTURES.rglob("*.py")) if b"\0" not in path.read_bytes()]


def parsed(data: bytes) -> cst.Module | None:
    try:
        return cst.parse_module(data)
    except cst.ParserSyntaxError:
        return None


def test_every_fixture_is_made_as_libcst_makes_it() -> None:
    made = ModuleCode()
    checked = 0
    for path in SOURCES:
        module = parsed(path.read_bytes())
        if module is None:
            continue
        assert made.code(module) == module.code, path
        checked += 1
    assert checked > 100


@pytest.mark.parametrize(
    "source",
    [
        "# header\n\nimport os\nx = 1\n\n\ndef f():\n    return x\n# footer\n",
        "import os\nx = 1",  # no final newline
        "import os\r\nx = 1\r\n",
        "x = 1\n\n# trailing comment",
        "# only a comment\n",
        "",
        "\n\n",
        "if x:\n\tpass\nelse:\n\ty = 2\n",
        "x = 1; y = 2\\\n\n",
    ],
)
def test_a_module_and_its_edit_are_made_as_libcst_makes_them(source: str) -> None:
    module = cst.parse_module(source)
    made = ModuleCode()
    assert made.code(module) == module.code
    if module.body:  # the first statement swapped for another: the rest is the same objects
        edited = module.with_changes(body=[cst.parse_statement("z = 3\n"), *module.body[1:]])
        assert made.code(edited) == edited.code
        dropped = module.with_changes(body=module.body[:-1])
        assert made.code(dropped) == dropped.code


def test_each_statements_lines_hold_its_ast_statements() -> None:
    checked = 0
    for path in SOURCES:
        data = path.read_bytes()
        module = parsed(data)
        try:
            tree = ast.parse(data)
        except (SyntaxError, ValueError):
            continue
        if module is None or not module.body:
            continue
        spans = ModuleCode().lines(module)
        assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans)), path
        assert spans[-1][1] >= module.code.count("\n"), path
        for statement in tree.body:
            assert any(first <= statement.lineno <= last for first, last in spans), path
            assert any(first <= statement.end_lineno <= last for first, last in spans), path
        checked += 1
    assert checked > 100
