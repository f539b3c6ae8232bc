"""What each read of a legacy flag meant in the configurations a script is launched in, and
what it becomes once the launchers set the signal instead of the flag, on the standard library's
`ast`.

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

import ast
import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from xlamigrate.findings import UNSET_ONCE_MIGRATED, with_note
from xlamigrate.kinds.python.envaccess import EnvAccess
from xlamigrate.kinds.python.flagtests import (
    RAISES,
    UNKNOWN,
    FlagEvaluator,
    enclosing_expression,
)
from xlamigrate.kinds.python.training import Block, TrainingScript, collect_nodes
from xlamigrate.project.model import Configuration, ScriptRecipe
from xlamigrate.results import Finding, Fix

Resolution = Literal["signal", "collapse", "unchanged", "manual"]
Branch = Block | ast.expr  # an `if`'s body or else, a conditional expression's
_DOWNCAST = "XLA_DOWNCAST_BF16"
_FLOAT64_DTYPES = ("double", "float64")
_READ_FORMS = ("get", "getenv", "subscript", "in")


@dataclass(frozen=True)
class ReadPlan:
    """One flag test of the module and what becomes of it."""

    top: ast.expr  # the largest expression that is the flags' alone
    code: str  # its code as written, its own parentheses included
    accesses: tuple[EnvAccess, ...]
    resolution: Resolution
    negated: bool = False  # "signal": it was true where the recipe is *not* applied
    # "collapse": the conditional that goes, and whether its body (not its else) stays
    collapsed: ast.If | ast.IfExp | None = None
    keep_body: bool = False
    float32: tuple[ast.Attribute, ...] = ()  # float64 spellings that become float32
    before: tuple[Any, ...] = ()  # its value per configuration
    after: Any = None

    def values(self, configurations: Sequence[Configuration]) -> str:
        """Its value per configuration, before and after, for a finding."""
        pairs = "; ".join(
            f"{_shown(value)} for {configuration.describe()}"
            for value, configuration in zip(self.before, configurations, strict=True)
        )
        after = _shown(self.after)
        return f"`{self.code}` was {pairs}; after the migration it is {after} in every one"


@dataclass(frozen=True)
class ReadOutcome:
    """A flag test, its findings worded for it, and whether the rewrite resolves it."""

    read: ReadPlan
    findings: tuple[Finding, ...]
    resolved: bool


def read_outcomes(
    script: TrainingScript,
    accesses: Sequence[EnvAccess],
    findings: Mapping[ast.AST, Finding],  # by the read's node
    recipe: ScriptRecipe,
    signal: str,
) -> list[ReadOutcome]:
    """What becomes of each reported flag test of a module whose reads resolve against
    `recipe` (`signal`: the gate's name where the recipe has none). Scan and rewrite say the
    same: a resolved read is a safe fix; the others say their values per configuration."""
    outcomes = []
    for read in ReadClassifier(script, accesses, recipe.configurations).plans():
        reported = tuple(findings[_node(a)] for a in read.accesses if _node(a) in findings)
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


def _node(access: EnvAccess) -> ast.AST:
    """The ast node an access is reported at (a read's is an expression, never a dict entry)."""
    return cast(ast.AST, access.node)


@dataclass(frozen=True)
class _Trick:
    float64: tuple[ast.Attribute, ...]
    collapsed: ast.If | ast.IfExp | None = None  # both branches agree once float64 is float32
    keep_body: bool = False


@dataclass
class ReadClassifier:
    script: TrainingScript
    accesses: Sequence[EnvAccess]
    configurations: Sequence[Configuration]
    _evaluator: FlagEvaluator = field(init=False)

    def __post_init__(self) -> None:
        reads = {_node(a): a for a in self.accesses if a.kind == "read" and a.form in _READ_FORMS}
        self._evaluator = FlagEvaluator(reads)
        self._envs = [{flag: "1" for flag in c.flags} for c in self.configurations]
        self._recipe = [bool(c.flags) for c in self.configurations]

    def plans(self) -> list[ReadPlan]:
        """One plan per flag test (several reads may share one: `A or B`)."""
        by_top: dict[ast.AST, list[EnvAccess]] = {}
        for access in self.accesses:
            if access.kind != "read" or access.target != "process":
                continue
            node = _node(access)
            top = self._top(node) if access.form in _READ_FORMS else node
            by_top.setdefault(top, []).append(access)
        return [self._classify(top, tuple(found)) for top, found in by_top.items()]

    def _top(self, node: ast.AST) -> ast.AST:
        current = node
        while True:
            outer = enclosing_expression(current, self.script.parent)
            if outer is None or any(
                self._evaluator.value(outer, env) in (UNKNOWN, RAISES) for env in self._envs
            ):
                return current
            current = outer

    def _classify(self, top: ast.AST, accesses: tuple[EnvAccess, ...]) -> ReadPlan:
        assert isinstance(top, ast.expr)
        before = tuple(self._evaluator.value(top, env) for env in self._envs)
        after = self._evaluator.value(top, {})
        code = self.script.code(top)
        plan = ReadPlan(top, code, accesses, "manual", before=before, after=after)
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

    def _in_test(self, node: ast.AST) -> bool:
        """Whether only the truth of `node` matters where it stands."""
        parent = self.script.parent(node)
        if isinstance(parent, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            return parent.test is node
        if isinstance(parent, ast.comprehension):
            return any(test is node for test in parent.ifs)
        if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not):
            return True
        if isinstance(parent, ast.BoolOp):
            return self._in_test(parent)
        return False

    # -- the float64 trick ---------------------------------------------------------------------

    def _float64_trick(self, top: ast.expr, accesses: tuple[EnvAccess, ...]) -> _Trick | None:
        """Where the test picks a branch that uses float64 under XLA_DOWNCAST_BF16: the float64
        nodes there, and the conditional that can go (both branches computing the same in
        float32); None where it picks no such branch."""
        if not any(a.variable == _DOWNCAST for a in accesses):
            return None
        on = bool(self._evaluator.value(top, {_DOWNCAST: "1"}))
        parent = self.script.parent(top)
        if isinstance(parent, (ast.If, ast.IfExp)) and parent.test is top:
            chosen, other = _branches(self.script, parent, on)
            float64 = self._float64_nodes(chosen)
            if not float64:
                return None
            agree = (  # (an `elif` is no other branch)
                chosen is not None and other is not None and _canonical(chosen) == _canonical(other)
            )
            return _Trick(tuple(float64), parent if agree else None, keep_body=not on)
        tests = self._tests_of_name_assigned(top)
        float64 = [
            node
            for test in tests
            for node in self._float64_nodes(_branches(self.script, test, on)[0])
        ]
        return _Trick(tuple(float64)) if float64 else None

    def _tests_of_name_assigned(self, top: ast.expr) -> list[ast.If | ast.IfExp]:
        """`name = <top>` (or `self.name = <top>`): the conditionals that test that name in
        the same function (or, for an attribute of self, the same class)."""
        assign = self.script.parent(top)
        if (
            not isinstance(assign, ast.Assign)
            or len(assign.targets) != 1
            or assign.value is not top
        ):
            return []
        target = assign.targets[0]
        scope: ast.AST | None
        if isinstance(target, ast.Name):
            scope = self.script.enclosing_function(assign) or self.script.module
        elif (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "self"
        ):
            scope = next(
                (a for a in self.script.ancestors(assign) if isinstance(a, ast.ClassDef)), None
            )
        else:
            return []
        if scope is None:
            return []
        name = self.script.code(target)
        conditionals: list[ast.If | ast.IfExp] = [
            *collect_nodes(scope, ast.If),
            *collect_nodes(scope, ast.IfExp),
        ]
        return [node for node in conditionals if self.script.code(node.test) == name]

    def _float64_nodes(self, branch: Branch | None) -> list[ast.Attribute]:
        """`torch.double`, `torch.float64` and `.double()` in `branch` (for `x.double()`, the
        attribute `x.double`: ast has no node for its name)."""
        if branch is None:
            return []
        found: list[ast.Attribute] = []
        for attribute in self.script.nodes(branch, ast.Attribute):
            if attribute.attr in _FLOAT64_DTYPES and _is_torch(attribute.value):
                found.append(attribute)  # torch.double
        for call in self.script.nodes(branch, ast.Call):
            func = call.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr == "double"
                and not _has_arguments(call)
            ):
                found.append(func)  # x.double()
        return found


def _with(plan: ReadPlan, resolution: Resolution, **changes: Any) -> ReadPlan:
    return replace(plan, resolution=resolution, **changes)


def _unknown(*values: Any) -> bool:
    return any(value is UNKNOWN or value is RAISES for value in values)


def _shown(value: Any) -> str:
    if value is RAISES:
        return "a KeyError"
    return repr(value)


def _branches(
    script: TrainingScript, conditional: ast.If | ast.IfExp, on: bool
) -> tuple[Branch | None, Branch | None]:
    """(the branch taken when the test is `on`, the other one; None where there is none: an
    `elif` is no else branch)."""
    if isinstance(conditional, ast.IfExp):
        return (
            (conditional.body, conditional.orelse) if on else (conditional.orelse, conditional.body)
        )
    body = script.block(conditional, "body")
    orelse = None if _is_elif_chain(script, conditional) else script.block(conditional, "orelse")
    return (body, orelse) if on else (orelse, body)


def _is_elif_chain(script: TrainingScript, conditional: ast.If) -> bool:
    """An `if` followed by `elif` (ast writes it as an else holding just an `if`)."""
    if len(conditional.orelse) != 1:
        return False
    orelse = conditional.orelse[0]
    if not isinstance(orelse, ast.If):
        return False
    start, _ = script.offsets(orelse)
    return script.source.startswith("elif", start)


def _has_arguments(call: ast.Call) -> bool:
    return bool(call.args or call.keywords)


def _is_torch(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "torch"


def float32_spelling(script: TrainingScript, node: ast.Attribute) -> str:
    """What a float64 spelling's code (its own parentheses included) becomes:
    `torch.float32` for `torch.double`, `x.float` for the `x.double` of `x.double()`."""
    start, end = script.offsets(node)
    _, name_end = script.offsets(node, parentheses=False)  # the attribute's name ends there
    name_start = name_end - len(node.attr)
    call = script.parent(node)
    spelling = "float" if isinstance(call, ast.Call) and call.func is node else "float32"
    return script.source[start:name_start] + spelling + script.source[name_end:end]


class _Canonical(ast.NodeTransformer):
    """One spelling for "float32" (double counted as float32: the branch is compared as it will
    be): `x.float()`, `x.double()`, `x.to(torch.float)` -> `x.to(torch.float32)`."""

    def visit_Attribute(self, node: ast.Attribute) -> ast.expr:
        self.generic_visit(node)
        if node.attr in (*_FLOAT64_DTYPES, "float", "float32") and _is_torch(node.value):
            return _torch_float32()
        return node

    def visit_Call(self, node: ast.Call) -> ast.expr:
        self.generic_visit(node)
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and not _has_arguments(node)
            and func.attr in ("double", "float")
        ):
            to = ast.Attribute(func.value, "to", ast.Load())
            return ast.Call(to, [_torch_float32()], [])
        if isinstance(func, ast.Attribute) and func.attr == "to":
            dtype = [keyword for keyword in node.keywords if keyword.arg == "dtype"]
            node.args = [*node.args, *(keyword.value for keyword in dtype)]
            node.keywords = [keyword for keyword in node.keywords if keyword.arg != "dtype"]
        return node


def _torch_float32() -> ast.Attribute:
    return ast.Attribute(ast.Name("torch", ast.Load()), "float32", ast.Load())


def _canonical(branch: Branch) -> str:
    """The branch as it computes once float64 is float32 (formatting and comments aside)."""
    statements: Sequence[ast.AST] = branch.statements if isinstance(branch, Block) else [branch]
    return "\n".join(
        ast.dump(_Canonical().visit(copy.deepcopy(statement))) for statement in statements
    )
