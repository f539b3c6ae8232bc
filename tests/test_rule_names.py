"""The code refers to a rule by a constant named as rules/ names the rule (`LEGACY_FLAG_READ =
"XM201"` for `name = "legacy-flag-read"`), declared once, at the top of the module that emits
it (issue 38): no rule code is written anywhere else in xlamigrate/, so a search for the name
finds every place that emits or asks for the rule, and a rule renamed in rules/ is renamed in
the code or this test fails."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import tomllib

from tests.test_import_graph import PACKAGE

RULES = Path(__file__).resolve().parent.parent / "rules"
CODE = re.compile(r"XM\d{3}")


def rule_names() -> dict[str, str]:
    """Each rule's code -> its name as a constant (`legacy-flag-read` -> LEGACY_FLAG_READ)."""
    names = {}
    for path in sorted(RULES.glob("XM*.toml")):
        rule = tomllib.loads(path.read_text(encoding="utf-8"))
        names[rule["code"]] = rule["name"].upper().replace("-", "_")
    return names


def code_literals(tree: ast.AST) -> list[ast.Constant]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and CODE.fullmatch(node.value)
    ]


def declarations(tree: ast.Module) -> dict[int, str]:
    """The module-level `NAME = "XMnnn"` constants: id of the literal -> the name."""
    found = {}
    for statement in tree.body:
        if (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
            and isinstance(statement.value, ast.Constant)
        ):
            found[id(statement.value)] = statement.targets[0].id
    return found


def test_every_rule_code_in_the_package_is_a_constant_named_after_its_rule() -> None:
    names = rule_names()
    declared: dict[str, str] = {}
    stray = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = declarations(tree)
        where = path.relative_to(PACKAGE.parent).as_posix()
        for literal in code_literals(tree):
            code, name = str(literal.value), constants.get(id(literal))
            if name is None:
                stray.append(f"{where}:{literal.lineno}: {code}")
                continue
            assert name == names.get(code), f"{where}: {name} = {code!r} ({names.get(code)})"
            assert code not in declared, f"{code} declared in {declared[code]} and {where}"
            declared[code] = where
    assert stray == []
    assert len(declared) >= 20  # (the walk sees the constants)
