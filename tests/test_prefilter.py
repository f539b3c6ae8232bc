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
from xlamigrate.frameworktable import Releases, framework_table
from xlamigrate.prefilter import Prefilter
from xlamigrate.project.frameworkpins import requirement_releases
from xlamigrate.request import FileContext
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


def pins(*requirements: str) -> dict[str, Releases]:
    """What a project pinning these requirements pins for its files (FileContext.frameworks)."""
    table = framework_table()
    found = [requirement_releases(text, table.packages) for text in requirements]
    return dict(pin for pin in found if pin is not None)


ACCELERATE = b'from accelerate import Accelerator\nAccelerator(mixed_precision="bf16")\n'
LIGHTNING = b'import lightning as L\nL.Trainer(devices=8, precision="bf16-true")\n'


@pytest.mark.parametrize(
    ("source", "pinned", "may"),
    [
        # accelerate sets the flag on any XLA device: a platform imported, or pinned
        (ACCELERATE, {}, False),
        (b"import torch_xla\n" + ACCELERATE, {}, True),
        (ACCELERATE, pins("torch-xla==2.1"), True),
        (ACCELERATE, pins("torch-neuronx==2.1.2.2.3.0"), True),
        (b"from optimum.neuron import x\n" + ACCELERATE, {}, True),
        (b"import torch_xla\n" + ACCELERATE, pins("accelerate==0.10.0"), False),  # before it
        (b"import torch_xla\n" + ACCELERATE, pins("accelerate==0.25.0"), True),
        # Lightning's precision acts where the call's own keywords put it on XLA
        (LIGHTNING, {}, False),
        (LIGHTNING.replace(b"devices=8", b'accelerator="tpu"'), {}, True),
        (LIGHTNING.replace(b"devices=8", b'strategy="xla"'), {}, True),
        # a plugin class is the knob itself: it acts wherever it is made
        (b"from lightning.pytorch.plugins import XLAPrecision\nXLAPrecision('bf16-true')\n", {},
         True),
    ],
)  # fmt: skip
def test_an_option_is_asked_again_where_the_projects_pins_are_known(
    source: bytes, pinned: dict[str, Releases], may: bool
) -> None:
    assert framework_table().may_be_used(source)
    assert framework_table().may_act(source, pinned) is may


def test_an_option_that_cannot_act_leaves_the_files_other_names(prefilter: Prefilter) -> None:
    assert not prefilter.may_have_findings("python", ACCELERATE, {})
    named = b"import os\nos.environ['XLA_USE_BF16'] = '1'\n" + ACCELERATE
    assert prefilter.may_have_findings("python", named, {})
    notebook = json.dumps({"cells": [{"cell_type": "code", "source": ACCELERATE.decode()}]})
    assert prefilter.may_have_findings("notebook", notebook.encode())
    assert not prefilter.may_have_findings("notebook", notebook.encode(), {})
    assert prefilter.may_have_findings("notebook", notebook.encode(), pins("torch-xla==2.5"))


def finding_sources(catalogue: Catalogue) -> list[tuple[str, bytes]]:
    """Every fixture file and every rule example's files, by name."""
    sources = [
        (path.name, path.read_bytes()) for path in sorted(FIXTURES.rglob("*")) if path.is_file()
    ]
    for rule in sorted((ROOT / "rules").glob("XM*.toml")):
        for example in examples_of(rule.stem, tuple(catalogue.modes)):
            sources += [(name, text.encode()) for name, text in example.files]
    return sources


# The pins a project may give a file: none, a platform's, a framework's releases on either side
# of those that set the flag.
PINNED = [
    (),
    ("torch-xla==2.5",),
    ("torch-neuronx==2.1.2.2.3.0",),
    ("libtpu",),
    ("accelerate==0.25.0",),
    ("accelerate>=0.30",),
    ("lightning==2.0.9",),
    ("lightning>=2.2,<2.5", "torch-xla"),
    ("optimum-neuron==0.0.25",),
    ("pytorch-lightning==1.9.0", "torch-neuronx"),
]


def test_nothing_with_a_finding_in_its_project_is_dropped(catalogue: Catalogue) -> None:
    """Every script with a framework option, scanned with the pins a project may give it: where
    it has a finding, the prefilter asked with those pins passes it."""
    enabled = catalogue.select()
    prefilter = Prefilter(catalogue, enabled)
    table = framework_table()
    checked = 0
    for name, data in finding_sources(catalogue):
        kind = classify(Path(name))
        if kind not in ("python", "notebook") or not table.may_be_used(data, kind == "notebook"):
            continue
        for requirements in PINNED:
            pinned = pins(*requirements)
            context = FileContext(frameworks=tuple(pinned.items()))
            result = scan_source(name, data, kind, catalogue, enabled, context)
            if result.findings:
                checked += 1
                assert prefilter.may_have_findings(kind, data, pinned), (name, requirements)
    assert checked > 20


def test_nothing_with_a_finding_is_dropped(catalogue: Catalogue, prefilter: Prefilter) -> None:
    """Every fixture and every rule example with a finding of its own passes the prefilter."""
    enabled = catalogue.select()
    checked = 0
    for name, data in finding_sources(catalogue):
        kind = classify(Path(name))
        if kind is None:
            continue
        result = scan_source(name, data, kind, catalogue, enabled)
        if result.findings:
            checked += 1
            assert prefilter.may_have_findings(kind, data), name
    assert checked > 100
