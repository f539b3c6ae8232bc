"""The recipe's environment edits in a Python file: NEURON_RT_STOCHASTIC_ROUNDING_EN where the
flag was set (or an explicit one removed where the master weights replace it), --auto-cast=none
merged into NEURON_CC_FLAGS, as the recipe's `EnvironmentEdits` for the platform say."""

from __future__ import annotations

import ast
from collections.abc import Callable

from xlamigrate.findings import (
    LEGACY_FLAG_STAYS_WITH_AUTOCAST,
)
from xlamigrate.flagvalue import RECIPE_FLAGS
from xlamigrate.kinds.python.astwalk import string_value
from xlamigrate.kinds.python.conditions import (
    enclosing_tests,
)
from xlamigrate.kinds.python.envaccess import EnvAccess
from xlamigrate.kinds.python.planstate import (
    PlannerState,
    anchor_of,
    auto_cast_code,
    is_whole_statement,
    stochastic_rounding_code,
    under,
)
from xlamigrate.neuronflags import NEURON_CC_FLAGS, STOCHASTIC_ROUNDING, merge_auto_cast_none
from xlamigrate.recipes import EnvironmentEdits


class EnvironmentStep(PlannerState):
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

    def _writes(self, variable: str) -> bool:
        return any(a.variable == variable and a.kind == "write" for a in self.accesses)

    def _sets_rounding_always(self) -> bool:
        """Whether the module sets stochastic rounding in every configuration (a write under
        `if args.amp:` serves another configuration, not the recipe's)."""
        return any(
            a.variable == STOCHASTIC_ROUNDING
            and a.kind == "write"
            and not enclosing_tests(self.script, anchor_of(a.node))
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
        line = self.script.statement_of(anchor_of(last.node))
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
