"""autocast: the model stays float32 and its forward pass runs under torch.autocast in bf16; on
Neuron --auto-cast=none goes into NEURON_CC_FLAGS, so that neuronx-cc does not cast on top of
autocast. Everything it does is data (rules/modes.toml); this module names it."""

from __future__ import annotations

from xlamigrate.recipes.table import shipped_recipe

RECIPE = shipped_recipe("autocast")
