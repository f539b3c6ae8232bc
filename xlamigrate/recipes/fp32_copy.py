"""fp32-copy: the model cast to bf16 as in full-bf16, and its optimizer wrapped in FP32ParamsCopy,
which keeps float32 master weights; on Neuron an explicit stochastic rounding "1" goes, since the
master weights replace it. Everything it does is data (rules/modes.toml); this module names it."""

from __future__ import annotations

from xlamigrate.recipes.table import shipped_recipe

RECIPE = shipped_recipe("fp32-copy")
