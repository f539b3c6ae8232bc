"""The recipe's cast: each model cast to bf16 (with the runtime's input cast) before its
optimizer is built, and, where the recipe keeps fp32 master weights, the optimizer wrapped in
FP32ParamsCopy or the framework's own master-weights option set."""

from __future__ import annotations

import ast

from xlamigrate.kinds.python.astwalk import string_value
from xlamigrate.kinds.python.conditions import (
    Expression,
    conjunction,
    enclosing_tests,
    expressible_at,
    expression,
)
from xlamigrate.kinds.python.planstate import PlannerState, under
from xlamigrate.kinds.python.training import (
    Line,
    Node,
    OptimizerSite,
    Statement,
    collect_nodes,
    fresh_name,
    keyword_added,
)
from xlamigrate.masterweights import MasterWeightsOption, master_weights_option
from xlamigrate.optimizer_facts import UNWRAPPABLE
from xlamigrate.optimizerfactories import OptimizerFactory, Zero1Switch, optimizer_factory
from xlamigrate.recipeproblems import (
    CONDITION_NOT_EXPRESSIBLE,
    MODEL_NOT_IDENTIFIED,
    OPTIMIZER_NOT_IDENTIFIED,
    OPTIMIZER_NOT_WRAPPABLE,
)

RUNTIME = "xlamigrate_runtime"


class CastStep(PlannerState):
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
