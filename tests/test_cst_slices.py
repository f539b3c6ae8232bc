"""A rewrite parses with libcst only the top-level statements its edits need (cstslices.py), and
writes the bytes the whole module's rewrite writes: the same file, edit for edit, whatever sits
around the edits (comments that move, blocks' trailing comments, decorators, added imports,
tabs, an encoding cookie, no final newline). Where it cannot be sure (CR line breaks, a form
feed, a BOM) the whole module is parsed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import libcst as cst
import pytest

from tests import snapshots
from tests.conftest import RECIPE_APPLIED, fixture_kind
from tests.test_scan_scaling import generated_module
from xlamigrate.catalogue import Catalogue
from xlamigrate.engine import rewrite_source
from xlamigrate.kinds.python import cstslices
from xlamigrate.kinds.python.plan import Plan
from xlamigrate.kinds.python.rewrite import MODES, whole_module_applied
from xlamigrate.kinds.python.training import TrainingScript

Compared = list[tuple[bytes, bytes]]


@pytest.fixture
def compared(monkeypatch: pytest.MonkeyPatch) -> Iterator[Compared]:
    """Each sliced rewrite beside the whole module's (its bytes, then theirs)."""
    found: Compared = []
    sliced_applied = cstslices.sliced_applied

    def both(data: bytes, script: TrainingScript, plan: Plan, drop_unused: bool = True):
        sliced = sliced_applied(data, script, plan, drop_unused)
        if sliced is not None:
            whole, _ = whole_module_applied("x.py", data, script, plan, drop_unused)
            assert isinstance(whole, bytes)
            found.append((sliced[0], whole))
        return sliced

    monkeypatch.setattr(cstslices, "sliced_applied", both)
    yield found


def assert_sliced_alike(compared: Compared) -> None:
    """The rewrite sliced, and wrote the whole module's bytes each time."""
    assert compared, "the rewrite parsed the whole module"
    for sliced, whole in compared:
        assert sliced == whole


def filler(start: int, count: int) -> str:
    return "".join(
        f"def helper_{i}(x):\n    if x:\n        return x + {i}\n    return {i}\n\n\n"
        for i in range(start, start + count)
    )


def rewritten(source: bytes, mode: str, catalogue: Catalogue, rules: frozenset[str]) -> bytes:
    outcome = rewrite_source("train.py", source, "python", catalogue, rules, mode)
    assert outcome.errors == ()
    assert outcome.rewritten is not None
    return outcome.rewritten


LOOP = """\
def main():
    print(os.getpid())
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        loss = model(torch.randn(2, 4)).sum()
        loss.backward()
        optimizer.step()
"""

SHAPES = {
    "comments above the write move down": (
        "import os\nimport torch\n\n" + filler(0, 20) + "# turn bf16 on\n# for the device\n"
        'os.environ["XLA_USE_BF16"] = "1"\n\n# the helpers\n' + filler(20, 20) + LOOP
    ),
    "a block's trailing comments stay with it": (
        "import os\nimport torch\n\n" + filler(0, 20) + "def before(x):\n    return x\n"
        '    # indented after the body\n# at the margin\nos.environ["XLA_USE_BF16"] = "1"\n'
        "if True:\n    pass\n    # trailing\n" + filler(20, 20) + LOOP
    ),
    "the write last, without a final newline": (
        "import os\nimport torch\n\n" + filler(0, 20) + LOOP + "\n# last words\n"
        'os.environ["XLA_USE_BF16"] = "1"'
    ),
    "decorated definitions around the edits": (
        "import functools\nimport os\nimport torch\n\n"
        '@functools.lru_cache\ndef cached():\n    return 1\n\nos.environ["XLA_USE_BF16"] = "1"\n'
        "\n@functools.lru_cache\n@functools.wraps(cached)\ndef wrapped():\n    return 2\n\n"
        + filler(0, 30)
        + LOOP
    ),
    "imports added after a docstring": (
        '"""A training script."""\nimport os\nimport torch\n'
        'os.environ["XLA_USE_BF16"] = "1"\n' + filler(0, 30) + LOOP
    ),
    "tabs": (
        'import os\nimport torch\n\nos.environ["XLA_USE_BF16"] = "1"\n'
        + (filler(0, 30) + LOOP).replace("    ", "\t")
    ),
    "the write inside a function": (
        "import os\nimport torch\n\n" + filler(0, 20) + "def setup():\n"
        '    os.environ["XLA_USE_BF16"] = "1"\n    return 1\n\n' + filler(20, 20) + LOOP
    ),
    "the first indented block deep in the file": (
        'import os\nimport torch\nos.environ["XLA_USE_BF16"] = "1"\n'
        + "".join(f"value_{i} = {i}\n" for i in range(200))
        + "if value_1:\n  value_2 = 3\n"
        + LOOP.replace("    ", "  ")
    ),
    "a top-level loop": (
        'import os\nimport torch\nos.environ["XLA_USE_BF16"] = "1"\n'
        + filler(0, 20)
        + "model = torch.nn.Linear(4, 4)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step in range(3):\n    loss = model(torch.randn(2, 4)).sum()\n"
        "    loss.backward()\n    optimizer.step()\nprint(os.getpid())\n" + filler(20, 20)
    ),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_sliced_rewrite_writes_the_whole_modules_bytes(
    shape: str,
    mode: str,
    compared: Compared,
    catalogue: Catalogue,
    precision_rules: frozenset[str],
) -> None:
    rewritten(SHAPES[shape].encode(), mode, catalogue, precision_rules)
    assert_sliced_alike(compared)


def test_an_encoding_cookie_is_kept_with_the_first_statement(
    compared: Compared, catalogue: Catalogue, precision_rules: frozenset[str]
) -> None:
    source = (
        "# -*- coding: latin-1 -*-\nimport os\nimport torch\nGREETING = 'h\xe9'\n"
        'os.environ["XLA_USE_BF16"] = "1"\n' + filler(0, 20) + LOOP
    ).encode("latin-1")
    out = rewritten(source, "full-bf16", catalogue, precision_rules)
    assert_sliced_alike(compared)
    assert "GREETING = 'h\xe9'".encode("latin-1") in out


def test_a_large_file_is_parsed_only_where_the_edits_are(
    monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue, precision_rules: frozenset[str]
) -> None:
    source = generated_module(5_000)
    parsed: list[int] = []
    parse_module = cst.parse_module

    def counted(data: bytes | str, *args: object) -> cst.Module:
        parsed.append(len(data))
        return parse_module(data, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(cst, "parse_module", counted)
    sliced = rewritten(source, "full-bf16", catalogue, precision_rules)
    assert len(parsed) == 1 and parsed[0] < len(source) // 20, parsed
    monkeypatch.setattr(cstslices, "sliced_applied", lambda *args: None)
    assert rewritten(source, "full-bf16", catalogue, precision_rules) == sliced
    assert parsed[1] == len(source)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda text: text.replace("\n", "\r\n"), id="CRLF"),
        pytest.param(lambda text: text.replace("return 3\n", 'return "\f"\n'), id="FF"),
        pytest.param(lambda text: "\ufeff" + text, id="BOM"),
    ],
)
def test_what_libcst_may_not_reproduce_is_parsed_whole(
    change, compared: Compared, catalogue: Catalogue, precision_rules: frozenset[str]
) -> None:
    source = change(SHAPES["comments above the write move down"]).encode("utf-8")
    out = rewritten(source, "full-bf16", catalogue, precision_rules)
    assert compared == []
    assert b"XLA_USE_BF16" not in out


OFF = 'os.environ["XLA_USE_BF16"] = "0"\n'

UNUSED_SHAPES = {
    "an off write, the only read of the module's os": (
        "import os\nimport torch\n\n" + filler(0, 20) + "# off\n" + OFF + filler(20, 20)
    ),
    "an off write, the only read of a function's os": (
        "import torch\n\n"
        + filler(0, 20)
        + "def setup():\n    import os\n\n    "
        + OFF
        + "    return 1\n\n"
        + filler(20, 20)
    ),
    "an if that goes with its import, and the import its test read": (
        "import sys\nimport torch\n\n" + filler(0, 20) + 'if sys.platform == "linux":\n'
        "    import os\n\n    " + OFF + filler(20, 20)
    ),
    "an import replaced with its uses' fixes": (
        "import torch\nimport torch_xla.core.xla_model as xm\n\n"
        + filler(0, 20)
        + "def device():\n    return xm.xla_device()\n\n"
        + filler(20, 20)
    ),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", sorted(UNUSED_SHAPES))
def test_imports_left_unused_go_as_the_whole_modules_rewrite_drops_them(
    shape: str, mode: str, compared: Compared, catalogue: Catalogue
) -> None:
    rewritten(UNUSED_SHAPES[shape].encode(), mode, catalogue, catalogue.select((), ()))
    assert_sliced_alike(compared)


def test_an_import_far_from_the_edit_goes_in_a_later_round(
    compared: Compared, catalogue: Catalogue, precision_rules: frozenset[str]
) -> None:
    source = UNUSED_SHAPES["an if that goes with its import, and the import its test read"]
    out = rewritten(source.encode(), "full-bf16", catalogue, precision_rules)
    assert out.startswith(b"import torch\n") and b"import os" not in out and b"if sys" not in out
    assert_sliced_alike(compared)


def python_cases() -> list[object]:
    return [
        pytest.param(mode, case, id=f"{mode}/{case.name}")
        for mode in MODES
        for case in snapshots.cases(mode, ".py")
    ]


@pytest.mark.parametrize(("mode", "case"), python_cases())
def test_every_python_fixture_rewrites_alike_sliced_or_whole(
    mode: str,
    case: Path,
    compared: Compared,
    catalogue: Catalogue,
    precision_rules: frozenset[str],
) -> None:
    kind = fixture_kind(case)
    assert kind == "python"
    rewrite_source(
        case.name, case.read_bytes(), kind, catalogue, precision_rules, mode, context=RECIPE_APPLIED
    )
    for sliced, whole in compared:
        assert sliced == whole
