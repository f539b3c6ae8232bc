"""Float64 under XLA_DOWNCAST_BF16: the device stored it as float32, so `.double()` and
`torch.float64` on the device become float32 where the recipe applies; one it cannot place is
reported (XM412)."""

from __future__ import annotations

import ast

from xlamigrate.kinds.python.planstate import (
    PlannerState,
)
from xlamigrate.kinds.python.reads import float32_spelling

DOWNCAST = "XLA_DOWNCAST_BF16"
FLOAT64_UNDER_DOWNCAST = "XM412"  # float64 stored as float32, not known to be on the device


class Float64Step(PlannerState):
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
