"""Frameworks that set the legacy flag themselves (XM104, rules/frameworks.toml) and launch APIs
that pass it to another process (XM301 worded from rules/launch_apis.toml). Each folder of
tests/fixtures/frameworks is a small project, scanned as the user would scan it; its
`expected.txt` is that command, `$ cd tests/fixtures/frameworks/<case> && xlamigrate scan
--output-format concise .`, and what it prints: the spec."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT
from tests.test_cli import run_cli
from xlamigrate.apitable import Version
from xlamigrate.catalogue import Catalogue
from xlamigrate.engine import scan_source
from xlamigrate.frameworktable import Releases, framework_table
from xlamigrate.kinds.python.astscopes import Scopes
from xlamigrate.kinds.python.frameworks import option_uses
from xlamigrate.launchtable import launch_table
from xlamigrate.prefilter import Prefilter
from xlamigrate.project.frameworkpins import FrameworkPins, requirement_releases
from xlamigrate.request import FileContext

CASES_DIR = FIXTURES / "frameworks"
CASES = sorted(path for path in CASES_DIR.iterdir() if path.is_dir())


def scanned(case: Path, tmp_path: Path) -> list[str]:
    """What `xlamigrate scan --output-format concise .` prints in a copy of the case (its own
    pins, nothing above): a finding a line."""
    project = tmp_path / case.name
    shutil.copytree(case, project)
    (project / "expected.txt").unlink()
    result = run_cli("scan", "--output-format", "concise", ".", cwd=project)
    assert result.returncode in (0, 1), result.stderr
    return result.stdout.splitlines()


def expected_output(case: Path) -> list[str]:
    command, *output = (case / "expected.txt").read_text(encoding="utf-8").splitlines()
    folder = case.relative_to(ROOT).as_posix()
    assert command == f"$ cd {folder} && xlamigrate scan --output-format concise .", case.name
    return output


@pytest.mark.parametrize("case", CASES, ids=lambda path: path.name)
def test_scan_of_each_project_is_its_expected_output(case: Path, tmp_path: Path) -> None:
    assert scanned(case, tmp_path) == expected_output(case)


def _selected(case: Path) -> list[str]:
    """The case's expected XM1xx/XM3xx findings (the flags' writes, XM104, XM301)."""
    return [line for line in expected_output(case) if re.search(r" XM[13]\d\d ", line)]


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if any("[fix: manual]" in line for line in _selected(c))],
    ids=lambda path: path.name,
)
def test_rewrite_leaves_the_option_and_the_unfollowed_launch_writes_for_manual_work(
    case: Path, tmp_path: Path
) -> None:
    """What stays manual (XM104, XM301, a launch whose recipe cannot go in) is left alone; only
    the launch writes the project migrated (and the scripts they start) are rewritten."""
    project = tmp_path / case.name
    shutil.copytree(case, project)
    selected = _selected(case)
    manual = sum("[fix: manual]" in line for line in selected)
    fixable = [line for line in selected if "[fix: manual]" not in line]
    started = {m.group(1) for line in fixable if (m := re.search(r"; it starts (\S+),", line))}
    result = run_cli("rewrite", "--diff", "--select", "XM1,XM3", ".", cwd=project)
    rewritten = {
        line[len("--- a/") :] for line in result.stdout.splitlines() if line.startswith("--- a/")
    }
    assert rewritten == {line.split(":")[0] for line in fixable} | started
    assert f"{manual} finding{'s' if manual > 1 else ''} left for manual work" in result.stderr


def test_lightning_bf16_true_on_tpu_names_flag_releases_and_what_replaces_it(
    catalogue: Catalogue,
) -> None:
    source = b'import lightning as L\nL.Trainer(accelerator="tpu", precision="bf16-true")\n'
    (finding,) = scan_source("t.py", source, "python", catalogue, frozenset({"XM104"})).findings
    assert (finding.span.line, finding.span.column) == (2, 40)  # the value
    assert finding.message.startswith(
        'precision="bf16-true": Lightning sets XLA_USE_BF16=1 itself, in releases 2.1.0+'
        " (2.6.6, the newest read, still does); no pin says which release runs."
    )
    assert 'Instead: no Lightning release stops: pass precision="32-true"' in finding.message
    assert finding.fix is not None and finding.fix.applicability == "manual"


@pytest.mark.parametrize(
    "code",
    [
        'from lightning.pytorch import Trainer\nTrainer(accelerator="tpu", precision="bf16-true")',
        'import lightning.pytorch as pl\npl.Trainer(strategy="xla_debug", precision="bf16-true")',
        "from lightning.pytorch.accelerators import XLAAccelerator\n"
        'import lightning as L\nL.Trainer(accelerator=XLAAccelerator(), precision="bf16-true")',
        'import pytorch_lightning as pl\npl.Trainer(tpu_cores=8, precision=16)',
        'from lightning.fabric.plugins import XLAPrecision\nXLAPrecision(precision="bf16-true")',
        "from pytorch_lightning.plugins import TPUBf16PrecisionPlugin\nTPUBf16PrecisionPlugin()",
        'from accelerate import Accelerator\nimport torch_xla\nAccelerator(mixed_precision="bf16")',
        "import accelerate\nfrom torch_xla.core import xla_model\n"
        'accelerate.Accelerator(mixed_precision="bf16")',
        "from optimum.neuron import NeuronTrainingArguments as Args\nArgs(bf16=True)",
        'import lightning as L\nPRECISION = "bf16-true"\n'
        'L.Trainer(accelerator="tpu", precision=PRECISION)',
    ],
)  # fmt: skip
def test_every_import_spelling_of_a_knob_is_found(code: str) -> None:
    scopes = Scopes(ast.parse(code))
    assert len(option_uses(scopes, framework_table())) == 1


@pytest.mark.parametrize(
    "code",
    [
        'import lightning as L\nL.Trainer(accelerator="cuda", precision="bf16-true")',
        'import lightning as L\nL.Trainer(tpu_cores=None, precision=16)',
        'import lightning as L\nL.Trainer(accelerator="tpu", precision=PRECISION)',
        'import lightning as L\nP = "bf16-true"\nP = "32-true"\n'
        'L.Trainer(accelerator="tpu", precision=P)',
        'import lightning as L\nL.Trainer(accelerator="tpu", **kwargs)',
        "from lightning import Trainer\n"
        'def f(Trainer):\n    Trainer(accelerator="tpu", precision=16)',
        'from accelerate import Accelerator\nAccelerator(mixed_precision="bf16")',
        'from accelerate import Accelerator\nimport torch_xla\nAccelerator(mixed_precision="fp16")',
        "from transformers import TrainingArguments\nTrainingArguments(bf16=True)",
    ],
    ids=[
        "gpu", "no-tpu-cores", "precision-not-literal", "constant-assigned-twice", "kwargs",
        "shadowed",
        "accelerate-not-on-xla", "fp16", "hf-trainer-without-optimum-neuron",
    ],
)  # fmt: skip
def test_nothing_is_claimed_without_certainty(code: str) -> None:
    scopes = Scopes(ast.parse(code))
    assert option_uses(scopes, framework_table()) == []


def test_pins_decide_whether_the_release_sets_the_flag() -> None:
    code = (
        "from accelerate import Accelerator\nimport torch_xla\nAccelerator(mixed_precision='bf16')"
    )
    scopes = Scopes(ast.parse(code))
    table = framework_table()

    def uses(*pins: str) -> list[str]:
        pinned = tuple(
            found for pin in pins if (found := requirement_releases(pin, table.packages))
        )
        return [k.written for use in option_uses(scopes, table, pinned) for k in use.knobs]

    assert uses() == ["0.11.0-0.27.2", "0.28.0+"]
    assert uses("accelerate==0.25.0") == ["0.11.0-0.27.2"]
    assert uses("accelerate>=0.30") == ["0.28.0+"]  # on TPU, which nothing rules out
    assert uses("accelerate>=0.30", "torch-neuronx==2.1.2.2.3.0") == []  # TPU only; Neuron
    assert uses("accelerate>=0.30", "torch-xla[tpu]==2.1") == ["0.28.0+"]
    assert uses("accelerate==0.10.0") == []  # before #462


def test_an_option_that_may_switch_the_flag_off_leaves_the_release_silent() -> None:
    code = (
        "from optimum.neuron import NeuronTrainingArguments\n"
        "NeuronTrainingArguments(bf16=True, half_precision_backend=backend)"
    )
    scopes = Scopes(ast.parse(code))
    table = framework_table()
    pinned = requirement_releases("optimum-neuron==0.0.25", table.packages)
    assert pinned is not None
    assert option_uses(scopes, table, (pinned,)) == []  # "amp" would set none


@pytest.mark.parametrize(
    ("text", "low", "high", "included"),
    [
        ("lightning==2.4.0", "2.4", "2.4", True),
        ("lightning>=2.1,<2.5", "2.1", "2.5", False),
        ("lightning<=2.0.9", None, "2.0.9", True),
        ("accelerate~=0.27.0", "0.27", "0.28", False),
        ("accelerate~=0.27", "0.27", "1", False),
        ("optimum-neuron==0.0.*", "0.0", "0.1", False),
        ("pytorch_lightning>1.8", "1.8", None, False),
    ],
)
def test_pins_are_read_as_the_releases_they_allow(
    text: str, low: str | None, high: str | None, included: bool
) -> None:
    found = requirement_releases(text, framework_table().packages)
    assert found is not None
    releases = found[1]
    assert releases.low == (Version.parse(low) if low else None)
    assert releases.high == (Version.parse(high) if high else None)
    assert releases.high_included is included


def test_a_file_takes_each_frameworks_nearest_pin(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("lightning==2.0.9\ntorch-neuronx==2.1.2.2.3.0\n")
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "pyproject.toml").write_text(
        '[project]\ndependencies = ["lightning>=2.2,<2.5", "accelerate"]\n'
    )
    pinned = dict(FrameworkPins(tmp_path).releases(tmp_path / "new" / "train.py"))
    assert pinned["lightning"].spelled == "lightning<2.5,>=2.2"
    assert pinned["accelerate"] == Releases(spelled="accelerate")
    assert "torch-neuronx" in pinned  # from the folder above
    assert dict(FrameworkPins(tmp_path).releases(tmp_path / "t.py"))["lightning"].high == (
        Version.parse("2.0.9")
    )


def test_a_pinned_release_that_does_not_set_the_flag_is_silent(catalogue: Catalogue) -> None:
    source = b'import lightning as L\nL.Trainer(accelerator="tpu", precision="bf16-true")\n'
    pinned = requirement_releases("lightning==2.0.9", framework_table().packages)
    assert pinned is not None
    context = FileContext(frameworks=(pinned,))
    result = scan_source("t.py", source, "python", catalogue, frozenset({"XM104"}), context)
    assert result.findings == ()


def test_noqa_suppresses_the_option(catalogue: Catalogue) -> None:
    source = (
        b"import lightning as L\n"
        b'L.Trainer(accelerator="tpu", precision="bf16-true")  # noqa: XM104\n'
    )
    result = scan_source("t.py", source, "python", catalogue, frozenset({"XM104"}))
    assert result.findings == ()


def test_the_prefilter_parses_a_framework_script_that_names_no_flag(catalogue: Catalogue) -> None:
    prefilter = Prefilter(catalogue, frozenset(catalogue.rules))
    script = b'import lightning as L\nL.Trainer(accelerator="tpu", precision="bf16-true")\n'
    assert prefilter.may_have_findings("python", script)
    assert not prefilter.may_have_findings("python", b"import lightning as L\nL.Trainer()\n")
    assert not prefilter.may_have_findings("python", b'mixed_precision = "bf16"\n')
    without = Prefilter(catalogue, frozenset(catalogue.rules) - {"XM104"})
    assert not without.may_have_findings("python", script)


def test_a_script_whose_option_cannot_act_in_its_project_is_not_parsed(tmp_path: Path) -> None:
    """The prefilter passed it for the option alone; with the project's pins known, the option
    cannot act (no platform pinned nor imported): as a file naming nothing, it is not parsed,
    its syntax error unreported, while the project does not pin torch-xla (the cache knows)."""
    pyproject = tmp_path / "pyproject.toml"
    (tmp_path / "train.py").write_text(
        'from accelerate import Accelerator\nAccelerator(mixed_precision="bf16")\ndef broken(:\n'
    )
    error = ["train.py:3:12: XM901 could not parse: invalid syntax"]
    for dependencies, code, said in [
        ('"accelerate"', 0, []),
        ('"accelerate", "torch-xla"', 1, error),
        ('"accelerate"', 0, []),
    ]:
        pyproject.write_text(f'[project]\nname = "p"\ndependencies = [{dependencies}]\n')
        result = run_cli("scan", "--output-format", "concise", ".", cwd=tmp_path)
        assert (result.returncode, result.stdout.splitlines()) == (code, said), result.stderr
        result = run_cli("rewrite", "--mode", "full-bf16", "--diff", ".", cwd=tmp_path)
        assert (result.returncode, result.stdout) == (code, "")
        assert (error[0] in result.stderr) is bool(said), result.stderr


def test_a_launched_script_whose_option_cannot_act_still_gets_its_recipe(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "p"\ndependencies = ["accelerate"]\n'
    )
    (tmp_path / "run.sh").write_text("#!/bin/bash\nXLA_USE_BF16=1 python train.py\n")
    (tmp_path / "train.py").write_text(
        "import torch\nfrom accelerate import Accelerator\n\n"
        'accelerator = Accelerator(mixed_precision="bf16")\n'
        "model = torch.nn.Linear(4, 2)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    )
    result = run_cli("rewrite", "--mode", "full-bf16", "--diff", ".", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "+model.to(torch.bfloat16)" in result.stdout.splitlines()
    assert "-XLA_USE_BF16=1 python train.py" in result.stdout.splitlines()


def test_launch_apis_name_the_script_the_process_runs(catalogue: Catalogue) -> None:
    source = (
        b"from sagemaker.train import ModelTrainer\n"
        b"from sagemaker.train.configs import SourceCode\n"
        b"ModelTrainer(\n"
        b'    source_code=SourceCode(source_dir="code", entry_script="pretrain.py"),\n'
        b'    environment=dict(XLA_USE_BF16="1"),\n'
        b")\n"
    )
    (finding,) = scan_source("l.py", source, "python", catalogue, frozenset({"XM301"})).findings
    assert finding.message.startswith(
        'XLA_USE_BF16 set to "1" (on): SageMaker passes it to the training job\'s containers, which'
        " run code/pretrain.py: put the recipe in code/pretrain.py, then remove this write"
    )


def test_a_flag_passed_off_is_not_asked_for_a_recipe(catalogue: Catalogue) -> None:
    source = (
        b"import sagemaker.pytorch as sm\n"
        b'sm.PyTorch(entry_point="eval.py", environment={"XLA_USE_BF16": "0"})\n'
    )
    (finding,) = scan_source("l.py", source, "python", catalogue, frozenset({"XM301"})).findings
    assert finding.message.startswith(
        'XLA_USE_BF16 set to "0" (off): SageMaker passes it to the training job\'s containers,'
        " which run eval.py, where torch-xla reads it as off: remove it once nothing there"
        " tests the flag"
    )
    assert (finding.value, finding.enabled) == ("0", False)


def test_a_dict_that_reaches_no_launch_keeps_the_plain_mention(catalogue: Catalogue) -> None:
    source = b'from sagemaker.pytorch import PyTorch\nflags = {"XLA_USE_BF16": "1"}\nPyTorch()\n'
    (finding,) = scan_source("l.py", source, "python", catalogue, frozenset({"XM301"})).findings
    assert finding.message.startswith(
        "XLA_USE_BF16 named as a key of the dict `flags`; no environment access in this file"
        " uses it"
    )
    assert "SageMaker" not in finding.message


def test_every_table_entry_cites_where_it_was_read() -> None:
    table = framework_table()
    for knob in table.knobs:
        assert knob.evidence and knob.instead and knob.calls
        assert knob.stops is None or knob.first < knob.stops
        assert (knob.last is None) == (knob.stops is None)
        assert knob.xla != "keywords" or knob.device
    for api in launch_table().apis:
        assert api.evidence and api.calls and api.env
