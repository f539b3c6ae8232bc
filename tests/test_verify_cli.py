"""`xlamigrate verify`'s usage errors (exit code 2, said before any run starts), in process: none
of these reaches torch."""

from __future__ import annotations

import importlib.util
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest

from tests.clirunner import invoke as invoke_cli

FLAGGED = 'import os\nos.environ["XLA_USE_BF16"] = "1"\n'


def invoke(*args: str) -> tuple[int, str]:
    result = invoke_cli("verify", *args)
    return result.exit_code, result.output


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(FLAGGED)
    return path


def hide_modules(monkeypatch: pytest.MonkeyPatch, *hidden: str) -> None:
    """As if these packages were not installed: find_spec says so, nothing is uninstalled."""
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> ModuleSpec | None:
        return None if name in hidden else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_missing_script_is_a_usage_error(tmp_path: Path) -> None:
    code, output = invoke(str(tmp_path / "absent.py"))
    assert code == 2
    assert "absent.py: no such file" in output


def test_without_torch_xla_verify_says_how_to_install_it(
    script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hide_modules(monkeypatch, "torch_xla")
    code, output = invoke(str(script))
    assert code == 2
    assert "torch-xla is not installed" in output
    assert "pip install 'xlamigrate[xla]'" in output


def test_plot_without_matplotlib_fails_before_running(
    script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hide_modules(monkeypatch, "matplotlib")
    code, output = invoke(str(script), "--plot", "chart.png")
    assert code == 2
    assert "--plot needs matplotlib: python -m pip install 'xlamigrate[plot]'" in output


def test_rewritten_needs_exactly_one_mode(script: Path) -> None:
    code, output = invoke(str(script), "--rewritten", str(script), "--mode", "all")
    assert code == 2
    assert "give exactly one --mode" in output


@pytest.mark.parametrize("value", ["XLA_USE_BF16", "=1"])
def test_legacy_env_wants_name_equals_value(script: Path, value: str) -> None:
    code, output = invoke(str(script), "--legacy-env", value)
    assert code == 2
    assert "--legacy-env wants NAME=VALUE" in output


def test_an_unparsable_script_is_named_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text(FLAGGED + "def f(:\n")
    code, output = invoke(str(path))
    assert code == 2
    assert "broken.py:3:" in output


def test_script_options_must_come_after_double_dash(script: Path) -> None:
    code, output = invoke(str(script), "--bf16")
    assert code == 2
    assert "No such option: --bf16" in output


def test_steps_must_be_positive(script: Path) -> None:
    code, _ = invoke(str(script), "--steps", "0")
    assert code == 2


def test_unreadable_rewritten_file(script: Path, tmp_path: Path) -> None:
    code, output = invoke(str(script), "--rewritten", str(tmp_path / "gone.py"), "-m", "autocast")
    assert code == 2
    assert "gone.py: cannot read" in output
