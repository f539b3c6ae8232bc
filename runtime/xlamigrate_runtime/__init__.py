"""What rewritten training scripts import for what PyTorch lacks. Depends on torch only.

* `FP32ParamsCopy` / `AdamW_FP32ParamsCopy`: fp32 master weights for a bf16 model (fp32-copy);
* `StochasticRoundingOptimizer`, `stochastic_round_to_bf16`: bf16 stochastic rounding where
  the Neuron runtime's (NEURON_RT_STOCHASTIC_ROUNDING_EN) does not apply: CPU and GPU;
* `cast_inputs_to_module_dtype`: fp32 inputs keep working on a bf16 model, as with the flag,
  and its outputs can come back in fp32 for losses against fp32 targets;
* `enable_stochastic_rounding`, `disable_neuron_auto_cast`, `bf16_autocast`: environment
  helpers for the full-bf16 and autocast recipes.

Its own distribution, `xlamigrate-runtime` (runtime/pyproject.toml), so that a training image
gets torch and nothing of the CLI; `xlamigrate rewrite --runtime vendor` copies this package
into the project instead.
"""

__version__ = "0.1.0"

from xlamigrate_runtime.casting import cast_inputs_to_module_dtype
from xlamigrate_runtime.flags import (
    bf16_autocast,
    disable_neuron_auto_cast,
    enable_stochastic_rounding,
    merge_auto_cast_none,
)
from xlamigrate_runtime.optim import (
    AdamW_FP32ParamsCopy,
    FP32ParamsCopy,
    StochasticRoundingOptimizer,
)
from xlamigrate_runtime.rounding import stochastic_round_to_bf16

__all__ = [
    "AdamW_FP32ParamsCopy",
    "FP32ParamsCopy",
    "StochasticRoundingOptimizer",
    "bf16_autocast",
    "cast_inputs_to_module_dtype",
    "disable_neuron_auto_cast",
    "enable_stochastic_rounding",
    "merge_auto_cast_none",
    "stochastic_round_to_bf16",
]
