"""`xlamigrate --version` and `-h` start as fast as Python does (issue 37): they import no
third-party package and nothing of the analysis, and a command's `-h` only what lists its
choices. (The wall times are measured, never asserted: benchmarks/startup.py.)"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# What the commands run, never what answers --version or --help: parsers of the files, the
# reporters, the old CLI framework, and the analysis.
HEAVY = (
    "libcst",
    "pydantic",
    "typer",
    "click",
    "yaml",
    "ruamel",
    "rich",
    "pathspec",
    "tree_sitter",
    "pygments",
    "packaging",
    "iniconfig",
    "xlamigrate.engine",
    "xlamigrate.kinds",
    "xlamigrate.project",
    "xlamigrate.catalogue",
    "xlamigrate.config",
    "xlamigrate.report",
    "xlamigrate.verify",
)
PROBE = """
import contextlib, io, json, sys
from xlamigrate.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        main(sys.argv[1:])
    except SystemExit as exit:
        code = exit.code
print(json.dumps({"code": code, "out": out.getvalue(), "modules": sorted(sys.modules)}))
"""


def imported_by(*args: str) -> tuple[set[str], str]:
    """The modules loaded by `xlamigrate ARGS` in a fresh interpreter, and what it printed."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True
    )
    probe = json.loads(result.stdout)
    assert probe["code"] == 0, result.stderr
    return set(probe["modules"]), probe["out"]


def heavy(modules: set[str]) -> set[str]:
    return {name for name in modules if name.split(".")[0] in HEAVY or name.startswith(HEAVY)}


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_the_version_imports_nothing_but_the_package(flag: str) -> None:
    modules, printed = imported_by(flag)
    assert printed.startswith("xlamigrate ")
    assert {name for name in modules if name.startswith("xlamigrate")} == {
        "xlamigrate",
        "xlamigrate.cli",
    }
    assert "argparse" not in modules  # (the quickest answer: nothing is parsed)


def test_the_help_imports_no_dependency_and_no_analysis() -> None:
    modules, printed = imported_by("-h")
    assert "Commands:" in printed
    assert heavy(modules) == set()
    assert "xlamigrate.recipes" not in modules  # (the list of commands needs no mode)


@pytest.mark.parametrize("command", ["scan", "rewrite", "verify", "rule"])
def test_a_commands_help_imports_only_what_lists_its_choices(command: str) -> None:
    """rewrite and verify list the recipes' modes (rules/modes.toml, read by xlamigrate.recipes,
    which imports no parser)."""
    modules, printed = imported_by(command, "--help")
    assert f"usage: xlamigrate {command} " in printed
    assert heavy(modules) == set()
