"""NEURON_CC_FLAGS editing shared by the rewriter (no torch) and the runtime helpers."""

from __future__ import annotations

import shlex

NEURON_CC_FLAGS = "NEURON_CC_FLAGS"
STOCHASTIC_ROUNDING = "NEURON_RT_STOCHASTIC_ROUNDING_EN"
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
