"""Plans the rewrite of one Python file to a recipe, on the standard library's `ast`: which legacy
writes go, what the recipe puts in and where, what becomes of the flag's reads, and what is left
to do by hand (the findings). The scan asks it whether a file's own enabling writes can go; the
rewrite applies its plan (apply.py).

Common to all modes: every write of a legacy flag that the user may have fixed (safe, or unsafe
with --unsafe-fixes) is removed. If some write enabled the flag, the mode's recipe (its facts in
rules/modes.toml, see `xlamigrate.recipes`) goes in under the same condition: its environment
edits (NEURON_RT_STOCHASTIC_ROUNDING_EN where the flag was set, or an explicit one removed, or
--auto-cast=none merged into NEURON_CC_FLAGS), the model cast to bf16 (with the runtime's input
cast) before its optimizer is built, the optimizer wrapped in FP32ParamsCopy, the forward pass
wrapped in torch.autocast. Where that recipe cannot go in whole (no model to cast, no backward
pass, a condition that cannot be written there), the enabling writes stay, manual: removing them
would train in FP32 with nothing in their place.
"""

from __future__ import annotations

import ast
import functools
import posixpath
import re
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import TypeVar

from xlamigrate.catalogue import Catalogue
from xlamigrate.findings import (
    LEGACY_FLAG_STAYS_WITH_AUTOCAST,
    WRITE_NOT_REMOVABLE,
    manual_finding,
    with_note,
)
from xlamigrate.flagvalue import RECIPE_FLAGS
from xlamigrate.kinds.python.astwalk import DictItem, string_value
from xlamigrate.kinds.python.conditions import (
    Condition,
    Expression,
    conjunction,
    disjunction,
    enabling_condition,
    enclosing_tests,
    expressible_at,
    expression,
    negated,
)
from xlamigrate.kinds.python.envaccess import EnvAccess, FlagMention
from xlamigrate.kinds.python.plan import Plan
from xlamigrate.kinds.python.reads import ReadPlan, float32_spelling, read_outcomes
from xlamigrate.kinds.python.training import (
    BF16_SPELLINGS,
    Block,
    Line,
    Node,
    OptimizerSite,
    Statement,
    TrainingScript,
    collect_nodes,
    fresh_name,
    keyword_added,
)
from xlamigrate.masterweights import MasterWeightsOption, master_weights_option
from xlamigrate.modelowners import model_owner
from xlamigrate.neuronflags import NEURON_CC_FLAGS, STOCHASTIC_ROUNDING, merge_auto_cast_none
from xlamigrate.optimizer_facts import UNWRAPPABLE
from xlamigrate.optimizerfactories import OptimizerFactory, Zero1Switch, optimizer_factory
from xlamigrate.project.model import Configuration, ScriptRecipe
from xlamigrate.recipes import EnvironmentEdits
from xlamigrate.request import FileContext, RewriteRequest
from xlamigrate.results import Finding, Fix, Span

_Item = TypeVar("_Item")
RUNTIME = "xlamigrate_runtime"
_AUTOCAST = 'torch.autocast(dtype=torch.bfloat16, device_type="xla")'
DOWNCAST = "XLA_DOWNCAST_BF16"
_GATE_FUNCTION = "bf16_recipe"  # "the recipe is on", where read in a launched function
# The rules the planner emits, by the names rules/ gives them.
MODEL_NOT_IDENTIFIED = "XM401"
FORWARD_PASS_NOT_LOCATED = "XM402"
CONDITION_NOT_EXPRESSIBLE = "XM403"
OPTIMIZER_NOT_IDENTIFIED = "XM406"
OPTIMIZER_NOT_WRAPPABLE = "XM408"
MODEL_CAST_BY_SCRIPT = "XM410"
FLAG_SET_AFTER_DEVICE_START = "XM411"  # turned on after the device started: it never acted
FLOAT64_UNDER_DOWNCAST = "XM412"  # float64 stored as float32, not known to be on the device
# What keeps a step of the recipe out of the script.
RECIPE_PROBLEMS = (
    MODEL_NOT_IDENTIFIED,
    FORWARD_PASS_NOT_LOCATED,
    CONDITION_NOT_EXPRESSIBLE,
    OPTIMIZER_NOT_IDENTIFIED,
    OPTIMIZER_NOT_WRAPPABLE,
    MODEL_CAST_BY_SCRIPT,
)
_BARE_PARENTS = (ast.If, ast.While, ast.IfExp, ast.Assert, ast.Assign, ast.Return)


@dataclass
class _Enabling:
    """An enabling write that was removed: where it stood and under which condition. A launched
    script's recipe has no write (`access` None): its condition is the signal, or none."""

    access: EnvAccess | None
    small: ast.stmt | None  # its statement, when the statement itself was removed
    condition: Condition


@dataclass
class Planner:
    path: str
    script: TrainingScript
    catalogue: Catalogue
    request: RewriteRequest
    context: FileContext
    accesses: tuple[EnvAccess, ...]
    plan: Plan = field(default_factory=Plan)
    fixed: list[Finding] = field(default_factory=list)
    remaining: list[Finding] = field(default_factory=list)
    enabling: list[_Enabling] = field(default_factory=list)
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

    def problems(self) -> list[Finding]:
        """What kept the recipe from going in whole (no model found, no backward...)."""
        return [f for f in self.remaining if f.code in RECIPE_PROBLEMS]

    def unapplied(self) -> str | None:
        """Why the recipe a launcher asked for could not go in whole (None: it did)."""
        if self.launched is None:
            return None
        problem = first_problem(self.problems())
        if problem is not None and self.framework_note:
            return f"{problem}, trained by {self.framework_note}"
        return problem

    def blocked_in_file(self) -> bool:
        """Whether the file's own enabling writes were planned away while their recipe could
        not go in whole: the flag would be gone and nothing in its place."""
        return any(e.access is not None for e in self.enabling) and bool(self.problems())

    # -- removing the legacy writes ------------------------------------------------------------

    def make_plan(self, pairs: Sequence[tuple[object, Finding]]) -> Plan:
        update_calls: dict[ast.Call, list[object]] = {}
        reads: dict[ast.AST, Finding] = {}  # by node: equal accesses are not the same read
        for item, finding in pairs:
            if isinstance(item, EnvAccess) and item.kind == "read":
                assert isinstance(item.node, ast.AST)  # (a read is an expression)
                reads[item.node] = finding
                continue
            allowed = finding.fix is not None and (
                finding.fix.applicability == "safe"
                or (finding.fix.applicability == "unsafe" and self.unsafe_fixes)
            )
            if isinstance(item, FlagMention) and allowed and self._launch_key_renamed(item):
                self.fixed.append(finding)
                continue
            if not isinstance(item, EnvAccess) or not allowed or item.kind == "read":
                self.remaining.append(finding)
                continue
            if self._after_the_device_started(item):
                continue
            if not self._remove(item, update_calls):
                self.remaining.append(
                    self._manual(WRITE_NOT_REMOVABLE, finding.span, finding.message)
                )
                continue
            self.fixed.append(finding)
        self._drop_emptied_updates(update_calls)
        if self.launched is not None:
            launched = self._launched_enabling(self.launched)
            self.enabling.append(launched)
            if launched.condition.full is not None:
                self._launched_environment(self.launched, launched.condition.full)
        if reads and self.reads_against is not None:
            self._resolve_reads(reads, self.reads_against)
        if self.enabling:
            self._apply_recipe()
        own = self._own_configurations() if self.reads_against is None else None
        if reads and own is not None:  # after the recipe: the signal goes beside its writes
            self._resolve_reads(reads, own)
        elif reads and self.reads_against is None:
            self.remaining.extend(reads.values())
        self._drop_imports_bound_where_used()
        return self.plan

    def _drop_imports_bound_where_used(self) -> None:
        """A module the plan's code names (`torch.bfloat16`) is imported at the top only where
        some of that code is outside a function that imports it itself (a Metaflow step's own
        `import torch`): there the top import would be unused, and shadowed."""
        for entry in [e for e in self.plan.imports if e[1] is None]:
            name = entry[0].split(".")[0]
            places = self._places_naming(name)
            if places and all(self._bound_in_function(place, name) for place in places):
                self.plan.imports.discard(entry)

    def _places_naming(self, name: str) -> list[ast.AST]:
        """Where the plan puts code that names `name` (the statements it goes at)."""
        word = re.compile(rf"(?<![\w.]){re.escape(name)}\b")
        anchored: list[tuple[Statement | ast.AST, Sequence[str]]] = [
            *self.plan.replacements.items(),
            *self.plan.before.items(),
            *self.plan.after.items(),
            *((first, [item]) for first, _, item in self.plan.wraps),
            *((node, [code]) for node, code in self.plan.swapped.items()),
        ]
        places: list[ast.AST] = []
        for anchor, codes in anchored:
            if any(word.search(code) for code in codes):
                places.append(anchor.body[0] if isinstance(anchor, Line) else anchor)
        return places

    def _bound_in_function(self, node: ast.AST, name: str) -> bool:
        """Whether the innermost function around `node` binds `name` itself."""
        for ancestor in self.script.ancestors(node):
            if isinstance(ancestor, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                scope = self.script.scopes.opened.get(id(ancestor))
                return scope is not None and name in scope.bindings
        return False

    def _after_the_device_started(self, access: EnvAccess) -> bool:
        """An enabling write after a tensor went to the device never took effect (torch-xla had
        read the flags): it stays, reported (XM411), and brings no recipe."""
        if access.kind != "write" or access.variable not in RECIPE_FLAGS:
            return False
        if access.value is not None and access.value.enabled is False:
            return False
        transfer = self.script.device_used_before(access.node)
        if transfer is None:
            return False
        line = self._span(transfer).line
        subject = f"{access.variable} set after line {line} (`{self.script.code(transfer)}`)"
        self.remaining.append(
            self._manual(FLAG_SET_AFTER_DEVICE_START, self._span(access.node), subject)
        )
        return True

    def _launch_key_renamed(self, mention: FlagMention) -> bool:
        """A flag written into a launch API's environment (`environment={"XLA_USE_BF16": "1"}`)
        that the project migrated: its key becomes the signal (the launched script sets the
        recipe's environment under it)."""
        node = mention.node
        if not isinstance(node, ast.Constant):
            return False
        decision = self.context.writes.get(self.script.offsets(node, parentheses=False)[0])
        spelling = self.script.simple_string(node)
        if decision is None or not decision.migrated or decision.signal is None or not spelling:
            return False
        prefix, quote = spelling
        self.plan.swapped[node] = f"{prefix}{quote}{decision.signal}{quote}"
        return True

    def _remove(self, access: EnvAccess, update_calls: dict[ast.Call, list[object]]) -> bool:
        node = access.node
        small: ast.stmt | None = None
        if isinstance(node, (DictItem, ast.keyword)):
            call = self._update_call_of(node)
            if call is None:
                return False
            self.plan.removed_elements.add(node)
            update_calls.setdefault(call, []).append(node)
        else:
            small = self.script.small_statement_of(node)
            if not is_whole_statement(small, node):
                return False
            assert small is not None
            self.plan.removed.add(small)
        if access.kind == "write" and access.variable in RECIPE_FLAGS:
            condition = enabling_condition(self.script, access)
            if condition.possible:
                self.enabling.append(_Enabling(access, small, condition))
        return True

    def _update_call_of(self, element: DictItem | ast.keyword) -> ast.Call | None:
        """The `os.environ.update(...)` call an element belongs to (via a dict or a keyword)."""
        parent = self.script.parent(element)
        if isinstance(element, DictItem):
            parent = self.script.parent(parent) if isinstance(parent, ast.Dict) else None
            if isinstance(parent, ast.keyword):
                parent = self.script.parent(parent)
        if not isinstance(parent, ast.Call):
            return None
        func = parent.func
        if isinstance(func, ast.Attribute) and func.attr == "update":
            return parent
        return None

    def _drop_emptied_updates(self, update_calls: dict[ast.Call, list[object]]) -> None:
        """An update() whose every entry went is removed whole, if it is a statement of its own."""
        removed = self.plan.removed_elements
        removed_keys = {id(e.key) for e in removed if isinstance(e, DictItem)}
        for call in update_calls:
            positional_left = any(not isinstance(arg, ast.Dict) for arg in call.args)
            dicts = [arg for arg in call.args if isinstance(arg, ast.Dict)]
            dicts += [k.value for k in call.keywords if isinstance(k.value, ast.Dict)]
            entries_left = any(
                key is None or id(key) not in removed_keys for d in dicts for key in d.keys
            )
            keywords_left = any(
                k not in removed and not isinstance(k.value, ast.Dict) for k in call.keywords
            )
            if positional_left or entries_left or keywords_left:
                continue
            small = self.script.small_statement_of(call)
            if is_whole_statement(small, call):
                assert small is not None
                self.plan.removed.add(small)

    # -- a launched script's recipe -------------------------------------------------------------

    def _launched_enabling(self, recipe: ScriptRecipe) -> _Enabling:
        """The recipe's condition: none, or the signal, read once into a module constant of the
        same name (the expression itself where the module already uses that name)."""
        if recipe.signal is None:
            return _Enabling(None, None, Condition(True, None, None, None))
        return _Enabling(None, None, Condition(True, None, self._recipe_gate(recipe), None))

    def _recipe_gate(self, recipe: ScriptRecipe) -> Expression:
        """ "The recipe is on" in this module: the signal read once into a module constant of
        its name (the read itself where the module already uses that name); a constant True
        where every launch gets the recipe."""
        if self.gate is not None:
            return self.gate
        if recipe.in_file:
            return self._signal_beside_the_writes(recipe.signal or self.request.signal)
        name = recipe.signal or self.request.signal
        here = posixpath.dirname(self.path)  # the launchers as seen from this script's folder
        launchers = [posixpath.relpath(launcher, here or ".") for launcher in recipe.launchers]
        by = ", ".join(launchers[:2]) + (" ..." if len(launchers) > 2 else "")
        flags = " / ".join(recipe.flags)
        if recipe.functions and recipe.signal is not None:  # read in the launched process
            return self._gate_function(recipe.signal, recipe.functions, by, flags)
        if recipe.signal is None:
            value = "True"
            said = f"Every launch of this script by {by} set {flags}: the recipe is always on."
        else:
            self.plan.imports.add(("os", None))
            value = f'os.environ.get("{recipe.signal}") == "1"'
            said = f"Set by {by} where it used to set {flags}."
        # (within black's and ruff's default line length)
        comment = textwrap.fill(said, 88, initial_indent="# ", subsequent_indent="# ") + "\n"
        if re.search(rf"\b{name}\b", self.script.source):
            self.gate = Expression(value)
        else:
            self.gate = _name(name)
            self._after_imports(f"\n{comment}{name} = {value}\n")  # apart from the imports
        return self.gate

    def _gate_function(
        self, signal: str, functions: Sequence[str], by: str, flags: str
    ) -> Expression:
        """Where the launched processes start in functions of this file (a Ray worker loop),
        the signal is read there, when called: a module constant would be read by the process
        that launches them (and a Ray worker gets it pickled from there)."""
        self.plan.imports.add(("os", None))
        read = f'os.environ.get("{signal}") == "1"'
        name = _GATE_FUNCTION
        if re.search(rf"\b{name}\b", self.script.source):
            self.gate = Expression(read)
            return self.gate
        started = ", ".join(f"{f}()" for f in functions)
        said = (
            f"Set by {by} where it used to set {flags}, in the processes that run {started}:"
            " read there, not at import."
        )
        comment = textwrap.fill(said, 88, initial_indent="# ", subsequent_indent="# ") + "\n"
        self._after_imports(f"\n\n{comment}def {name}():\n    return {read}\n")
        self.gate = Expression(f"{name}()")
        return self.gate

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

    def _launched_environment(self, script: ScriptRecipe, gate: Expression) -> None:
        """Under the signal, the script sets what the launcher's flag implied on its platform
        (with no signal the launcher itself sets it, where the flag was)."""
        if script.signal is None:
            return
        environment = self.recipe.environment_on(script.platform)
        code = ""
        if environment.rounding_on and not (
            script.rounding_elsewhere or self._sets_rounding_always()
        ):
            code = f'os.environ["{STOCHASTIC_ROUNDING}"] = "1"\n'
        elif environment.rounding_off and (script.rounding_elsewhere or self._rounding_on()):
            code = f'os.environ["{STOCHASTIC_ROUNDING}"] = "0"  # FP32 masters replace rounding\n'
        elif environment.auto_cast_none and not self._writes(NEURON_CC_FLAGS):
            code = auto_cast_code("os.environ")  # (else merged after the file's own writes)
        if not code:
            return
        self.plan.imports.add(("os", None))
        if not script.functions:
            self._after_imports(under(gate, [code]))
            return
        for function in self._functions(script.functions):  # where its process starts
            block = self.script.block(function, "body")
            if block is None or block.suite or not block.body:
                continue
            anchor = after_imports_in(self.script, block)  # (after its docstring, imports)
            if anchor is not None:
                self.plan.insert_after(anchor, [under(gate, [code])])
            else:
                self.plan.insert_before(block.body[0], [under(gate, [code])])

    def _functions(self, names: Sequence[str]) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
        return [
            node
            for node in ast.walk(self.script.module)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names
        ]

    # -- reads of the flag ----------------------------------------------------------------------

    def _own_configurations(self) -> ScriptRecipe | None:
        """For a file that turns the flag on itself: its configurations (the flags its writes
        that always run set, with each conditional write's on top, and without them), as the
        recipe its reads resolve against; None where it removed no enabling write."""
        own = [e for e in self.enabling if e.access is not None]
        if not own:
            return None
        always = [e for e in own if e.condition.full is None]
        base = frozenset(e.access.variable for e in always if e.access is not None)
        where = tuple(f"line {self._span(e.access.node).line}" for e in own if e.access)
        configurations = []
        for enabling in own:
            if enabling.condition.full is not None and enabling.access is not None:
                line = f"line {self._span(enabling.access.node).line}"
                configurations.append(Configuration(base | {enabling.access.variable}, (line,)))
        if configurations:
            configurations.append(Configuration(base))
        else:
            configurations.append(Configuration(base, where))
        flags = tuple(sorted({e.access.variable for e in own if e.access is not None}))
        return ScriptRecipe(
            self.path,
            self.context.signal,
            flags,
            where,
            configurations=tuple(dict.fromkeys(configurations)),
            in_file=True,
        )

    def _resolve_reads(self, findings: dict[ast.AST, Finding], recipe: ScriptRecipe) -> None:
        """Each flag test of the module, per `read_outcomes`: it reads the recipe's gate, or
        its float64 branch goes, or it stays for a hand edit, with its values per configuration."""
        for outcome in read_outcomes(
            self.script, self.accesses, findings, recipe, self.request.signal
        ):
            read = outcome.read
            if not outcome.resolved:
                self.remaining.extend(outcome.findings)
                continue
            self.fixed.extend(outcome.findings)
            if read.resolution == "collapse":
                self._collapse(read)
                continue
            gate = self._recipe_gate(recipe)
            self.plan.swapped[read.top] = _gate_code(gate, read, self.script)
            for node in read.float32:
                self.plan.swapped[node] = float32_spelling(self.script, node)

    def _collapse(self, read: ReadPlan) -> None:
        conditional = read.collapsed
        if isinstance(conditional, ast.IfExp):
            kept = conditional.body if read.keep_body else conditional.orelse
            code = self.script.code(kept)
            if self.script.has_parentheses(conditional) and not self.script.has_parentheses(kept):
                start, end = self.script.offsets(conditional)
                inner_start, inner_end = self.script.offsets(conditional, parentheses=False)
                source = self.script.source
                code = f"{source[start:inner_start]}{code}{source[inner_end:end]}"
            self.plan.swapped[conditional] = code
        elif isinstance(conditional, ast.If):
            self.plan.collapsed[conditional] = read.keep_body

    def _after_imports(self, code: str) -> None:
        anchor = after_imports(self.script)
        if anchor is not None:
            self.plan.insert_after(anchor, [code])
        elif self.script.top.body:
            self.plan.insert_before(self.script.top.body[0], [code])

    # -- the recipe ----------------------------------------------------------------------------

    def _apply_recipe(self) -> None:
        """The recipe's parts, each as the recipe says: its environment edits, the model's cast
        (with the master weights), the forward pass under autocast."""
        self._environment_edits(self.own_environment)
        if self.recipe.casts_model:
            self._cast_models(wrap_optimizer=self.recipe.fp32_masters)
        if self.recipe.autocast_forward:
            self._autocast_regions()
        if not self.recipe.casts_model:
            self._keep_models_float32()
        if self._downcast():
            self._float64_on_the_device_float32()

    def _downcast(self) -> bool:
        """Whether XLA_DOWNCAST_BF16 is among the flags the recipe replaces here."""
        own = any(e.access is not None and e.access.variable == DOWNCAST for e in self.enabling)
        return own or (self.launched is not None and DOWNCAST in self.launched.flags)

    def _float64_on_the_device_float32(self) -> None:
        """Under XLA_DOWNCAST_BF16 the device computed float64 as float32: `.double()`,
        `torch.float64` and `torch.double` in statements that use the device or the model
        become float32 where the recipe applies (a float64 kept on the CPU stays)."""
        script = self.script
        devices = script.device_names()
        models = {script.code(site.model) for site in script.optimizer_sites()}
        models |= {
            script.code(script.root_module(site.model, site.statement))
            for site in script.optimizer_sites()
        }
        for node in script.float64_spellings():
            if node in self.plan.swapped or not self._in_scope(node):
                continue
            statement = script.statement_of(node)
            if statement is None or not script.uses_device_or_model(statement, devices, models):
                self._float64_reported(node)
                continue
            ok, condition = self._combined_condition(statement, self._span(node))
            if not ok:
                self._float64_reported(node)
                continue
            call = script.parent(node)
            if condition is None:
                self.plan.swapped[node] = float32_spelling(script, node)
            elif isinstance(call, ast.Call) and call.func is node:  # x.double()
                receiver = script.code(node.value)
                dtype = f"torch.float32 if {condition.code} else torch.float64"
                self.plan.swapped[call] = f"{receiver}.to({dtype})"
                self.plan.imports.add(("torch", None))
            else:  # (parenthesized unless it is an argument of its own)
                chosen = f"torch.float32 if {condition.code} else {script.code(node)}"
                alone = isinstance(call, ast.keyword) or (
                    isinstance(call, ast.Call) and node in call.args
                )
                self.plan.swapped[node] = chosen if alone else f"({chosen})"

        for move in script.numpy_moves(devices):
            if self._in_scope(move):
                what = "a numpy array (float64 unless made otherwise) moved to the device"
                self._float64_reported(move, f"{what}: `{script.code(move)}`")

    def _float64_reported(self, node: ast.AST, subject: str | None = None) -> None:
        """XM412: float64 the rewrite cannot tell is on the device, named with its line; not
        the dtype of a tensor made on the CPU (`torch.zeros(1, dtype=torch.float64)`, no
        `device=`), which the flag never touched."""
        keyword = self.script.parent(node)
        factory = self.script.parent(keyword) if isinstance(keyword, ast.keyword) else None
        if (
            isinstance(keyword, ast.keyword)
            and keyword.arg == "dtype"
            and isinstance(factory, ast.Call)
            and any(name.startswith("torch.") for name in self.script.qualified_names(factory.func))
            and not any(k.arg == "device" for k in factory.keywords)
        ):
            return
        if subject is None:
            call = self.script.parent(node)
            spelled = call if isinstance(call, ast.Call) and call.func is node else node
            subject = f"float64: `{self.script.code(spelled)}`"
        self.remaining.append(self._manual(FLOAT64_UNDER_DOWNCAST, self._span(node), subject))

    def _environment_edits(self, environment: EnvironmentEdits) -> None:
        """Stochastic rounding set where the flag was, or an explicit "1" removed; --auto-cast=none
        merged into NEURON_CC_FLAGS unless a legacy flag stays set beside it (XM405)."""
        if environment.rounding_on:
            self._environment_statement(stochastic_rounding_code, STOCHASTIC_ROUNDING)
        if environment.rounding_off and (self.launched is None or self.launched.signal is None):
            # every configuration is the recipe's: its explicit rounding "1" goes (under the
            # signal, rounding is turned off there instead, and the other configurations keep
            # their writes)
            self._remove_stochastic_rounding_writes()
        if environment.auto_cast_none:
            staying = self._legacy_writes_staying()
            if staying is None:
                self._neuron_cc_flags()
            else:
                self.remaining.append(
                    self._manual(
                        LEGACY_FLAG_STAYS_WITH_AUTOCAST, self._span(staying.node), staying.variable
                    )
                )

    def _legacy_writes_staying(self) -> EnvAccess | None:
        """A write that may turn a legacy flag on and is not being removed (noqa'd, say)."""
        plan = self.plan
        for access in self.accesses:
            if access.kind != "write" or access.variable not in RECIPE_FLAGS:
                continue
            if access.target != "process" or (access.value and access.value.enabled is False):
                continue
            small = self.script.small_statement_of(access.node)
            removed = (
                access.node in plan.removed_elements
                or small in plan.removed
                or small in plan.replacements
            )
            if not removed:
                return access
        return None

    def _first(self) -> _Enabling:
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

    def _environment_statement(
        self, code: Callable[[str, str], str], unless_set: str | None = None
    ) -> None:
        """Puts `code(receiver)` where each enabling write stood, one per block (exclusive
        branches each get it), unless the file already writes `unless_set`; under the write's
        own value condition."""
        if any(a.variable == unless_set and a.kind == "write" for a in self.accesses):
            return
        done: set[int] = set()  # the blocks that already have it
        for enabling in sorted(
            (e for e in self.enabling if e.access is not None),
            key=lambda e: self._span(e.access.node).line if e.access else 0,
        ):
            access = enabling.access
            assert access is not None
            line = self.script.statement_of(access.node)
            block = id(self.script.parent(line)) if line is not None else 0
            if block in done:
                continue
            done.add(block)
            statement = code(self._receiver(access), access.form)
            if enabling.condition.in_place is not None:
                statement = under(enabling.condition.in_place, [statement])
            anchor = enabling.small
            if anchor is not None and anchor not in self.plan.replacements:
                self.plan.replacements[anchor] = [statement]
                self.plan.removed.discard(anchor)
            elif line is not None:
                self.plan.insert_before(line, [statement])

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

    def _writes(self, variable: str) -> bool:
        return any(a.variable == variable and a.kind == "write" for a in self.accesses)

    def _sets_rounding_always(self) -> bool:
        """Whether the module sets stochastic rounding in every configuration (a write under
        `if args.amp:` serves another configuration, not the recipe's)."""
        return any(
            a.variable == STOCHASTIC_ROUNDING
            and a.kind == "write"
            and not enclosing_tests(self.script, _anchor(a.node))
            for a in self.accesses
        )

    def _rounding_on(self) -> bool:
        """Whether the module itself may turn stochastic rounding on."""
        return any(
            a.variable == STOCHASTIC_ROUNDING
            and a.kind == "write"
            and (a.value is None or a.value.enabled is not False)
            for a in self.accesses
        )

    def _remove_stochastic_rounding_writes(self) -> None:
        for access in self.accesses:
            if access.variable != STOCHASTIC_ROUNDING or access.kind != "write":
                continue
            if access.value is None or access.value.enabled is not True:
                continue  # only an explicit "1": the master weights replace rounding
            small = self.script.small_statement_of(access.node)
            if is_whole_statement(small, access.node):
                assert small is not None
                self.plan.removed.add(small)

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

    def _cast_models(self, wrap_optimizer: bool) -> None:
        script = self.script
        sites = [s for s in script.optimizer_sites() if self._in_scope(s.statement)]
        targets: list[tuple[Line, ast.expr, bool]] = [
            (site.statement, model, True)
            for site in sites
            if self._nameable(
                model := script.root_module(site.model, site.statement), site.statement
            )
        ]
        for statement, model, _ in list(targets):  # its copies made before the cast
            for copied, copy in script.copies_of(model, statement):
                if self._in_scope(copied):
                    targets.append((copied, copy, False))
        if targets:  # other modules moved to the device and run there (a frozen teacher)
            named = {script.code(model) for _, model, _ in targets}
            called = {c.func.id for c in script.calls() if isinstance(c.func, ast.Name)}
            for statement, moved in script.model_moves():
                if (
                    isinstance(moved, ast.Name)
                    and moved.id in called
                    and moved.id not in named
                    and self._in_scope(statement)
                ):
                    named.add(moved.id)
                    targets.append((statement, moved, False))
        if not targets:  # the model handed to a framework's trainer, cast before it
            for statement, model, owner, call in script.owner_models():
                if not self._in_scope(statement) or not self._nameable(model, statement):
                    continue
                targets.append((statement, model, True))
                if wrap_optimizer:  # its optimizer is the framework's: its knob, by hand
                    self.framework_note = f"{owner.name}'s `{script.code(call.func)}`"
                    self.framework_note += f": {owner.fp32_masters}"
                    subject = f"`{script.code(call.func)}` ({owner.fp32_masters})"
                    self.remaining.append(
                        self._manual(OPTIMIZER_NOT_WRAPPABLE, self._span(statement), subject)
                    )
        if not targets:
            for statement, model in script.model_moves():
                if self._in_scope(statement):
                    targets.append((statement, model, False))
            if wrap_optimizer and targets and not sites:  # cast, yet no master weights: say so
                subject = f"the optimizer of `{script.code(targets[0][1])}`"
                subject += self._unrecognised_optimizers()
                self.remaining.append(
                    self._manual(OPTIMIZER_NOT_IDENTIFIED, self._span(targets[0][0]), subject)
                )
        if not targets:
            subject = self._trained_by_framework("the model to cast") or "the model to cast"
            subject += self._unrecognised_optimizers()
            self.remaining.append(self._manual(MODEL_NOT_IDENTIFIED, self._first_span(), subject))
            return

        def model_key(target: Node, model: ast.expr) -> tuple[int, str]:
            # one model per name and function: `model` in `train()` is not `model` in `test()`
            return id(script.enclosing_function(target)), script.code(model)

        done: set[tuple[int, str]] = set()
        for target, model, before in targets:
            name, key = script.code(model), model_key(target, model)
            if key in done:
                continue
            done.add(key)
            place: Statement = target
            if before:  # before every optimizer of this model (`if a: A(...) elif b: B(...)`)
                same = [t for t, m, _ in targets if model_key(t, m) == key]
                around = script.first_statement_around(same)
                if around is not None and self._nameable(model, around):
                    place = around
            ok, condition = self._combined_condition(place, self._span(place))
            if not ok:
                continue
            code: list[str] = []
            if not self._casts_where_the_recipe_is(model, condition):
                code.append(f"{name}.to(torch.bfloat16)\n")
            for fed in script.step_modules(target) if name == "self" else [name]:
                code.append(f"cast_inputs_to_module_dtype({fed}, output_dtype=torch.float32)\n")
            self.plan.imports.add(("torch", None))  # torch.bfloat16, torch.float32
            self.plan.imports.add((RUNTIME, "cast_inputs_to_module_dtype"))
            block = [under(condition, code)] if condition is not None else code
            if before:
                self.plan.insert_before(place, block)
            else:
                self.plan.insert_after(place, block)
        for site in sites:
            own = master_weights_option(script.qualified_names(site.call.func))
            if own is not None:  # ZeRO-1: its own masters take the recipe's dtype
                self._master_weights_dtype(site, own)
                continue
            factory = optimizer_factory(script.qualified_names(site.call.func))
            if factory is not None:  # the framework keeps master weights its own way
                self._factory_master_weights(site, factory)
                continue
            if not wrap_optimizer:
                continue
            name = script.code(site.call.func).rsplit(".", 1)[-1]
            if name in UNWRAPPABLE:  # the recipe cannot go in whole: its writes stay
                subject = f"`{name}` ({UNWRAPPABLE[name]})"
                self.remaining.append(
                    self._manual(OPTIMIZER_NOT_WRAPPABLE, self._span(site.statement), subject)
                )
                continue
            self._wrap_optimizer(site.call, site.statement)

    def _factory_master_weights(self, site: OptimizerSite, factory: OptimizerFactory) -> None:
        """A framework's optimizer factory: where the file's own config turns ZeRO-1 on, its
        master shards are float32 by default (fp32-copy has them), and full-bf16 makes them
        bf16 where the recipe applies; elsewhere fp32-copy names the framework's knob."""
        zero1 = factory.zero1
        if zero1 is not None and self._zero1_enabled(zero1):
            if not self.recipe.fp32_masters:
                entry = MasterWeightsOption(
                    factory.name, frozenset(), zero1.dtype_option, None, "torch.float32", ""
                )
                self._master_weights_dtype(site, entry)
            return
        if self.recipe.fp32_masters:
            self.framework_note = f"{factory.framework}'s `{factory.name}`: {factory.fp32_masters}"
            subject = f"`{factory.name}` ({factory.fp32_masters})"
            self.remaining.append(
                self._manual(OPTIMIZER_NOT_WRAPPABLE, self._span(site.statement), subject)
            )

    def _zero1_enabled(self, zero1: Zero1Switch) -> bool:
        """Whether every config call of the file turns ZeRO-1 on with a literal True."""
        script = self.script
        configs = [c for c in script.calls() if script.qualified_names(c.func) & zero1.config]
        if not configs:
            return False
        for call in configs:
            value = next((k.value for k in call.keywords if k.arg == zero1.keyword), None)
            if not isinstance(value, ast.Dict):
                return False
            enabled = [
                v
                for k, v in zip(value.keys, value.values, strict=True)
                if k is not None and string_value(k) == zero1.key
            ]
            if len(enabled) != 1 or not (
                isinstance(enabled[0], ast.Constant) and enabled[0].value is True
            ):
                return False
        return True

    def _master_weights_dtype(self, site: OptimizerSite, own: MasterWeightsOption) -> None:
        """An optimizer that keeps master shards of its own (ZeRO-1) gets their dtype as an
        argument: float32 where the recipe keeps fp32 masters, else bfloat16 where the recipe
        applies (the flag made the shards bf16 on the device) and its default elsewhere."""
        script, call = self.script, site.call
        dtype = "torch.float32" if self.recipe.fp32_masters else "torch.bfloat16"
        given = next((k.value for k in call.keywords if k.arg == own.option), None)
        if given is None and own.position is not None and len(call.args) > own.position:
            given = call.args[own.position]
        if given is not None:
            if script.code(given) != dtype and self.recipe.fp32_masters:
                subject = (
                    f"`{own.name}` ({own.option}={script.code(given)} where the recipe needs"
                    f" {dtype} master weights)"
                )
                self.remaining.append(
                    self._manual(OPTIMIZER_NOT_WRAPPABLE, self._span(site.statement), subject)
                )
            return
        ok, condition = self._combined_condition(site.statement, self._span(site.statement))
        if not ok:
            return
        value = dtype
        if condition is not None and dtype != own.default:
            value = f"{dtype} if {condition.code} else {own.default}"
        inserted = keyword_added(script, call, f"{own.option}={value}")
        if inserted is None or any(node in self.plan.swapped for node in ast.walk(call)):
            subject = f"`{own.name}` (set {own.option}={value} by hand)"
            self.remaining.append(
                self._manual(OPTIMIZER_NOT_WRAPPABLE, self._span(site.statement), subject)
            )
            return
        self.plan.imports.add(("torch", None))
        self.plan.swapped[call] = inserted

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

    def _no_forward_found(self, backward: Line, loss: str, models: Sequence[str]) -> str:
        """Why no forward pass was found before `<loss>.backward()`, for its finding."""
        script = self.script
        block = script.block_of(backward)
        body = block.body[: block.body.index(backward)] if block is not None else []
        if not any(loss in script.assigned_names(statement) for statement in body):
            return f"`{loss}` is not computed in the block of its backward (another function?)"
        if not models:
            return "no model found to look for" + (
                self._unrecognised_optimizers() or ", as no optimizer is built from its parameters"
            )
        named = ", ".join(f"`{model}`" for model in dict.fromkeys(models))
        return f"no statement before it computes `{loss}` from a call of {named}"

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

    def _casts_where_the_recipe_is(self, model: ast.expr, condition: Expression | None) -> bool:
        """Whether the script's own bf16 cast of `model` runs wherever the recipe does: with no
        test around it, or under the recipe's own condition. A cast under an option of its own
        (`if args.bf16:`) counts only where the bf16 launches pass it, which is not known."""
        script = self.script
        for call in script.bf16_casts(model):
            statement = script.small_statement_of(call)
            inline = any(
                isinstance(node, (ast.IfExp, ast.BoolOp))
                for node in script.ancestors(call)
                if statement is not None and node is not statement and isinstance(node, ast.expr)
            )
            tests = conjunction(enclosing_tests(script, call))
            if not inline and (tests is None or (condition and tests.code == condition.code)):
                return True
        return False

    def _nameable(self, model: ast.expr, at: Node) -> bool:
        """Whether code at `at` can name the module `model` names (not a comprehension's or a
        lambda's variable; not a call, which would build another one)."""
        if collect_nodes(model, ast.Call):
            return False
        return expressible_at(self.script, expression(self.script, model), model, at)

    def _wrap_optimizer(self, call: ast.Call, statement: Line) -> None:
        script = self.script
        parent = script.parent(call)
        if isinstance(parent, ast.keyword):
            parent = script.parent(parent)
        if isinstance(parent, ast.Call) and script.code(parent.func).endswith("FP32ParamsCopy"):
            return
        if script.code(call.func).endswith("FP32ParamsCopy"):
            return
        ok, condition = self._combined_condition(statement, self._span(statement))
        if not ok:
            return
        if condition is None:
            self.plan.imports.add((RUNTIME, "FP32ParamsCopy"))
            self.plan.swapped[call] = f"FP32ParamsCopy({script.code(call)})"
            return
        # Under a condition the wrapper is a statement of its own: `<target> = FP32ParamsCopy(
        # <target>)`, right only where the target holds the optimizer itself.
        small = script.small_statement_of(call)
        if isinstance(small, ast.Return) and small.value is call and len(statement.body) == 1:
            # `return Opt(...)` (a LightningModule's configure_optimizers): named, wrapped
            # under the condition, returned
            name = fresh_name(script, call, "optimizer")
            self.plan.imports.add((RUNTIME, "FP32ParamsCopy"))
            wrapped = f"{name} = FP32ParamsCopy({name})\n"
            self.plan.replacements[small] = [
                f"{name} = {script.code(call)}\n",
                under(condition, [wrapped]),
                f"return {name}\n",
            ]
            return
        assigned = isinstance(small, ast.Assign) and small.value is call
        target = small.targets[0] if isinstance(small, ast.Assign) else None
        if not assigned or not isinstance(target, (ast.Name, ast.Attribute)):
            self.remaining.append(
                self._manual(
                    CONDITION_NOT_EXPRESSIBLE, self._span(statement), "the optimizer wrapper"
                )
            )
            return
        self.plan.imports.add((RUNTIME, "FP32ParamsCopy"))
        name = script.code(target)
        wrapped = f"{name} = FP32ParamsCopy({name})\n"
        self.plan.insert_after(statement, [under(condition, [wrapped])])

    def _neuron_cc_flags(self) -> None:
        """Edits the file's NEURON_CC_FLAGS literals when the flag was on unconditionally;
        else appends `--auto-cast=none` after the file's last NEURON_CC_FLAGS write (so it is
        not overwritten) or where the flag was set."""
        writes = [a for a in self.accesses if a.variable == NEURON_CC_FLAGS and a.kind == "write"]
        literal_writes = [
            a for a in writes if a.value_node is not None and string_value(a.value_node) is not None
        ]
        unconditional = all(e.condition.full is None for e in self.enabling)
        if literal_writes and unconditional and len(literal_writes) == len(writes):
            for access in literal_writes:
                assert access.value_node is not None
                self._merge_literal(access.value_node)
            return
        if not writes:
            self._environment_statement(auto_cast_code)
            return
        last = max(writes, key=lambda a: self._span(a.node).line)
        line = self.script.statement_of(_anchor(last.node))
        if line is None:
            return
        ok, condition = self._combined_condition(line, self._span(line))
        if not ok:
            return
        statement = auto_cast_code(self._receiver(last), last.form)
        self.plan.insert_after(line, [under(condition, [statement])] if condition else [statement])

    def _merge_literal(self, literal: ast.expr) -> None:
        """Edits a NEURON_CC_FLAGS literal in place, keeping its quotes where they still fit."""
        text = string_value(literal)
        assert text is not None
        merged = merge_auto_cast_none(text)
        if merged == text:
            return
        written = self.script.simple_string(literal)
        if written is not None and written[1] not in merged and "\\" not in merged:
            prefix, quote = written
            self.plan.swapped[literal] = f"{prefix}{quote}{merged}{quote}"
        else:
            self.plan.swapped[literal] = repr(merged)

    def _autocast_regions(self) -> None:
        script = self.script
        self.plan.imports.add(("torch", None))
        models = [
            script.code(script.root_module(site.model, site.statement))
            for site in script.optimizer_sites()
        ]
        backwards = [b for b in script.backward_statements() if self._in_scope(b[0])]
        steps = [s for s in script.train_step_statements() if self._in_scope(s)]
        if not backwards and steps:  # the framework runs forward and backward in one call
            for step in steps:
                self._autocast_around((step,), "around the framework's training step")
            return
        returns = [r for r in script.loss_returns() if self._in_scope(r[0])]
        if not backwards and returns:  # the framework backpropagates what its step returns
            for returned, loss in returns:
                callees = script.self_callees(returned)
                region = script.forward_region(returned, loss, callees)
                if region is None:
                    subject = f"the forward pass before `return {loss}`"
                    self.remaining.append(
                        self._manual(FORWARD_PASS_NOT_LOCATED, self._span(returned), subject)
                    )
                    continue
                self._autocast_around(region.statements, f"before `return {loss}`")
            return
        if not backwards:
            where = self._first_span()
            subject = (
                self._trained_by_framework("the forward pass") or "no `<loss>.backward()` found"
            )
            self.remaining.append(self._manual(FORWARD_PASS_NOT_LOCATED, where, subject))
            return
        handled = {statement for statement, _ in backwards}
        for call in script.backward_calls():  # `f(x).backward()`, `a = 1; b.backward()`
            if not self._in_scope(call):
                continue
            if script.statement_of(call) not in handled and not script.in_autocast(call):
                subject = f"the forward pass before `{script.code(call.func)}()`"
                self.remaining.append(
                    self._manual(FORWARD_PASS_NOT_LOCATED, self._span(call), subject)
                )
        for backward, loss in backwards:
            candidates = models + script.model_parameter_names(backward)
            region = script.forward_region(backward, loss, candidates)
            if region is None:
                cause = self._no_forward_found(backward, loss, candidates)
                subject = f"the forward pass before `{script.code(backward.body[0])}`; {cause}"
                self.remaining.append(
                    self._manual(FORWARD_PASS_NOT_LOCATED, self._span(backward), subject)
                )
                continue
            self._autocast_around(region.statements, f"before {loss}.backward()")
        copies = [
            script.code(copy)
            for site in script.optimizer_sites()
            for _, copy in script.copies_of(
                script.root_module(site.model, site.statement), site.statement
            )
        ]
        moved = [script.code(model) for _, model in script.model_moves()]  # (a teacher)
        self._other_forwards_under_autocast([*models, *copies, *moved])

    def _other_forwards_under_autocast(self, models: Sequence[str]) -> None:
        """The model's other forwards (an evaluation under `no_grad`, a test loop) ran bf16 under
        the flag too: each goes under autocast where the recipe applies, or is reported."""
        script = self.script
        names = {name for name in models if name.isidentifier()}
        if not names:
            return
        for call in script.calls():
            func = call.func
            if not isinstance(func, ast.Name) or func.id not in names or not self._in_scope(call):
                continue
            if script.in_autocast(call) or self._wrapped(call) or self._reported(call):
                continue
            line = script.statement_of(call)
            if isinstance(line, Line) and len(line.body) == 1:
                self._autocast_around((line,), f"`{script.code(call)}`")
            else:
                subject = f"the forward pass `{script.code(call)}`"
                self.remaining.append(
                    self._manual(FORWARD_PASS_NOT_LOCATED, self._span(call), subject)
                )

    def _reported(self, node: Node) -> bool:
        """Whether an XM402 already stands on the node's line (a training forward)."""
        line = self._span(node).line
        return any(
            f.code == FORWARD_PASS_NOT_LOCATED and f.span.line == line for f in self.remaining
        )

    def _wrapped(self, node: Node) -> bool:
        """Whether the plan already puts `node` under autocast (in a planned `with`)."""
        statement = self.script.statement_of(node)
        ancestors = {id(a) for a in self.script.ancestors(node)}
        for first, last, _ in self.plan.wraps:
            block = self.script.block_of(first)
            if block is None:
                continue
            start, end = block.body.index(first), block.body.index(last)
            for inside in block.body[start : end + 1]:
                if inside is statement or id(inside) in ancestors:
                    return True
        return False

    def _autocast_around(self, statements: Sequence[Statement], where: str) -> None:
        """The statements under autocast where the recipe applies: in a `with` of their own,
        or the script's own autocast region widened to the recipe's configurations."""
        first, last = statements[0], statements[-1]
        own = self.script.autocast_calls_over(statements)
        ok, condition = self._combined_condition(first, self._span(first))
        if not ok:
            return
        if own:
            self._own_autocast(own, condition, where)
            return
        enabled = f", enabled={condition.as_argument()}" if condition is not None else ""
        self.plan.wraps.append((first, last, _AUTOCAST.replace(")", f"{enabled})")))

    def _keep_models_float32(self) -> None:
        """A recipe that keeps the model float32 (autocast) turns the script's own bf16 casts of
        it off where the recipe is on (`if not BF16_RECIPE:` around the cast): under an option
        the bf16 launches pass, the model would stay bf16 beside autocast."""
        script = self.script
        models = [site.model for site in script.optimizer_sites()]
        models += [model for _, model in script.model_moves()]
        done: set[ast.Call] = set()
        for model in models:
            for call in script.bf16_casts(model):
                if call in done or not self._in_scope(call):
                    continue
                done.add(call)
                small = script.small_statement_of(call)
                whole = isinstance(small, (ast.Expr, ast.Assign)) and small.value is call
                line = script.statement_of(call)
                subject = f"`{script.code(call)}`"
                if not whole or not isinstance(line, Line) or len(line.body) != 1:
                    self.remaining.append(
                        self._manual(MODEL_CAST_BY_SCRIPT, self._span(call), subject)
                    )
                    continue
                ok, condition = self._combined_condition(line, self._span(line))
                if not ok:
                    continue
                if condition is None:
                    self.remaining.append(
                        self._manual(MODEL_CAST_BY_SCRIPT, self._span(call), subject)
                    )
                    continue
                assert small is not None
                kept = script.code(small) + "\n"
                self.plan.replacements[small] = [under(negated(condition), [kept])]

    def _own_autocast(
        self, calls: Sequence[ast.Call], condition: Expression | None, where: str
    ) -> None:
        """The script's own autocast region is the recipe where it is on in every configuration
        that gets the recipe: as written (no `enabled=`, or the recipe's own gate), or with its
        `enabled=` widened by the gate (`enabled=args.amp or BF16_RECIPE`); an option the bf16
        launches never pass would otherwise leave them in float32."""
        script = self.script
        for call in calls:
            keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}
            dtype = keywords.get("dtype")
            positional = len(call.args) > 1 or any(k.arg is None for k in call.keywords)
            if positional or (dtype is not None and script.code(dtype) not in BF16_SPELLINGS):
                subject = f"the script's own `{script.code(call.func)}(...)` {where}"
                self.remaining.append(
                    self._manual(FORWARD_PASS_NOT_LOCATED, self._span(call), subject)
                )
                continue
            enabled = keywords.get("enabled")
            if enabled is None or (isinstance(enabled, ast.Constant) and enabled.value is True):
                continue
            if condition is not None and script.code(enabled) == condition.code:
                continue  # (already the recipe's gate: a second rewrite)
            if condition is None:
                self.plan.swapped[enabled] = "True"
                continue
            own = script.code(enabled)
            if isinstance(enabled, (ast.IfExp, ast.Lambda, ast.NamedExpr)):
                own = f"({own})"
            gate = condition.as_argument()
            if not condition.atomic and not isinstance(
                condition.node, (ast.Compare, ast.BoolOp, ast.UnaryOp)
            ):
                gate = f"({gate})" if not gate.startswith("(") else gate
            self.plan.swapped[enabled] = f"{own} or {gate}"

    # -- findings ------------------------------------------------------------------------------

    def _span(self, node: object) -> Span:
        return self.script.span(node)  # type: ignore[arg-type]

    def _manual(self, code: str, span: Span, subject: str) -> Finding:
        return manual_finding(self.catalogue, code, self.path, span, subject)


def first_problem(problems: Sequence[Finding]) -> str | None:
    if not problems:
        return None
    first = min(problems, key=lambda f: f.sort_key)
    return f"{first.code} at line {first.span.line}"


def kept_enabling(
    pairs: Sequence[tuple[_Item, Finding]], planner: Planner
) -> list[tuple[_Item, Finding]]:
    """The pairs with each enabling write the planner removed made manual: it stays, and its
    finding says which part of the recipe could not go in. So are the enabling writes it left
    (an unsafe fix not asked for): with the recipe out, no option would remove them."""
    from xlamigrate.kinds.python.filefindings import removable_enabling

    enabling = {id(e.access) for e in planner.enabling if e.access is not None}
    enabling |= {
        id(item)
        for item, f in pairs
        if isinstance(item, (EnvAccess, FlagMention)) and removable_enabling(item, f)
    }
    codes = ", ".join(sorted({f.code for f in planner.problems()}))
    note = (
        f"kept: the recipe could not be applied here (see {codes}); apply it by hand, then"
        " remove this write"
    )
    return [
        (item, replace(f, message=with_note(f.message, note), fix=Fix("manual")))
        if id(item) in enabling
        else (item, f)
        for item, f in pairs
    ]


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


def _gate_code(gate: Expression, read: ReadPlan, script: TrainingScript) -> str:
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


def _name(name: str) -> Expression:
    return Expression(name, node=ast.Name(id=name))


def _anchor(node: object) -> Node:
    """The ast node an access stands at (a dict entry: its key)."""
    if isinstance(node, DictItem):
        return node.key
    return node  # type: ignore[return-value]
