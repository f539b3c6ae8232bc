"""An enabling write, said with what the project decided about it: where it takes effect, which
scripts get the recipe and under which signal, or why it stays. Shared by the text kinds and the
launch calls of Python files (`subprocess.run(..., env=...)`)."""

from __future__ import annotations

from dataclasses import replace

from xlamigrate.kinds.textaccess import TextAccess
from xlamigrate.project.launchers import is_enabling
from xlamigrate.request import FileContext


def with_decision(access: TextAccess, context: FileContext) -> TextAccess:
    """An enabling write, saying where it takes effect and what the project does about it."""
    if not is_enabling(access):
        return access
    decision = context.decision(access)
    if not decision.migrated:
        return replace(
            access,
            note=f"{access.note}; {decision.reason}: it stays until that script has the recipe",
            applicability="manual",
        )
    if not decision.scripts:
        return access
    under = f" under {decision.signal}=1, set here instead" if decision.signal else ""
    scripts = ", ".join(decision.scripts)
    return replace(access, note=f"{access.note}; it starts {scripts}, which gets the recipe{under}")
