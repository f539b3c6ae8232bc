"""The recipe's autocast region: the forward pass and loss under torch.autocast (bf16), the
backward outside it; a model the script itself casts to bf16 kept float32 where the recipe is on."""

from __future__ import annotations

import ast
from collections.abc import Sequence

from xlamigrate.kinds.python.conditions import (
    Expression,
    negated,
)
from xlamigrate.kinds.python.planstate import (
    PlannerState,
    under,
)
from xlamigrate.kinds.python.training import (
    BF16_SPELLINGS,
    Line,
    Node,
    Statement,
)
from xlamigrate.recipeproblems import FORWARD_PASS_NOT_LOCATED, MODEL_CAST_BY_SCRIPT

_AUTOCAST = 'torch.autocast(dtype=torch.bfloat16, device_type="xla")'


class AutocastStep(PlannerState):
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
