"""What the fp32-update wrappers (FP32ParamsCopy, StochasticRoundingOptimizer) need to know about
particular optimizers, keyed by class name (the last dotted part). Data only, no imports: the
runtime enforces it and the rewriter (which must not import torch) reads the same module, so an
fp32-copy rewrite never wraps an optimizer the runtime would refuse."""

from __future__ import annotations

# Optimizers they cannot wrap, each with why: the runtime refuses them with this reason, and an
# fp32-copy rewrite leaves them, and the flag that enabled the recipe, for a hand edit (XM408).
UNWRAPPABLE: dict[str, str] = {
    "LBFGS": (
        "its step re-evaluates the loss through a closure and searches along the parameters it"
        " steps itself"
    ),
    "SparseAdam": "it takes sparse gradients, which the fp32 stand-ins do not carry",
    "ZeroRedundancyOptimizer": (
        "it shards the parameters across processes and steps its own local optimizer on them:"
        " a wrapper outside writes back masters that never moved (torch-xla's and"
        " neuronx-distributed's ZeRO-1 keep fp32 master shards of their own)"
    ),
    "NeuronZero1Optimizer": (
        "it shards the parameters across processes and keeps fp32 master shards of its own"
    ),
}

# Optimizers that make per-parameter state when they are built, before any step (and so before a
# wrapper can give them fp32 stand-ins): state key -> the optimizer default it is filled with.
# The wrapper makes these states again in fp32, filled with that value (on the bf16 parameters
# they were made bf16: Adagrad's `initial_accumulator_value=0.1` became 0.10009765625), and
# refuses an optimizer that has already stepped.
STATES_BUILT_AT_CONSTRUCTION: dict[str, dict[str, str]] = {
    "Adagrad": {"sum": "initial_accumulator_value"},
}
