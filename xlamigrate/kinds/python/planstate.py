"""What the planner of one Python file holds while it plans (the file, the request, the plan
so far, its findings) and what every recipe step asks of it: the condition a step goes in
under, whether a node is in the recipe's scope, the findings a step leaves. The steps
(recipe_steps/) and the planner (planner.py) build on it."""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from xlamigrate.catalogue import Catalogue
from xlamigrate.findings import (
    manual_finding,
)
from xlamigrate.kinds.python.astwalk import DictItem
from xlamigrate.kinds.python.conditions import (
    Condition,
    Expression,
    disjunction,
    expressible_at,
)
from xlamigrate.kinds.python.envaccess import EnvAccess
from xlamigrate.kinds.python.plan import Plan
from xlamigrate.kinds.python.reads import ReadPlan
from xlamigrate.kinds.python.training import (
    Block,
    Line,
    Node,
    Statement,
    TrainingScript,
)
from xlamigrate.modelowners import model_owner
from xlamigrate.neuronflags import NEURON_CC_FLAGS, STOCHASTIC_ROUNDING
from xlamigrate.recipeproblems import CONDITION_NOT_EXPRESSIBLE
from xlamigrate.request import FileContext, RewriteRequest
from xlamigrate.results import Finding, Span

_BARE_PARENTS = (ast.If, ast.While, ast.IfExp, ast.Assert, ast.Assign, ast.Return)


@dataclass
class RemovedWrite:
    """An enabling write that was removed: where it stood and under which condition. A launched
    script's recipe has no write (`access` None): its condition is the signal, or none."""

    access: EnvAccess | None
    small: ast.stmt | None  # its statement, when the statement itself was removed
    condition: Condition


@dataclass
class PlannerState:
    """The file, the request and the plan so far, shared by the planner and its recipe steps."""

    path: str
    script: TrainingScript
    catalogue: Catalogue
    request: RewriteRequest
    context: FileContext
    accesses: tuple[EnvAccess, ...]
    plan: Plan = field(default_factory=Plan)
    fixed: list[Finding] = field(default_factory=list)
    remaining: list[Finding] = field(default_factory=list)
    enabling: list[RemovedWrite] = field(default_factory=list)
    # What "the recipe is on" reads as in this module, once something needed it.
    gate: Expression | None = None
    framework_note: str | None = None  # where a framework takes the recipe it could not place

    def __post_init__(self) -> None:
        self.recipe = self.request.recipe
        # The environment edits of the file's own enabling writes: for the platform the user
        # names (--target), else the one its launchers say (Neuron where nothing says).
        self.own_environment = self.recipe.environment_on(
            self.request.target or self.context.platform
        )
        self.unsafe_fixes = self.request.unsafe_fixes
        self.launched = self.context.recipe
        self.reads_against = self.context.reads_against

    def _signal_beside_the_writes(self, name: str) -> Expression:
        """In a file that turned the flag on itself, its reads of the flag (and the recipe where
        the writes' own condition would not hold) read the signal, written where the flag was
        (under the write's own value condition): read when and where the flag was read, it is
        set exactly where and from when the flag was."""
        if self.gate is not None:
            return self.gate
        for enabling in self.enabling:
            access = enabling.access
            if access is None:
                continue
            statement = f'{self._receiver(access)}["{name}"] = "1"\n'
            if enabling.condition.in_place is not None:
                statement = under(enabling.condition.in_place, [statement])
            anchor = enabling.small
            line = self.script.statement_of(access.node)
            if anchor is not None and anchor in self.plan.replacements:
                self.plan.replacements[anchor].append(statement)
            elif anchor is not None:
                self.plan.replacements[anchor] = [statement]
                self.plan.removed.discard(anchor)
            elif line is not None:
                self.plan.insert_before(line, [statement])
        self.plan.imports.add(("os", None))
        self.gate = Expression(f'os.environ.get("{name}") == "1"')
        return self.gate

    def _receiver(self, access: EnvAccess) -> str:
        """The environment code written next to `access` names (importing os if it is ours)."""
        receiver = self._receiver_code(access)
        if receiver == "os.environ":
            self.plan.imports.add(("os", None))
        return receiver

    def _receiver_code(self, access: EnvAccess) -> str:
        """The expression naming the environment the write used (`os.environ`, an alias...)."""
        node = access.node
        if isinstance(node, ast.Subscript) and access.form == "subscript":
            return self.script.code(node.value)
        forms_with_receiver = ("setdefault", "update", "pop")
        receiver = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        if receiver and access.form in forms_with_receiver:
            assert isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            return self.script.code(node.func.value)
        return "os.environ"

    def _combined_condition(self, at: Node, span: Span) -> tuple[bool, Expression | None]:
        """(ok, condition) for code placed at `at`; None if any enabling write is unconditional."""
        conditions = [e.condition for e in self.enabling]
        if any(c.full is None for c in conditions):
            return True, None
        if self._in_function(at) and any(_names_the_module(c.full) for c in conditions):
            # `if __name__ == "__main__":` is false in the workers `xmp.spawn` starts (they
            # import the file as `__mp_main__`), which inherit the environment: the signal
            # written beside the flag's writes says it there
            return True, self._signal_beside_the_writes(self.context.signal)
        expressions = []
        for condition in conditions:
            assert condition.full is not None
            if not expressible_at(self.script, condition.full, condition.origin, at):
                self.remaining.append(
                    self._manual(
                        CONDITION_NOT_EXPRESSIBLE, span, f"condition `{condition.full.code}`"
                    )
                )
                return False, None
            expressions.append(condition.full)
        unique = {e.code: e for e in expressions}
        combined = list(unique.values())
        if len(combined) == 1:
            return True, combined[0]
        # `if X:` and its `else:` both enabled it: always on; `(A and B) or (A and not B)`: A
        return True, disjunction([c.tests or (c.full,) for c in conditions if c.full is not None])

    def _in_function(self, node: Node) -> bool:
        return any(
            isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            for a in self.script.ancestors(node)
        )

    @functools.cached_property
    def _test_functions_setting_the_flag(self) -> frozenset[ast.AST] | None:
        """In a test module whose enabling writes all sit in test functions, those functions:
        each test is a configuration of its own (`pytest -k`), and a test that never set the
        flag keeps its models as they were. None: the recipe's scope is the whole file."""
        name = PurePosixPath(self.path.replace("\\", "/")).name
        if self.launched is not None or not (name.startswith("test_") or name.endswith("_test.py")):
            return None
        functions: set[ast.AST] = set()
        for enabling in self.enabling:
            if enabling.access is None:
                return None
            function = self.script.outermost_function(enabling.access.node)
            if function is None or not function.name.startswith("test"):
                return None
            functions.add(function)
        return frozenset(functions)

    def _in_scope(self, node: Node) -> bool:
        scope = self._test_functions_setting_the_flag  # (asked once the enabling writes are known)
        return scope is None or self.script.outermost_function(node) in scope

    def _span(self, node: object) -> Span:
        return self.script.span(node)  # type: ignore[arg-type]

    def _manual(self, code: str, span: Span, subject: str) -> Finding:
        return manual_finding(self.catalogue, code, self.path, span, subject)

    def _first(self) -> RemovedWrite:
        """The first enabling write of the file (a launched script's recipe comes last)."""
        return min(
            self.enabling,
            key=lambda e: self._span(e.access.node).line if e.access else 1 << 30,
        )

    def _first_span(self) -> Span:
        first = self._first()
        if first.access is None:
            return Span(1, 1, 1, 1)
        return self._span(first.access.node)

    def _trained_by_framework(self, what: str) -> str | None:
        """`what`, trained by a framework that owns the training step and where that framework
        takes the recipe (Lightning's Trainer fits a LightningModule), noted for the launcher's
        finding too; None where the script calls no such framework."""
        for call in self.script.calls():
            owner = model_owner(self.script.qualified_names(call.func))
            if owner is not None:
                trainer = self.script.code(call.func)
                where = owner.where if self.recipe.casts_model else owner.autocast
                self.framework_note = f"{owner.name}'s `{trainer}`: {where}"
                return f"{what}, trained by {self.framework_note}"
        return None

    def _unrecognised_optimizers(self) -> str:
        """A note naming the calls that take a model's parameters yet are of no optimizer
        class xlamigrate knows (imported from elsewhere), the likely cause of not finding one;
        empty where there is none."""
        calls = self.script.unrecognised_optimizers()
        if not calls:
            return ""
        spelled = ", ".join(f"`{self.script.code(call)}`" for call in calls)
        return (
            f"; {spelled} takes the model's parameters, but xlamigrate does not know"
            f" `{self.script.code(calls[0].func)}` as an optimizer (a subclass of"
            " `torch.optim.Optimizer` is known where this file defines it)"
        )


def stochastic_rounding_code(receiver: str, form: str) -> str:
    if form == "setdefault":  # the legacy write let a launcher override it: so does this
        return f'{receiver}.setdefault("{STOCHASTIC_ROUNDING}", "1")\n'
    return f'{receiver}["{STOCHASTIC_ROUNDING}"] = "1"\n'


def auto_cast_code(receiver: str, form: str = "subscript") -> str:
    return (
        f'{receiver}["{NEURON_CC_FLAGS}"] = '
        f'{receiver}.get("{NEURON_CC_FLAGS}", "") + " --auto-cast=none"\n'
    )


def under(condition: Expression, body: list[str]) -> str:
    """`if <condition>:` with `body` (statements' code) indented under it."""
    lines = [line for code in body for line in code.splitlines(keepends=True)]
    return f"if {condition.code}:\n" + "".join(f"    {line}" for line in lines)


def _names_the_module(condition: Expression | None) -> bool:
    """Whether the condition reads `__name__` (what a spawned worker sees differently)."""
    return condition is not None and any(
        isinstance(node, ast.Name) and node.id == "__name__"
        for part in condition.parts
        for node in ast.walk(part)
    )


def after_imports(script: TrainingScript) -> Statement | None:
    """The last statement of the module's leading docstring and import lines."""
    return after_imports_in(script, script.top)


def after_imports_in(script: TrainingScript, block: Block) -> Statement | None:
    """The last statement of a block's leading docstring and import lines."""
    last = None
    for index, statement in enumerate(block.body):
        if not isinstance(statement, Line):
            break
        first = statement.body[0]
        docstring = (
            index == 0
            and isinstance(first, ast.Expr)
            and script.simple_string(first.value) is not None
        )
        imports = all(isinstance(small, (ast.Import, ast.ImportFrom)) for small in statement.body)
        if not (docstring or imports):
            break
        last = statement
    return last


def is_whole_statement(small: ast.stmt | None, node: object) -> bool:
    """Whether the simple statement is exactly this access (so removing it removes only that)."""
    if isinstance(small, ast.Assign):
        return len(small.targets) == 1 and small.targets[0] is node
    if isinstance(small, ast.Expr):
        return small.value is node
    if isinstance(small, ast.Delete):
        return len(small.targets) == 1 and small.targets[0] is node
    return False


def gate_code(gate: Expression, read: ReadPlan, script: TrainingScript) -> str:
    """The gate (or `not` it) in place of a flag test, parenthesized where it needs to be."""
    code = f"not {gate.code}" if read.negated else gate.code
    name = gate.is_name and not read.negated
    top = read.top
    if script.has_parentheses(top):
        start, end = script.offsets(top)
        inner_start, inner_end = script.offsets(top, parentheses=False)
        source = script.source
        return f"{source[start:inner_start]}{code}{source[inner_end:end]}"
    if not name and not isinstance(script.parent(top), _BARE_PARENTS):
        return f"({code})"
    return code


def name_expression(name: str) -> Expression:
    return Expression(name, node=ast.Name(id=name))


def anchor_of(node: object) -> Node:
    """The ast node an access stands at (a dict entry: its key)."""
    if isinstance(node, DictItem):
        return node.key
    return node  # type: ignore[return-value]
