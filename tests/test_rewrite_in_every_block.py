"""The rewrite plans on `ast` and writes with libcst (apply.py pairs the two trees): its edits land
wherever the legacy writes stand, in every kind of block Python has, however the file indents.

Each case puts two legacy writes that turn a flag off (removed without a recipe) inside one
block: a whole statement, and one entry of a multi-line `os.environ.update({...})` (found by its
position inside its statement, whose continuation lines count the block's indentation). The
rewrite must remove exactly those two lines and keep every other byte."""

from __future__ import annotations

import ast

import pytest

from xlamigrate.catalogue import load_catalogue
from xlamigrate.engine import rewrite_source
from xlamigrate.kinds.python.rewrite import MODES

CATALOGUE = load_catalogue()
STATEMENT = 'os.environ["XLA_DOWNCAST_BF16"] = "0"'
ENTRY = '"XLA_USE_BF16": "0",'

# {body}: the block's statements, each line already indented by one level ({i}).
BLOCKS = {
    "module": "{body}",
    "function": "def main():\n{body}",
    "method": "class Trainer:\n{i}def run(self):\n{body2}",
    "if": "if ready:\n{body}",
    "elif": "if ready:\n{i}pass\nelif other:\n{body}",
    "else": "if ready:\n{i}pass\nelse:\n{body}",
    "for else": "for step in range(3):\n{i}pass\nelse:\n{body}",
    "while": "while ready:\n{body}{i}break\n",
    "with": "with context():\n{body}",
    "try": "try:\n{body}except ValueError:\n{i}pass\n",
    "except": "try:\n{i}pass\nexcept ValueError:\n{body}",
    "try else": "try:\n{i}pass\nexcept ValueError:\n{i}pass\nelse:\n{body}",
    "finally": "try:\n{i}pass\nfinally:\n{body}",
    "match": "match mode:\n{i}case 1:\n{body2}",
    "async": "async def main():\n{i}async with lock:\n{i}{i}async for item in queue:\n{body3}",
    "decorated": "@decorate\ndef main():\n{body}",
}
INDENTS = {"4 spaces": "    ", "2 spaces": "  ", "tabs": "\t"}


def block_source(block: str, indent: str) -> tuple[str, str]:
    """(the file, what the rewrite must make of it)."""

    def body(level: int) -> tuple[str, str]:
        pad = indent * level
        lines = [
            f"{pad}x = 1\n",
            f"{pad}{STATEMENT}\n",
            f"{pad}os.environ.update({{\n",
            f"{pad}{indent}{ENTRY}\n",
            f'{pad}{indent}"OTHER": "1",\n',
            f"{pad}}})\n",
            f"{pad}y = 2\n",
        ]
        kept = [line for line in lines if STATEMENT not in line and ENTRY not in line]
        return "".join(lines), "".join(kept)

    before = {f"body{level if level > 1 else ''}": body(level)[0] for level in (1, 2, 3)}
    after = {f"body{level if level > 1 else ''}": body(level)[1] for level in (1, 2, 3)}
    template = BLOCKS[block]
    if block == "module":
        before["body"], after["body"] = body(0)
    head = "import os\n\n"
    return (
        head + template.format(i=indent, **before),
        head + template.format(i=indent, **after),
    )


@pytest.mark.parametrize("indent", INDENTS)
@pytest.mark.parametrize("block", BLOCKS)
def test_edits_land_in_every_kind_of_block(block: str, indent: str) -> None:
    source, expected = block_source(block, INDENTS[indent])
    ast.parse(source)  # the case itself is Python
    for mode in MODES:
        outcome = rewrite_source(
            "t.py", source.encode(), "python", CATALOGUE, CATALOGUE.select(), mode
        )
        assert outcome.errors == ()
        assert outcome.rewritten is not None
        assert outcome.rewritten.decode() == expected
        assert {f.code for f in outcome.fixed} == {"XM101", "XM102"}


def test_a_line_of_several_statements_keeps_the_others() -> None:
    source = f"import os\nx = 1; {STATEMENT}; y = 2\n"
    outcome = rewrite_source(
        "t.py", source.encode(), "python", CATALOGUE, CATALOGUE.select(), "full-bf16"
    )
    assert outcome.rewritten == b"x = 1; y = 2\n"  # (os, used by that statement only, too)


def test_a_one_line_suite_left_empty_goes_with_its_if_or_gets_pass() -> None:
    """The `if` goes where its test does nothing else; a test that may act stays."""
    for test, expected in (("ready", b"x = 1\n"), ("ready()", b"if ready():\n    pass\nx = 1\n")):
        source = f"import os\nif {test}: {STATEMENT}\nx = 1\n"
        outcome = rewrite_source(
            "t.py", source.encode(), "python", CATALOGUE, CATALOGUE.select(), "full-bf16"
        )
        assert outcome.rewritten == expected


def test_a_plan_only_rewrite_says_what_the_rewrite_says_and_writes_nothing() -> None:
    """What a scan asks of the scripts its launchers start: the plan and its findings, without
    libcst writing them."""
    from xlamigrate.request import RewriteRequest

    source, _ = block_source("function", "    ")
    source += "model = torch.nn.Linear(2, 2)\noptimizer = torch.optim.SGD(model.parameters())\n"
    for mode in MODES:
        whole = rewrite_source(
            "t.py", source.encode(), "python", CATALOGUE, CATALOGUE.select(), mode
        )
        planned = rewrite_source(
            "t.py",
            source.encode(),
            "python",
            CATALOGUE,
            CATALOGUE.select(),
            RewriteRequest(mode, plan_only=True),
        )
        assert whole.rewritten is not None and planned.rewritten is None
        assert (planned.fixed, planned.remaining, planned.unapplied) == (
            whole.fixed,
            whole.remaining,
            whole.unapplied,
        )
