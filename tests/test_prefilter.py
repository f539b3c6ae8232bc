"""The prefilter: which files are worth parsing, from their bytes alone. It may pass a file
that has no finding; it must never drop one that has (every fixture and rule example with a
finding passes it), and it drops what only looks like a use: `xla_device` inside
`xla_device_hw`, a framework's package and the word `precision` with no option passed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT
from xlamigrate.apitable import api_table
from xlamigrate.catalogue import Catalogue
from xlamigrate.discover import classify
from xlamigrate.engine import scan_source
from xlamigrate.frameworktable import framework_table
from xlamigrate.prefilter import Prefilter
from xlamigrate.ruleexamples import examples_of
from xlamigrate.textwords import has_keyword_argument, has_word


@pytest.fixture(scope="module")
def prefilter(catalogue: Catalogue) -> Prefilter:
    return Prefilter(catalogue, catalogue.select())


def test_a_word_stands_alone() -> None:
    assert has_word(b"xm.xla_device()", b"xla_device")
    assert has_word(b"xla_device", b"xla_device")
    assert not has_word(b"xm.xla_device_hw(d)", b"xla_device")
    assert not has_word(b"my_xla_device = 1", b"xla_device")
    assert has_word(b"xm.xla_device_hw(d); xm.xla_device(1)", b"xla_device")  # (a later one)
    assert has_word("é".encode() + b"xla_device", b"xla_device")  # (non-ASCII: it may be one)


def test_a_keyword_argument_is_a_name_then_its_equals_sign() -> None:
    assert has_keyword_argument(b'Accelerator(mixed_precision="bf16")', b"mixed_precision")
    assert has_keyword_argument(b"f(mixed_precision  # why\n   = x)", b"mixed_precision")
    assert has_keyword_argument(b"f(mixed_precision \\\n= x)", b"mixed_precision")
    assert not has_keyword_argument(b"if mixed_precision == 'bf16':", b"mixed_precision")
    assert not has_keyword_argument(b"f(mixed_precision)", b"mixed_precision")
    assert not has_keyword_argument(b"f(no_mixed_precision=1)", b"mixed_precision")


def test_an_api_is_used_only_where_every_part_of_its_name_is_a_word() -> None:
    table = api_table()
    imported = b"import torch_xla\nimport torch_xla.core.xla_model as xm\n"
    assert table.may_be_used(imported + b"device = xm.xla_device(1)\n")
    assert table.may_be_used(b"from torch_xla.core.xla_model import xla_device as d\nd(1)\n")
    assert not table.may_be_used(imported + b"if xm.xla_device_hw(device) == 'TPU': pass\n")
    assert not table.may_be_used(imported + b"xla_device_count = 8\n" + b"# core\n")


def test_a_notebook_is_json_where_a_name_may_follow_an_escape(prefilter: Prefilter) -> None:
    cell = "import torch_xla.core.xla_model as xm\nxm.mark_step()\n"
    notebook = json.dumps({"cells": [{"cell_type": "code", "source": cell}]}).encode()
    assert b"\\nxm.mark_step" in notebook
    assert api_table().may_be_used(notebook, escaped=True)
    assert prefilter.may_have_findings("notebook", notebook)


@pytest.mark.parametrize(
    ("source", "may"),
    [
        (b'from accelerate import Accelerator\nAccelerator(mixed_precision="bf16")\n', True),
        (
            b"from accelerate import Accelerator\nAccelerator(\n  mixed_precision  # bf16\n  = m)",
            True,
        ),
        # the word and the package, but no option passed: the accelerate repository's own files
        (b"from accelerate import Accelerator\n# mixed_precision\nAccelerator(cpu=True)\n", False),
        (b'from accelerate.utils import precision\nprint(precision, "mixed_precision")\n', False),
        # a knob whose option may be passed by position: the call alone
        (b'from lightning.pytorch.plugins import XLAPrecision\nXLAPrecision("bf16-true")\n', True),
        (b'import lightning as L\nL.Trainer(accelerator="tpu", precision="bf16-true")\n', True),
        (b"import lightning as L\nL.Trainer(accelerator='tpu')\nprint(precision == 16)\n", False),
        # optimum-neuron reads transformers' arguments: the module it needs, not the call's
        (
            b"import optimum.neuron\nfrom transformers import TrainingArguments as T\nT(bf16=True)",
            True,
        ),
    ],
)
def test_a_framework_knob_needs_its_call_package_and_option(source: bytes, may: bool) -> None:
    assert framework_table().may_be_used(source) is may


def test_nothing_with_a_finding_is_dropped(catalogue: Catalogue, prefilter: Prefilter) -> None:
    """Every fixture and every rule example with a finding of its own passes the prefilter."""
    enabled = catalogue.select()
    sources = [
        (path.name, path.read_bytes()) for path in sorted(FIXTURES.rglob("*")) if path.is_file()
    ]
    for rule in sorted((ROOT / "rules").glob("XM*.toml")):
        for example in examples_of(rule.stem, tuple(catalogue.modes)):
            sources += [(name, text.encode()) for name, text in example.files]
    checked = 0
    for name, data in sources:
        kind = classify(Path(name))
        if kind is None:
            continue
        result = scan_source(name, data, kind, catalogue, enabled)
        if result.findings:
            checked += 1
            assert prefilter.may_have_findings(kind, data), name
    assert checked > 100
