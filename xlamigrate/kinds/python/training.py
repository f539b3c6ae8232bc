"""Finds the parts of a training script a recipe changes: where the optimizer is built (and which
model feeds it), where a model is moved to its device, and the forward pass before backward()."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import libcst as cst
from libcst.metadata import ParentNodeProvider, ScopeProvider

# Optimizer classes recognised by name when their module cannot be resolved (transformers,
# apex, Neuron samples, bitsandbytes...). torch.optim.* is recognised by qualified name.
OPTIMIZER_NAMES = frozenset(
    {
        "SGD", "Adam", "AdamW", "Adagrad", "Adadelta", "Adamax", "RMSprop", "Rprop", "NAdam",
        "RAdam", "LBFGS", "SparseAdam", "Adafactor", "Lamb", "LAMB", "FusedAdam", "FusedLAMB",
        "AdamW_FP32ParamsCopy", "AdamW8bit", "Lion", "ZeroRedundancyOptimizer",
    }
)  # fmt: skip
AUTOCAST_CALLS = frozenset(
    {
        "torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast",
        "torch.cpu.amp.autocast", "torch_xla.amp.autocast", "autocast",
    }
)  # fmt: skip
_FEEDING_DEPTH = 3  # assignments followed back from an optimizer's params argument
_OPTIMIZER_CLASS_NAME = re.compile(r"Adam|SGD|Optim|Lamb(?!da)|LAMB|Lion|Adafactor")
_SCHEDULER_NAME = re.compile(r"Scheduler|LR$|lr_scheduler")
_MODEL_PARAMETER_HINTS = ("model", "net", "module")
_BlockOwner = cst.Module | cst.IndentedBlock
_NodeT = TypeVar("_NodeT", bound=cst.CSTNode)


@dataclass(frozen=True)
class OptimizerSite:
    """`optimizer = SomeOptimizer(model.parameters(), ...)`: the call, its statement, the model."""

    call: cst.Call
    statement: cst.SimpleStatementLine
    model: cst.BaseExpression


@dataclass(frozen=True)
class ForwardRegion:
    """Consecutive statements of one block: from the model call through the loss computation."""

    statements: tuple[cst.BaseStatement, ...]
    backward: cst.SimpleStatementLine


def code_of(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


class TrainingScript:
    """Structural queries over one parsed module (needs ParentNodeProvider and ScopeProvider)."""

    def __init__(self, wrapper: cst.MetadataWrapper) -> None:
        self.module = wrapper.module
        self.parents = wrapper.resolve(ParentNodeProvider)
        self.scopes = wrapper.resolve(ScopeProvider)
        self._calls = list(collect_nodes(self.module, cst.Call))

    # -- navigation ------------------------------------------------------------------------------

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(node)

    def statement_of(self, node: cst.CSTNode) -> cst.BaseStatement | None:
        """The statement line (or compound statement) that directly holds `node`."""
        current: cst.CSTNode | None = node
        while current is not None and not isinstance(current, cst.BaseStatement):
            current = self.parent(current)
        return current

    def small_statement_of(self, node: cst.CSTNode) -> cst.BaseSmallStatement | None:
        current: cst.CSTNode | None = node
        while current is not None and not isinstance(current, cst.BaseSmallStatement):
            if isinstance(current, cst.BaseStatement):
                return None
            current = self.parent(current)
        return current

    def block_of(self, statement: cst.BaseStatement) -> _BlockOwner | None:
        owner = self.parent(statement)
        return owner if isinstance(owner, (cst.Module, cst.IndentedBlock)) else None

    def enclosing_function(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        current = self.parent(node)
        while current is not None and not isinstance(current, cst.FunctionDef):
            current = self.parent(current)
        return current

    def outermost_function(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        """The function at module level (or a method of a module-level class) holding `node`."""
        outermost = None
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, cst.FunctionDef):
                outermost = ancestor
        return outermost

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        current = self.parent(node)
        while current is not None:
            yield current
            current = self.parent(current)

    def qualified_names(self, node: cst.CSTNode) -> set[str]:
        scope = self.scopes.get(node)
        if scope is None or not isinstance(node, (cst.Name, cst.Attribute)):
            return set()
        return {q.name for q in scope.get_qualified_names_for(node)}

    # -- optimizer and model -------------------------------------------------------------------

    def optimizer_sites(self) -> list[OptimizerSite]:
        sites = []
        for call in self._calls:
            if not self._is_optimizer_class(call.func):
                continue
            params = _params_argument(call)
            if params is None:
                continue
            model = self._model_feeding(params)
            statement = self.statement_of(call)
            if model is not None and isinstance(statement, cst.SimpleStatementLine):
                sites.append(OptimizerSite(call, statement, model))
        return sites

    def _is_optimizer_class(self, func: cst.BaseExpression) -> bool:
        names = self.qualified_names(func)
        if any(_SCHEDULER_NAME.search(name) for name in (*names, code_of(func))):
            return False  # `LambdaLR(optimizer, ...)`, `get_scheduler(...)`: not an optimizer
        if any(name.startswith("torch.optim.") and name[12:13].isupper() for name in names):
            return True
        if isinstance(func, cst.Attribute):
            last = func.attr.value
        elif isinstance(func, cst.Name):
            last = func.value
        else:  # `optimizers[0](...)`, `make()(...)`: no class name to go by
            return False
        # A project's own optimizer class (AdamW_FP32OptimParams, ZeroOneAdam...) by its name.
        return last in OPTIMIZER_NAMES or (
            last[:1].isupper() and _OPTIMIZER_CLASS_NAME.search(last) is not None
        )

    def _model_feeding(self, params: cst.BaseExpression) -> cst.BaseExpression | None:
        """The module whose parameters an optimizer's params argument is built from."""
        sources = [params, *self._feeding_values(params)]
        receivers: dict[str, cst.BaseExpression] = {}
        for source in sources:
            for call in collect_nodes(source, cst.Call):
                func = call.func
                if isinstance(func, cst.Attribute) and func.attr.value in (
                    "parameters",
                    "named_parameters",
                ):
                    receivers.setdefault(code_of(func.value), func.value)
        if not receivers:
            return None
        if len(receivers) == 1:
            return next(iter(receivers.values()))
        roots = {code_of(_root(expr)): _root(expr) for expr in receivers.values()}
        return next(iter(roots.values())) if len(roots) == 1 else None

    def _feeding_values(self, params: cst.BaseExpression) -> list[cst.BaseExpression]:
        """The values of the names `params` is built from, followed a few assignments back:
        `grouped = [{"params": [p for n, p in named if ...]}]` with
        `named = list(model.named_parameters())` (HF and the Neuron samples)."""
        values: list[cst.BaseExpression] = []
        seen: set[str] = set()
        frontier = [params]
        for _ in range(_FEEDING_DEPTH):
            found = []
            for source in frontier:
                for name in collect_nodes(source, cst.Name):
                    if name.value in seen:
                        continue
                    parent = self.parent(name)
                    if isinstance(parent, cst.Attribute) and parent.attr is name:
                        continue  # `.named_parameters`: an attribute, not a variable
                    seen.add(name.value)
                    found.extend(self._assigned_values(name))
            values.extend(found)
            frontier = found
        return values

    def _assigned_values(self, name: cst.Name) -> list[cst.BaseExpression]:
        scope = self.scopes.get(name)
        if scope is None:
            return []
        values = []
        for assignment in scope[name.value]:
            node = getattr(assignment, "node", None)
            parent = self.parent(node) if node is not None else None
            if isinstance(parent, cst.AssignTarget):
                assign = self.parent(parent)
                if isinstance(assign, cst.Assign):
                    values.append(assign.value)
        return values

    def model_moves(self) -> list[tuple[cst.SimpleStatementLine, cst.BaseExpression]]:
        """`model = Net().to(device)`, `model.to(device)`: statements moving a module."""
        moves: list[tuple[cst.SimpleStatementLine, cst.BaseExpression]] = []
        for call in self._calls:
            func = call.func
            if not (isinstance(func, cst.Attribute) and func.attr.value == "to" and call.args):
                continue
            if any(_is_dtype(arg.value) for arg in call.args):
                continue
            statement = self.statement_of(call)
            if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
                continue
            small = statement.body[0]
            if isinstance(small, cst.Assign) and small.value is call:
                target = small.targets[0].target
                built = func.value
                if (
                    isinstance(target, cst.Name)
                    and isinstance(built, cst.Call)
                    and not self._makes_a_tensor(built)
                ):
                    moves.append((statement, target))
            elif (
                isinstance(small, cst.Expr)
                and small.value is call
                and isinstance(func.value, (cst.Name, cst.Attribute))
            ):
                moves.append((statement, func.value))
        return moves

    def _makes_a_tensor(self, call: cst.Call) -> bool:
        """`torch.zeros(1)`, `torch.tensor(...)`, `torch.DoubleTensor([0.0])`, and method chains
        on them (`torch.randn(n).transpose(0, 1)`, `torch.LongTensor(size=s).random_(0, v)`): a
        tensor, not a module (`running_loss = torch.zeros(1).to(device)` is no model to cast)."""
        while isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Call):
            call = call.func.value  # the call the chain starts from
        names = self.qualified_names(call.func) or {code_of(call.func)}
        for name in names:
            head, _, last = name.rpartition(".")
            if head == "torch" and (last[:1].islower() or last.endswith("Tensor")):
                return True
        return False

    def first_statement_around(self, nodes: Sequence[cst.CSTNode]) -> cst.BaseStatement | None:
        """The statement that runs before any of `nodes` can: in the innermost block holding
        them all, the first statement holding one (`if a: opt = A(...) elif b: opt = B(...)`
        gives the `if`)."""
        chains = [[*reversed(list(self.ancestors(node))), node] for node in nodes]
        if not chains:
            return None
        common = 0
        while all(len(c) > common and c[common] is chains[0][common] for c in chains):
            common += 1
        for depth in range(common - 1, -1, -1):
            block = chains[0][depth]
            if isinstance(block, (cst.Module, cst.IndentedBlock)):
                held = {id(c[depth + 1]) for c in chains if len(c) > depth + 1}
                body = block.body
                return next((s for s in body if id(s) in held), None)
        return None

    def casts_to_bf16(self, model: cst.BaseExpression) -> bool:
        """Whether the script already casts this model (`.to(torch.bfloat16)`, `.bfloat16()`)."""
        wanted = code_of(model)
        for call in self._calls:
            func = call.func
            if not isinstance(func, cst.Attribute) or code_of(func.value) != wanted:
                continue
            if func.attr.value == "bfloat16":
                return True
            if func.attr.value == "to" and any(_is_bf16(arg.value) for arg in call.args):
                return True
        return False

    # -- the forward pass ------------------------------------------------------------------------

    def backward_calls(self) -> list[cst.Call]:
        """Every `<something>.backward(...)` call."""
        return [call for call in self._calls if _is_backward_call(call)]

    def backward_statements(self) -> list[tuple[cst.SimpleStatementLine, str]]:
        """`loss.backward()` statements and the name of the tensor backpropagated."""
        found = []
        for call in self.backward_calls():
            func = call.func
            assert isinstance(func, cst.Attribute)
            if not isinstance(func.value, cst.Name):
                continue
            statement = self.statement_of(call)
            if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
                found.append((statement, func.value.value))
        return found

    def forward_region(
        self, backward: cst.SimpleStatementLine, loss: str, models: Sequence[str]
    ) -> ForwardRegion | None:
        """The statements from the model call through the last assignment of `loss`."""
        block = self.block_of(backward)
        if block is None:
            return None
        body = list(block.body)
        end = body.index(backward)
        last_assignment = next(
            (i for i in range(end - 1, -1, -1) if loss in _assigned_names(body[i])), None
        )
        if last_assignment is None:
            return None
        needed = _read_names(body[last_assignment])
        start = last_assignment if _calls_any(body[last_assignment], models) else None
        for index in range(last_assignment - 1, -1, -1):
            if _calls_backward(body[index]):
                break  # what comes before belongs to an earlier backward(): never wrapped
            assigned = _assigned_names(body[index])
            if not assigned & needed:
                continue
            needed = (needed - assigned) | _read_names(body[index])
            if _calls_any(body[index], models):
                start = index
        if start is None:
            return None
        return ForwardRegion(tuple(body[start : last_assignment + 1]), backward)

    def in_autocast(self, node: cst.CSTNode) -> bool:
        """Whether `node` already runs inside (or is) a `with <autocast>(...)` block."""
        candidates = [node, *self.ancestors(node)]
        return any(isinstance(c, cst.With) and self._is_autocast_with(c) for c in candidates)

    def contains_autocast(self, statements: Sequence[cst.BaseStatement]) -> bool:
        return any(
            self._is_autocast_with(with_node)
            for statement in statements
            for with_node in collect_nodes(statement, cst.With)
        )

    def _is_autocast_with(self, node: cst.With) -> bool:
        for item in node.items:
            call = item.item
            if isinstance(call, cst.Call):
                names = self.qualified_names(call.func) | {code_of(call.func)}
                if names & AUTOCAST_CALLS:
                    return True
        return False

    def model_parameter_names(self, node: cst.CSTNode) -> list[str]:
        """Parameters of the enclosing function that look like a model (`train_loop_fn(model)`)."""
        function = self.enclosing_function(node)
        if function is None:
            return []
        params = [*function.params.posonly_params, *function.params.params]
        return [
            p.name.value
            for p in params
            if any(hint in p.name.value.lower() for hint in _MODEL_PARAMETER_HINTS)
        ]


def collect_nodes(root: cst.CSTNode, kind: type[_NodeT]) -> Iterator[_NodeT]:
    """Every node of a kind below `root` (root included), in source order."""
    found: list[_NodeT] = []

    class Collector(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, kind):
                found.append(node)
            return True

    root.visit(Collector())
    yield from found


def _params_argument(call: cst.Call) -> cst.BaseExpression | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "params":
            return arg.value
    positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
    return positional[0].value if positional else None


def _root(expression: cst.BaseExpression) -> cst.BaseExpression:
    """`model` for `model.encoder.layer`; the expression itself otherwise."""
    while isinstance(expression, cst.Attribute) and not (
        isinstance(expression.value, cst.Name) and expression.value.value in ("self", "cls")
    ):
        expression = expression.value
    return expression


def _is_dtype(expression: cst.BaseExpression) -> bool:
    text = code_of(expression)
    return text.startswith("torch.") and text.split(".")[-1] in (
        "bfloat16", "float16", "half", "float32", "float", "float64", "double", "bf16",
    )  # fmt: skip


def _is_bf16(expression: cst.BaseExpression) -> bool:
    return code_of(expression) in ("torch.bfloat16", "torch.bf16")


def _assigned_names(statement: cst.CSTNode) -> set[str]:
    targets = [t.target for node in collect_nodes(statement, cst.Assign) for t in node.targets]
    targets += [node.target for node in collect_nodes(statement, cst.AugAssign)]
    targets += [node.target for node in collect_nodes(statement, cst.AnnAssign)]
    return {name.value for target in targets for name in collect_nodes(target, cst.Name)}


def _read_names(statement: cst.CSTNode) -> set[str]:
    return {name.value for name in collect_nodes(statement, cst.Name)}


def _calls_backward(statement: cst.CSTNode) -> bool:
    return any(_is_backward_call(call) for call in collect_nodes(statement, cst.Call))


def _is_backward_call(call: cst.Call) -> bool:
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward"


def _calls_any(statement: cst.CSTNode, callees: Sequence[str]) -> bool:
    wanted = set(callees) | {f"{callee}.forward" for callee in callees}
    return any(code_of(call.func) in wanted for call in collect_nodes(statement, cst.Call))
