"""Rewrites one Python file to a recipe: plans the edits from the same findings scan reports,
applies them, and returns the new bytes with what was fixed and what is left to do by hand.

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

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import TypeVar

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider, ScopeProvider

from xlamigrate.catalogue import Catalogue
from xlamigrate.findings import manual_finding, with_note
from xlamigrate.flagvalue import RECIPE_FLAGS
from xlamigrate.kinds.python.commands import command_findings
from xlamigrate.kinds.python.conditions import (
    Condition,
    disjunction,
    enabling_condition,
    enclosing_tests,
    expressible_at,
)
from xlamigrate.kinds.python.detect import span_of
from xlamigrate.kinds.python.envaccess import EnvAccess, FlagMention, analyse_env_accesses
from xlamigrate.kinds.python.literals import string_value
from xlamigrate.kinds.python.parse import parse_python
from xlamigrate.kinds.python.plan import Plan, apply_plan
from xlamigrate.kinds.python.reads import ReadPlan, float32_spelling, read_outcomes
from xlamigrate.kinds.python.scan import kept_for_children, reported
from xlamigrate.kinds.python.training import TrainingScript, code_of, collect_nodes
from xlamigrate.model import FileError, Finding, Fix, RewriteOutcome, Span
from xlamigrate.neuronflags import (
    NEURON_CC_FLAGS,
    RECIPE_VARIABLES,
    STOCHASTIC_ROUNDING,
    merge_auto_cast_none,
)
from xlamigrate.project.model import Configuration, ScriptRecipe
from xlamigrate.recipes import MODES as MODES
from xlamigrate.recipes import EnvironmentEdits
from xlamigrate.request import STANDALONE, FileContext, RewriteRequest
from xlamigrate.rulesdata import unwrappable_optimizers

_Item = TypeVar("_Item")
RUNTIME = "xlamigrate.runtime"
_AUTOCAST = 'torch.autocast(dtype=torch.bfloat16, device_type="xla")'


def rewrite_python(
    path: str,
    data: bytes,
    catalogue: Catalogue,
    enabled: frozenset[str],
    request: RewriteRequest,
    context: FileContext = STANDALONE,
) -> RewriteOutcome:
    parsed = parse_python(path, data)
    if isinstance(parsed, FileError):
        return RewriteOutcome(path, data, None, errors=(parsed,))
    wrapper = MetadataWrapper(parsed, unsafe_skip_copy=True)
    # Resolved together, parents and the expression contexts under scopes share one traversal.
    wrapper.resolve_many((ScopeProvider, ParentNodeProvider, PositionProvider))
    analysis = analyse_env_accesses(wrapper, catalogue.flags, also=RECIPE_VARIABLES)
    pairs = kept_for_children(
        reported(path, parsed.code, analysis, _span_in(wrapper), catalogue, enabled),
        context,
        analysis.children,
    )
    # shell command lines run child processes: reported for a hand edit, never rewritten here
    commands = command_findings(path, wrapper, analysis.commands, catalogue, enabled)
    if not pairs and context.recipe is None:
        remaining_commands = tuple(sorted(commands, key=lambda f: f.sort_key))
        return RewriteOutcome(path, data, None, remaining=remaining_commands)
    planner = _Planner(path, wrapper, catalogue, request, context, analysis.accesses)
    plan = planner.make_plan(pairs)
    unapplied = planner.unapplied()
    if unapplied is None and planner.blocked_in_file():
        # the file's own enabling writes stay: planned again with them left, manual
        problems = planner.problems()
        pairs = _kept_enabling(pairs, planner)
        planner = _Planner(path, wrapper, catalogue, request, context, analysis.accesses)
        plan = planner.make_plan(pairs)
        planner.remaining.extend(problems)
    remaining = tuple(sorted([*planner.remaining, *commands], key=lambda f: f.sort_key))
    fixed = tuple(sorted(planner.fixed, key=lambda f: f.sort_key))
    if unapplied is not None:
        return RewriteOutcome(path, data, None, fixed, remaining, unapplied=unapplied)
    if plan.is_empty():
        return RewriteOutcome(path, data, None, fixed, remaining)
    lost = _first_line_not_reproduced(data, parsed.bytes)
    if lost is not None:  # writing libcst's code would also drop what it cannot reproduce
        message = (
            "cannot rewrite: libcst does not reproduce this line byte for byte (a form feed "
            "before code, or a final bare CR newline); the file is left untouched"
        )
        return RewriteOutcome(path, data, None, errors=(FileError(path, lost, message),))
    new_module = apply_plan(wrapper.module, plan)
    rewritten = new_module.bytes
    check = parse_python(path, rewritten)
    if isinstance(check, FileError):  # a safety net: never write what does not parse
        error = FileError(
            path, None, f"internal error: the rewrite does not parse ({check.message})"
        )
        return RewriteOutcome(path, data, None, errors=(error,))
    return RewriteOutcome(path, data, rewritten, fixed, remaining)


def _span_in(wrapper: MetadataWrapper) -> Callable[[cst.CSTNode], Span]:
    positions = wrapper.resolve(PositionProvider)
    return lambda node: span_of(node, positions)


def kept_for_recipe(
    path: str,
    wrapper: MetadataWrapper,
    pairs: list[tuple[EnvAccess | FlagMention, Finding]],
    catalogue: Catalogue,
    context: FileContext,
    accesses: tuple[EnvAccess, ...],
) -> list[tuple[EnvAccess | FlagMention, Finding]]:
    """What a scan says of the file's own enabling writes: manual, as the rewrite (in
    `context.mode`) leaves them, where their recipe cannot go in whole. `accesses`: the
    scan's analysis of the file, the recipe's own variables included (RECIPE_VARIABLES)."""
    wrapper.resolve_many((ScopeProvider, ParentNodeProvider, PositionProvider))
    request = RewriteRequest(context.mode, signal=context.signal)
    planner = _Planner(path, wrapper, catalogue, request, context, accesses)
    planner.make_plan(pairs)
    if planner.blocked_in_file():
        return _kept_enabling(pairs, planner)
    # its reads, as the rewrite resolves them against the file's own configurations
    worded = {(f.span, f.code): f for f in (*planner.fixed, *planner.remaining)}
    return [
        (item, worded.get((f.span, f.code), f))
        if isinstance(item, EnvAccess) and item.kind == "read"
        else (item, f)
        for item, f in pairs
    ]


def _first_problem(problems: Sequence[Finding]) -> str | None:
    if not problems:
        return None
    first = min(problems, key=lambda f: f.sort_key)
    return f"{first.code} at line {first.span.line}"


def _kept_enabling(
    pairs: Sequence[tuple[_Item, Finding]], planner: _Planner
) -> list[tuple[_Item, Finding]]:
    """The pairs with each enabling write the planner removed made manual: it stays, and its
    finding says which part of the recipe could not go in."""
    enabling = {id(e.access) for e in planner.enabling if e.access is not None}
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


def _first_line_not_reproduced(data: bytes, reproduced: bytes) -> int | None:
    """The 1-based line where libcst's code of a module first differs from the file's bytes."""
    if reproduced == data:
        return None
    same = next(
        (i for i, (a, b) in enumerate(zip(data, reproduced, strict=False)) if a != b),
        min(len(data), len(reproduced)),
    )
    return len(re.findall(rb"\r\n|\r|\n", data[:same])) + 1


@dataclass
class _Enabling:
    """An enabling write that was removed: where it stood and under which condition. A launched
    script's recipe has no write (`access` None): its condition is the signal, or none."""

    access: EnvAccess | None
    small: cst.BaseSmallStatement | None  # its statement, when the statement itself was removed
    condition: Condition


RECIPE_PROBLEMS = ("XM401", "XM402", "XM403", "XM406", "XM408")


@dataclass
class _Planner:
    path: str
    wrapper: MetadataWrapper
    catalogue: Catalogue
    request: RewriteRequest
    context: FileContext
    accesses: tuple[EnvAccess, ...]
    plan: Plan = field(default_factory=Plan)
    fixed: list[Finding] = field(default_factory=list)
    remaining: list[Finding] = field(default_factory=list)
    enabling: list[_Enabling] = field(default_factory=list)
    # What "the recipe is on" reads as in this module, once something needed it.
    gate: cst.BaseExpression | None = None

    def __post_init__(self) -> None:
        self.script = TrainingScript(self.wrapper)
        self.positions = self.wrapper.resolve(PositionProvider)
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
        return _first_problem(self.problems())

    def blocked_in_file(self) -> bool:
        """Whether the file's own enabling writes were planned away while their recipe could
        not go in whole: the flag would be gone and nothing in its place."""
        return any(e.access is not None for e in self.enabling) and bool(self.problems())

    # -- removing the legacy writes ------------------------------------------------------------

    def make_plan(self, pairs: Sequence[tuple[object, Finding]]) -> Plan:
        update_calls: dict[cst.Call, list[cst.CSTNode]] = {}
        reads: dict[cst.CSTNode, Finding] = {}  # by node: equal accesses are not the same read
        for item, finding in pairs:
            if isinstance(item, EnvAccess) and item.kind == "read":
                reads[item.node] = finding
                continue
            allowed = finding.fix is not None and (
                finding.fix.applicability == "safe"
                or (finding.fix.applicability == "unsafe" and self.unsafe_fixes)
            )
            if not isinstance(item, EnvAccess) or not allowed or item.kind == "read":
                self.remaining.append(finding)
                continue
            if not self._remove(item, finding, update_calls):
                self.remaining.append(self._manual("XM404", finding.span, finding.message))
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
        return self.plan

    def _remove(
        self, access: EnvAccess, finding: Finding, update_calls: dict[cst.Call, list[cst.CSTNode]]
    ) -> bool:
        node = access.node
        small: cst.BaseSmallStatement | None = None
        if isinstance(node, (cst.DictElement, cst.Arg)):
            call = self._update_call_of(node)
            if call is None:
                return False
            self.plan.removed_elements.add(node)
            update_calls.setdefault(call, []).append(node)
        else:
            small = self.script.small_statement_of(node)
            if not _is_whole_statement(small, node):
                return False
            assert small is not None
            self.plan.removed.add(small)
        if access.kind == "write" and access.variable in RECIPE_FLAGS:
            condition = enabling_condition(self.script, access)
            if condition.possible:
                self.enabling.append(_Enabling(access, small, condition))
        return True

    def _update_call_of(self, element: cst.CSTNode) -> cst.Call | None:
        """The `os.environ.update(...)` call an element belongs to (via a dict or a keyword)."""
        parent = self.script.parent(element)
        if isinstance(parent, cst.Dict):
            parent = self.script.parent(parent)
            parent = self.script.parent(parent) if isinstance(parent, cst.Arg) else None
        if not isinstance(parent, cst.Call):
            return None
        func = parent.func
        if isinstance(func, cst.Attribute) and func.attr.value == "update":
            return parent
        return None

    def _drop_emptied_updates(self, update_calls: dict[cst.Call, list[cst.CSTNode]]) -> None:
        """An update() whose every entry went is removed whole, if it is a statement of its own."""
        removed = self.plan.removed_elements
        for call in update_calls:
            entries: list[cst.CSTNode] = []
            for arg in call.args:
                if isinstance(arg.value, cst.Dict):
                    entries.extend(arg.value.elements)
                    if not all(e in removed for e in arg.value.elements) or arg.keyword:
                        entries.append(arg)  # a dict argument with entries left stays
                else:
                    entries.append(arg)
            if all(entry in removed for entry in entries if not isinstance(entry, cst.Arg)) and all(
                arg in removed or isinstance(arg.value, cst.Dict) for arg in call.args
            ):
                small = self.script.small_statement_of(call)
                if _is_whole_statement(small, call):
                    assert small is not None
                    self.plan.removed.add(small)

    # -- a launched script's recipe -------------------------------------------------------------

    def _launched_enabling(self, recipe: ScriptRecipe) -> _Enabling:
        """The recipe's condition: none, or the signal, read once into a module constant of the
        same name (the expression itself where the module already uses that name)."""
        module = self.wrapper.module
        if recipe.signal is None:
            return _Enabling(None, None, Condition(True, None, None, module))
        return _Enabling(None, None, Condition(True, None, self._recipe_gate(recipe), module))

    def _recipe_gate(self, recipe: ScriptRecipe) -> cst.BaseExpression:
        """ "The recipe is on" in this module: the signal read once into a module constant of
        its name (the read itself where the module already uses that name); a constant True
        where every launch gets the recipe."""
        if self.gate is not None:
            return self.gate
        if recipe.in_file:
            return self._signal_beside_the_writes(recipe)
        name = recipe.signal or self.request.signal
        by = ", ".join(recipe.launchers[:2]) + (" ..." if len(recipe.launchers) > 2 else "")
        flags = " / ".join(recipe.flags)
        if recipe.signal is None:
            value = "True"
            comment = (
                f"# Every launch of this script by {by} set {flags}: the recipe is always on.\n"
            )
        else:
            self.plan.imports.add(("os", None))
            value = f'os.environ.get("{recipe.signal}") == "1"'
            comment = f"# Set by {by} where it used to set {flags}.\n"
        if re.search(rf"\b{name}\b", self.wrapper.module.code):
            self.gate = cst.parse_expression(value)
        else:
            self.gate = cst.Name(name)
            statement = cst.parse_statement(f"{comment}{name} = {value}\n")
            assert isinstance(statement, cst.SimpleStatementLine)
            leading = [cst.EmptyLine(), *statement.leading_lines]  # apart from the imports
            self._after_imports(statement.with_changes(leading_lines=leading))
        return self.gate

    def _signal_beside_the_writes(self, recipe: ScriptRecipe) -> cst.BaseExpression:
        """In a file that turned the flag on itself, its reads of the flag read the signal,
        written where the flag was (under the write's own value condition): read when and where
        the flag was read, it is set exactly where and from when the flag was."""
        name = recipe.signal or self.request.signal
        for enabling in self.enabling:
            access = enabling.access
            if access is None:
                continue
            statement = cst.parse_statement(f'{self._receiver(access)}["{name}"] = "1"\n')
            if enabling.condition.in_place is not None:
                statement = _under(enabling.condition.in_place, [statement])
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
        self.gate = cst.parse_expression(f'os.environ.get("{name}") == "1"')
        return self.gate

    def _launched_environment(self, script: ScriptRecipe, gate: cst.BaseExpression) -> None:
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
        elif environment.auto_cast_none:
            code = self._auto_cast_code("os.environ")
        if code:
            self.plan.imports.add(("os", None))
            self._after_imports(_under(gate, [cst.parse_statement(code)]))

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

    def _resolve_reads(self, findings: dict[cst.CSTNode, Finding], recipe: ScriptRecipe) -> None:
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
            self.plan.swapped[read.top] = _gate_expression(gate, read, self.script)
            for node in read.float32:
                self.plan.swapped[node] = float32_spelling(node)

    def _collapse(self, read: ReadPlan) -> None:
        conditional = read.collapsed
        if isinstance(conditional, cst.IfExp):
            kept = conditional.body if read.keep_body else conditional.orelse
            if conditional.lpar and not kept.lpar:
                kept = kept.with_changes(lpar=conditional.lpar, rpar=conditional.rpar)
            self.plan.swapped[conditional] = kept
        elif isinstance(conditional, cst.If):
            self.plan.collapsed[conditional] = read.keep_body

    def _after_imports(self, statement: cst.BaseStatement) -> None:
        anchor = _after_imports(self.wrapper.module)
        if anchor is not None:
            self.plan.insert_after(anchor, [statement])
        elif self.wrapper.module.body:
            self.plan.insert_before(self.wrapper.module.body[0], [statement])

    # -- the recipe ----------------------------------------------------------------------------

    def _apply_recipe(self) -> None:
        """The recipe's parts, each as the recipe says: its environment edits, the model's cast
        (with the master weights), the forward pass under autocast."""
        self._environment_edits(self.own_environment)
        if self.recipe.casts_model:
            self._cast_models(wrap_optimizer=self.recipe.fp32_masters)
        if self.recipe.autocast_forward:
            self._autocast_regions()

    def _environment_edits(self, environment: EnvironmentEdits) -> None:
        """Stochastic rounding set where the flag was, or an explicit "1" removed; --auto-cast=none
        merged into NEURON_CC_FLAGS unless a legacy flag stays set beside it (XM405)."""
        if environment.rounding_on:
            self._environment_statement(self._stochastic_rounding_code, STOCHASTIC_ROUNDING)
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
                    self._manual("XM405", self._span(staying.node), staying.variable)
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
            statement = cst.parse_statement(code(self._receiver(access), access.form))
            if enabling.condition.in_place is not None:
                statement = _under(enabling.condition.in_place, [statement])
            anchor = enabling.small
            if anchor is not None and anchor not in self.plan.replacements:
                self.plan.replacements[anchor] = [statement]
                self.plan.removed.discard(anchor)
            elif line is not None:
                self.plan.insert_before(line, [statement])

    def _receiver(self, access: EnvAccess) -> str:
        """The environment code written next to `access` names (importing os if it is ours)."""
        receiver = _receiver_code(access)
        if receiver == "os.environ":
            self.plan.imports.add(("os", None))
        return receiver

    @staticmethod
    def _stochastic_rounding_code(receiver: str, form: str) -> str:
        if form == "setdefault":  # the legacy write let a launcher override it: so does this
            return f'{receiver}.setdefault("{STOCHASTIC_ROUNDING}", "1")\n'
        return f'{receiver}["{STOCHASTIC_ROUNDING}"] = "1"\n'

    @staticmethod
    def _auto_cast_code(receiver: str, form: str = "subscript") -> str:
        return (
            f'{receiver}["{NEURON_CC_FLAGS}"] = '
            f'{receiver}.get("{NEURON_CC_FLAGS}", "") + " --auto-cast=none"\n'
        )

    def _sets_rounding_always(self) -> bool:
        """Whether the module sets stochastic rounding in every configuration (a write under
        `if args.amp:` serves another configuration, not the recipe's)."""
        return any(
            a.variable == STOCHASTIC_ROUNDING
            and a.kind == "write"
            and not enclosing_tests(self.script, a.node)
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
            if _is_whole_statement(small, access.node):
                assert small is not None
                self.plan.removed.add(small)

    def _combined_condition(
        self, at: cst.CSTNode, span: Span
    ) -> tuple[bool, cst.BaseExpression | None]:
        """(ok, condition) for code placed at `at`; None if any enabling write is unconditional."""
        conditions = [e.condition for e in self.enabling]
        if any(c.full is None for c in conditions):
            return True, None
        expressions = []
        for condition in conditions:
            assert condition.full is not None
            external = condition.origin is self.wrapper.module  # the signal: read anywhere
            if not external and not expressible_at(
                self.script, condition.full, condition.origin, at
            ):
                self.remaining.append(
                    self._manual("XM403", span, f"condition `{code_of(condition.full)}`")
                )
                return False, None
            expressions.append(condition.full)
        unique = {code_of(e): e for e in expressions}
        combined = list(unique.values())
        if len(combined) == 1:
            return True, combined[0]
        # `if X:` and its `else:` both enabled it: always on; `(A and B) or (A and not B)`: A
        return True, disjunction([c.tests or (c.full,) for c in conditions if c.full is not None])

    @functools.cached_property
    def _test_functions_setting_the_flag(self) -> frozenset[cst.FunctionDef] | None:
        """In a test module whose enabling writes all sit in test functions, those functions:
        each test is a configuration of its own (`pytest -k`), and a test that never set the
        flag keeps its models as they were. None: the recipe's scope is the whole file."""
        name = PurePosixPath(self.path.replace("\\", "/")).name
        if self.launched is not None or not (name.startswith("test_") or name.endswith("_test.py")):
            return None
        functions = set()
        for enabling in self.enabling:
            if enabling.access is None:
                return None
            function = self.script.outermost_function(enabling.access.node)
            if function is None or not function.name.value.startswith("test"):
                return None
            functions.add(function)
        return frozenset(functions)

    def _in_scope(self, node: cst.CSTNode) -> bool:
        scope = self._test_functions_setting_the_flag  # (asked once the enabling writes are known)
        return scope is None or self.script.outermost_function(node) in scope

    def _cast_models(self, wrap_optimizer: bool) -> None:
        sites = [s for s in self.script.optimizer_sites() if self._in_scope(s.statement)]
        targets: list[tuple[cst.SimpleStatementLine, cst.BaseExpression, bool]] = [
            (site.statement, site.model, True)
            for site in sites
            if self._nameable(site.model, site.statement)
        ]
        if not targets:
            for statement, model in self.script.model_moves():
                if self._in_scope(statement):
                    targets.append((statement, model, False))
            if wrap_optimizer and targets and not sites:  # cast, yet no master weights: say so
                subject = f"the optimizer of `{code_of(targets[0][1])}`"
                self.remaining.append(self._manual("XM406", self._span(targets[0][0]), subject))
        if not targets:
            self.remaining.append(self._manual("XM401", self._first_span(), "the model to cast"))
            return

        def model_key(target: cst.CSTNode, model: cst.BaseExpression) -> tuple[int, str]:
            # one model per name and function: `model` in `train()` is not `model` in `test()`
            return id(self.script.enclosing_function(target)), code_of(model)

        done: set[tuple[int, str]] = set()
        for target, model, before in targets:
            name, key = code_of(model), model_key(target, model)
            if key in done:
                continue
            done.add(key)
            place: cst.BaseStatement = target
            if before:  # before every optimizer of this model (`if a: A(...) elif b: B(...)`)
                same = [t for t, m, _ in targets if model_key(t, m) == key]
                around = self.script.first_statement_around(same)
                if around is not None and self._nameable(model, around):
                    place = around
            ok, condition = self._combined_condition(place, self._span(place))
            if not ok:
                continue
            code: list[cst.BaseStatement] = []
            if not self.script.casts_to_bf16(model):
                code.append(cst.parse_statement(f"{name}.to(torch.bfloat16)\n"))
            code.append(
                cst.parse_statement(
                    f"cast_inputs_to_module_dtype({name}, output_dtype=torch.float32)\n"
                )
            )
            self.plan.imports.add(("torch", None))  # torch.bfloat16, torch.float32
            self.plan.imports.add((RUNTIME, "cast_inputs_to_module_dtype"))
            block: list[cst.BaseStatement] = (
                [_under(condition, code)] if condition is not None else code
            )
            if before:
                self.plan.insert_before(place, block)
            else:
                self.plan.insert_after(place, block)
        if wrap_optimizer:
            unwrappable = unwrappable_optimizers()
            for site in sites:
                name = code_of(site.call.func).rsplit(".", 1)[-1]
                if name in unwrappable:  # the recipe cannot go in whole: its writes stay
                    subject = f"`{name}` ({unwrappable[name]})"
                    self.remaining.append(
                        self._manual("XM408", self._span(site.statement), subject)
                    )
                    continue
                self._wrap_optimizer(site.call, site.statement)

    def _nameable(self, model: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Whether code at `at` can name the module `model` names (not a comprehension's or a
        lambda's variable; not a call, which would build another one)."""
        if any(True for _ in collect_nodes(model, cst.Call)):
            return False
        return expressible_at(self.script, model, model, at)

    def _wrap_optimizer(self, call: cst.Call, statement: cst.SimpleStatementLine) -> None:
        parent = self.script.parent(self.script.parent(call) or call)
        if isinstance(parent, cst.Call) and code_of(parent.func).endswith("FP32ParamsCopy"):
            return
        if code_of(call.func).endswith("FP32ParamsCopy"):
            return
        ok, condition = self._combined_condition(statement, self._span(statement))
        if not ok:
            return
        if condition is None:
            self.plan.imports.add((RUNTIME, "FP32ParamsCopy"))
            self.plan.swapped[call] = cst.Call(cst.Name("FP32ParamsCopy"), [cst.Arg(call)])
            return
        # Under a condition the wrapper is a statement of its own: `<target> = FP32ParamsCopy(
        # <target>)`, right only where the target holds the optimizer itself.
        small = self.script.small_statement_of(call)
        assigned = isinstance(small, cst.Assign) and small.value is call
        target = small.targets[0].target if isinstance(small, cst.Assign) else None
        if not assigned or not isinstance(target, (cst.Name, cst.Attribute)):
            self.remaining.append(
                self._manual("XM403", self._span(statement), "the optimizer wrapper")
            )
            return
        self.plan.imports.add((RUNTIME, "FP32ParamsCopy"))
        name = code_of(target)
        wrapped = cst.parse_statement(f"{name} = FP32ParamsCopy({name})\n")
        self.plan.insert_after(statement, [_under(condition, [wrapped])])

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
            self._environment_statement(self._auto_cast_code)
            return
        last = max(writes, key=lambda a: self._span(a.node).line)
        line = self.script.statement_of(last.node)
        if line is None:
            return
        ok, condition = self._combined_condition(line, self._span(line))
        if not ok:
            return
        statement = cst.parse_statement(self._auto_cast_code(self._receiver(last), last.form))
        self.plan.insert_after(line, [_under(condition, [statement])] if condition else [statement])

    def _merge_literal(self, literal: cst.BaseExpression) -> None:
        """Edits a NEURON_CC_FLAGS literal in place, keeping its quotes where they still fit."""
        text = string_value(literal)
        assert text is not None
        merged = merge_auto_cast_none(text)
        if merged == text:
            return
        if (
            isinstance(literal, cst.SimpleString)
            and literal.quote not in merged
            and "\\" not in merged
        ):
            replacement = cst.SimpleString(
                f"{literal.prefix}{literal.quote}{merged}{literal.quote}"
            )
        else:
            replacement = cst.SimpleString(repr(merged))
        self.plan.swapped[literal] = replacement

    def _autocast_regions(self) -> None:
        self.plan.imports.add(("torch", None))
        models = [code_of(site.model) for site in self.script.optimizer_sites()]
        backwards = [b for b in self.script.backward_statements() if self._in_scope(b[0])]
        if not backwards:
            where = self._first_span()
            self.remaining.append(self._manual("XM402", where, "no `<loss>.backward()` found"))
            return
        handled = {statement for statement, _ in backwards}
        for call in self.script.backward_calls():  # `f(x).backward()`, `a = 1; b.backward()`
            if not self._in_scope(call):
                continue
            if self.script.statement_of(call) not in handled and not self.script.in_autocast(call):
                subject = f"the forward pass before `{code_of(call.func)}()`"
                self.remaining.append(self._manual("XM402", self._span(call), subject))
        for backward, loss in backwards:
            candidates = models + self.script.model_parameter_names(backward)
            region = self.script.forward_region(backward, loss, candidates)
            if region is None:
                self.remaining.append(
                    self._manual(
                        "XM402", self._span(backward), f"the forward pass before {loss}.backward()"
                    )
                )
                continue
            first, last = region.statements[0], region.statements[-1]
            if self.script.in_autocast(first) or self.script.contains_autocast(region.statements):
                continue
            ok, condition = self._combined_condition(first, self._span(first))
            if not ok:
                continue
            enabled = f", enabled={_argument_code(condition)}" if condition is not None else ""
            item = cst.parse_expression(_AUTOCAST.replace(")", f"{enabled})"))
            self.plan.wraps.append((first, last, item))

    # -- findings ------------------------------------------------------------------------------

    def _span(self, node: cst.CSTNode) -> Span:
        return span_of(node, self.positions)

    def _manual(self, code: str, span: Span, subject: str) -> Finding:
        return manual_finding(self.catalogue, code, self.path, span, subject)


def _gate_expression(
    gate: cst.BaseExpression, read: ReadPlan, script: TrainingScript
) -> cst.BaseExpression:
    """The gate (or `not` it) in place of a flag test, parenthesized where it needs to be."""
    expression = gate.deep_clone()
    if read.negated:
        expression = cst.UnaryOperation(cst.Not(), expression)
    top = read.top
    needs_parentheses = not isinstance(expression, cst.Name) and not isinstance(
        script.parent(top), (cst.If, cst.While, cst.IfExp, cst.Assert, cst.Assign, cst.Return)
    )
    if top.lpar:
        return expression.with_changes(lpar=top.lpar, rpar=top.rpar)
    if needs_parentheses:
        return expression.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return expression


def _after_imports(module: cst.Module) -> cst.BaseStatement | None:
    """The last statement of the module's leading docstring and import lines."""
    last = None
    for index, statement in enumerate(module.body):
        docstring = (
            index == 0
            and isinstance(statement, cst.SimpleStatementLine)
            and isinstance(statement.body[0], cst.Expr)
            and isinstance(statement.body[0].value, cst.SimpleString)
        )
        imports = isinstance(statement, cst.SimpleStatementLine) and all(
            isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body
        )
        if not (docstring or imports):
            break
        last = statement
    return last


def _is_whole_statement(small: cst.BaseSmallStatement | None, node: cst.CSTNode) -> bool:
    """Whether the small statement is exactly this access (so removing it removes only that)."""
    if isinstance(small, cst.Assign):
        return len(small.targets) == 1 and small.targets[0].target is node
    if isinstance(small, cst.Expr):
        return small.value is node
    if isinstance(small, cst.Del):
        return small.target is node
    return False


def _receiver_code(access: EnvAccess) -> str:
    """The expression naming the environment the write used (`os.environ`, an alias...)."""
    node = access.node
    if isinstance(node, cst.Subscript) and access.form == "subscript":
        return code_of(node.value)
    forms_with_receiver = ("setdefault", "update", "pop")
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        return code_of(node.func.value) if access.form in forms_with_receiver else "os.environ"
    return "os.environ"


def _argument_code(expression: cst.BaseExpression) -> str:
    """An expression as a keyword argument's value: a bare `:=` needs parentheses there."""
    code = code_of(expression)
    if isinstance(expression, cst.NamedExpr) and not expression.lpar:
        return f"({code})"
    return code


def _under(condition: cst.BaseExpression, body: list[cst.BaseStatement]) -> cst.If:
    return cst.If(test=condition.deep_clone(), body=cst.IndentedBlock(body=body))
