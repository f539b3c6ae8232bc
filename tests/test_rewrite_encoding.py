"""`xlamigrate rewrite` on latin-1 scripts with a PEP 263 coding cookie, through the CLI.

Every recipe inserts imports at the top of the module (`import torch`, and for full-bf16 and
fp32-copy `from xlamigrate_runtime import ...`). Python reads a coding cookie only on line 1 or
2, so an import inserted above `# -*- coding: latin-1 -*-` on line 2 would move it out of
reach: the file would then be read as UTF-8 and its latin-1 bytes (`caf\\xe9`) would no longer
decode. Each variant here is rewritten in every mode, and the written bytes are checked the way
Python reads them: the cookie is still on line 1 or 2, the file still compiles, its latin-1
text reads back unchanged (never re-encoded as UTF-8), and the imports really were added.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize

import pytest

from tests.test_cli import run_cli
from xlamigrate.kinds.python.rewrite import MODES

SHEBANG = b"#!/usr/bin/env python\n"
COOKIE = b"# -*- coding: latin-1 -*-\n"
# PEP 263: the regular expression Python matches against line 1 or 2
COOKIE_PATTERN = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")

# Sets the legacy flag and trains a model with an optimizer, so every mode applies its recipe
# fully (exit 0). Only `from torch import ...`: the recipes' `torch.bfloat16` and
# `torch.autocast` need `import torch`, so all three modes insert an import.
BODY = (
    b"import os\n"
    b"\n"
    b"from torch import nn, optim\n"
    b"\n"
    b'os.environ["XLA_USE_BF16"] = "1"\n'
    b"\n"
    b'LABEL = "caf\xe9"  # le caf\xe9 du coin\n'
    b"\n"
    b"\n"
    b"def train(batches):\n"
    b"    model = nn.Linear(4, 2)\n"
    b"    optimizer = optim.SGD(model.parameters(), lr=0.1)\n"
    b"    for inputs in batches:\n"
    b"        optimizer.zero_grad()\n"
    b"        loss = model(inputs).sum()\n"
    b"        loss.backward()\n"
    b"        optimizer.step()\n"
    b"    return model\n"
)
DOCSTRING = b'"""Entra\xeene un mod\xe8le au caf\xe9."""\n'
FUTURE = b"from __future__ import annotations\n"
AUTHOR = b'__author__ = "Jos\xe9"\n'

VARIANTS: dict[str, bytes] = {
    # the case: the cookie on line 2, under a shebang
    "shebang_then_cookie": SHEBANG + COOKIE + BODY,
    # the cookie on line 1 and a module docstring: imports never go above the docstring
    "cookie_then_docstring": COOKIE + DOCSTRING + b"\n" + BODY,
    # a __future__ import first: the inserted imports must come after it
    "cookie_then_future_import": COOKIE + FUTURE + b"\n" + BODY,
    # a statement before any import: the imports go at the very top of the module's code
    "shebang_cookie_then_statement": SHEBANG + COOKIE + AUTHOR + b"\n" + BODY,
}

# The imports each mode's recipe needs here: (module, name), name None for `import module`.
ADDED_IMPORTS: dict[str, set[tuple[str, str | None]]] = {
    "full-bf16": {("torch", None), ("xlamigrate_runtime", "cast_inputs_to_module_dtype")},
    "fp32-copy": {
        ("torch", None),
        ("xlamigrate_runtime", "cast_inputs_to_module_dtype"),
        ("xlamigrate_runtime", "FP32ParamsCopy"),
    },
    "autocast": {("torch", None)},
}

Rewrites = dict[str, tuple[subprocess.CompletedProcess[str], dict[str, bytes]]]

CASES = [
    pytest.param(mode, variant, id=f"{mode}/{variant}") for mode in MODES for variant in VARIANTS
]


@pytest.fixture(scope="module")
def rewrites(tmp_path_factory: pytest.TempPathFactory) -> Rewrites:
    """`python -m xlamigrate.cli rewrite --mode <mode>` once per mode over copies of every
    variant: the CLI's result and the bytes it wrote, per variant."""
    results = {}
    for mode in MODES:
        folder = tmp_path_factory.mktemp(f"encoding-{mode}")
        names = []
        for variant, data in VARIANTS.items():
            (folder / f"{variant}.py").write_bytes(data)
            names.append(f"{variant}.py")
        result = run_cli("rewrite", "--mode", mode, "--ignore", "XM409", *names, cwd=folder)
        written = {variant: (folder / f"{variant}.py").read_bytes() for variant in VARIANTS}
        results[mode] = (result, written)
    return results


def written(rewrites: Rewrites, mode: str, variant: str) -> bytes:
    """What the CLI wrote for the variant, once it has rewritten every variant fully."""
    result, files = rewrites[mode]
    assert result.returncode == 0, result.stdout + result.stderr  # rewritten fully
    data = files[variant]
    assert data != VARIANTS[variant], f"{mode} left {variant} unchanged:\n{result.stdout}"
    return data


def cookie_lines(data: bytes) -> list[int]:
    """The lines among the first two (1-based) that hold a coding cookie, as Python reads it."""
    return [n for n, line in enumerate(data.splitlines()[:2], 1) if COOKIE_PATTERN.match(line)]


def top_level_imports(tree: ast.Module) -> list[tuple[int, tuple[str, str | None]]]:
    """(statement index, (module, name)) for each name the module's top-level imports bind."""
    found: list[tuple[int, tuple[str, str | None]]] = []
    for index, statement in enumerate(tree.body):
        if isinstance(statement, ast.Import):
            found.extend((index, (alias.name, None)) for alias in statement.names)
        elif isinstance(statement, ast.ImportFrom) and statement.module:
            module = statement.module
            found.extend((index, (module, alias.name)) for alias in statement.names)
    return found


def test_every_variant_sets_the_flag_under_a_latin1_cookie() -> None:
    """The inputs are what the tests claim: latin-1 bytes that are not UTF-8, and a cookie that
    makes Python read them as latin-1."""
    for variant, data in VARIANTS.items():
        assert cookie_lines(data), variant
        assert tokenize.detect_encoding(io.BytesIO(data).readline)[0] == "iso-8859-1"
        assert b"caf\xe9" in data
        with pytest.raises(UnicodeDecodeError):
            data.decode("utf-8")
        compile(data, f"{variant}.py", "exec", dont_inherit=True)


@pytest.mark.parametrize(("mode", "variant"), CASES)
def test_the_coding_cookie_stays_on_line_1_or_2(
    rewrites: Rewrites, mode: str, variant: str
) -> None:
    data = written(rewrites, mode, variant)
    original = VARIANTS[variant]
    assert cookie_lines(data) == cookie_lines(original), data[:200]
    # the header above the first statement is kept byte for byte (shebang on line 1 included)
    header = original[: original.index(COOKIE) + len(COOKIE)]
    assert data.startswith(header), data[:200]
    assert tokenize.detect_encoding(io.BytesIO(data).readline)[0] == "iso-8859-1"


@pytest.mark.parametrize(("mode", "variant"), CASES)
def test_latin1_bytes_are_written_back_as_latin1(
    rewrites: Rewrites, mode: str, variant: str
) -> None:
    data = written(rewrites, mode, variant)
    original = VARIANTS[variant]
    assert data.count(b"caf\xe9") == original.count(b"caf\xe9")
    assert "café".encode() not in data  # never re-encoded as UTF-8
    with pytest.raises(UnicodeDecodeError):
        data.decode("utf-8")
    # every line holding latin-1 bytes (comment, string, docstring) is there, byte for byte
    kept = set(data.splitlines())
    for line in original.splitlines():
        if any(byte > 0x7F for byte in line):
            assert line in kept, line
    assert "café" in data.decode("latin-1")


@pytest.mark.parametrize(("mode", "variant"), CASES)
def test_the_rewrite_compiles_and_reads_the_same_text(
    rewrites: Rewrites, mode: str, variant: str
) -> None:
    """compile() and ast.parse() on the bytes honour the cookie, as `python script.py` does: the
    string constants read back as the same text they were before."""
    data = written(rewrites, mode, variant)
    compile(data, f"{variant}.py", "exec", dont_inherit=True)
    tree = ast.parse(data)
    strings = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    assert "café" in strings
    if b"__author__" in VARIANTS[variant]:
        assert "José" in strings
    if VARIANTS[variant].startswith(COOKIE + DOCSTRING):
        assert ast.get_docstring(tree) == "Entraîne un modèle au café."


@pytest.mark.parametrize(("mode", "variant"), CASES)
def test_the_recipe_imports_were_added_below_the_cookie_and_any_future_import(
    rewrites: Rewrites, mode: str, variant: str
) -> None:
    data = written(rewrites, mode, variant)
    before = {entry for _, entry in top_level_imports(ast.parse(VARIANTS[variant]))}
    tree = ast.parse(data)
    imports = top_level_imports(tree)
    assert ADDED_IMPORTS[mode] <= {entry for _, entry in imports}
    assert not ADDED_IMPORTS[mode] & before  # really added, not already there
    # below the header: the first statement (an added import, here or there) follows the cookie
    assert cookie_lines(data)
    assert tree.body[0].lineno > cookie_lines(data)[0]
    if FUTURE in VARIANTS[variant]:
        future = next(i for i, (module, _) in imports if module == "__future__")
        added = [i for i, entry in imports if entry in ADDED_IMPORTS[mode]]
        assert future == 0
        assert all(index > future for index in added), ast.unparse(tree)[:400]


def test_a_cookie_pushed_to_line_3_no_longer_compiles() -> None:
    """The failure the checks above guard against: one import line above the cookie on line 2
    and Python reads the file as UTF-8, where `caf\\xe9` is not valid."""
    data = VARIANTS["shebang_then_cookie"]
    moved = SHEBANG + b"import torch\n" + data[len(SHEBANG) :]
    assert cookie_lines(moved) == []
    with pytest.raises(SyntaxError):
        compile(moved, "moved.py", "exec", dont_inherit=True)
