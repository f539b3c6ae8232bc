"""The Neuron variables the recipes set, and `--auto-cast=none` merged into NEURON_CC_FLAGS: the
runtime's `disable_neuron_auto_cast` and the rewriter's literal edits must agree, so both read
this module. Standard library only (the rewriter must not import torch): the CLI package links
to this file as `xlamigrate.neuronflags`."""

from __future__ import annotations

import shlex

NEURON_CC_FLAGS = "NEURON_CC_FLAGS"
STOCHASTIC_ROUNDING = "NEURON_RT_STOCHASTIC_ROUNDING_EN"
# The variables the recipes set: the rewriter's planner follows their accesses (never findings).
RECIPE_VARIABLES = (STOCHASTIC_ROUNDING, NEURON_CC_FLAGS)
AUTO_CAST = "--auto-cast"


def merge_auto_cast_none(flags: str) -> str:
    """`flags` with every `--auto-cast` option replaced by one trailing `--auto-cast=none`.

    neuronx-cc lets the right-most `--auto-cast` win; removing the others keeps this idempotent.
    Other flags keep their order and quoting.
    """
    words = shlex.split(flags)
    kept: list[str] = []
    skip_value = False
    for word in words:
        if skip_value:
            skip_value = False
            continue
        if word == AUTO_CAST:
            skip_value = True  # `--auto-cast none`: the value is the next word
            continue
        if word.startswith(AUTO_CAST + "="):
            continue
        kept.append(word)
    return shlex.join([*kept, f"{AUTO_CAST}=none"])
