"""What each read of a legacy flag meant in the configurations a script is launched in, and
what it becomes once the launchers set the signal instead of the flag.

A read is climbed to the largest expression that is the flags' alone (`A == "1"`,
`os.environ.get(A) or os.environ.get(B)`, `int(...)`), evaluated in every configuration before
the migration (the flags the launchers set) and after (none; the signal where they were):

- **signal**: true exactly in the configurations that now get the recipe (or exactly in the
  others): "is this the bf16 run?". It reads the signal (`not` the signal).
- **float64 trick**: it chooses a branch that uses float64 where XLA_DOWNCAST_BF16 made that
  device fp32 (an `if`/conditional expression on the read, or on a name the read was assigned
  to). The float64 there becomes float32; where both branches then compute the same, the
  branch without the read is all that is left.
- **unchanged**: it evaluates the same in every configuration, before and after.
- **manual**: anything else. The finding gives its value per configuration, before and after.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import libcst as cst

from xlamigrate.findings import UNSET_ONCE_MIGRATED, with_note
from xlamigrate.kinds.python.envaccess import EnvAccess
from xlamigrate.kinds.python.flagtests import (
    RAISES,
    UNKNOWN,
    FlagEvaluator,
    enclosing_expression,
)
from xlamigrate.kinds.python.training import TrainingScript, code_of, collect_nodes
from xlamigrate.model import Finding, Fix
from xlamigrate.project.model import Configuration, ScriptRecipe

Resolution = Literal["signal", "collapse", "unchanged", "manual"]
_DOWNCAST = "XLA_DOWNCAST_BF16"
_FLOAT64_DTYPES = ("double", "float64")
_READ_FORMS = ("get", "getenv", "subscript", "in")


@dataclass(frozen=True)
class ReadPlan:
    """One flag test of the module and what becomes of it."""

    top: cst.BaseExpression  # the largest expression that is the flags' alone
    accesses: tuple[EnvAccess, ...]
    resolution: Resolution
    negated: bool = False  # "signal": it was true where the recipe is *not* applied
    # "collapse": the conditional that goes, and whether its body (not its else) stays
    collapsed: cst.If | cst.IfExp | None = None
    keep_body: bool = False
    float32: tuple[cst.CSTNode, ...] = ()  # float64 spellings that become float32
    before: tuple[Any, ...] = ()  # its value per configuration
    after: Any = None

    def values(self, configurations: Sequence[Configuration]) -> str:
        """Its value per configuration, before and after, for a finding."""
        pairs = "; ".join(
            f"{_shown(value)} for {configuration.describe()}"
            for value, configuration in zip(self.before, configurations, strict=True)
        )
        after = _shown(self.after)
        return f"`{code_of(self.top)}` was {pairs}; after the migration it is {after} in every one"


@dataclass(frozen=True)
class ReadOutcome:
    """A flag test, its findings worded for it, and whether the rewrite resolves it."""

    read: ReadPlan
    findings: tuple[Finding, ...]
    resolved: bool


def read_outcomes(
    script: TrainingScript,
    accesses: Sequence[EnvAccess],
    findings: Mapping[cst.CSTNode, Finding],  # by the read's node
    recipe: ScriptRecipe,
    signal: str,
) -> list[ReadOutcome]:
    """What becomes of each reported flag test of a module whose reads resolve against
    `recipe` (`signal`: the gate's name where the recipe has none). Scan and rewrite say the
    same: a resolved read is a safe fix; the others say their values per configuration."""
    outcomes = []
    for read in ReadClassifier(script, accesses, recipe.configurations).plans():
        reported = tuple(findings[a.node] for a in read.accesses if a.node in findings)
        if not reported:
            continue
        if len(reported) < len(read.accesses):  # a read noqa'd or not selected: left alone
            outcomes.append(ReadOutcome(read, reported, resolved=False))
            continue
        resolved = read.resolution in ("signal", "collapse")
        note = _note(read, recipe, recipe.signal or signal)
        worded = tuple(
            replace(
                finding,
                message=with_note(
                    finding.message.replace(UNSET_ONCE_MIGRATED, "")
                    if resolved
                    else finding.message,
                    note,
                    instead=resolved,
                ),
                fix=Fix("safe") if resolved else finding.fix,
            )
            for finding in reported
        )
        outcomes.append(ReadOutcome(read, worded, resolved))
    return outcomes


def _note(read: ReadPlan, recipe: ScriptRecipe, gate: str) -> str:
    if read.resolution == "signal":
        sense = "the recipe is off" if read.negated else "the recipe is on"
        double = ", its float64 float32 (what the device computed)" if read.float32 else ""
        return f"the rewrite makes it read {gate}{double}: it is true exactly where {sense}"
    if read.resolution == "collapse":
        return (
            "the rewrite keeps only the branch without float64: under XLA_DOWNCAST_BF16 the"
            " device computed it in float32, as the other branch does"
        )
    values = read.values(recipe.configurations)
    if read.resolution == "unchanged":
        return f"{values}: nothing changes"
    if recipe.signal is not None and not recipe.in_file:
        return f"{values} ({recipe.signal}=1 marks the configurations that set the flag)"
    return values


@dataclass(frozen=True)
class _Trick:
    float64: tuple[cst.CSTNode, ...]
    collapsed: cst.If | cst.IfExp | None = None  # both branches agree once float64 is float32
    keep_body: bool = False


@dataclass
class ReadClassifier:
    script: TrainingScript
    accesses: Sequence[EnvAccess]
    configurations: Sequence[Configuration]
    _evaluator: FlagEvaluator = field(init=False)

    def __post_init__(self) -> None:
        reads = {a.node: a for a in self.accesses if a.kind == "read" and a.form in _READ_FORMS}
        self._evaluator = FlagEvaluator(reads)
        self._envs = [{flag: "1" for flag in c.flags} for c in self.configurations]
        self._recipe = [bool(c.flags) for c in self.configurations]

    def plans(self) -> list[ReadPlan]:
        """One plan per flag test (several reads may share one: `A or B`)."""
        by_top: dict[cst.CSTNode, list[EnvAccess]] = {}
        for access in self.accesses:
            if access.kind != "read" or access.target != "process":
                continue
            top = self._top(access.node) if access.form in _READ_FORMS else access.node
            by_top.setdefault(top, []).append(access)
        return [self._classify(top, tuple(found)) for top, found in by_top.items()]

    def _top(self, node: cst.CSTNode) -> cst.CSTNode:
        current = node
        while True:
            outer = enclosing_expression(current, self.script.parent)
            if outer is None or any(
                self._evaluator.value(outer, env) in (UNKNOWN, RAISES) for env in self._envs
            ):
                return current
            current = outer

    def _classify(self, top: cst.CSTNode, accesses: tuple[EnvAccess, ...]) -> ReadPlan:
        assert isinstance(top, cst.BaseExpression)
        before = tuple(self._evaluator.value(top, env) for env in self._envs)
        after = self._evaluator.value(top, {})
        plan = ReadPlan(top, accesses, "manual", before=before, after=after)
        if any(a.form not in _READ_FORMS for a in accesses) or _unknown(after, *before):
            return plan
        if all(value == after for value in before):
            # (before the signal: `"XLA_USE_BF16" in os.environ` where every launch sets only
            # XLA_DOWNCAST_BF16 is False throughout, not "the recipe is off")
            return _with(plan, "unchanged")
        boolean = all(isinstance(v, bool) for v in (*before, after)) or self._in_test(top)
        truth = [bool(value) for value in before]
        signal = boolean and truth == self._recipe and any(self._recipe)
        negated = boolean and truth == [not on for on in self._recipe] and any(self._recipe)
        trick = self._float64_trick(top, accesses)
        if trick is not None:
            if trick.collapsed is not None:
                return _with(plan, "collapse", collapsed=trick.collapsed, keep_body=trick.keep_body)
            if signal or negated:
                return _with(plan, "signal", negated=negated, float32=trick.float64)
            return plan
        if signal or negated:
            return _with(plan, "signal", negated=negated)
        return plan

    def _in_test(self, node: cst.CSTNode) -> bool:
        """Whether only the truth of `node` matters where it stands."""
        parent = self.script.parent(node)
        if isinstance(parent, (cst.If, cst.While, cst.IfExp, cst.Assert, cst.CompIf)):
            return parent.test is node
        if isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Not):
            return True
        if isinstance(parent, cst.BooleanOperation):
            return self._in_test(parent)
        return False

    # -- the float64 trick ---------------------------------------------------------------------

    def _float64_trick(
        self, top: cst.BaseExpression, accesses: tuple[EnvAccess, ...]
    ) -> _Trick | None:
        """Where the test picks a branch that uses float64 under XLA_DOWNCAST_BF16: the float64
        nodes there, and the conditional that can go (both branches computing the same in
        float32); None where it picks no such branch."""
        if not any(a.variable == _DOWNCAST for a in accesses):
            return None
        on = bool(self._evaluator.value(top, {_DOWNCAST: "1"}))
        parent = self.script.parent(top)
        if isinstance(parent, (cst.If, cst.IfExp)) and parent.test is top:
            chosen, other = _branches(parent, on)
            float64 = _float64_nodes(chosen)
            if not float64:
                return None
            elif_chain = isinstance(parent, cst.If) and isinstance(parent.orelse, cst.If)
            agree = (
                chosen is not None
                and other is not None
                and not elif_chain
                and _canonical(chosen) == _canonical(other)
            )
            return _Trick(tuple(float64), parent if agree else None, keep_body=not on)
        tests = self._tests_of_name_assigned(top)
        float64 = [node for test in tests for node in _float64_nodes(_branches(test, on)[0])]
        return _Trick(tuple(float64)) if float64 else None

    def _tests_of_name_assigned(self, top: cst.CSTNode) -> list[cst.If | cst.IfExp]:
        """`name = <top>` (or `self.name = <top>`): the conditionals that test that name in
        the same function (or, for an attribute of self, the same class)."""
        assign = self.script.parent(top)
        if (
            not isinstance(assign, cst.Assign)
            or len(assign.targets) != 1
            or assign.value is not top
        ):
            return []
        target = assign.targets[0].target
        if isinstance(target, cst.Name):
            scope: cst.CSTNode | None = self.script.enclosing_function(assign) or self.script.module
        elif (
            isinstance(target, cst.Attribute)
            and isinstance(target.value, cst.Name)
            and target.value.value == "self"
        ):
            scope = next(
                (a for a in self.script.ancestors(assign) if isinstance(a, cst.ClassDef)), None
            )
        else:
            return []
        if scope is None:
            return []
        name = code_of(target)
        conditionals: list[cst.If | cst.IfExp] = [
            *collect_nodes(scope, cst.If),
            *collect_nodes(scope, cst.IfExp),
        ]
        return [node for node in conditionals if code_of(node.test) == name]


def _with(plan: ReadPlan, resolution: Resolution, **changes: Any) -> ReadPlan:
    return replace(plan, resolution=resolution, **changes)


def _unknown(*values: Any) -> bool:
    return any(value is UNKNOWN or value is RAISES for value in values)


def _shown(value: Any) -> str:
    if value is RAISES:
        return "a KeyError"
    return repr(value)


def _branches(
    conditional: cst.If | cst.IfExp, on: bool
) -> tuple[cst.CSTNode | None, cst.CSTNode | None]:
    """(the branch taken when the test is `on`, the other one; None where there is none)."""
    if isinstance(conditional, cst.IfExp):
        return (
            (conditional.body, conditional.orelse) if on else (conditional.orelse, conditional.body)
        )
    orelse = conditional.orelse.body if isinstance(conditional.orelse, cst.Else) else None
    return (conditional.body, orelse) if on else (orelse, conditional.body)


def _float64_nodes(branch: cst.CSTNode | None) -> list[cst.CSTNode]:
    """`torch.double`, `torch.float64` and `.double()` in `branch`."""
    if branch is None:
        return []
    found: list[cst.CSTNode] = []
    for attribute in collect_nodes(branch, cst.Attribute):
        if attribute.attr.value in _FLOAT64_DTYPES and _is_torch(attribute.value):
            found.append(attribute)  # torch.double
    for call in collect_nodes(branch, cst.Call):
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "double" and not call.args:
            found.append(func.attr)  # x.double()
    return found


def _is_torch(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "torch"


def float32_spelling(node: cst.CSTNode) -> cst.CSTNode:
    """What a float64 spelling becomes: `torch.float32`, `.float`."""
    if isinstance(node, cst.Attribute):
        return node.with_changes(attr=cst.Name("float32"))
    assert isinstance(node, cst.Name)
    return node.with_changes(value="float")


class _Canonical(cst.CSTTransformer):
    """One spelling for "float32" (double counted as float32: the branch is compared as it will
    be): `x.float()`, `x.double()`, `x.to(torch.float)` -> `x.to(torch.float32)`."""

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.BaseExpression:
        if updated_node.attr.value in (*_FLOAT64_DTYPES, "float", "float32") and _is_torch(
            updated_node.value
        ):
            return cst.Attribute(cst.Name("torch"), cst.Name("float32"))
        return updated_node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        func = updated_node.func
        if (
            isinstance(func, cst.Attribute)
            and not updated_node.args
            and func.attr.value in ("double", "float")
        ):
            dtype = cst.Attribute(cst.Name("torch"), cst.Name("float32"))
            return cst.Call(cst.Attribute(func.value, cst.Name("to")), [cst.Arg(dtype)])
        if isinstance(func, cst.Attribute) and func.attr.value == "to":
            args = [
                arg.with_changes(
                    keyword=None, equal=cst.MaybeSentinel.DEFAULT, comma=cst.MaybeSentinel.DEFAULT
                )
                if arg.keyword and arg.keyword.value == "dtype"
                else arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)
                for arg in updated_node.args
            ]
            return updated_node.with_changes(args=args)
        return updated_node


def _canonical(branch: cst.CSTNode) -> str:
    if isinstance(branch, cst.IndentedBlock):
        statements: Iterable[cst.CSTNode] = branch.body
    elif isinstance(branch, cst.SimpleStatementSuite):
        statements = [cst.SimpleStatementLine(body=branch.body)]
    else:
        statements = [branch]
    codes = []
    for statement in statements:
        if hasattr(statement, "leading_lines"):
            statement = statement.with_changes(leading_lines=())
        canonical = statement.visit(_Canonical())
        assert isinstance(canonical, cst.CSTNode)
        codes.append(code_of(canonical).strip())
    return "\n".join(codes)
