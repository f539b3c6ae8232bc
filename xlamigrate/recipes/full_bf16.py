"""full-bf16, the closest to what the legacy flag did: the model (and its inputs) cast to bf16
before its optimizer is built, and on Neuron NEURON_RT_STOCHASTIC_ROUNDING_EN=1 where the flag
was set, so that bf16 weight updates are not lost to round-to-nearest. Everything it does is data
(rules/modes.toml); this module names it."""

from __future__ import annotations

from xlamigrate.recipes.table import shipped_recipe

RECIPE = shipped_recipe("full-bf16")
