"""Optimizers for bf16 models that update in fp32: master weights, or fp32 states with
stochastic rounding.

Both wrap any `torch.optim.Optimizer` (the *inner* optimizer) built on the model's bf16
parameters. The wrapper is itself an Optimizer whose `param_groups` hold those bf16 parameters,
so LR schedulers, `clip_grad_norm_` and `xm.optimizer_step` (which all-reduces the `.grad` of
the params in `param_groups`) work unchanged, and whose `state` is the inner optimizer's, keyed
by those parameters (`state[p]["exp_avg_sq"]`: params_state.py). The inner optimizer steps fp32
stand-ins:

* `FP32ParamsCopy` keeps a persistent fp32 master copy of every bf16 parameter (Neuron's
  "AdamW_FP32ParamsCopy" recipe, without the published sample's defects: parameters stay bf16
  and never alias masters, masters and fp32 states survive `state_dict()`, and masters follow
  changes made to the parameters outside the optimizer);
* `StochasticRoundingOptimizer` keeps no masters: fp32 stand-ins live only during `step()`,
  the inner optimizer's states stay fp32 (or bf16, `bf16_states=True`), and the result is
  written back with stochastic rounding (the torchao `bf16_stochastic_round` idea, for
  CPU/GPU where NEURON_RT_STOCHASTIC_ROUNDING_EN does nothing).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch.optim import Optimizer

from xlamigrate_runtime.optimizer_facts import STATES_BUILT_AT_CONSTRUCTION, UNWRAPPABLE
from xlamigrate_runtime.params_state import ParamsState
from xlamigrate_runtime.rounding import (
    copy_all_stochastically_rounded_,
    differ_from_nearest,
    is_bf16_rounding_of,
)

MASTERS_KEY = "fp32_master_params"
GENERATOR_KEY = "stochastic_rounding_generator_state"
_LOW_PRECISION = (torch.bfloat16, torch.float16)  # what gets an fp32 master
# StochasticRoundingOptimizer steps at most this many elements at a time by default (fp32
# stand-ins and grads: 8 B each while they exist, 128 MiB here), and at most a quarter of the
# model: a step's peak then stays below fp32 AdamW's (docs/performance.md).
DEFAULT_BUCKET_ELEMENTS = 1 << 24
BUCKETS_AT_LEAST = 4
_FOREACH_DEVICES = ("cpu", "cuda")  # torch._foreach_copy_ kernels; XLA copies one by one

_Pair = tuple[
    torch.Tensor, torch.Tensor
]  # (model parameter, fp32 tensor the inner optimizer steps)


class _FP32UpdateOptimizer(Optimizer):
    """What both wrappers share: the bf16 param_groups, hyper-parameter sync, step, write-back."""

    def __init__(
        self,
        optimizer: Optimizer,
        stochastic_rounding: bool,
        generator: torch.Generator | None,
        seed: int,
        keep_fp32_grads: bool | None,
        max_grad_norm: float | None = None,
    ) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"expected a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if isinstance(optimizer, _FP32UpdateOptimizer):
            raise TypeError("the optimizer is already wrapped")
        why = UNWRAPPABLE.get(type(optimizer).__name__)
        if why is not None:
            raise TypeError(
                f"{type(optimizer).__name__} cannot be wrapped: {why}. Keep fp32 master weights"
                " for this model another way (ZeRO-1: its own fp32 master option), or train it"
                " in full bf16 or under autocast"
            )
        if any(optimizer.state.values()):
            _remake_construction_states_in_fp32(optimizer)
        # The inner optimizer's groups are the caller's own dicts (torch keeps what it is given):
        # its fp32 stand-ins go into copies, never into the caller's `groups[i]["params"]`.
        optimizer.param_groups = [
            {**group, "params": list(group["params"])} for group in optimizer.param_groups
        ]
        self.optimizer = optimizer
        self.stochastic_rounding = stochastic_rounding
        self.generator = generator
        self.seed = seed
        self.keep_fp32_grads = keep_fp32_grads
        if max_grad_norm is not None and not max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be positive, got {max_grad_norm}")
        self.max_grad_norm = max_grad_norm
        self._clip_scale: torch.Tensor | None = None  # this step's, where max_grad_norm is set
        # param -> its fp32 gradient buffer, reused every step where grads are kept
        self._kept_grads: dict[torch.Tensor, torch.Tensor] = {}
        # model param -> the key of its inner state between steps, and back (`state`)
        self._stand_ins: dict[torch.Tensor, torch.Tensor] = {}
        self._params_of: dict[torch.Tensor, torch.Tensor] = {}
        self._params_state = ParamsState(self, self._stand_ins, self._params_of)
        self._attached = False  # Optimizer.__init__ calls add_param_group for our own groups
        groups = [dict(group) for group in optimizer.param_groups]
        super().__init__(groups, dict(optimizer.defaults))
        self._attached = True
        for index, group in enumerate(self.param_groups):
            self._attach(index, group["params"])

    # -- what each wrapper decides ---------------------------------------------------------

    def _attach_group(self, index: int, params: list[torch.Tensor]) -> None:
        """Prepares the inner optimizer's group `index` for the given model parameters: its
        params are what the inner optimizer keys their state by between steps."""
        raise NotImplementedError

    @contextmanager
    def _fp32_pairs(self, bucket: frozenset[int] | None = None) -> Iterator[list[_Pair]]:
        """Puts fp32 stand-ins in the inner optimizer for the duration of the block (for the
        parameters of `bucket` only, where the wrapper steps them bucket by bucket)."""
        raise NotImplementedError
        yield []

    @contextmanager
    def _fp32_states(self, pairs: list[_Pair]) -> Iterator[None]:
        """The inner optimizer's states of these stand-ins, in fp32 while it steps them (they
        are, but where StochasticRoundingOptimizer keeps them in bf16 between steps)."""
        yield

    def _after_write(self, pairs: list[_Pair]) -> None:
        """Called after the updated values were written into the model parameters."""

    def _attach(self, index: int, params: list[torch.Tensor]) -> None:
        self._attach_group(index, params)
        stand_ins = self.optimizer.param_groups[index]["params"]
        for param, stand_in in zip(params, stand_ins, strict=True):
            self._stand_ins[param] = stand_in
            self._params_of[stand_in] = param

    # -- Optimizer API ---------------------------------------------------------------------

    @property  # type: ignore[override]  # (Optimizer's is a defaultdict: any key makes a state)
    def state(self) -> ParamsState:
        """The inner optimizer's per-parameter state, keyed by the model's parameters:
        `optimizer.state[p]["exp_avg_sq"]` for a `p` of `model.parameters()` is the moment the
        inner optimizer keeps for `p` (in fp32), and writes to it are the inner optimizer's.
        Keys it does not know raise a KeyError saying what it is keyed by (see ParamsState)."""
        return self._params_state

    @state.setter
    def state(self, value: Mapping[Any, Any]) -> None:
        """`optimizer.state = defaultdict(dict)` (a reset) replaces the inner optimizer's
        per-parameter state with `value`'s. (Optimizer.__init__'s own empty one is ignored:
        the inner optimizer's state is the state.)"""
        if not self.__dict__.get("_attached") or value is self._params_state:
            return
        entries = list(value.items())
        self._params_state.clear()
        self._params_state.update(entries)

    def __getstate__(self) -> dict[str, Any]:
        """All of it (pickle, deepcopy): Optimizer's own keeps only defaults, state and
        param_groups, which would lose the inner optimizer and the masters."""
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Optimizer.load_state_dict sets its own state through here: ours is the property's.
        super().__setstate__({key: value for key, value in state.items() if key != "state"})

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)
        if self._attached:
            group = self.param_groups[-1]
            self.optimizer.add_param_group({**_hyperparameters(group), "params": []})
            self._attach(len(self.param_groups) - 1, group["params"])

    def _check_groups(self) -> None:
        """A group edited in place (a parameter removed, replaced or appended to its list)
        leaves the inner optimizer's copy of it behind: say so, and what to do instead."""
        if len(self.param_groups) != len(self.optimizer.param_groups):
            raise RuntimeError(
                f"{type(self).__name__}: param_groups has {len(self.param_groups)} groups, the"
                f" optimizer was given {len(self.optimizer.param_groups)}: add a group with"
                " add_param_group(); to drop one, build the optimizer again"
            )
        for index, (outer, inner) in enumerate(
            zip(self.param_groups, self.optimizer.param_groups, strict=True)
        ):
            params, kept = outer["params"], inner["params"]
            if len(params) != len(kept) or any(
                self._stand_ins.get(param) is not stand_in
                for param, stand_in in zip(params, kept, strict=True)
            ):
                raise RuntimeError(
                    f"{type(self).__name__}: param_groups[{index}]['params'] is not the list of"
                    " parameters it was built with (edited in place): the wrapper keeps an"
                    " fp32 copy of each parameter, so a group cannot be edited. Add"
                    " parameters with add_param_group(); to drop or replace one, build the"
                    " optimizer again"
                )

    def _before_step(self) -> None:
        """Called at the start of each step, once the groups are checked."""

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        self._check_groups()
        self._before_step()
        loss = None
        if closure is not None:
            with torch.enable_grad():  # type: ignore[no-untyped-call]
                loss = closure()
        for outer, inner in zip(self.param_groups, self.optimizer.param_groups, strict=True):
            inner.update(_hyperparameters(outer))  # LR schedulers write to our groups
        self._clip_scale = self._clipping()
        for bucket in self._buckets():
            with self._fp32_pairs(bucket) as pairs:
                # Params with a gradient and an fp32 stand-in; the others step themselves or not
                # at all.
                stood_in = [(p, fp32) for p, fp32 in pairs if fp32 is not p and p.grad is not None]
                self._set_fp32_grads(stood_in)
                with self._fp32_states(stood_in):
                    self.optimizer.step()
                self._write_back(stood_in)
                for _, fp32 in stood_in:
                    fp32.grad = None
                self._after_write(stood_in)
        return loss

    def _clipping(self) -> torch.Tensor | None:
        """With `max_grad_norm`: the factor every gradient is scaled by in fp32, as
        `clip_grad_norm_` computes it (max_grad_norm / (total 2-norm + 1e-6), at most 1) but
        over the gradients' exact fp32 values and applied to the fp32 copies the inner
        optimizer steps (`clip_grad_norm_` on the model takes the norm of bf16 gradients in
        bf16 and writes the clipped gradients back in bf16)."""
        if self.max_grad_norm is None:
            return None
        grads = [p.grad for group in self.param_groups for p in group["params"]]
        present = [grad for grad in grads if grad is not None]
        if not present:
            return None
        device = present[0].device
        norms = [
            torch.linalg.vector_norm(
                (grad.coalesce().values() if grad.is_sparse else grad).to(torch.float32)
            ).to(device)
            for grad in present
        ]
        total = torch.linalg.vector_norm(torch.stack(norms))
        scale: torch.Tensor = (self.max_grad_norm / (total + 1e-6)).clamp(max=1.0)
        return scale

    def _buckets(self) -> Iterator[frozenset[int] | None]:
        """The parameters (by id) each inner step covers: all of them at once (None)."""
        yield None

    def _inner_state_dict(self) -> dict[str, Any]:
        with self._fp32_pairs():
            return self.optimizer.state_dict()

    def state_dict(self) -> dict[str, Any]:
        self._check_groups()
        inner = self._inner_state_dict()
        state = {"state": inner["state"], "param_groups": super().state_dict()["param_groups"]}
        if self.generator is not None:
            state[GENERATOR_KEY] = self.generator.get_state()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._check_groups()
        groups = state_dict["param_groups"]
        super().load_state_dict({"state": {}, "param_groups": groups})
        # The inner optimizer casts floating states to its params' dtype: fp32 here, lossless.
        with self._fp32_pairs():
            self.optimizer.load_state_dict({"state": state_dict["state"], "param_groups": groups})
        generator = self._generator(self._first_device())
        if GENERATOR_KEY in state_dict and generator is not None:  # XLA uses its own RNG state
            generator.set_state(state_dict[GENERATOR_KEY])

    def __repr__(self) -> str:
        mode = "stochastic" if self.stochastic_rounding else "nearest"
        return f"{type(self).__name__}(rounding={mode}, optimizer={self.optimizer!r})"

    def _set_fp32_grads(self, pairs: list[_Pair]) -> None:
        """Gives each fp32 stand-in an fp32 copy of its parameter's gradient (exact: bf16 ->
        fp32): fresh tensors dropped after the step, or buffers kept between steps, 4 bytes
        per parameter more at rest but no allocation (see `keeps_fp32_grads`). A sparse
        gradient (an `Embedding(sparse=True)`'s) gets a sparse fp32 copy, which the inner
        optimizer takes (SGD, Adagrad) or refuses with its own words (AdamW)."""
        for group in _by_device(pairs):
            scale = self._clip_scale
            if scale is not None:
                scale = scale.to(group[0][0].device)
            for param, fp32 in group:
                if param.grad is not None and param.grad.is_sparse:
                    sparse = param.grad.to(torch.float32)
                    fp32.grad = sparse if scale is None else sparse * scale
            dense = [(p, fp32) for p, fp32 in group if p.grad is not None and not p.grad.is_sparse]
            grads = [self._fp32_grad_buffer(param, fp32) for param, fp32 in dense]
            _copy_all(grads, [param.grad for param, _ in dense if param.grad is not None])
            if scale is not None and grads:
                torch._foreach_mul_(grads, scale)
            for (_, fp32), grad in zip(dense, grads, strict=True):
                fp32.grad = grad

    def _fp32_grad_buffer(self, param: torch.Tensor, fp32: torch.Tensor) -> torch.Tensor:
        if not keeps_fp32_grads(self.keep_fp32_grads, fp32.device):
            return torch.empty_like(fp32)
        kept = self._kept_grads
        buffer = kept.get(param)
        if buffer is None or buffer.shape != fp32.shape or buffer.device != fp32.device:
            buffer = kept[param] = torch.empty_like(fp32)
        return buffer

    # -- writing back ------------------------------------------------------------------------

    def _write_back(self, pairs: list[_Pair]) -> None:
        """Writes the stepped fp32 values into the existing storage of the model parameters."""
        if self.stochastic_rounding:
            for group in _by_device([pair for pair in pairs if pair[0].dtype == torch.bfloat16]):
                params, stepped = [param for param, _ in group], [fp32 for _, fp32 in group]
                generator = self._generator(params[0].device)
                copy_all_stochastically_rounded_(params, stepped, generator)
            pairs = [pair for pair in pairs if pair[0].dtype != torch.bfloat16]
        for group in _by_device(pairs):  # round to nearest: one foreach copy per device
            _copy_all([param for param, _ in group], [fp32 for _, fp32 in group])

    def _generator(self, device: torch.device) -> torch.Generator | None:
        """The generator for stochastic rounding: the user's, else one seeded with `seed`, so
        that every data-parallel rank draws the same roundings. None where the device has no
        generators of its own (XLA): its default RNG is used, so seed it alike on every rank
        (`xm.set_rng_state(seed)`)."""
        if self.generator is None and device.type != "xla":
            self.generator = torch.Generator(device=device).manual_seed(self.seed)
        return self.generator

    def _first_device(self) -> torch.device:
        first: torch.Tensor = self.param_groups[0]["params"][0]
        return first.device


class FP32ParamsCopy(_FP32UpdateOptimizer):
    """Wraps an optimizer built on a bf16 model with fp32 master weights.

    `FP32ParamsCopy(torch.optim.AdamW(model.parameters(), lr=1e-4))` keeps an fp32 copy of every
    bf16 parameter; the inner optimizer computes the update on it in fp32 from fp32 gradients
    with fp32 states, and the result is written into the existing bf16 storage, rounded to
    nearest (or stochastically with `stochastic_rounding=True`). fp16 parameters get masters
    too (written back rounded to nearest: stochastic rounding is bf16's). Parameters in fp32
    (a norm layer, say) are stepped directly. Masters are saved by `state_dict()`. A
    parameter changed outside the optimizer (`model.load_state_dict(...)`, an in-place edit)
    is noticed at the next step and its master follows it. `keep_fp32_grads`: keep the fp32
    gradient buffers between steps (4 bytes per parameter); None, the default, keeps them on
    the CPU only (`keeps_fp32_grads`). `max_grad_norm` clips the gradients by their total
    2-norm as `clip_grad_norm_` does, but in fp32, on the copies the masters are stepped with
    (instead of calling `clip_grad_norm_` on the bf16 gradients).

    `follow_data_writes` (rounding to nearest): a write through `p.data` (a WGAN weight clip)
    moves no version counter, so by default every element of every parameter is compared with
    its master's rounding each step, which costs a read of both (1.07-1.4x a hand-written
    master loop, which follows no outside write at all: docs/performance.md). False compares
    only the parameters whose version counter moved since this optimizer wrote them (an
    in-place op on the parameter, `model.load_state_dict`): a hand loop's cost, for code that
    writes no parameter through `.data`.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        stochastic_rounding: bool = False,
        generator: torch.Generator | None = None,
        seed: int = 0,
        keep_fp32_grads: bool | None = None,
        max_grad_norm: float | None = None,
        follow_data_writes: bool = True,
    ) -> None:
        self.follow_data_writes = follow_data_writes
        self._masters: dict[torch.Tensor, torch.Tensor] = {}
        self._versions: dict[torch.Tensor, int] = {}  # as this optimizer last left each param
        super().__init__(
            optimizer, stochastic_rounding, generator, seed, keep_fp32_grads, max_grad_norm
        )

    def _attach_group(self, index: int, params: list[torch.Tensor]) -> None:
        masters = []
        for param in params:
            if param.dtype in _LOW_PRECISION and param.requires_grad:
                master = param.detach().to(torch.float32)  # a new tensor: never aliases
                self._masters[param] = master
                masters.append(master)
            else:  # (fp32: stepped as it is; frozen: its master is made once it trains)
                masters.append(param)
        self.optimizer.param_groups[index]["params"] = masters
        _rekey(self.optimizer.state, list(zip(params, masters, strict=True)))

    def master_params(self) -> list[torch.Tensor]:
        """The fp32 master weights, in parameter order (a parameter that is neither bf16 nor
        fp16 is its own, and so is one frozen since the optimizer was built: a frozen
        parameter costs no master until it trains)."""
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def _before_step(self) -> None:
        """Masters for the low-precision parameters frozen when the optimizer was built that
        train now (a gradient): made from their current values."""
        for index, position, param, kept in self._slots():
            if kept is param and param.dtype in _LOW_PRECISION and param.grad is not None:
                self._give_master(index, position, param, param)

    def _slots(self) -> Iterator[tuple[int, int, torch.Tensor, torch.Tensor]]:
        """(group, position, model parameter, what the inner optimizer holds for it)."""
        for index, (outer, inner) in enumerate(
            zip(self.param_groups, self.optimizer.param_groups, strict=True)
        ):
            for position, (param, kept) in enumerate(
                zip(outer["params"], inner["params"], strict=True)
            ):
                yield index, position, param, kept

    def _give_master(
        self, index: int, position: int, param: torch.Tensor, source: torch.Tensor
    ) -> None:
        with torch.no_grad():
            master = source.detach().to(device=param.device, dtype=torch.float32, copy=True)
        self._masters[param] = master
        self.optimizer.param_groups[index]["params"][position] = master
        self._params_of.pop(self._stand_ins[param], None)
        self._stand_ins[param] = master
        self._params_of[master] = param
        _rekey(self.optimizer.state, [(param, master)])

    @contextmanager
    def _fp32_pairs(self, bucket: frozenset[int] | None = None) -> Iterator[list[_Pair]]:
        pairs: list[_Pair] = []  # (masters are the inner optimizer's params: one bucket)
        for outer, inner in zip(self.param_groups, self.optimizer.param_groups, strict=True):
            pairs.extend(zip(outer["params"], inner["params"], strict=True))
        self._follow_outside_changes(pairs)
        yield pairs

    def _follow_outside_changes(self, pairs: list[_Pair]) -> None:
        """Masters follow parameters that something other than this optimizer wrote.

        Rounding to nearest, every step compares each parameter with its master's rounding
        (what this optimizer wrote): any other value was written from outside, a write
        through `p.data` (a WGAN weight clip) and a `load_state_dict` of values one bf16
        step away included, and its master follows it exactly. A `p.data` write leaves no
        trace but the bits (that tensor's version counter is not the parameter's), so every
        element is read: `differ_from_nearest`, one pass over masters and parameters with
        no allocation on the CPU and one host sync for all parameters elsewhere; on XLA the
        comparison is part of the step's graph, with no sync. With `follow_data_writes=False`,
        only a parameter whose version counter moved is compared. Rounding stochastically,
        either neighbour of the master may be ours: a write the version counter shows
        (`load_state_dict`, an in-place op on the parameter) is followed where the value is
        neither neighbour; a write through `p.data` is not seen.
        """
        compared: list[_Pair] = []
        with torch.no_grad():
            for param, master in pairs:
                if master is param:
                    continue
                if self.stochastic_rounding and param.dtype == torch.bfloat16:
                    if param._version != self._versions.get(param):
                        _follow(param, master, is_bf16_rounding_of(param, master))
                        self._versions[param] = param._version
                elif not self.follow_data_writes:
                    if param._version != self._versions.get(param):
                        _follow(param, master, _is_nearest_rounding(param, master))
                        self._versions[param] = param._version
                elif param.device.type == "xla":
                    _follow(param, master, _is_nearest_rounding(param, master))
                else:
                    compared.append((param, master))
            if not compared:
                return
            params, masters = [p for p, _ in compared], [m for _, m in compared]
            for param, master, differs in zip(
                params, masters, differ_from_nearest(params, masters), strict=True
            ):
                if differs:
                    _follow(param, master, _is_nearest_rounding(param, master))

    def _after_write(self, pairs: list[_Pair]) -> None:
        if self.stochastic_rounding or not self.follow_data_writes:  # (where versions are read)
            for param, _ in pairs:
                self._versions[param] = param._version

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state[MASTERS_KEY] = dict(enumerate(self.master_params()))
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        saved = state_dict.get(MASTERS_KEY)
        if saved is None and self._masters:
            warnings.warn(
                "FP32ParamsCopy.load_state_dict: the state_dict holds no fp32 master weights"
                f" ('{MASTERS_KEY}': saved by the plain optimizer, not by this wrapper?): the"
                " masters were rebuilt from the bf16/fp16 parameters, so they lost what those"
                " cannot hold (up to half a bf16 step per weight). Resume from a state_dict"
                " saved by FP32ParamsCopy to continue exactly",
                stacklevel=2,
            )
        with torch.no_grad():
            for number, (index, position, param, master) in enumerate(list(self._slots())):
                source = saved[number] if saved is not None else param
                if master is param:  # (a frozen parameter saved with its master: keep it)
                    if param.dtype in _LOW_PRECISION and source.dtype == torch.float32:
                        self._give_master(index, position, param, source)
                    continue
                master.copy_(source.to(device=master.device, dtype=torch.float32))


class AdamW_FP32ParamsCopy(FP32ParamsCopy):  # the class name Neuron's sample uses
    """Drop-in for Neuron's sample class: `AdamW_FP32ParamsCopy(params, lr=..., ...)` takes
    torch.optim.AdamW's arguments and keeps fp32 master weights."""

    def __init__(
        self,
        params: Iterable[Any],
        *args: Any,
        stochastic_rounding: bool = False,
        generator: torch.Generator | None = None,
        seed: int = 0,
        keep_fp32_grads: bool | None = None,
        follow_data_writes: bool = True,
        **kwargs: Any,
    ) -> None:
        adamw = torch.optim.AdamW(params, *args, **kwargs)
        super().__init__(
            adamw,
            stochastic_rounding,
            generator,
            seed,
            keep_fp32_grads,
            follow_data_writes=follow_data_writes,
        )


class StochasticRoundingOptimizer(_FP32UpdateOptimizer):
    """Wraps an optimizer built on a bf16 model: fp32 states, stochastic rounding, no masters.

    During `step()` each bf16 parameter gets a temporary fp32 stand-in; the inner optimizer
    updates it with fp32 gradients and fp32 states, and the result is written back with
    unbiased stochastic rounding, so updates far below a bf16 ulp still move the weights on
    average. Between steps nothing but the inner optimizer's fp32 states is kept (12 bytes
    per parameter with AdamW instead of 16 with masters). A step upcasts a bucket of
    parameters at a time, `bucket_elements` elements at most (by default a quarter of the
    model, and 2**24), so its stand-ins, their fp32 gradients and the inner optimizer's
    temporaries add a bounded amount, and its peak stays below fp32 AdamW's. `max_grad_norm`
    clips in fp32 over every bucket's gradients, as FP32ParamsCopy's does.

    `bf16_states=True` keeps the states in bf16 between steps too: 8 bytes per parameter with
    AdamW, as torchao's `_AdamW(bf16_stochastic_round=True)`. They are upcast (exactly) for
    the step and written back with stochastic rounding, like the parameters: torchao rounds
    them to nearest, which loses every change below half a bf16 ulp (with beta2 = 0.999,
    `exp_avg_sq` moves by a thousandth of the difference per step: rounded to nearest it can
    never decrease), so each state would stall where stochastic rounding keeps its
    expectation on the fp32 recursion.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        generator: torch.Generator | None = None,
        seed: int = 0,
        keep_fp32_grads: bool = False,
        bucket_elements: int | None = None,
        max_grad_norm: float | None = None,
        bf16_states: bool = False,
    ) -> None:
        if bucket_elements is not None and bucket_elements < 1:
            raise ValueError("bucket_elements must be at least 1")
        self.bucket_elements = bucket_elements
        self.bf16_states = bf16_states
        super().__init__(optimizer, True, generator, seed, keep_fp32_grads, max_grad_norm)

    def _attach_group(self, index: int, params: list[torch.Tensor]) -> None:
        if any(param.dtype == torch.float16 for param in params):
            warnings.warn(
                "StochasticRoundingOptimizer rounds to bf16 only: fp16 parameters are stepped in"
                " fp16, with fp16 optimizer states. Use FP32ParamsCopy for an fp16 model (fp32"
                " master weights), or cast it to bf16.",
                RuntimeWarning,
                stacklevel=4,
            )
        self.optimizer.param_groups[index]["params"] = list(params)

    def _buckets(self) -> Iterator[frozenset[int] | None]:
        """Parameters of at most `bucket_elements` elements at a time (or one larger parameter
        alone): their fp32 stand-ins and gradients exist only while the inner optimizer steps
        them. An upcast of every parameter at once peaked at ~28 bytes per parameter, above
        fp32 AdamW's 20 (foreach) or 16 (fused); a bucket of a quarter of the model adds at
        most a quarter of the step's 12 to 20 bytes of fp32 work."""
        params = [param for group in self.optimizer.param_groups for param in group["params"]]
        limit = self.bucket_elements
        if limit is None:
            total = sum(param.numel() for param in params)
            limit = max(1, min(DEFAULT_BUCKET_ELEMENTS, total // BUCKETS_AT_LEAST))
        bucket: set[int] = set()
        size = 0
        for param in params:
            if bucket and size + param.numel() > limit:
                yield frozenset(bucket)
                bucket, size = set(), 0
            bucket.add(id(param))
            size += param.numel()
        if bucket:
            yield frozenset(bucket)

    @contextmanager
    def _fp32_states(self, pairs: list[_Pair]) -> Iterator[None]:
        """With `bf16_states`: the stand-ins' bf16 states upcast for the step (exact), then
        written back into the same bf16 tensors with stochastic rounding, one draw for all;
        states the step made (its first) get new bf16 tensors. A state is a floating tensor
        of its parameter's shape (AdamW's `step` is not one)."""
        if not self.bf16_states:
            yield
            return
        state = self.optimizer.state
        at_rest: dict[tuple[int, str], torch.Tensor] = {}
        for _, fp32 in pairs:
            entry = state.get(fp32, {})
            for key, value in list(entry.items()):
                if _is_state_of(value, fp32) and value.dtype == torch.bfloat16:
                    at_rest[id(fp32), key] = value
                    entry[key] = value.to(torch.float32)
        yield
        moved: list[tuple[dict[str, Any], str, torch.Tensor, torch.Tensor]] = []
        for _, fp32 in pairs:
            entry = state.get(fp32, {})
            for key, value in entry.items():
                if _is_state_of(value, fp32) and value.dtype == torch.float32:
                    kept = at_rest.get((id(fp32), key))
                    if kept is None:
                        kept = torch.empty_like(value, dtype=torch.bfloat16)
                    moved.append((entry, key, kept, value))
        for group in _by_device([(kept, value) for _, _, kept, value in moved]):
            generator = self._generator(group[0][0].device)
            copy_all_stochastically_rounded_(
                [kept for kept, _ in group], [value for _, value in group], generator
            )
        for entry, key, kept, _ in moved:
            entry[key] = kept

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """With `bf16_states`, the loaded states are kept in bf16 (exact for states saved by
        such an optimizer; rounded to nearest, once, for fp32 ones)."""
        super().load_state_dict(state_dict)
        if self.bf16_states:
            with torch.no_grad():
                for group in self.optimizer.param_groups:
                    for param in group["params"]:
                        entry = self.optimizer.state.get(param, {})
                        for key, value in entry.items():
                            if param.dtype == torch.bfloat16 and _is_state_of(value, param):
                                entry[key] = value.to(torch.bfloat16)

    def _inner_state_dict(self) -> dict[str, Any]:
        """Between steps the inner optimizer holds the bf16 params and their states (fp32, or
        bf16): its state_dict needs no stand-ins (which cost 4 bytes per parameter)."""
        return self.optimizer.state_dict()

    @contextmanager
    def _fp32_pairs(self, bucket: frozenset[int] | None = None) -> Iterator[list[_Pair]]:
        groups = self.optimizer.param_groups
        every = [list(group["params"]) for group in groups]
        pairs: list[_Pair] = []
        for group, params in zip(groups, every, strict=True):
            stand_ins = []
            for param in params:
                if bucket is not None and id(param) not in bucket:
                    continue
                stand_in = (
                    param.detach().to(torch.float32) if param.dtype == torch.bfloat16 else param
                )
                pairs.append((param, stand_in))
                stand_ins.append(stand_in)
            group["params"] = stand_ins
        _rekey(self.optimizer.state, pairs)
        try:
            yield pairs
        finally:
            _rekey(self.optimizer.state, [(fp32, param) for param, fp32 in pairs])
            # (the inner optimizer's current groups: a load_state_dict made new ones)
            for group, params in zip(self.optimizer.param_groups, every, strict=True):
                group["params"] = params


def _remake_construction_states_in_fp32(optimizer: Optimizer) -> None:
    """An optimizer that makes per-parameter state when it is built (Adagrad's squared-gradient
    sums, optimizer_facts.py) made it in its parameters' bf16 or fp16: it is made again in
    fp32, filled with the optimizer's value as the optimizer fills it. Any other state means the
    optimizer has already stepped, and its low-precision states cannot be made exact again."""
    built = STATES_BUILT_AT_CONSTRUCTION.get(type(optimizer).__name__, {})
    for state in optimizer.state.values():
        step = state.get("step", 0)
        if set(state) - {"step", *built} or float(step) != 0:
            raise ValueError("wrap the optimizer before its first step: it already has state")
    with torch.no_grad():
        for param, state in optimizer.state.items():
            if param.dtype in _LOW_PRECISION:
                for key, default in built.items():
                    value = optimizer.defaults[default]
                    state[key] = torch.full_like(param, value, dtype=torch.float32)


def _is_nearest_rounding(param: torch.Tensor, master: torch.Tensor) -> torch.Tensor:
    """Elementwise: does the parameter hold its master rounded to nearest (NaN for NaN)?"""
    ours = master.to(param.dtype)
    return (ours == param) | (torch.isnan(ours) & torch.isnan(param))


def _follow(param: torch.Tensor, master: torch.Tensor, ours: torch.Tensor) -> None:
    """The master takes the parameter's value wherever it does not hold what this optimizer
    wrote (`ours`, elementwise)."""
    master.copy_(torch.where(ours, master, param.to(torch.float32)))


def _is_state_of(value: object, param: torch.Tensor) -> bool:
    """Whether an optimizer state is one of the parameter's per-element floating states."""
    return (
        isinstance(value, torch.Tensor)
        and value.is_floating_point()
        and value.dim() > 0
        and value.shape == param.shape
    )


def _by_device(pairs: list[_Pair]) -> list[list[_Pair]]:
    """The pairs split by the parameter's device, in order: foreach ops take one device."""
    groups: dict[torch.device, list[_Pair]] = {}
    for pair in pairs:
        groups.setdefault(pair[0].device, []).append(pair)
    return list(groups.values())


def _copy_all(destinations: list[torch.Tensor], sources: list[torch.Tensor]) -> None:
    """`destination.copy_(source)` for each pair: one foreach call where the device has it."""
    if not destinations:
        return
    if destinations[0].device.type in _FOREACH_DEVICES:
        torch._foreach_copy_(destinations, sources)
    else:  # XLA and other backends without foreach kernels
        for destination, source in zip(destinations, sources, strict=True):
            destination.copy_(source)


def _rekey(state: dict[Any, Any], moves: list[_Pair]) -> None:
    """Moves the inner optimizer's per-parameter state from one key tensor to another."""
    for old, new in moves:
        if old is not new and old in state:
            state[new] = state.pop(old)


def keeps_fp32_grads(choice: bool | None, device: torch.device) -> bool:
    """Whether fp32 gradient buffers are kept between steps on `device`. By default (None)
    only on the CPU: there the allocator gives large freed blocks back to the OS, and the page
    faults of fresh ones every step cost as much as the step itself at ~100M parameters. CUDA's
    caching allocator reuses freed blocks, and XLA fuses the cast into the update: fresh
    gradients cost nothing there, and keep the 4 bytes per parameter free between steps."""
    return device.type == "cpu" if choice is None else choice


def _hyperparameters(group: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in group.items() if key != "params"}
