"""Reading version checks (xlamigrate/kinds/python/versionchecks.py): each spelling real
projects use, the torch-xla releases each branch runs on, and the tests it cannot read."""

from __future__ import annotations

import ast

import pytest

from tests.conftest import FIXTURES
from xlamigrate.apitable import Version
from xlamigrate.kinds.python.astscopes import Scopes
from xlamigrate.kinds.python.versionchecks import ANY, VersionChecks
from xlamigrate.releasetable import release_table


def branches(source: str) -> tuple[str | None, str | None] | None:
    """The releases the body and the `else` of the source's last `if` run on (None: cannot be
    read); None where that `if` is no version check."""
    source += "\n    body()\nelse:\n    orelse()\n"
    tree = ast.parse(source)
    checks = VersionChecks(Scopes(tree))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _called(n) in MARKS]
    said: list[str | None] = []
    for call in sorted(calls, key=lambda call: MARKS.index(_called(call))):
        around = checks.around(call)
        if not around:
            return None
        releases = ANY
        for branch in around:
            if branch.releases is None:
                said.append(None)
                break
            releases = releases & branch.releases
        else:
            said.append(str(releases))
    return said[0], said[1]


MARKS = ["body", "orelse"]


def _called(call: ast.Call) -> str:
    return call.func.id if isinstance(call.func, ast.Name) else ""


@pytest.mark.parametrize(
    ("source", "body", "orelse"),
    [
        # a running version compared with a constant
        ("import torch\nif torch.__version__ >= '2.1':", "2.1+", "before 2.1"),
        ("import torch_xla\nif torch_xla.__version__ < '2.5':", "before 2.5", "2.5+"),
        ("from torch_xla import __version__\nif '2.3' <= __version__:", "2.3+", "before 2.3"),
        (
            "import torch\nfrom packaging import version\n"
            "if version.parse(torch.__version__) >= version.parse('2.2'):",
            "2.2+",
            "before 2.2",
        ),
        (
            "import packaging.version\nimport torch\n"
            "if packaging.version.Version(torch.__version__) > packaging.version.Version('2.1.2'):",
            "2.1+",
            "before 2.2",  # 2.1.0 to 2.1.2 fail it
        ),
        (
            "import torch\nfrom packaging.version import Version\n"
            "if Version(torch.__version__).release >= (2, 4):",
            "2.4+",
            "before 2.4",
        ),
        (
            "import torch\nfrom distutils.version import LooseVersion\n"
            "if LooseVersion(torch.__version__) >= LooseVersion('1.13'):",
            "1.13+",
            "before 1.13",
        ),
        (
            "from importlib.metadata import version\nif version('torch-xla') >= '2.3':",
            "2.3+",
            "before 2.3",
        ),
        ("from compat import TORCH_VERSION\nif TORCH_VERSION >= (1, 13):", "1.13+", "before 1.13"),
        ("if (2, 0) <= XLA_VERSION < (2, 5):", "2.0+, before 2.5", "any torch-xla"),
        ("import torch\nif torch.__version__ == '2.1.2':", "2.1+, before 2.2", "any torch-xla"),
        (
            "import torch\nif torch.__version__.startswith('2.0'):",
            "2.0+, before 2.1",
            "any torch-xla",
        ),
        # aws-neuron-samples: a tuple of the version's numbers, then flags from it
        (
            "from torch_xla import __version__\n"
            "version_tuple = tuple(map(int, __version__.split('.')[:2]))\n"
            "is_pt21_plus = version_tuple >= (2,1)\n"
            "if is_pt21_plus:",
            "2.1+",
            "before 2.1",
        ),
        (
            "from torch_xla import __version__\n"
            "version_tuple = tuple(map(int, __version__.split('.')[:2]))\n"
            "is_pt20 = version_tuple == (2,0)\n"
            "if is_pt20:",
            "2.0+, before 2.1",
            "any torch-xla",
        ),
        # the libraries' helpers
        (
            "from transformers.utils import is_torch_greater_or_equal\n"
            "if is_torch_greater_or_equal('2.2', accept_dev=True):",
            "2.2+",
            "before 2.2",
        ),
        (
            "from accelerate.utils import is_torch_version\nif is_torch_version('>=', '2.3.0'):",
            "2.3+",
            "before 2.3",
        ),
        (
            "from accelerate.utils import compare_versions\n"
            "if compare_versions('torch', '<', '2.6'):",
            "before 2.6",
            "2.6+",
        ),
        (
            "import operator\nfrom lightning_utilities.core.imports import compare_version\n"
            "if compare_version('torch', operator.ge, '2.1.0'):",
            "2.1+",
            "before 2.1",
        ),
        (
            "from lightning_utilities.core.imports import RequirementCache\n"
            "if RequirementCache('torch_xla>=2.2,<2.6'):",
            "2.2+, before 2.6",
            "any torch-xla",
        ),
        # flags named for a release, imported (or not bound at all)
        ("from compat import is_pt21_plus\nif is_pt21_plus:", "2.1+", "before 2.1"),
        (
            "from lightning.fabric.accelerators.xla import _XLA_GREATER_EQUAL_2_1\n"
            "if _XLA_GREATER_EQUAL_2_1:",
            "2.1+",
            "before 2.1",
        ),
        ("if _TORCH_GREATER_EQUAL_2_4_1:", "2.4+", "before 2.5"),
        ("if is_torch_greater_or_equal_than_1_13:", "1.13+", "before 1.13"),
        ("if is_torch_xla_2_1_or_later:", "2.1+", "before 2.1"),
        ("if _TORCH_LESS_EQUAL_2_6:", "before 2.7", "2.6+"),
        ("if is_pt2_5:", "2.5+, before 2.6", "any torch-xla"),
        ("from compat import is_pt21_plus as new_enough\nif new_enough:", "2.1+", "before 2.1"),
        # a name assigned once, in a function too
        (
            "import torch_xla\nfrom packaging import version\n"
            "new_enough = version.parse(torch_xla.__version__) >= version.parse('2.1')\n"
            "if new_enough:",
            "2.1+",
            "before 2.1",
        ),
        (
            "def f():\n"
            "    tv = tuple(map(int, get_version('torch').split('.')[:2]))\n"
            "    is_pt2_5 = tv == (2, 5)\n"
            "if f():\n    pass\nif is_pt2_5:",  # (the module's is_pt2_5: its name alone)
            "2.5+, before 2.6",
            "any torch-xla",
        ),
        # and, or, not
        ("if is_pt21_plus and use_spmd:", "2.1+", "any torch-xla"),
        ("if is_pt21_plus and min_xla_version('2.5'):", "2.1+", None),  # the largest known
        ("if is_pt21_plus and _XLA_GREATER_EQUAL_2_5:", "2.5+", "before 2.5"),
        ("if not is_pt21_plus:", "before 2.1", "2.1+"),
        ("if is_pt20 or is_pt21_plus:", "2.0+", "before 2.1"),
        ("if not (is_pt20 or is_pt21_plus):", "before 2.1", "2.0+"),
        ("if is_pt21_plus or check_version():", None, "before 2.1"),  # fails where both do
    ],
)
def test_each_spelling_of_a_version_check_gives_its_branches_releases(
    source: str, body: str | None, orelse: str | None
) -> None:
    spelled = [None if said is None else _spelled(said) for said in (body, orelse)]
    assert branches(source) == tuple(spelled)


def _spelled(said: str) -> str:
    return said if said.startswith("any") else f"torch-xla {said}"


@pytest.mark.parametrize(
    "source",
    [
        "if min_xla_version('2.1'):",
        "import torch\nif int(torch.__version__.split('.')[0]) >= 2:",
    ],
)
def test_a_test_that_looks_like_a_version_check_but_cannot_be_read_gives_no_release(
    source: str,
) -> None:
    assert branches(source) == (None, None)


@pytest.mark.parametrize(
    "source",
    [
        "if use_xla:",
        "from transformers.utils import is_torch_xla_available\nif is_torch_xla_available():",
        "if torchvision_available and not debug:",
        # another package's version
        "import transformers\nfrom packaging import version\n"
        "if version.parse(transformers.__version__) >= version.parse('4.30'):",
        "if _TORCHMETRICS_GREATER_EQUAL_1_0_0:",
    ],
)
def test_a_test_of_something_else_is_no_version_check(source: str) -> None:
    assert branches(source) is None


def test_an_elif_runs_where_the_tests_before_it_fail() -> None:
    source = (
        "if XLA_VERSION >= (2, 4):\n    newest()\n"
        "elif XLA_VERSION >= (2, 1):\n    middle()\n"
        "else:\n    oldest()\n"
        "value = fast() if is_pt21_plus else slow()\n"
    )
    tree = ast.parse(source)
    checks = VersionChecks(Scopes(tree))
    said = {}
    for call in [n for n in ast.walk(tree) if isinstance(n, ast.Call)]:
        around = checks.around(call)
        releases = ANY
        for branch in around:
            assert branch.releases is not None
            releases = releases & branch.releases
        said[_called(call)] = (around[-1].said, str(releases))
    assert said == {
        "newest": ("`if XLA_VERSION >= (2, 4):`", "torch-xla 2.4+"),
        "middle": ("`elif XLA_VERSION >= (2, 1):`", "torch-xla 2.1+, before 2.4"),
        "oldest": ("the `else` of `elif XLA_VERSION >= (2, 1):`", "torch-xla before 2.1"),
        "fast": ("`... if is_pt21_plus else ...`", "torch-xla 2.1+"),
        "slow": ("the `else` of `... if is_pt21_plus else ...`", "torch-xla before 2.1"),
    }


def test_torch_and_torch_xla_releases_go_in_lock_step_from_1_5_to_2_9() -> None:
    table = release_table()
    torch = [str(row.torch) for row in table.releases]
    assert torch[0] == "1.5" and torch[-1] == "2.9" and len(torch) == 19
    assert all(row.torch == row.torch_xla and row.evidence for row in table.releases)
    assert table.torch_xla(Version.parse("1.13.1")) == Version.parse("1.13")
    assert table.after(Version.parse("1.13")) == Version.parse("2.0")


@pytest.mark.parametrize(
    "test",
    [
        "torch.__version__ >= '2.1'",
        "version.parse(torch_xla.__version__).release[:2] >= (2, 1)",
        "is_pt21_plus and not use_cpu",
        "f'{x}version' == y",
        "call(min_version=2)",
        "(lambda version: version)(1)",
        "XLA_2_1_PLUS",
        "1e16 > x and b'pt21' in data",
        "a.b.c[0] > 1 or not d",
        "x if y else z",
    ],
)
def test_a_condition_looks_like_a_check_only_where_a_name_or_constant_does(test: str) -> None:
    """`_unread` asks its words before the text (ast.unparse is the slow part of reading a
    file's conditions): the two answers agree."""
    from xlamigrate.kinds.python import versionchecks

    node = ast.parse(test, mode="eval").body
    by_text = versionchecks._LOOKS_LIKE.search(ast.unparse(node)) is not None
    by_words = any(versionchecks._LOOKS_LIKE.search(w) for w in versionchecks._words(node))
    assert by_words == by_text


# Where the branches are in the text, as `around` reads them: decorated definitions (their
# decorators stand before them), elif chains, conditional expressions in tests and branches,
# one-line bodies, f-strings.
AROUND_CASES = [
    """
import torch
if torch.__version__ >= "2.1":
    @decorate(xm.xrt_world_size())
    def f():
        return xm.mark_step()
else:
    @decorate(xm.get_ordinal())
    class C:
        pass
""",
    """
import torch_xla
if torch_xla.__version__ < "2.1": a = xm.xla_device()
elif torch_xla.__version__ < "2.3": b = (xm.xla_device() if is_pt22_plus else None)
elif (x if is_pt20 else y): c = f"{xm.mark_step()} {d}"
else:
    if version_ok(): e = xm.get_ordinal()
""",
    """
def g():
    value = xm.a() if torch.__version__ >= "2.0" else (xm.b() if is_pt25_plus else xm.c())
    if is_torch_greater_or_equal("2.1") and other:
        for item in items: use(item, xm.d())
    return [xm.e() for _ in range(2) if is_pt21_plus]
""",
]


@pytest.mark.parametrize("source", AROUND_CASES)
def test_around_reads_only_the_tests_around_a_node_and_agrees_with_every_branch(
    source: str,
) -> None:
    tree = ast.parse(source)
    scopes = Scopes(tree)
    everywhere = VersionChecks(scopes)._branches  # each node of a branch, every test read
    assert everywhere  # (the case has version checks)
    checks = VersionChecks(scopes)
    for node in ast.walk(tree):
        assert checks.around(node) == everywhere.get(id(node), ()), ast.dump(node)[:80]


def test_around_reads_no_test_far_from_the_node() -> None:
    tree = ast.parse(
        'if torch.__version__ >= "2.1":\n    a = 1\nif is_pt21_plus:\n    b = xm.mark_step()\n'
    )
    checks = VersionChecks(Scopes(tree))
    use = next(n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "mark_step")
    assert [branch.test for branch in checks.around(use)] == ["is_pt21_plus"]
    assert len(checks._said) == 1  # the first `if`'s test was never read


def test_around_agrees_with_every_branch_in_each_fixture() -> None:
    checked = 0
    for path in sorted(FIXTURES.rglob("*.py")):
        try:
            tree = ast.parse(path.read_bytes())
        except SyntaxError:
            continue  # (a fixture of a file that does not parse)
        scopes = Scopes(tree)
        everywhere, checks = VersionChecks(scopes)._branches, VersionChecks(scopes)
        for node in ast.walk(tree):
            assert checks.around(node) == everywhere.get(id(node), ()), (path, ast.dump(node))
        checked += bool(everywhere)
    assert checked  # (some fixtures have version checks)
