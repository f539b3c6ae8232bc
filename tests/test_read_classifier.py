"""How the rewriter classifies each test of a legacy flag (reads.py): climbed to the largest
expression that is the flags' alone, resolved (signal, collapse, unchanged, manual) with its
values per configuration, its float64 spellings found.

`fixtures/reads/classified.json` holds what the classifier said on libcst, before the planner
moved to `ast` (made once from the last libcst version: the reads of every fixture, and a
hand-written test of each shape, in five launch configurations). The classifier must keep
saying it."""

from __future__ import annotations

import ast
import json
import textwrap

import pytest

from tests import snapshots
from tests.conftest import FIXTURES
from xlamigrate.catalogue import load_catalogue
from xlamigrate.kinds.python.envanalysis import analyse_env_accesses
from xlamigrate.kinds.python.reads import ReadClassifier, ReadPlan, float32_spelling
from xlamigrate.kinds.python.training import TrainingScript
from xlamigrate.project.model import Configuration

FLAGS = load_catalogue().flags
USE, DOWNCAST = "XLA_USE_BF16", "XLA_DOWNCAST_BF16"
BF16 = Configuration(frozenset({USE}), ("run.sh:5",))
MIXED = Configuration(frozenset({DOWNCAST}), ("run.sh:7",))
BOTH = Configuration(frozenset({USE, DOWNCAST}), ("run.sh:9",))
NO_FLAG = Configuration(frozenset())
CONFIGURATION_SETS = {
    "bf16|fp32": (BF16, NO_FLAG),
    "mixed|fp32": (MIXED, NO_FLAG),
    "bf16|mixed|fp32": (BF16, MIXED, NO_FLAG),
    "both|fp32": (BOTH, NO_FLAG),
    "always-mixed": (MIXED,),
}
HEADER = "import os\n\nimport torch\n"
EXPECTED = json.loads((FIXTURES / "reads" / "classified.json").read_text())


def classified(
    source: str, configurations: tuple[Configuration, ...]
) -> tuple[TrainingScript, list[ReadPlan]]:
    module = ast.parse(source)
    accesses = analyse_env_accesses(module, source, FLAGS).accesses
    script = TrainingScript(module, source)
    return script, ReadClassifier(script, accesses, configurations).plans()


def described(source: str, configurations: tuple[Configuration, ...]) -> list[object]:
    """Each plan as the expectations record it, in one order (the order of a module's accesses
    is the analysis's)."""
    script, plans = classified(source, configurations)
    found = [
        [
            script.code(plan.top),
            len(plan.accesses),
            plan.resolution,
            plan.negated,
            plan.keep_body,
            [repr(value) for value in plan.before],
            repr(plan.after),
            [float32_spelling(script, node) for node in plan.float32],
            type(plan.collapsed).__name__,
        ]
        for plan in plans
    ]
    return sorted(found, key=json.dumps)


# -- each shape of test --------------------------------------------------------------------------

EITHER = 'os.environ.get("XLA_USE_BF16") or os.environ.get("XLA_DOWNCAST_BF16")'
SHAPES = {
    "either flag": f"if {EITHER}:\n    DTYPE = torch.bfloat16\n",
    "either flag, parenthesized": f"bf16 = ({EITHER})\n",
    "int() of getenv": 'if int(os.getenv("XLA_USE_BF16", 0)):\n    DTYPE = torch.bfloat16\n',
    "int() compared": 'bf16 = int(os.getenv("XLA_USE_BF16", "0")) == 1\n',
    "lower()": 'bf16 = os.environ.get("XLA_USE_BF16", "0").lower() in ("1", "true")\n',
    "default keyword": 'bf16 = os.environ.get("XLA_USE_BF16", default="0") == "1"\n',
    "in": 'if "XLA_USE_BF16" in os.environ:\n    DTYPE = torch.bfloat16\n',
    "not in": 'if "XLA_USE_BF16" not in os.environ:\n    DTYPE = torch.float32\n',
    "not": 'fp32 = not os.environ.get("XLA_USE_BF16")\n',
    "subscript": 'bf16 = os.environ["XLA_USE_BF16"] == "1"\n',
    "chained comparison": 'bf16 = "0" < os.environ.get("XLA_USE_BF16", "0") <= "1"\n',
    "is None": 'bf16 = os.environ.get("XLA_USE_BF16") is not None\n',
    "a value, not a test": 'dtype_name = os.environ.get("XLA_USE_BF16", "0")\n',
    "an unknown operand": 'bf16 = os.environ.get("XLA_USE_BF16") == args.value\n',
    "a keyword argument": 'run(bf16=os.environ.get("XLA_USE_BF16") == "1")\n',
    "reads in a conditional expression": (
        'mixed = os.environ["XLA_DOWNCAST_BF16"] if "XLA_DOWNCAST_BF16" in os.environ else "0"\n'
    ),
    "a comprehension's test": '[x for x in xs if os.environ.get("XLA_USE_BF16")]\n',
    "float64 in one branch": (
        'if os.environ.get("XLA_DOWNCAST_BF16") == "1":\n'
        "    x = x.double()\n"
        "    y = y.to(torch.float64)\n"
    ),
    "float64 else float32": (
        'if os.environ.get("XLA_DOWNCAST_BF16") == "1":\n'
        "    x = x.double()\n"
        "else:\n"
        "    x = x.float()\n"
    ),
    "float64 in the else": (
        'if not os.environ.get("XLA_DOWNCAST_BF16"):\n'
        "    x = x.to(dtype=torch.float)\n"
        "else:\n"
        "    x = x.to(torch.double)\n"
    ),
    "float64 else something else": (
        'if os.environ.get("XLA_DOWNCAST_BF16"):\n    x = x.double()\nelse:\n    x = x.half()\n'
    ),
    "float64 then elif": (
        'if os.environ.get("XLA_DOWNCAST_BF16"):\n'
        "    x = x.double()\n"
        "elif other:\n"
        "    x = x.float()\n"
    ),
    "float64 in a one-line suite": (
        'if os.environ.get("XLA_DOWNCAST_BF16"): x = x.double()\nelse: x = x.float()\n'
    ),
    "float64 conditional expression": (
        'dtype = torch.float64 if os.environ.get("XLA_DOWNCAST_BF16") else torch.float32\n'
    ),
    "float64 on a name assigned": (
        'mixed = os.environ.get("XLA_DOWNCAST_BF16") == "1"\n'
        "dtype = torch.float64 if mixed else torch.bfloat16\n"
        "if mixed:\n"
        "    x = (x.double())\n"
    ),
    "float64 on an attribute of self": (
        "class Trainer:\n"
        "    def __init__(self):\n"
        '        self.mixed = os.getenv("XLA_DOWNCAST_BF16") == "1"\n'
        "\n"
        "    def cast(self, x):\n"
        "        if self.mixed:\n"
        "            return x.to((torch.double))\n"
        "        return x\n"
    ),
}


@pytest.mark.parametrize("name", CONFIGURATION_SETS)
@pytest.mark.parametrize("shape", SHAPES)
def test_each_shape_of_test_is_classified_as_before(shape: str, name: str) -> None:
    expected = EXPECTED["shapes"][f"{shape} | {name}"]
    assert expected
    assert described(HEADER + SHAPES[shape], CONFIGURATION_SETS[name]) == expected


FIXTURE_CASES = sorted(EXPECTED["fixtures"])


def test_the_expectations_cover_the_fixtures_that_read_a_flag() -> None:
    assert len({case.split(" | ")[0] for case in FIXTURE_CASES}) >= 20


def fixture_source(path: str) -> str:
    """A fixture's text by the name the expectations give it: a file under tests/fixtures/, the
    rewritten text of a case's snapshot (`cases/<case>.<mode>.snap`), or a file a project's
    snapshot rewrites (`projects/<case>/<mode>.snap:<file>`)."""
    snapshot, _, name = path.partition(".snap")
    if not _:
        return (FIXTURES / path).read_bytes().decode("utf-8")
    files = snapshots.parse((FIXTURES / f"{snapshot}.snap").read_bytes()).files or ()
    return dict(files)[name.removeprefix(":")].decode("utf-8")


@pytest.mark.parametrize("case", FIXTURE_CASES)
def test_each_fixture_s_reads_are_classified_as_before(case: str) -> None:
    path, name = case.split(" | ")
    source = fixture_source(path)
    assert described(source, CONFIGURATION_SETS[name]) == EXPECTED["fixtures"][case]


# -- single cases --------------------------------------------------------------------------------


def only_plan(body: str, *configurations: Configuration) -> ReadPlan:
    _, plans = classified(HEADER + textwrap.dedent(body), configurations)
    [plan] = plans
    return plan


def test_either_flag_is_one_test_that_reads_the_signal() -> None:
    plan = only_plan(f"if {EITHER}:\n    pass\n", BF16, MIXED, NO_FLAG)
    assert plan.code == EITHER
    assert len(plan.accesses) == 2
    assert plan.resolution == "signal" and not plan.negated
    assert plan.before == ("1", "1", None) and plan.after is None


def test_int_of_a_read_is_climbed_to() -> None:
    plan = only_plan('bf16 = int(os.getenv("XLA_USE_BF16", 0))\n', BF16, NO_FLAG)
    assert plan.code == 'int(os.getenv("XLA_USE_BF16", 0))'
    assert plan.before == (1, 0) and plan.resolution == "manual"


def test_a_method_of_a_read_is_climbed_to() -> None:
    plan = only_plan('if os.environ.get("XLA_USE_BF16", "").lower() == "1":\n    pass\n', BF16)
    assert plan.code == 'os.environ.get("XLA_USE_BF16", "").lower() == "1"'
    assert plan.before == (True,) and plan.after is False


def test_not_in_reads_the_signal_negated() -> None:
    plan = only_plan('fp32 = "XLA_USE_BF16" not in os.environ\n', BF16, NO_FLAG)
    assert plan.resolution == "signal" and plan.negated
    present = only_plan('bf16 = "XLA_USE_BF16" in os.environ\n', BF16, NO_FLAG)
    assert present.resolution == "signal" and not present.negated


def test_a_float64_branch_equal_to_the_other_in_float32_collapses() -> None:
    plan = only_plan(SHAPES["float64 else float32"], MIXED, NO_FLAG)
    assert plan.resolution == "collapse"
    assert isinstance(plan.collapsed, ast.If) and not plan.keep_body


def test_float64_tested_through_a_name_becomes_float32() -> None:
    script, [plan] = classified(HEADER + SHAPES["float64 on a name assigned"], (MIXED, NO_FLAG))
    assert plan.resolution == "signal" and plan.collapsed is None
    spellings = [float32_spelling(script, node) for node in plan.float32]
    assert spellings == ["x.float", "torch.float32"]  # the `if`s' first, as on libcst


def test_float32_spelling_keeps_the_parentheses_it_replaces() -> None:
    script, [plan] = classified(
        HEADER + SHAPES["float64 on an attribute of self"], (MIXED, NO_FLAG)
    )
    assert [float32_spelling(script, node) for node in plan.float32] == ["(torch.float32)"]


def test_branches_that_differ_only_in_comments_and_layout_collapse() -> None:
    """The branches are compared as trees: a comment or a line break in one does not keep the
    float64 `if` (the libcst classifier compared their code, and read a signal with float32)."""
    body = (
        'if os.environ.get("XLA_DOWNCAST_BF16") == "1":\n'
        "    x = x.double()\n"
        "else:\n"
        "    x = x.to(  # the same, in float32\n"
        "        dtype=torch.float\n"
        "    )\n"
    )
    plan = only_plan(body, MIXED, NO_FLAG)
    assert plan.resolution == "collapse" and not plan.keep_body


def test_a_test_of_either_flag_before_another_operand_reads_the_signal() -> None:
    """`A or B or x` is `(A or B) or x`: the flags' part is one test (Python keeps one flat
    list of operands; the script nests them as libcst did)."""
    plan = only_plan(f"if {EITHER} or args.bf16:\n    pass\n", BF16, MIXED, NO_FLAG)
    assert plan.code == EITHER and len(plan.accesses) == 2
    assert plan.resolution == "signal" and not plan.negated
