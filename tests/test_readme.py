"""The README's quick-start output is what the tool prints on the shipped examples."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import ROOT

FINDING = re.compile(r"^(\S+:\d+:\d+: XM\d+)\b")


def test_readme_example_output_matches_a_real_scan_of_examples() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("$ xlamigrate scan examples/\n", 1)[1].split("```", 1)[0]
    documented = [m.group(1) for line in block.splitlines() if (m := FINDING.match(line))]
    result = subprocess.run(
        [sys.executable, "-m", "xlamigrate.cli", "scan", "examples/"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    printed = [m.group(1) for line in result.stdout.splitlines() if (m := FINDING.match(line))]
    assert documented and printed == documented
    summary = block.strip().splitlines()[-1]
    assert result.stderr.strip() == summary
