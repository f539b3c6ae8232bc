"""What value a flag write sets, and whether torch-xla reads that value as on or off."""

from __future__ import annotations

import json
from dataclasses import dataclass

_C_SPACE = " \t\n\v\f\r"
# The legacy flags that turned bf16 on: what a recipe replaces (the FP16 ones did nothing).
RECIPE_FLAGS = ("XLA_USE_BF16", "XLA_DOWNCAST_BF16")


def torch_xla_enabled(value: str) -> bool:
    """Mirrors torch-xla's `sys_util::GetEnvBool`: "true"/"false" exactly, else `atoi(value) != 0`.

    So "1", "2", " 1" and "1abc" are on; "0", "", "false", "True", "yes" and "on" are off.
    """
    if value == "true":
        return True
    if value == "false":
        return False
    return _atoi(value) != 0


def _atoi(text: str) -> int:
    stripped = text.lstrip(_C_SPACE)
    sign = 1
    if stripped[:1] in ("+", "-"):
        sign = -1 if stripped[0] == "-" else 1
        stripped = stripped[1:]
    digits = ""
    for char in stripped:
        if not ("0" <= char <= "9"):
            break
        digits += char
    return sign * int(digits) if digits else 0


@dataclass(frozen=True)
class FlagValue:
    """The value(s) a write may set: one literal, several (a conditional), or unknown (`None`)."""

    candidates: tuple[str, ...] | None

    @classmethod
    def unknown(cls) -> FlagValue:
        return cls(None)

    @property
    def literal(self) -> str | None:
        """The value when exactly one is possible."""
        if self.candidates is not None and len(set(self.candidates)) == 1:
            return self.candidates[0]
        return None

    @property
    def enabled(self) -> bool | None:
        """True/False when every possible value agrees, None when unknown or conditional."""
        if not self.candidates:
            return None
        states = {torch_xla_enabled(candidate) for candidate in self.candidates}
        return states.pop() if len(states) == 1 else None

    @property
    def may_be_off(self) -> bool:
        """Whether torch-xla may read this write as off: a "0" branch, or a value not known."""
        if self.candidates is None:
            return True
        return not all(torch_xla_enabled(candidate) for candidate in self.candidates)

    @property
    def is_conditional(self) -> bool:
        return self.candidates is not None and len(set(self.candidates)) > 1

    def describe(self) -> str:
        """What the write sets, for messages: '"1" (on)', '"1" or "0" depending on a condition'."""
        if self.candidates is None:
            return "a value not known statically"
        # JSON quoting escapes newlines and quotes: a message stays on one line.
        shown = " or ".join(json.dumps(candidate) for candidate in dict.fromkeys(self.candidates))
        enabled = self.enabled
        state = "" if enabled is None else (" (on)" if enabled else " (off)")
        condition = " depending on a condition" if self.is_conditional else ""
        return f"{shown}{condition}{state}"
