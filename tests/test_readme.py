"""The README's quick-start output is what the tool prints on the shipped examples."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import ROOT, environment_without, needs_torch_xla_platform
from tests.test_cli import run_cli
from xlamigrate.apitable import api_table
from xlamigrate.catalogue import load_catalogue

FINDING = re.compile(r"^(\S+:\d+:\d+: XM\d+)\b")


def test_readme_example_output_is_what_a_scan_of_examples_prints() -> None:
    """Word for word: the findings (stdout), then the summary (stderr), as a terminal shows
    them; its fixable count and the quick start's count of findings agree with them."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("$ xlamigrate scan examples/\n", 1)[1].split("```", 1)[0]
    result = run_cli("scan", "examples/", cwd=ROOT)
    assert result.returncode == 1, result.stderr
    assert block == result.stdout + result.stderr
    printed = [m.group(1) for line in result.stdout.splitlines() if (m := FINDING.match(line))]
    words = {6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}
    said = f"It prints {words[len(printed)]} findings and exits 1"
    assert said in " ".join(readme.split())  # the quick start's own count


VERIFY_COMMAND = (
    "xlamigrate verify tests/fixtures/cases/argparse_gated_flag.py --mode all -- --bf16"
)
NUMBER = re.compile(r"\d+(?:\.\d+)?")
MODE = re.compile(r"\b(?:full-bf16|fp32-copy|autocast)\b")


def _without_plot_and_numbers(lines: list[str]) -> list[str]:
    """Table, verdicts and notes with every number masked: the losses are bf16 arithmetic, whose
    last bits may differ on another CPU; which run passed, and why, may not."""
    kept = [line for line in lines if not re.match(r"^\s*[\d.]*\s+[|+]|^\s+step 1", line)]
    # Which mode steps fastest (and, in a near tie, tracks closest) is measured, not fixed.
    kept = [MODE.sub("M", line) if line.startswith("recommendation:") else line for line in kept]
    return [" ".join(NUMBER.sub("N", line).split()) for line in kept if line.strip()]


@needs_torch_xla_platform
def test_readme_verify_example_is_what_verify_prints() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split(f"$ {VERIFY_COMMAND}\n", 1)[1].split("```", 1)[0]
    env = environment_without("XLA_")
    result = subprocess.run(
        [sys.executable, "-m", "xlamigrate.cli", *VERIFY_COMMAND.split()[1:]],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    printed = result.stderr.splitlines()[:1] + result.stdout.splitlines()
    printed += result.stderr.splitlines()[1:]
    assert _without_plot_and_numbers(printed) == _without_plot_and_numbers(block.splitlines())


EXAMPLES = ROOT / "examples"


def test_the_example_project_has_what_the_quick_start_says() -> None:
    """A launcher with a precision switch, the script it starts (reading the flag, never setting
    it), a Kubernetes Job, a Dockerfile, requirements, a notebook, and the pyproject.toml that
    makes it the project's root (not this repository's, with its fixtures). A scan of it
    keeps its cache there, at the project's root, as the README says (and ruff does): that
    folder is no file of the example, and git ignores it (its own .gitignore, as ruff's)."""
    cache = EXAMPLES / ".xlamigrate_cache"
    names = {
        path.relative_to(EXAMPLES).as_posix()
        for path in EXAMPLES.rglob("*")
        if path.is_file() and cache not in path.parents
    }
    if cache.exists():  # git ignores it: its own .gitignore ignores everything in it
        lines = (cache / ".gitignore").read_text().splitlines()
        assert [line for line in lines if not line.startswith("#")] == ["*"]
    assert names == {
        "Dockerfile",
        "k8s/pretrain-job.yaml",
        "notebooks/finetune.ipynb",
        "pyproject.toml",
        "requirements.txt",
        "run_pretrain.sh",
        "train.py",
    }
    script = (EXAMPLES / "train.py").read_text()
    assert 'os.environ.get("XLA_USE_BF16")' in script and "os.environ[" not in script


def test_readme_rewrite_examples_are_what_rewrite_prints_in_each_mode_and_show_each_recipe() -> (
    None
):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    launcher = (EXAMPLES / "run_pretrain.sh").read_text(encoding="utf-8")
    assert f"```bash\n{launcher}```" in readme
    recipe = {  # what only this mode's diff of the script adds
        "full-bf16": '+    os.environ["NEURON_RT_STOCHASTIC_ROUNDING_EN"] = "1"',
        "fp32-copy": "+        optimizer = FP32ParamsCopy(optimizer)",
        "autocast": '+        with torch.autocast(dtype=torch.bfloat16, device_type="xla"',
    }
    for mode, added in recipe.items():
        command = f"$ xlamigrate rewrite --diff --mode {mode} examples/\n"
        block = readme.split(command, 1)[1].split("```", 1)[0]
        result = run_cli("rewrite", "--diff", "--mode", mode, "examples/", cwd=ROOT)
        assert result.returncode == 1, result.stderr
        assert block == result.stdout, mode
        assert added in block, mode
        for other, line in recipe.items():
            assert other == mode or line not in block, (mode, other)
        for path in (
            "run_pretrain.sh",
            "k8s/pretrain-job.yaml",
            "train.py",
            "notebooks/finetune.ipynb",
        ):
            assert f"+++ b/examples/{path}\n" in block, (mode, path)
        runtime = "+xlamigrate-runtime>=0.1.0\n" in block  # the script now imports it
        assert runtime == (mode != "autocast"), mode


API_EXAMPLE = "xlamigrate rewrite --select XM5 --diff tests/fixtures/xla-apis/env_before_import.py"


def test_readme_api_example_is_what_rewrite_prints() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split(f"$ {API_EXAMPLE}\n", 1)[1].split("```", 1)[0]
    result = run_cli(*API_EXAMPLE.split()[1:], cwd=ROOT)
    assert result.returncode == 1, result.stderr
    assert block == result.stdout


def test_readme_rule_families_cover_the_catalogue_and_its_rule_example_is_what_rule_prints() -> (
    None
):
    """The README lists rule families, not rules (a new rule is its rules/ file and its emitter,
    nothing else): every rule's code falls in a family it lists, and the `xlamigrate rule`
    output it shows, examples included, is the tool's word for word."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("| codes | what they find |\n|---|---|\n", 1)[1].split("\n\n", 1)[0]
    families = [line.split(" | ")[0].lstrip("| ").removesuffix("xx") for line in table.splitlines()]
    codes = set(load_catalogue().rules) | api_table().rules()
    assert all(any(code.startswith(family) for family in families) for code in codes)
    block = readme.split("$ xlamigrate rule XM202\n", 1)[1].split("```", 1)[0]
    result = run_cli("rule", "XM202", cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert block == result.stdout
