"""`optimizer.state` of a wrapper in optim.py: the inner optimizer's per-parameter state, looked up
by the model's parameters.

The inner optimizer keys its state by the tensors it steps (fp32 masters for `FP32ParamsCopy`),
which a training script never sees: it reads `optimizer.state[p]["exp_avg_sq"]` for the `p` of
`model.parameters()`. `ParamsState` translates each key and hands back the inner optimizer's
own dicts, so a write (`state[p]["step"] = ...`) is one the inner optimizer sees. It holds
nothing itself: it answers from whatever the inner optimizer's `state` is now (a
`load_state_dict` replaces it).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any, Protocol

import torch
from torch.optim import Optimizer


class Wrapper(Protocol):
    """What the view reads: the wrapper's inner optimizer, whose `state` a `load_state_dict`
    replaces (so it is looked up every time, never kept)."""

    optimizer: Optimizer


class ParamsState(MutableMapping[Any, Any]):
    """The inner optimizer's state, keyed by the model's parameters.

    `state[p]` is the inner state of `p`'s stand-in (the same dict; like the inner optimizer's
    defaultdict it makes an empty one for a parameter without state yet). `in`, `get`, `len`
    and iteration see the parameters that have state; iteration yields the model's parameters,
    in the order the inner optimizer made their states. A stand-in (a master from
    `master_params()`) is accepted as a key too, for its own state, but is never yielded: each
    state is listed once, under its parameter. Any other key is a KeyError that says what the
    state is keyed by.
    """

    def __init__(
        self,
        wrapper: Wrapper,
        stand_ins: Mapping[torch.Tensor, torch.Tensor],
        params: Mapping[torch.Tensor, torch.Tensor],
    ) -> None:
        self._wrapper = wrapper  # (no closure: a wrapper and its state pickle and deepcopy)
        self._stand_ins = stand_ins  # model parameter -> the key of its inner state
        self._params = params  # key of an inner state -> model parameter

    def _inner(self) -> MutableMapping[Any, Any]:
        state: MutableMapping[Any, Any] = self._wrapper.optimizer.state
        return state

    def _key(self, param: Any) -> Any:
        """The inner optimizer's key for `param` (a model parameter or a stand-in), or a
        KeyError naming what is accepted."""
        try:
            key = self._stand_ins.get(param)
            if key is None and param in self._params:
                key = param
        except TypeError:  # unhashable
            key = None
        if key is None:
            raise KeyError(self._unknown(param))
        return key

    def _unknown(self, param: Any) -> str:
        if isinstance(param, torch.Tensor):
            what = f"a {param.dtype} tensor of shape {tuple(param.shape)} on {param.device}"
        else:
            what = f"a {type(param).__name__}"
        masters = any(key is not model for model, key in self._stand_ins.items())
        keyed_by = " and by their fp32 masters" if masters else ""
        owner = type(self._wrapper).__name__
        return (
            f"{owner}.state is keyed by the model's parameters (the tensors in its"
            f" param_groups){keyed_by}; {what} is not one of them. Look up a tensor this"
            " optimizer was given (add_param_group adds one); the inner optimizer's own state,"
            f" keyed by the tensors it steps, is {owner}.optimizer.state"
        )

    def __getitem__(self, param: Any) -> Any:
        return self._inner()[self._key(param)]

    def __setitem__(self, param: Any, value: Any) -> None:
        self._inner()[self._key(param)] = value

    def __delitem__(self, param: Any) -> None:
        del self._inner()[self._key(param)]

    def __contains__(self, param: object) -> bool:
        try:
            return self._key(param) in self._inner()
        except KeyError:
            return False

    def __iter__(self) -> Iterator[torch.Tensor]:
        for key in self._inner():
            param = self._params.get(key)
            if param is not None:
                yield param

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def get(self, param: Any, default: Any = None) -> Any:
        """Never makes an empty state, unlike `state[param]` (as dict.get on a defaultdict)."""
        try:
            key = self._key(param)
        except KeyError:
            return default
        return self._inner().get(key, default)

    def setdefault(self, param: Any, default: Any = None) -> Any:
        if param not in self:
            self[param] = default
        return self[param]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self.items())!r})"
