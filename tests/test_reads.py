"""Reads of a legacy flag in a launched script (or a module it imports): each test of the flag
is evaluated in every configuration the launchers start the script in, before and after the
migration, and resolved (the signal, the float64 branch dropped) or reported with its values.
The whole-project behaviour is tests/fixtures/projects/reads_three_ways."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import environment_without
from xlamigrate.catalogue import Catalogue
from xlamigrate.engine import rewrite_source, scan_source
from xlamigrate.kinds.python.envanalysis import analyse_env_accesses
from xlamigrate.kinds.python.flagtests import RAISES, UNKNOWN, FlagEvaluator
from xlamigrate.project.model import Configuration, ScriptRecipe
from xlamigrate.request import FileContext, RewriteRequest
from xlamigrate.results import RewriteOutcome

USE, DOWNCAST = "XLA_USE_BF16", "XLA_DOWNCAST_BF16"
BF16 = Configuration(frozenset({USE}), ("run.sh:5",))
MIXED = Configuration(frozenset({DOWNCAST}), ("run.sh:7",))
NO_FLAG = Configuration(frozenset())


def recipe(*configurations: Configuration, signal: str | None = "BF16_RECIPE") -> ScriptRecipe:
    flags = tuple(sorted({flag for c in configurations for flag in c.flags}))
    return ScriptRecipe("train.py", signal, flags, ("run.sh",), configurations=configurations)


SWITCH = recipe(BF16, MIXED, NO_FLAG)  # run.sh BF16|MIXED|FP32
MIXED_OR_FP32 = recipe(MIXED, NO_FLAG)  # run.sh MIXED|FP32
ALWAYS_MIXED = recipe(MIXED, signal=None)  # every launch sets XLA_DOWNCAST_BF16

HEADER = "import os\n\nimport torch\n"


def rewrite(catalogue: Catalogue, body: str, against: ScriptRecipe) -> RewriteOutcome:
    """`body` as a module a launched script imports (its reads resolve; no recipe goes in)."""
    source = HEADER + textwrap.dedent(body)
    context = FileContext(imported_by=against)
    return rewrite_source(
        "train.py",
        source.encode(),
        "python",
        catalogue,
        frozenset(catalogue.rules),
        RewriteRequest("full-bf16"),
        context=context,
    )


def new_code(outcome: RewriteOutcome) -> str:
    assert outcome.rewritten is not None, outcome
    return outcome.rewritten.decode()


def read_lines(outcome: RewriteOutcome) -> list[str]:
    return [f.message for f in outcome.remaining if f.code == "XM201"]


# -- "is this the bf16 run?": the signal ---------------------------------------------------------


@pytest.mark.parametrize(
    "test",
    [
        'os.environ.get("XLA_USE_BF16") or os.environ.get("XLA_DOWNCAST_BF16")',
        '"XLA_USE_BF16" in os.environ or "XLA_DOWNCAST_BF16" in os.environ',
        'os.getenv("XLA_USE_BF16") == "1" or os.getenv("XLA_DOWNCAST_BF16") == "1"',
    ],
)
def test_a_test_of_either_flag_reads_the_signal(catalogue: Catalogue, test: str) -> None:
    outcome = rewrite(catalogue, f"if {test}:\n    DTYPE = torch.bfloat16\n", SWITCH)
    code = new_code(outcome)
    assert "if BF16_RECIPE:\n    DTYPE = torch.bfloat16" in code
    assert 'BF16_RECIPE = os.environ.get("BF16_RECIPE") == "1"' in code
    assert "XLA_" not in code.replace("XLA_DOWNCAST_BF16 / XLA_USE_BF16", "")
    assert read_lines(outcome) == []
    assert {f.code for f in outcome.fixed} == {"XM201"}


def test_a_test_of_either_flag_before_another_operand_reads_the_signal(
    catalogue: Catalogue,
) -> None:
    """`A or B or args.bf16` is `(A or B) or args.bf16`: the flags' part reads the signal, the
    rest stays (Python keeps the three operands in one list; the rewrite splits it)."""
    either = 'os.environ.get("XLA_USE_BF16") or os.environ.get("XLA_DOWNCAST_BF16")'
    outcome = rewrite(catalogue, f"if {either} or args.bf16:\n    DTYPE = 1\n", SWITCH)
    assert "\nif BF16_RECIPE or args.bf16:\n    DTYPE = 1\n" in new_code(outcome)
    assert {f.code for f in outcome.fixed} == {"XM201"} and read_lines(outcome) == []


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (  # a default: found in its `def` (a compound statement's header)
            'def train(bf16=os.environ.get("XLA_USE_BF16") == "1"):\n    return bf16\n',
            "def train(bf16=BF16_RECIPE):\n    return bf16\n",
        ),
        (  # a decorator's argument, in a class, its continuation lines indented
            "class Trainer:\n"
            "    @configure(\n"
            '        bf16=os.environ.get("XLA_USE_BF16") == "1",\n'
            "    )\n"
            "    def step(self):\n"
            "        pass\n",
            "class Trainer:\n"
            "    @configure(\n"
            "        bf16=BF16_RECIPE,\n"
            "    )\n"
            "    def step(self):\n"
            "        pass\n",
        ),
        (  # an `elif` test
            'if args.fp32:\n    pass\nelif os.environ.get("XLA_USE_BF16") == "1":\n    pass\n',
            "if args.fp32:\n    pass\nelif BF16_RECIPE:\n    pass\n",
        ),
    ],
)
def test_a_test_in_a_statement_s_header_reads_the_signal(
    catalogue: Catalogue, body: str, expected: str
) -> None:
    outcome = rewrite(catalogue, body, recipe(BF16, NO_FLAG))
    assert expected in new_code(outcome)


def test_an_int_kept_as_a_value_is_not_a_test(catalogue: Catalogue) -> None:
    """`int(...)` assigned is 0 or 1, not False or True: reported, not replaced."""
    outcome = rewrite(catalogue, 'level = int(os.getenv("XLA_DOWNCAST_BF16", 0))\n', SWITCH)
    [message] = read_lines(outcome)
    assert "was 0 for XLA_USE_BF16 (run.sh:5); 1 for XLA_DOWNCAST_BF16" in message


@pytest.mark.parametrize(
    ("test", "expected"),
    [
        ('os.environ.get("XLA_DOWNCAST_BF16") == "1"', "BF16_RECIPE"),
        ('"XLA_DOWNCAST_BF16" in os.environ', "BF16_RECIPE"),
        ('int(os.getenv("XLA_DOWNCAST_BF16", 0))', "BF16_RECIPE"),
        ('os.environ.get("XLA_DOWNCAST_BF16", "0").lower() in ("1", "true")', "BF16_RECIPE"),
        ('os.environ.get("XLA_DOWNCAST_BF16", "0") != "1"', "not BF16_RECIPE"),
        ('"XLA_DOWNCAST_BF16" not in os.environ', "not BF16_RECIPE"),
    ],
)
def test_a_test_of_the_only_flag_reads_the_signal_in_its_sense(
    catalogue: Catalogue, test: str, expected: str
) -> None:
    outcome = rewrite(catalogue, f"if {test}:\n    mixed = True\n", MIXED_OR_FP32)
    assert f"\nif {expected}:\n    mixed = True\n" in new_code(outcome)
    assert read_lines(outcome) == []


def test_a_test_of_one_flag_when_the_other_also_gets_the_recipe_is_reported_with_its_values(
    catalogue: Catalogue,
) -> None:
    """BF16 and MIXED both get the recipe (the signal is on in both), but this read was true in
    BF16 only: nothing says what it should read now."""
    outcome = rewrite(catalogue, 'if "XLA_USE_BF16" in os.environ:\n    print("bf16")\n', SWITCH)
    assert outcome.rewritten is None
    [message] = read_lines(outcome)
    assert (
        '`"XLA_USE_BF16" in os.environ` was True for XLA_USE_BF16 (run.sh:5); False for'
        " XLA_DOWNCAST_BF16 (run.sh:7); False for launches that set no flag; after the"
        " migration it is False in every one (BF16_RECIPE=1 marks the configurations that set"
        " the flag)"
    ) in message
    assert message.endswith("review by hand")


def test_a_value_read_is_reported_with_its_values(catalogue: Catalogue) -> None:
    outcome = rewrite(catalogue, 'print(os.environ.get("XLA_DOWNCAST_BF16", "0"))\n', SWITCH)
    [message] = read_lines(outcome)
    assert (
        "was '0' for XLA_USE_BF16 (run.sh:5); '1' for XLA_DOWNCAST_BF16 (run.sh:7); '0' for"
        " launches that set no flag; after the migration it is '0' in every one"
    ) in message


def test_a_subscript_read_says_it_raised_where_the_flag_was_unset(catalogue: Catalogue) -> None:
    outcome = rewrite(catalogue, 'x = os.environ["XLA_DOWNCAST_BF16"]\n', MIXED_OR_FP32)
    [message] = read_lines(outcome)
    assert "a KeyError for launches that set no flag" in message
    assert "it is a KeyError in every one" in message


def test_a_test_that_no_launch_changes_is_left_and_says_so(catalogue: Catalogue) -> None:
    """`== "0"` was false everywhere (no launcher set "0") and stays false."""
    body = 'if os.environ.get("XLA_DOWNCAST_BF16") == "0":\n    print("fp32")\n'
    [message] = read_lines(rewrite(catalogue, body, SWITCH))
    assert "after the migration it is False in every one: nothing changes" in message


def test_a_read_combined_with_other_state_resolves_its_own_part(catalogue: Catalogue) -> None:
    body = 'import sys\nif os.environ.get("XLA_DOWNCAST_BF16") or "--amp" in sys.argv:\n    pass\n'
    code = new_code(rewrite(catalogue, body, MIXED_OR_FP32))
    assert 'if BF16_RECIPE or "--amp" in sys.argv:' in code


def test_every_launch_with_the_flag_makes_the_recipe_constant_true(catalogue: Catalogue) -> None:
    body = 'if os.environ.get("XLA_DOWNCAST_BF16") == "1":\n    print("bf16")\n'
    code = new_code(rewrite(catalogue, body, ALWAYS_MIXED))
    assert "BF16_RECIPE = True\n" in code
    assert "if BF16_RECIPE:" in code


def test_a_flag_no_launch_sets_is_left_where_every_launch_sets_the_other(
    catalogue: Catalogue,
) -> None:
    """`"XLA_USE_BF16" in os.environ`, where every launch sets only XLA_DOWNCAST_BF16, was False
    throughout and stays so: it became `not BF16_RECIPE` (neuronx-distributed's gpt_neox)."""
    body = 'if "XLA_USE_BF16" in os.environ:\n    print("bf16")\n'
    outcome = rewrite(catalogue, body, ALWAYS_MIXED)
    assert outcome.rewritten is None
    [message] = read_lines(outcome)
    assert "nothing changes" in message


def test_where_the_module_uses_the_signal_name_the_read_itself_goes_in(
    catalogue: Catalogue,
) -> None:
    body = 'BF16_RECIPE = "mine"\nmixed = os.environ.get("XLA_DOWNCAST_BF16") == "1"\n'
    code = new_code(rewrite(catalogue, body, MIXED_OR_FP32))
    assert 'mixed = os.environ.get("BF16_RECIPE") == "1"\n' in code
    assert 'BF16_RECIPE = "mine"' in code


def test_a_noqa_read_is_left_alone(catalogue: Catalogue) -> None:
    body = 'mixed = os.environ.get("XLA_DOWNCAST_BF16") == "1"  # noqa: XM201\n'
    outcome = rewrite(catalogue, body, MIXED_OR_FP32)
    assert outcome.rewritten is None
    assert not [f for f in outcome.fixed if f.code == "XM201"]


# -- the float64 trick ---------------------------------------------------------------------------


def test_a_float64_conditional_expression_becomes_its_float32_branch(
    catalogue: Catalogue,
) -> None:
    body = 'dtype = torch.double if os.environ.get("XLA_DOWNCAST_BF16") == "1" else torch.float32\n'
    outcome = rewrite(catalogue, body, SWITCH)
    assert "\ndtype = torch.float32\n" in new_code(outcome)
    assert read_lines(outcome) == []


def test_a_float64_if_becomes_its_float32_branch(catalogue: Catalogue) -> None:
    body = """\
    def norm(h):
        # fp32 for the variance
        if os.environ.get("XLA_DOWNCAST_BF16", None) == "1":
            h = h.double()
        else:
            h = h.to(torch.float32)
        return h
    """
    code = new_code(rewrite(catalogue, body, SWITCH))
    assert "    # fp32 for the variance\n    h = h.to(torch.float32)\n    return h\n" in code
    assert "double" not in code


def test_a_float64_branch_unlike_the_other_keeps_the_test_on_the_signal(
    catalogue: Catalogue,
) -> None:
    """The branches differ (fp32 moments vs the gradient's own dtype): the float64 one becomes
    float32 and is taken where the recipe is on, as it was under the flag."""
    body = """\
    def moments(g):
        if os.environ.get("XLA_DOWNCAST_BF16") == "1":
            g = g.to(torch.float64)
        return g * g
    """
    code = new_code(rewrite(catalogue, body, MIXED_OR_FP32))
    assert "    if BF16_RECIPE:\n        g = g.to(torch.float32)\n" in code


def test_a_float64_branch_under_a_name_assigned_the_read_becomes_float32(
    catalogue: Catalogue,
) -> None:
    body = """\
    class Upcast:
        def __init__(self):
            self.upcast = os.environ.get("XLA_DOWNCAST_BF16", "0") == "1"

        def step(self, grad):
            if self.upcast:
                grad = grad.double()
            return grad
    """
    code = new_code(rewrite(catalogue, body, MIXED_OR_FP32))
    assert "self.upcast = BF16_RECIPE\n" in code
    assert "grad = grad.float()\n" in code


def test_a_float64_branch_that_is_not_the_recipes_stays_manual(catalogue: Catalogue) -> None:
    """True in MIXED only, while BF16 gets the recipe too, and the branches differ."""
    body = """\
    def moments(g):
        if os.environ.get("XLA_DOWNCAST_BF16") == "1":
            g = g.double()
        return g
    """
    outcome = rewrite(catalogue, body, SWITCH)
    assert outcome.rewritten is None
    assert len(read_lines(outcome)) == 1


# -- scan says what rewrite does -----------------------------------------------------------------


def test_scan_marks_the_reads_the_rewrite_resolves(catalogue: Catalogue) -> None:
    source = HEADER + (
        'mixed = os.environ.get("XLA_DOWNCAST_BF16") == "1"\n'
        'print(os.environ.get("XLA_DOWNCAST_BF16"))\n'
    )
    result = scan_source(
        "train.py",
        source.encode(),
        "python",
        catalogue,
        frozenset(catalogue.rules),
        FileContext(recipe=MIXED_OR_FP32),
    )
    resolved, left = sorted(result.findings, key=lambda f: f.span.line)
    assert resolved.fix is not None and resolved.fix.applicability == "safe"
    assert "the rewrite makes it read BF16_RECIPE" in resolved.message
    assert left.fix is not None and left.fix.applicability == "manual"
    assert "was '1' for XLA_DOWNCAST_BF16 (run.sh:7); None for launches" in left.message


def test_without_a_launch_the_reads_stay_as_they_were(catalogue: Catalogue) -> None:
    source = HEADER + 'mixed = os.environ.get("XLA_DOWNCAST_BF16") == "1"\n'
    result = scan_source(
        "train.py", source.encode(), "python", catalogue, frozenset(catalogue.rules)
    )
    [finding] = result.findings
    assert finding.fix is not None and finding.fix.applicability == "manual"
    assert "was" not in finding.message


# -- the evaluator -------------------------------------------------------------------------------


def evaluate(expression: str, env: dict[str, str]) -> object:
    source = f"import os\nx = {expression}\n"
    module = ast.parse(source)
    analysis = analyse_env_accesses(module, source, frozenset({USE, DOWNCAST}))
    assign = module.body[1]
    assert isinstance(assign, ast.Assign)
    reads = {a.node: a for a in analysis.accesses}
    return FlagEvaluator(reads).value(assign.value, env)


@pytest.mark.parametrize(
    ("expression", "env", "value"),
    [
        ('os.environ.get("XLA_USE_BF16")', {}, None),
        ('os.environ.get("XLA_USE_BF16", "0")', {}, "0"),
        ('os.environ.get("XLA_USE_BF16", default="0")', {}, "0"),
        ('os.environ.get("XLA_USE_BF16")', {USE: "1"}, "1"),
        ('os.environ["XLA_USE_BF16"]', {}, RAISES),
        ('int(os.environ.get("XLA_USE_BF16"))', {}, RAISES),
        ('int(os.environ.get("XLA_USE_BF16", 0)) == 1', {USE: "1"}, True),
        ('bool(os.environ.get("XLA_USE_BF16"))', {USE: "0"}, True),  # presence, not torch-xla
        ('os.environ.get("XLA_USE_BF16") is None', {}, True),
        ('not "XLA_USE_BF16" in os.environ', {USE: "1"}, False),
        ('os.environ.get("XLA_USE_BF16") or "fallback"', {}, "fallback"),
        ('os.environ.get("XLA_USE_BF16") == some_name', {}, UNKNOWN),
        ('os.environ.get("XLA_USE_BF16").split(",")', {USE: "1"}, UNKNOWN),
    ],
)
def test_the_evaluator_follows_python(expression: str, env: dict[str, str], value: object) -> None:
    assert evaluate(expression, env) == value or evaluate(expression, env) is value


# -- a script that sets the flag itself ---------------------------------------------------------

SELF_SETTING = """\
import os
import sys

import torch

AT_IMPORT = os.environ.get("XLA_USE_BF16") == "1"  # read before the script sets it


def is_bf16_run():
    return bool(os.environ.get("XLA_USE_BF16") or os.environ.get("XLA_DOWNCAST_BF16"))


def main(mixed):
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    print(AT_IMPORT, is_bf16_run(), next(model.parameters()).dtype)


if __name__ == "__main__":
    precision = sys.argv[1]
    if precision == "bf16":
        os.environ["XLA_USE_BF16"] = "1"
    elif precision == "mixed":
        os.environ["XLA_DOWNCAST_BF16"] = "1"
    main(precision == "mixed")
"""


def test_a_script_that_sets_the_flag_itself_reads_the_signal_where_and_when_it_was_set(
    catalogue: Catalogue, tmp_path: Path
) -> None:
    """Its reads asked "is this the bf16 run?" of the flag it set in `__main__`: they read the
    signal, written in the flag's place, so a read at import (before the write) still sees it
    unset and one after sees it set, in each configuration."""
    outcome = rewrite_source(
        "train.py", SELF_SETTING.encode(), "python", catalogue, frozenset(catalogue.rules),
        RewriteRequest("full-bf16"),
    )  # fmt: skip
    migrated = new_code(outcome)
    assert 'return os.environ.get("BF16_RECIPE") == "1"' in migrated
    assert migrated.count('os.environ["BF16_RECIPE"] = "1"') == 2
    # the read at import tests XLA_USE_BF16 alone, while "mixed" gets the recipe too: manual
    assert [(f.code, f.span.line) for f in outcome.remaining] == [("XM201", 6)]
    scanned = scan_source(
        "train.py", SELF_SETTING.encode(), "python", catalogue, frozenset(catalogue.rules)
    )
    fixes = [(f.span.line, f.fix.applicability if f.fix else None) for f in scanned.findings]
    assert fixes == [(6, "manual"), (10, "safe"), (10, "safe"), (22, "safe"), (24, "safe")]
    (tmp_path / "before.py").write_text(SELF_SETTING)
    (tmp_path / "after.py").write_text(migrated)
    env = environment_without("XLA_", "BF16_RECIPE")
    for precision, dtype in (("bf16", "bfloat16"), ("mixed", "bfloat16"), ("fp32", "float32")):
        printed = []
        for script in ("before.py", "after.py"):
            result = subprocess.run(
                [sys.executable, script, precision],
                cwd=tmp_path, capture_output=True, text=True, env=env, check=True, timeout=120,
            )  # fmt: skip
            printed.append(result.stdout.split())
        before, after = printed
        assert before[:2] == after[:2], precision  # the reads: the same values, the same times
        assert after[2] == f"torch.{dtype}", precision  # and the recipe where the flag was on
