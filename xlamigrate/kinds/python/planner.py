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

This module removes the writes, places a launched script's recipe behind its signal and
resolves the reads; each step of the recipe is a module of recipe_steps/ (the state they share,
planstate.py).
"""

from __future__ import annotations

import ast
import posixpath
import re
import textwrap
from collections.abc import Sequence
from dataclasses import replace
from typing import TypeVar

from xlamigrate.findings import (
    WRITE_NOT_REMOVABLE,
    with_note,
)
from xlamigrate.flagvalue import RECIPE_FLAGS
from xlamigrate.kinds.python.astwalk import DictItem
from xlamigrate.kinds.python.conditions import (
    Condition,
    Expression,
    enabling_condition,
)
from xlamigrate.kinds.python.envaccess import EnvAccess, FlagMention
from xlamigrate.kinds.python.plan import Plan
from xlamigrate.kinds.python.planstate import (
    RemovedWrite,
    after_imports,
    after_imports_in,
    auto_cast_code,
    gate_code,
    is_whole_statement,
    name_expression,
    under,
)
from xlamigrate.kinds.python.reads import ReadPlan, float32_spelling, read_outcomes
from xlamigrate.kinds.python.recipe_steps.autocast import AutocastStep
from xlamigrate.kinds.python.recipe_steps.cast import CastStep
from xlamigrate.kinds.python.recipe_steps.environment import EnvironmentStep
from xlamigrate.kinds.python.recipe_steps.float64 import Float64Step
from xlamigrate.kinds.python.training import (
    Line,
    Statement,
)
from xlamigrate.neuronflags import NEURON_CC_FLAGS, STOCHASTIC_ROUNDING
from xlamigrate.project.model import Configuration, ScriptRecipe
from xlamigrate.recipeproblems import RECIPE_PROBLEMS
from xlamigrate.results import Finding, Fix

_Item = TypeVar("_Item")
_GATE_FUNCTION = "bf16_recipe"  # "the recipe is on", where read in a launched function
FLAG_SET_AFTER_DEVICE_START = "XM411"  # turned on after the device started: it never acted


class Planner(EnvironmentStep, CastStep, AutocastStep, Float64Step):
    """Plans one file's rewrite: the legacy writes that go, the recipe's steps (each in its module
    of recipe_steps/, run as the recipe asks), the reads, the findings left."""

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
                self.enabling.append(RemovedWrite(access, small, condition))
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

    def _launched_enabling(self, recipe: ScriptRecipe) -> RemovedWrite:
        """The recipe's condition: none, or the signal, read once into a module constant of the
        same name (the expression itself where the module already uses that name)."""
        if recipe.signal is None:
            return RemovedWrite(None, None, Condition(True, None, None, None))
        return RemovedWrite(None, None, Condition(True, None, self._recipe_gate(recipe), None))

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
            self.gate = name_expression(name)
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
            self.plan.swapped[read.top] = gate_code(gate, read, self.script)
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
        """The recipe's steps, each as the recipe object says (rules/modes.toml): its environment
        edits (recipe_steps/environment.py), the model's cast with the master weights (cast.py),
        the forward pass under autocast (autocast.py), float64 under XLA_DOWNCAST_BF16
        (float64.py)."""
        self._environment_edits(self.own_environment)
        if self.recipe.casts_model:
            self._cast_models(wrap_optimizer=self.recipe.fp32_masters)
        if self.recipe.autocast_forward:
            self._autocast_regions()
        if not self.recipe.casts_model:
            self._keep_models_float32()
        if self._downcast():
            self._float64_on_the_device_float32()


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
