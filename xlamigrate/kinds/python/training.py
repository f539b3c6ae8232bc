"""A training script's structure on the standard library's `ast`, as the rewriter's planner asks
about it: statements and the blocks holding them, parents, scopes, and the parts a recipe changes
(where the optimizer is built and which model feeds it, where a model is moved to its device, the
forward pass before backward()).

ast has no node for a line of simple statements (`a = 1; b = 2`) nor for a block: `Line` and
`Block` stand for them, made once per tree, so the planner can key its edits by them as it keys
ast's own statements. A statement is a `Line` or a compound ast statement (`if`, `for`, `def`...);
a simple statement on the line of its compound's header (`if c: x = 1`) belongs to no line: its
block is a suite."""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from xlamigrate.kinds.python.astpositions import SourceLines
from xlamigrate.kinds.python.astscopes import Scope, Scopes
from xlamigrate.kinds.python.astwalk import DictItem
from xlamigrate.modelowners import ModelOwner, model_owner, step_methods
from xlamigrate.nesting import MAX_NESTING
from xlamigrate.optimizerfactories import model_builders, optimizer_factory, train_steps
from xlamigrate.results import Span

COMPOUND = (
    ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.TryStar,
    ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Match,
)  # fmt: skip
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_BODIES = ("body", "orelse", "finalbody")

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
BF16_SPELLINGS = frozenset({"torch.bfloat16", "torch.bf16"})
_FEEDING_DEPTH = 3  # assignments followed back from an optimizer's params argument
_OPTIMIZER_CLASS_NAME = re.compile(r"Adam|SGD|Optim|Lamb(?!da)|LAMB|Lion|Adafactor")
_SCHEDULER_NAME = re.compile(r"Scheduler|LR$|lr_scheduler")
_MODEL_PARAMETER_HINTS = ("model", "net", "module")
_NodeT = TypeVar("_NodeT", bound=ast.AST)


@dataclass(eq=False)
class Line:
    """The simple statements of one line of a block (`a = 1; b = 2`: two), libcst's
    SimpleStatementLine."""

    body: tuple[ast.stmt, ...]
    block: Block


@dataclass(eq=False)
class Block:
    """A body of statements: the module's, or one of a compound statement's (`owner.<part>`; an
    except clause's or a match case's body has that clause as its owner). A suite is a body
    written on its header's line (`if c: x = 1`): its statements belong to no line."""

    owner: ast.AST
    part: str  # "body", "orelse", "finalbody"
    statements: list[ast.stmt]
    suite: bool
    body: list[Statement] = field(default_factory=list)  # lines and compound statements


Statement = Line | ast.stmt
Node = ast.AST | Line | Block | DictItem


@dataclass(frozen=True, eq=False)
class OptimizerSite:
    """`optimizer = SomeOptimizer(model.parameters(), ...)`: the call, its line, the model."""

    call: ast.Call
    statement: Line
    model: ast.expr


# What returns the XLA device.
_DEVICE_CALLS = frozenset(
    {"torch_xla.device", "torch_xla.core.xla_model.xla_device", "torch_xla.runtime.xla_device"}
)

# Calls that copy a model (an EMA, a teacher snapshot): under the flag the copy was bf16 too.
_COPIES = frozenset(
    {"copy.deepcopy", "torch.optim.swa_utils.AveragedModel", "timm.utils.ModelEmaV2",
     "timm.utils.ModelEmaV3", "timm.utils.model_ema.ModelEmaV2"}
)  # fmt: skip


@dataclass(frozen=True, eq=False)
class ForwardRegion:
    """Consecutive statements of one block: from the model call through the loss computation."""

    statements: tuple[Statement, ...]
    backward: Line


class TrainingScript:
    """Structural queries over one parsed module (its ast tree and its text)."""

    def __init__(self, module: ast.Module, source: str, scopes: Scopes | None = None) -> None:
        self.module = module
        self.source = source
        self.lines = SourceLines(source)
        self.scopes = scopes if scopes is not None else Scopes(module)
        self._parents: dict[int, Node] = {}
        self._blocks: dict[int, list[Block]] = {}
        self._calls: list[ast.Call] = []
        self._scope_of: dict[int, Scope] | None = None
        self._synthetic: list[ast.AST] = []
        # The first line nested deeper than libcst can take (None: none is), found on the way.
        self.too_deep: int | None = None
        self._index()
        if id(module) not in self._blocks:  # (a module without statements: an empty body)
            self._blocks[id(module)] = [Block(module, "body", [], suite=False)]
            self._parents[id(self._blocks[id(module)][0])] = module
        self.top = self._blocks[id(module)][0]  # the module's own block

    # -- the index -------------------------------------------------------------------------------

    def _index(self) -> None:
        parents = self._parents
        calls = self._calls
        pending: list[tuple[ast.AST, int]] = [(self.module, 0)]
        while pending:
            node, depth = pending.pop()
            if isinstance(node, ast.Call):
                calls.append(node)
            elif isinstance(node, ast.BoolOp):
                depth += len(node.values) - 1  # libcst nests `a and b and c`: one level each
            if depth > MAX_NESTING and self.too_deep is None:
                self.too_deep = self._line_of(node)
            inner = depth + 1
            for name in node._fields:
                value = getattr(node, name, None)
                if isinstance(value, list):
                    if value and isinstance(value[0], ast.stmt):
                        self._block(node, name, value)
                        pending.extend((statement, inner) for statement in value)
                        continue
                    for item in value:
                        if isinstance(item, ast.AST):
                            parents[id(item)] = node
                            pending.append((item, inner))
                elif isinstance(value, ast.AST) and not isinstance(value, _INERT):
                    parents[id(value)] = node
                    pending.append((value, inner))
            if isinstance(node, ast.BoolOp) and len(node.values) > 2:
                self._nest(node)  # (after its operands' parents were set: it sets them again)
        calls.sort(key=_start)

    def _line_of(self, node: Node) -> int:
        current: Node | None = node
        while current is not None and not hasattr(current, "lineno"):
            current = self.parent(current)
        return getattr(current, "lineno", 1)

    def _nest(self, chain: ast.BoolOp) -> None:
        """`a or b or c` as libcst has it, `(a or b) or c`: each operand's parent is the
        operation it ends (ast keeps one flat list; the prefixes are made here, positioned)."""
        values = chain.values
        outer: ast.BoolOp = chain
        for count in range(len(values) - 1, 1, -1):
            last = values[count - 1]
            prefix = ast.BoolOp(op=chain.op, values=values[:count])
            prefix.lineno, prefix.col_offset = values[0].lineno, values[0].col_offset
            prefix.end_lineno, prefix.end_col_offset = last.end_lineno, last.end_col_offset
            self._parents[id(prefix)] = outer
            self._parents[id(values[count])] = outer
            self._synthetic.append(prefix)  # (kept alive: parents are keyed by id)
            outer = prefix
        self._parents[id(values[0])] = outer
        self._parents[id(values[1])] = outer

    def _block(self, owner: ast.AST, name: str, statements: list[ast.stmt]) -> None:
        first = statements[0]
        suite = not isinstance(owner, ast.Module) and bool(
            self.lines.lines[first.lineno - 1][: self._column(first)].strip()
        )
        block = Block(owner, name, statements, suite)
        self._parents[id(block)] = owner
        self._blocks.setdefault(id(owner), []).append(block)
        line: list[ast.stmt] = []
        for statement in statements:
            if isinstance(statement, COMPOUND) or suite:
                self._close(line, block)
                line = []
                self._parents[id(statement)] = block
                if not suite:
                    block.body.append(statement)
                continue
            if line and not self._same_line(line[-1], statement):
                self._close(line, block)
                line = []
            line.append(statement)
        self._close(line, block)

    def _close(self, statements: list[ast.stmt], block: Block) -> None:
        if not statements:
            return
        line = Line(tuple(statements), block)
        self._parents[id(line)] = block
        for statement in statements:
            self._parents[id(statement)] = line
        block.body.append(line)

    def _same_line(self, before: ast.stmt, after: ast.stmt) -> bool:
        """Whether `after` follows `before` after a `;` on its line."""
        if after.lineno != before.end_lineno:
            return False
        text = self.lines.lines[after.lineno - 1]
        return ";" in text[self._end_column(before) : self._column(after)]

    def _column(self, node: ast.AST) -> int:
        return self.lines.column(node.lineno, node.col_offset)  # type: ignore[attr-defined]

    def _end_column(self, node: ast.AST) -> int:
        return self.lines.column(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]

    # -- navigation ------------------------------------------------------------------------------

    def parent(self, node: Node) -> Node | None:
        if isinstance(node, DictItem):  # ast has no node for it: its dict holds its key
            return self._parents.get(id(node.key))
        return self._parents.get(id(node))

    def ancestors(self, node: Node) -> Iterator[Node]:
        current = self.parent(node)
        while current is not None:
            yield current
            current = self.parent(current)

    def blocks(self, owner: ast.AST) -> list[Block]:
        """The bodies of a compound statement (or an except clause, a match case) in order."""
        return self._blocks.get(id(owner), [])

    def block(self, owner: ast.AST, name: str) -> Block | None:
        return next((b for b in self.blocks(owner) if b.part == name), None)

    def statement_of(self, node: Node) -> Statement | None:
        """The line (or compound statement) that directly holds `node`."""
        current: Node | None = node
        while current is not None and not is_statement(current):
            current = self.parent(current)
        return current  # type: ignore[return-value]

    def small_statement_of(self, node: Node) -> ast.stmt | None:
        """The simple statement holding `node` (None where a compound one holds it)."""
        current: Node | None = node
        while current is not None:
            if isinstance(current, ast.stmt):
                return None if isinstance(current, COMPOUND) else current
            if isinstance(current, (Line, Block)):
                return None
            current = self.parent(current)
        return None

    def block_of(self, statement: Statement) -> Block | None:
        owner = self.parent(statement)
        return owner if isinstance(owner, Block) and not owner.suite else None

    def enclosing_function(self, node: Node) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        return next((a for a in self.ancestors(node) if isinstance(a, FUNCTIONS)), None)

    def outermost_function(self, node: Node) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The function at module level (or a method of a module-level class) holding `node`."""
        outermost = None
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, FUNCTIONS):
                outermost = ancestor
        return outermost

    # -- scopes ----------------------------------------------------------------------------------

    def scope_of(self, node: ast.AST) -> Scope | None:
        """The scope `node` is evaluated in."""
        if self._scope_of is None:
            self._scope_of = {id(n): scope for n, scope, _ in self.scopes.order}
        return self._scope_of.get(id(node))

    def qualified_names(self, node: ast.AST) -> set[str]:
        scope = self.scope_of(node)
        if scope is None or not isinstance(node, (ast.Name, ast.Attribute)):
            return set()
        return scope.qualified(node)

    # -- text and positions ----------------------------------------------------------------------

    def code(self, node: Node) -> str:
        """The node's source text as written, its own parentheses included (`(a or b)`; not a
        call's)."""
        start, end = self.offsets(node)
        return self.source[start:end]

    def offsets(self, node: Node, parentheses: bool = True) -> tuple[int, int]:
        """Where the node's text starts and ends in the source (character offsets)."""
        span = self.span(node)
        start = self.lines.offset(span.line, span.column - 1)
        end = self.lines.offset(span.end_line, span.end_column - 1)
        if not parentheses or not isinstance(node, ast.expr):
            return start, end
        source = self.source
        call_paren = self._call_paren(node)
        while True:
            before = _skip_blank(source, start, -1)
            after = _skip_blank(source, end, 1)
            if before < 0 or after >= len(source) or source[before] != "(" or source[after] != ")":
                return start, end
            if before == call_paren:
                return start, end
            start, end = before, after + 1

    def simple_string(self, node: ast.AST) -> tuple[str, str] | None:
        """(prefix, quote) of a literal written as one string token (`r"..."`, `\'\'\'...\'\'\'`);
        None for anything else (implicitly concatenated strings, f-strings with fields)."""
        if not isinstance(node, ast.Constant) or not isinstance(node.value, (str, bytes)):
            return None
        start, end = self.offsets(node, parentheses=False)
        tokens = [t for t in _tokens(self.source[start:end]) if t.type not in _LAYOUT]
        if len(tokens) != 1 or tokens[0].type != tokenize.STRING:
            return None
        match = _STRING_START.match(tokens[0].string)
        return (match.group(1), match.group(2)) if match else None

    def has_parentheses(self, node: ast.expr) -> bool:
        """Whether the node is written in parentheses of its own."""
        return self.offsets(node) != self.offsets(node, parentheses=False)

    def _call_paren(self, node: ast.expr) -> int | None:
        """Where the `(` of the call (or class) whose argument `node` is opens."""
        parent = self.parent(node)
        if isinstance(parent, ast.keyword):
            return None
        func = parent.func if isinstance(parent, ast.Call) else None
        if isinstance(parent, ast.ClassDef) and node in parent.bases:
            start, _ = self.offsets(parent, parentheses=False)
            return self.source.find("(", start)
        if func is None or func is node:
            return None
        _, end = self.offsets(func)
        return _skip_blank(self.source, end, 1)

    def span(self, node: Node) -> Span:
        """Where the node is (a line: from its first statement through its last)."""
        if isinstance(node, Line):
            first, last = self.lines.span(node.body[0]), self.lines.span(node.body[-1])
            return Span(first.line, first.column, last.end_line, last.end_column)
        if isinstance(node, Block):
            first, last = self.lines.span(node.statements[0]), self.span(node.statements[-1])
            return Span(first.line, first.column, last.end_line, last.end_column)
        return self.lines.span(node)

    # -- optimizer and model ---------------------------------------------------------------------

    def calls(self) -> list[ast.Call]:
        """Every call of the module, in source order."""
        return list(self._calls)

    def optimizer_sites(self) -> list[OptimizerSite]:
        return list(self._optimizer_sites)

    @functools.cached_property
    def _optimizer_sites(self) -> tuple[OptimizerSite, ...]:
        sites = []
        for call in self._calls:
            factory = optimizer_factory(self.qualified_names(call.func))
            if factory is not None:  # `nxd.initialize_parallel_optimizer(config, AdamW, params)`
                params = argument(call, factory.position, factory.keyword)
            elif self._is_optimizer_class(call.func):
                params = params_argument(call)
            else:
                continue
            if params is None:
                continue
            model = self._model_feeding(params)
            statement = self.statement_of(call)
            if model is not None and isinstance(statement, Line):
                sites.append(OptimizerSite(call, statement, model))
        return tuple(sites)

    def device_used_before(self, node: Node) -> ast.Call | None:
        """The call that moved a tensor or model to the XLA device earlier than `node` on every
        path to it (a statement before it in its block, or before a block around it, within its
        function): torch-xla had read the legacy flags by then. None where there is none."""
        devices = self.device_names()
        statement = self.statement_of(node)
        current: Node | None = statement
        while current is not None and not isinstance(current, FUNCTIONS):
            block = self.block_of(current) if isinstance(current, (Line, ast.stmt)) else None
            if block is not None and isinstance(current, (Line, ast.stmt)):
                for earlier in block.body[: block.body.index(current)]:
                    found = self._device_transfer(earlier, devices)
                    if found is not None:
                        return found
            current = self.parent(current)
        return None

    def float64_spellings(self) -> list[ast.Attribute]:
        """`torch.double`, `torch.float64` and the `x.double` of `x.double()` (no arguments)."""
        found: list[ast.Attribute] = []
        for node, _, _ in self.scopes.of(ast.Attribute):
            if not isinstance(node, ast.Attribute) or node.attr not in ("double", "float64"):
                continue
            if self.qualified_names(node) & {"torch.double", "torch.float64"}:
                found.append(node)
                continue
            parent = self.parent(node)
            if (
                node.attr == "double"
                and isinstance(parent, ast.Call)
                and parent.func is node
                and not parent.args
                and not parent.keywords
            ):
                found.append(node)
        return found

    def numpy_moves(self, devices: frozenset[str]) -> list[ast.Call]:
        """`torch.from_numpy(a).to(device)` and `torch.tensor(np...).to(device)`: tensors made
        from numpy arrays (float64 unless made otherwise) moved to the XLA device."""
        found = []
        for call in self._calls:
            func = call.func
            if not (isinstance(func, ast.Attribute) and func.attr == "to" and call.args):
                continue
            target = call.args[0]
            to_device = (isinstance(target, ast.Name) and target.id in devices) or (
                isinstance(target, ast.Constant) and target.value == "xla"
            )
            made = func.value
            if not to_device or not isinstance(made, ast.Call) or not made.args:
                continue
            names = self.qualified_names(made.func)
            first = made.args[0]
            from_numpy = "torch.from_numpy" in names
            wrapped = (
                names & {"torch.tensor", "torch.as_tensor"}
                and isinstance(first, ast.Call)
                and any(n.startswith("numpy.") for n in self.qualified_names(first.func))
            )
            if from_numpy or wrapped:
                found.append(call)
        return found

    def uses_device_or_model(
        self, statement: Statement, devices: frozenset[str], models: set[str]
    ) -> bool:
        """Whether the statement names the XLA device (`device`, `"xla"`) or calls a model."""
        nodes = statement.body if isinstance(statement, Line) else [statement]
        for top in nodes:
            for node in ast.walk(top):
                if isinstance(node, ast.Name) and node.id in devices:
                    return True
                if isinstance(node, ast.Constant) and node.value == "xla":
                    return True
                if isinstance(node, ast.Call) and self.code(node.func) in models:
                    return True
        return False

    def device_names(self) -> frozenset[str]:
        """Names bound to the XLA device (`device = torch_xla.device()`)."""
        return self._device_names

    @functools.cached_property
    def _device_names(self) -> frozenset[str]:
        names = set()
        for node, _, _ in self.scopes.of(ast.Assign):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and self.qualified_names(node.value.func) & _DEVICE_CALLS
            ):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        return frozenset(names)

    def _device_transfer(self, statement: Statement, devices: frozenset[str]) -> ast.Call | None:
        """A call in the statement that puts a tensor on the device: `x.to(device)`,
        `.to("xla")`, `torch.zeros(..., device=device)`."""
        nodes = statement.body if isinstance(statement, Line) else [statement]
        for top in nodes:
            if isinstance(top, (*FUNCTIONS, ast.ClassDef)):
                continue  # (a definition runs nothing yet)
            for call in ast.walk(top):
                if not isinstance(call, ast.Call):
                    continue
                targets = [k.value for k in call.keywords if k.arg == "device"]
                if isinstance(call.func, ast.Attribute) and call.func.attr == "to" and call.args:
                    targets.append(call.args[0])
                for target in targets:
                    if (isinstance(target, ast.Name) and target.id in devices) or (
                        isinstance(target, ast.Constant) and target.value == "xla"
                    ):
                        return call
        return None

    def root_module(self, model: ast.expr, at: Node) -> ast.expr:
        """The module the forward pass calls that holds `model` (`model = Sequential(backbone,
        head)` for an optimizer on `head.parameters()`: the flag made the whole of it bf16),
        built from it before `at` in the same function; `model` itself where none is."""
        function = self.enclosing_function(at)
        body = function if function is not None else self.module
        called = {
            call.func.id
            for call in self._calls
            if isinstance(call.func, ast.Name) and self.enclosing_function(call) is function
        }
        line = getattr(at, "lineno", None) or self.span(at).line
        chain: list[ast.Name] = []  # head -> model -> (a copy of it: ema = deepcopy(model))
        current = model
        while isinstance(current, ast.Name) and current.id not in {n.id for n in chain}:
            chain.append(current)
            holder = self._holder_of(current.id, body, function, line)
            if holder is None:
                break
            current = holder
        return next((name for name in reversed(chain[1:]) if name.id in called), model)

    def copies_of(self, model: ast.expr, before: Node) -> list[tuple[Line, ast.Name]]:
        """The copies of `model` made before `before` in the same function (`ema =
        copy.deepcopy(model)`, `AveragedModel(model)`): the flag stored them bf16 too."""
        if not isinstance(model, ast.Name):
            return []
        function = self.enclosing_function(before)
        line = getattr(before, "lineno", None) or self.span(before).line
        found = []
        for call in self._calls:
            if self.enclosing_function(call) is not function or call.lineno >= line:
                continue
            if not self.qualified_names(call.func) & _COPIES or not call.args:
                continue
            first = call.args[0]
            if not isinstance(first, ast.Name) or first.id != model.id:
                continue
            statement = self.statement_of(call)
            if not isinstance(statement, Line):
                continue
            assign = statement.body[0]
            if (
                isinstance(assign, ast.Assign)
                and len(assign.targets) == 1
                and isinstance(assign.targets[0], ast.Name)
                and _innermost_call(assign.value) is call
            ):
                found.append((statement, assign.targets[0]))
        return found

    def _holder_of(
        self, name: str, body: ast.AST, function: ast.AST | None, line: int
    ) -> ast.Name | None:
        """The name bound, before `line`, to a module built with `name` among its arguments
        (`Sequential(backbone, name)`, `Wrapper(encoder=name).to(device)`)."""
        for node in ast.walk(body):
            if not isinstance(node, ast.Assign) or node.lineno >= line:
                continue
            if self.enclosing_function(node) is not function or len(node.targets) != 1:
                continue
            target = node.targets[0]
            if not isinstance(target, ast.Name) or target.id == name:
                continue
            value = node.value
            while (  # `Sequential(...).to(device)`
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Attribute)
                and value.func.attr in ("to", "cuda", "cpu")
            ):
                value = value.func.value
            if not isinstance(value, ast.Call):
                continue
            arguments = [*value.args, *(k.value for k in value.keywords)]
            if any(isinstance(a, ast.Name) and a.id == name for a in arguments):
                return target
        return None

    def _is_optimizer_class(self, func: ast.expr) -> bool:
        return self._known_optimizer_class(func) or (
            isinstance(func, ast.Name) and func.id in self._optimizer_subclasses
        )

    def _known_optimizer_class(self, func: ast.expr) -> bool:
        names = self.qualified_names(func)
        if any(_SCHEDULER_NAME.search(name) for name in (*names, self.code(func))):
            return False  # `LambdaLR(optimizer, ...)`, `get_scheduler(...)`: not an optimizer
        if any(name.startswith("torch.optim.") and name[12:13].isupper() for name in names):
            return True
        if isinstance(func, ast.Attribute):
            last = func.attr
        elif isinstance(func, ast.Name):
            last = func.id
        else:  # `optimizers[0](...)`, `make()(...)`: no class name to go by
            return False
        # A project's own optimizer class (AdamW_FP32OptimParams, ZeroOneAdam...) by its name.
        return last in OPTIMIZER_NAMES or (
            last[:1].isupper() and _OPTIMIZER_CLASS_NAME.search(last) is not None
        )

    @functools.cached_property
    def _optimizer_subclasses(self) -> frozenset[str]:
        """The classes this module defines whose bases are optimizers (torch.optim's, or one
        defined here: `class TinyFactor(Optimizer)`): their calls build optimizers too."""
        classes = [n for n, _, _ in self.scopes.of(ast.ClassDef) if isinstance(n, ast.ClassDef)]
        found: set[str] = set()
        while more := {
            node.name
            for node in classes
            if node.name not in found
            and any(
                self._known_optimizer_class(base)
                or (isinstance(base, ast.Name) and base.id in found)
                for base in node.bases
            )
        }:
            found |= more
        return frozenset(found)

    def unrecognised_optimizers(self) -> list[ast.Call]:
        """Calls of a class xlamigrate does not know as an optimizer that take a model's
        `.parameters()` as first argument (`Shampoo(model.parameters())`, imported from
        elsewhere): what a finding names where no optimizer was found."""
        return [
            call
            for call in self._calls
            if (params := params_argument(call)) is not None
            and _class_name(call.func) is not None
            and not self._is_optimizer_class(call.func)
            and optimizer_factory(self.qualified_names(call.func)) is None
            and not any(_SCHEDULER_NAME.search(n) for n in self.qualified_names(call.func))
            and any(
                isinstance(c.func, ast.Attribute)
                and c.func.attr in ("parameters", "named_parameters")
                for c in collect_nodes(params, ast.Call)
            )
        ]

    def _model_feeding(self, params: ast.expr) -> ast.expr | None:
        """The module whose parameters an optimizer's params argument is built from."""
        sources = [params, *self._feeding_values(params)]
        receivers: dict[str, ast.expr] = {}
        for source in sources:
            for call in collect_nodes(source, ast.Call):
                func = call.func
                if isinstance(func, ast.Attribute) and func.attr in (
                    "parameters",
                    "named_parameters",
                ):
                    receivers.setdefault(self.code(func.value), func.value)
                    continue
                for passed in call.args:  # `param_groups(model)`, model built by a framework
                    if isinstance(passed, ast.Name) and self._built_by_framework(passed):
                        receivers.setdefault(passed.id, passed)
        if not receivers:
            return None
        if len(receivers) == 1:
            return next(iter(receivers.values()))
        roots = {self.code(root(expr)): root(expr) for expr in receivers.values()}
        return next(iter(roots.values())) if len(roots) == 1 else None

    def _feeding_values(self, params: ast.expr) -> list[ast.expr]:
        """The values of the names `params` is built from, followed a few assignments back:
        `grouped = [{"params": [p for n, p in named if ...]}]` with
        `named = list(model.named_parameters())` (HF and the Neuron samples)."""
        values: list[ast.expr] = []
        seen: set[str] = set()
        frontier = [params]
        for _ in range(_FEEDING_DEPTH):
            found = []
            for source in frontier:
                named: list[ast.Name | ast.keyword] = [
                    *collect_nodes(source, ast.Name),
                    *collect_nodes(source, ast.keyword),
                ]
                for name in sorted(named, key=_start):
                    identifier = name.id if isinstance(name, ast.Name) else name.arg
                    if identifier is None or identifier in seen:
                        continue
                    seen.add(identifier)
                    found.extend(self._assigned_values(name, identifier))
            values.extend(found)
            frontier = found
        return values

    def loss_returns(self) -> list[tuple[Line, str]]:
        """`return loss` ending a framework module's training step (a LightningModule's
        `training_step`), and the name returned: the framework backpropagates it."""
        found: list[tuple[Line, str]] = []
        for node in ast.walk(self.module):
            if not isinstance(node, ast.ClassDef):
                continue
            methods = self._step_methods(node)
            for item in node.body:
                if not isinstance(item, FUNCTIONS) or item.name not in methods:
                    continue
                last = item.body[-1]
                returned = last.value if isinstance(last, ast.Return) else None
                line = self.statement_of(last)
                if isinstance(returned, ast.Name) and isinstance(line, Line):
                    found.append((line, returned.id))
        return found

    def owner_models(self) -> list[tuple[Line, ast.expr, ModelOwner, ast.Call]]:
        """`Trainer(model=model, ...)`: a framework trainer's call given the script's model by
        name, the statement it is in, the framework and the call."""
        found: list[tuple[Line, ast.expr, ModelOwner, ast.Call]] = []
        for call in self._calls:
            owner = model_owner(self.qualified_names(call.func))
            if owner is None or owner.model is None:
                continue
            model = argument(call, *owner.model)
            line = self.statement_of(call)
            if isinstance(model, (ast.Name, ast.Attribute)) and isinstance(line, Line):
                found.append((line, model, owner, call))
        return found

    def step_modules(self, node: Node) -> list[str]:
        """The modules a framework module's training step feeds (`self.net` where
        `training_step` calls `self.net(x)`; `self` where it calls `self(x)`): where the class
        around `node` is one, the models whose inputs and outputs the recipe casts; else
        `["self"]`."""
        owner = next((a for a in self.ancestors(node) if isinstance(a, ast.ClassDef)), None)
        if owner is None:
            return ["self"]
        methods = self._step_methods(owner)
        steps = [i for i in owner.body if isinstance(i, FUNCTIONS) and i.name in methods]
        if not steps:
            return ["self"]
        built = {  # `self.X = <call>` anywhere in the class: its submodules
            self.code(target)
            for assign in collect_nodes(owner, ast.Assign)
            if isinstance(assign.value, ast.Call)
            for target in assign.targets
            if isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "self"
        }
        fed = [
            callee
            for step in steps
            for callee in self.self_callees(step.body[0])
            if (callee == "self" and self._calls_self(step)) or callee in built
        ]
        return list(dict.fromkeys(fed)) or ["self"]

    def _step_methods(self, cls: ast.ClassDef) -> frozenset[str]:
        """The loss-returning methods a framework gives the class through its bases (a
        LightningModule's `training_step`); empty for any other class."""
        bases: set[str] = set()
        for base in cls.bases:
            bases |= self.qualified_names(base)
        return step_methods(bases)

    def _calls_self(self, function: ast.AST) -> bool:
        return any(
            isinstance(call.func, ast.Name) and call.func.id == "self"
            for call in collect_nodes(function, ast.Call)
        )

    def self_callees(self, node: Node) -> list[str]:
        """`self.<module>` called in the function around `node` (`self.net(x)`): a
        framework module's own submodules, its forward pass."""
        function = self.enclosing_function(node)
        if function is None:
            return []
        return sorted(
            {
                self.code(call.func)
                for call in collect_nodes(function, ast.Call)
                if isinstance(call.func, ast.Attribute)
                and isinstance(call.func.value, ast.Name)
                and call.func.value.id == "self"
            }
            | {"self"}
        )

    def train_step_statements(self) -> list[Line]:
        """Lines calling a framework model's forward-and-backward method
        (`loss = model.run_train(...)`, NxD pipeline parallel), where the script calls no
        backward() of its own."""
        found: list[Line] = []
        for call in self._calls:
            func = call.func
            if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
                continue
            steps: frozenset[str] = frozenset()
            for value in self._assigned_values(func.value, func.value.id):
                if isinstance(value, ast.Call):
                    steps |= train_steps(self.qualified_names(value.func))
            line = self.statement_of(call)
            if func.attr in steps and isinstance(line, Line) and line not in found:
                found.append(line)
        return found

    def _built_by_framework(self, name: ast.Name) -> bool:
        """Whether every assignment binding `name` here calls a framework's model builder
        (`model = nxd.initialize_parallel_model(config, get_model, ...)`)."""
        values = self._assigned_values(name, name.id)
        builders = model_builders()
        return bool(values) and all(
            isinstance(value, ast.Call) and bool(self.qualified_names(value.func) & builders)
            for value in values
        )

    def _assigned_values(self, node: ast.AST, name: str) -> list[ast.expr]:
        """The values of the `name = ...` assignments binding `name` where `node` is."""
        scope = self.scope_of(node)
        binder = scope.binder(name) if scope is not None else None
        if binder is None:
            return []
        values = []
        for target in binder.targets.get(name, ()):
            assign = self.parent(target)
            if isinstance(assign, ast.Assign) and target in assign.targets:
                values.append(assign.value)
        return values

    def model_moves(self) -> list[tuple[Line, ast.expr]]:
        """`model = Net().to(device)`, `model.to(device)`: statements moving a module."""
        moves: list[tuple[Line, ast.expr]] = []
        for call in self._calls:
            func = call.func
            if not (isinstance(func, ast.Attribute) and func.attr == "to" and call_arguments(call)):
                continue
            if any(_is_dtype(self.code(value)) for value in argument_values(call)):
                continue
            statement = self.statement_of(call)
            if not isinstance(statement, Line) or len(statement.body) != 1:
                continue
            small = statement.body[0]
            if isinstance(small, ast.Assign) and small.value is call:
                target = small.targets[0]
                built = func.value
                if (
                    isinstance(target, ast.Name)
                    and isinstance(built, ast.Call)
                    and not self._makes_a_tensor(built)
                ):
                    moves.append((statement, target))
            elif (
                isinstance(small, ast.Expr)
                and small.value is call
                and isinstance(func.value, (ast.Name, ast.Attribute))
            ):
                moves.append((statement, func.value))
        return moves

    def _makes_a_tensor(self, call: ast.Call) -> bool:
        """`torch.zeros(1)`, `torch.tensor(...)`, `torch.DoubleTensor([0.0])`, and method chains
        on them (`torch.randn(n).transpose(0, 1)`, `torch.LongTensor(size=s).random_(0, v)`): a
        tensor, not a module (`running_loss = torch.zeros(1).to(device)` is no model to cast)."""
        while isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Call):
            call = call.func.value  # the call the chain starts from
        names = self.qualified_names(call.func) or {self.code(call.func)}
        for name in names:
            head, _, last = name.rpartition(".")
            if head == "torch" and (last[:1].islower() or last.endswith("Tensor")):
                return True
        return False

    def first_statement_around(self, nodes: Sequence[Node]) -> Statement | None:
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
            if isinstance(block, Block) and not block.suite:
                held = {id(c[depth + 1]) for c in chains if len(c) > depth + 1}
                return next((s for s in block.body if id(s) in held), None)
        return None

    def bf16_casts(self, model: ast.expr) -> list[ast.Call]:
        """The script's own casts of this model to bf16 (`<model>.to(torch.bfloat16)`,
        `.to(device=..., dtype=torch.bfloat16)`, `<model>.bfloat16()`)."""
        wanted = self.code(model)
        casts = []
        for call in self._calls:
            func = call.func
            if not isinstance(func, ast.Attribute) or self.code(func.value) != wanted:
                continue
            if func.attr == "bfloat16" or (
                func.attr == "to"
                and any(self.code(value) in BF16_SPELLINGS for value in argument_values(call))
            ):
                casts.append(call)
        return casts

    # -- the forward pass ------------------------------------------------------------------------

    def backward_calls(self) -> list[ast.Call]:
        """Every `<something>.backward(...)` call."""
        return [call for call in self._calls if _is_backward_call(call)]

    def backward_statements(self) -> list[tuple[Line, str]]:
        """`loss.backward()` statements and the name of the tensor backpropagated; also where
        the backward is of an expression of one loss (`(loss * scale).backward()`,
        `scaler.scale(loss).backward()`): the one name in it that its block assigns before."""
        found = []
        for call in self.backward_calls():
            func = call.func
            assert isinstance(func, ast.Attribute)
            statement = self.statement_of(call)
            if not isinstance(statement, Line) or len(statement.body) != 1:
                continue
            if isinstance(func.value, ast.Name):
                found.append((statement, func.value.id))
                continue
            loss = self._loss_in(func.value, statement)
            if loss is not None:
                found.append((statement, loss))
        return found

    def _loss_in(self, expression: ast.expr, backward: Line) -> str | None:
        """The one name of `expression` that a statement before `backward` in its block
        assigns (None: none, or several)."""
        block = self.block_of(backward)
        if block is None:
            return None
        before = block.body[: block.body.index(backward)]
        assigned = {name for statement in before for name in self.assigned_names(statement)}
        losses = set(identifiers(expression)) & assigned
        return losses.pop() if len(losses) == 1 else None

    def forward_region(
        self, backward: Line, loss: str, models: Sequence[str]
    ) -> ForwardRegion | None:
        """The statements from the model call through the last assignment of `loss`."""
        block = self.block_of(backward)
        if block is None:
            return None
        body = block.body
        end = next(i for i, s in enumerate(body) if s is backward)
        last_assignment = next(
            (i for i in range(end - 1, -1, -1) if loss in self.assigned_names(body[i])), None
        )
        if last_assignment is None:
            return None
        needed = self._read_names(body[last_assignment])
        start = last_assignment if self._calls_any(body[last_assignment], models) else None
        for index in range(last_assignment - 1, -1, -1):
            if any(_is_backward_call(c) for c in self.nodes(body[index], ast.Call)):
                break  # what comes before belongs to an earlier backward(): never wrapped
            assigned = self.assigned_names(body[index])
            if not assigned & needed:
                continue
            needed = (needed - assigned) | self._read_names(body[index])
            if self._calls_any(body[index], models):
                start = index
        if start is None:
            return None
        return ForwardRegion(tuple(body[start : last_assignment + 1]), backward)

    def in_autocast(self, node: Node) -> bool:
        """Whether `node` already runs inside (or is) a `with <autocast>(...)` block."""
        candidates = [node, *self.ancestors(node)]
        return any(
            isinstance(c, (ast.With, ast.AsyncWith)) and self._is_autocast_with(c)
            for c in candidates
        )

    def autocast_calls_over(self, statements: Sequence[Statement]) -> list[ast.Call]:
        """The `<autocast>(...)` calls of the `with` blocks around the statements or inside
        them: the script's own autocast regions over this forward pass."""
        withs: list[ast.With | ast.AsyncWith] = [
            c for c in self.ancestors(statements[0]) if isinstance(c, (ast.With, ast.AsyncWith))
        ]
        for statement in statements:
            withs.extend(self.nodes(statement, ast.With))
            withs.extend(self.nodes(statement, ast.AsyncWith))
        return [call for with_node in withs for call in self._autocast_calls(with_node)]

    def _is_autocast_with(self, node: ast.With | ast.AsyncWith) -> bool:
        return bool(self._autocast_calls(node))

    def _autocast_calls(self, node: ast.With | ast.AsyncWith) -> list[ast.Call]:
        calls = []
        for item in node.items:
            call = item.context_expr
            if isinstance(call, ast.Call):
                names = self.qualified_names(call.func) | {self.code(call.func)}
                if names & AUTOCAST_CALLS:
                    calls.append(call)
        return calls

    def model_parameter_names(self, node: Node) -> list[str]:
        """Parameters of the enclosing function that look like a model (`train_loop_fn(model)`)."""
        function = self.enclosing_function(node)
        if function is None:
            return []
        params = [*function.args.posonlyargs, *function.args.args]
        return [
            p.arg for p in params if any(hint in p.arg.lower() for hint in _MODEL_PARAMETER_HINTS)
        ]

    # -- statements' contents --------------------------------------------------------------------

    def nodes(self, root: Node, kind: type[_NodeT]) -> list[_NodeT]:
        """Every node of a kind in a node, a line or a block, in source order."""
        if isinstance(root, Line):
            return [n for statement in root.body for n in collect_nodes(statement, kind)]
        if isinstance(root, Block):
            return [n for statement in root.statements for n in collect_nodes(statement, kind)]
        if isinstance(root, DictItem):
            return [*collect_nodes(root.key, kind), *collect_nodes(root.value, kind)]
        return collect_nodes(root, kind)

    def assigned_names(self, statement: Statement) -> set[str]:
        targets: list[ast.AST] = []
        for node in self.nodes(statement, ast.stmt):
            if isinstance(node, ast.Assign):
                targets += node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets.append(node.target)
        return {name for target in targets for name in identifiers(target)}

    def _read_names(self, statement: Statement) -> set[str]:
        nodes = statement.body if isinstance(statement, Line) else (statement,)
        return {name for node in nodes for name in identifiers(node)}

    def _calls_any(self, statement: Statement, callees: Sequence[str]) -> bool:
        wanted = set(callees) | {f"{callee}.forward" for callee in callees}
        return any(self.code(call.func) in wanted for call in self.nodes(statement, ast.Call))


_STRING_START = re.compile(r"""([A-Za-z]*)('\'\'|\"\"\"|'|\")""")
_LAYOUT = (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT)
_INERT = (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)


def _tokens(code: str) -> list[tokenize.TokenInfo]:
    try:
        return list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return []


def _skip_blank(source: str, at: int, step: int) -> int:
    """The first index from `at` (exclusive going back, inclusive going on) that is not blank
    (spaces, tabs, line breaks, line continuations)."""
    index = at - 1 if step < 0 else at
    while 0 <= index < len(source) and source[index] in " \t\r\n\f\\":
        index += step
    return index


def is_statement(node: Node) -> bool:
    """A line or a compound statement (libcst's BaseStatement)."""
    return isinstance(node, (Line, *COMPOUND))


def fresh_name(script: TrainingScript, node: ast.AST, wanted: str) -> str:
    """`wanted`, or `wanted_2`... : a name nothing in the function (or module) around `node`
    writes or reads."""
    scope: ast.AST = script.enclosing_function(node) or script.module
    taken = identifiers(scope)
    name, count = wanted, 1
    while name in taken:
        count += 1
        name = f"{wanted}_{count}"
    return name


def identifiers(root: ast.AST) -> set[str]:
    """Every identifier written in `root`: names, attributes, keywords, definitions, imports
    (what libcst's Name nodes are)."""
    found: set[str] = set()
    for node in ast.walk(root):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, (ast.keyword, ast.arg)) and node.arg:
            found.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.alias):
            found.update(node.name.split("."))
            found.update([node.asname] if node.asname else [])
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.update(node.module.split("."))
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            found.update(node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            found.add(node.name)
    return found


def collect_nodes(root: ast.AST, kind: type[_NodeT]) -> list[_NodeT]:
    """Every node of a kind below `root` (root included), in source order."""
    found: list[_NodeT] = [node for node in ast.walk(root) if isinstance(node, kind)]
    found.sort(key=_start)  # (stable: a node before its first child at the same place)
    return found


def _start(node: ast.AST) -> tuple[int, int]:
    return getattr(node, "lineno", 0), getattr(node, "col_offset", 0)


def call_arguments(call: ast.Call) -> list[ast.expr | ast.keyword]:
    """The arguments of a call in source order (positional and keyword ones interleaved)."""
    found: list[ast.expr | ast.keyword] = [*call.args, *call.keywords]
    return sorted(found, key=_start)


def argument_values(call: ast.Call) -> list[ast.expr]:
    return [a.value if isinstance(a, ast.keyword) else a for a in call_arguments(call)]


def _class_name(func: ast.expr) -> str | None:
    """The capitalised name a call is of (`Shampoo`, `opt.Shampoo`): a class, by convention."""
    last = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return last if isinstance(last, str) and last[:1].isupper() else None


def params_argument(call: ast.Call) -> ast.expr | None:
    return argument(call, 0, "params")


def argument(call: ast.Call, position: int, keyword: str) -> ast.expr | None:
    """The argument a call passes for a parameter (by keyword, else by position; not through
    `*args`)."""
    for given in call.keywords:
        if given.arg == keyword:
            return given.value
    positional = []
    for arg in call.args:
        if isinstance(arg, ast.Starred):
            break
        positional.append(arg)
    return positional[position] if position < len(positional) else None


def root(expression: ast.expr) -> ast.expr:
    """`model` for `model.encoder.layer`; the expression itself otherwise."""
    while isinstance(expression, ast.Attribute) and not (
        isinstance(expression.value, ast.Name) and expression.value.id in ("self", "cls")
    ):
        expression = expression.value
    return expression


def _is_dtype(text: str) -> bool:
    return text.startswith("torch.") and text.split(".")[-1] in (
        "bfloat16", "float16", "half", "float32", "float", "float64", "double", "bf16",
    )  # fmt: skip


def _is_backward_call(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Attribute) and call.func.attr == "backward"


def keyword_added(script: TrainingScript, call: ast.Call, keyword: str) -> str | None:
    """The call's text with `keyword` as its last argument, laid out as its arguments are: on a
    line of its own where the last one has one (after that line's comma and comment), else after
    the last one. Its continuation lines are relative to the indentation of the line the call
    starts on (libcst indents them by the block's again). None where the text does not end the
    call."""
    text = _keyword_added(script, call, keyword)
    if text is None or "\n" not in text:
        return text
    line = script.lines.lines[call.lineno - 1]
    indent = line[: len(line) - len(line.lstrip())]
    first, *rest = text.split("\n")
    return "\n".join([first, *(r[len(indent) :] if r.startswith(indent) else r for r in rest)])


def _keyword_added(script: TrainingScript, call: ast.Call, keyword: str) -> str | None:
    source = script.source
    start, end = script.offsets(call, parentheses=False)
    if not source[start:end].endswith(")"):
        return None
    arguments: list[ast.expr | ast.keyword] = [*call.args, *call.keywords]
    if not arguments:
        return source[start : end - 1] + keyword + ")"
    last = max(arguments, key=_end)
    last_start, last_end = script.offsets(last)
    line_start = source.rfind("\n", 0, last_start) + 1
    own_line = last.lineno != call.lineno and not source[line_start:last_start].strip()
    if not own_line:
        return source[start:last_end] + ", " + keyword + source[last_end:end]
    indent = source[line_start:last_start]
    rest = source[last_end:end]
    if rest.lstrip().startswith(","):
        line_end = source.find("\n", last_end, end)
        if line_end < 0:
            return None
        return source[start:line_end] + "\n" + indent + keyword + "," + source[line_end:end]
    return source[start:last_end] + ",\n" + indent + keyword + source[last_end:end]


def _end(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "end_lineno", 0) or 0, getattr(node, "end_col_offset", 0) or 0)


def _innermost_call(value: ast.expr) -> ast.expr:
    """The call a chain of method calls starts from: `copy.deepcopy(model)` in
    `copy.deepcopy(model).requires_grad_(False).eval()`."""
    while (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and isinstance(value.func.value, ast.Call)
    ):
        value = value.func.value
    return value
