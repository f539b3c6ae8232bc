"""The scopes' walk (astscopes.py): every node of the tree with code in it, in pre-order, a
node's children read from the fields its type's grammar says may hold one, and the nodes of
given types asked for alone (`Scopes.of`) as the walk met them."""

from __future__ import annotations

import ast
from collections.abc import Iterator

import pytest

from tests.conftest import FIXTURES
from xlamigrate.kinds.python import astscopes
from xlamigrate.kinds.python.astscopes import Scopes

EVERY_SYNTAX = """
import os, torch_xla.core.xla_model as xm
from a.b import (c as d, e)
x: int = 1
y = {**os.environ, "k": [i async for i in g() if i] if (w := 2) else None}
def f(p, /, q: "T" = 1, *args, r=None, s, **kw) -> None:
    global x
    def g():
        nonlocal p
        return lambda z=p: {k: v for k, v in zip(z, z)}
    del y
    return f"{p!r:>{q}} and {x=}"
@decorator(1)
class C(Base, metaclass=M):
    attr = [j for j in range(3)]
    async def m(self):
        async with a as (b, c), d:
            await e
        try:
            pass
        except (ValueError, KeyError) as err:
            raise err from None
        else:
            pass
        finally:
            assert x, "message"
match command:
    case [Point(x=0, y=yy), *rest] if yy > 0:
        pass
    case {"key": value, **others} | {"other": value, **others}:
        pass
    case str() as text:
        pass
for i, (j, k) in enumerate(pairs):
    while i < -j ** 2 and not k or k in (1, 2):
        i += 1; break
print(*args, sep="", **kw)[1:2, ::3]
"""


def sources() -> list[tuple[str, str]]:
    found = [("every syntax", EVERY_SYNTAX)]
    for path in sorted(FIXTURES.rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
            ast.parse(text)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        found.append((str(path.relative_to(FIXTURES)), text))
    return found


SOURCES = sources()


def reference_walk(node: ast.AST) -> Iterator[ast.AST]:
    """The walk as `ast.iter_child_nodes` gives a node's children, less contexts and
    operators; a scope's opener's children as the scopes order them."""
    yield node
    if type(node) in astscopes._OPENERS:
        scopes = Scopes(ast.Module([], []))
        children = [child for child, _ in astscopes._children(node, scopes.module, scopes)]
    else:
        children = [c for c in ast.iter_child_nodes(node) if not isinstance(c, astscopes._INERT)]
    for child in children:
        yield from reference_walk(child)


@pytest.mark.parametrize(("name", "source"), SOURCES, ids=[name for name, _ in SOURCES])
def test_the_walk_is_every_node_with_code_in_pre_order(name: str, source: str) -> None:
    module = ast.parse(source)
    walked = [node for node, _, _ in Scopes(module).order]
    assert [id(node) for node in walked] == [id(node) for node in reference_walk(module)]


@pytest.mark.parametrize(
    "kinds",
    [
        (ast.Name,),
        (ast.Call, ast.Attribute, ast.Name),
        (ast.If, ast.IfExp),
        (ast.Import, ast.ImportFrom, ast.Try),
        (ast.Nonlocal,),
    ],
)
def test_the_nodes_of_some_types_are_those_of_the_walk(kinds: tuple[type[ast.AST], ...]) -> None:
    for _, source in SOURCES[:20]:
        scopes = Scopes(ast.parse(source))
        expected = [item for item in scopes.order if type(item[0]) in kinds]
        assert scopes.of(*kinds) == expected


def test_a_node_type_without_a_grammar_is_walked_by_its_fields() -> None:
    class Odd(ast.expr):
        """Not a grammar line."""

        _fields = ("inner", "items")

    odd = Odd()
    odd.inner = ast.Name("a", ast.Load())
    odd.items = [ast.Name("b", ast.Load()), None, ast.Add()]
    module = ast.Module([ast.Expr(odd)], [])
    walked = [node for node, _, _ in Scopes(module).order]
    assert [type(node).__name__ for node in walked] == ["Module", "Expr", "Odd", "Name", "Name"]
