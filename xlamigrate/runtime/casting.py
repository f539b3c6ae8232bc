"""Make a bf16 module accept fp32 inputs the way the legacy flag did (hazard 1 in recipes.md)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

_HANDLE_ATTRIBUTE = "_xlamigrate_input_cast"


def module_dtype(module: nn.Module, recurse: bool = True) -> torch.dtype | None:
    """The dtype of the module's first floating-point parameter (or buffer), if any: the walk
    stops there (the input-cast hook asks on every forward; a model of thousands of tensors
    was walked whole each time)."""
    for tensor in itertools.chain(module.parameters(recurse), module.buffers(recurse)):
        if tensor.is_floating_point():
            return tensor.dtype
    return None


def cast_floating(value: Any, dtype: torch.dtype) -> Any:
    """Casts floating-point tensors nested in tuples, lists and dicts; leaves the rest alone."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() and value.dtype != dtype:
            return value.to(dtype)
        return value
    if isinstance(value, tuple):
        items = [cast_floating(item, dtype) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        return [cast_floating(item, dtype) for item in value]
    if isinstance(value, Mapping):
        converted = {key: cast_floating(item, dtype) for key, item in value.items()}
        try:
            rebuilt: Any = type(value)
            return rebuilt(converted)
        except TypeError:  # a mapping type that cannot be built from a dict
            return converted
    return value


class InputCast:
    """The input-cast hooks of one model (on it and on every submodule that holds floating
    parameters or buffers of its own); `remove()` takes them all off."""

    def __init__(self, handles: list[RemovableHandle]) -> None:
        self.handles = handles
        self.active = True

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.active = False


def cast_inputs_to_module_dtype(module: nn.Module) -> InputCast:
    """Casts floating inputs to the parameter dtype before every forward of `module` and of
    each submodule holding floating parameters or buffers of its own.

    What the legacy flag did for every fp32 tensor on the device: a bf16 model fed fp32 batches
    works, and so does an fp32 tensor made inside `forward` (a timestep `t.float() / N`,
    `torch.arange(...).float()` features) reaching a bf16 Conv or Linear (hazard 7 in
    recipes.md). Integer tensors (token ids, labels) are untouched; an fp32 module is left
    alone. The dtype is read at each call, so a later `module.to(...)` is respected. Installing
    twice returns the first handle; `handle.remove()` undoes it.
    """
    existing: InputCast | None = getattr(module, _HANDLE_ATTRIBUTE, None)
    if existing is not None and existing.active:
        return existing
    handles = [module.register_forward_pre_hook(_cast_hook(recurse=True), with_kwargs=True)]
    for sub in module.modules():
        if sub is not module and _owns_floating(sub):
            handles.append(sub.register_forward_pre_hook(_cast_hook(False), with_kwargs=True))
    cast = InputCast(handles)
    setattr(module, _HANDLE_ATTRIBUTE, cast)
    return cast


def _owns_floating(module: nn.Module) -> bool:
    tensors = itertools.chain(module.parameters(recurse=False), module.buffers(recurse=False))
    return any(tensor.is_floating_point() for tensor in tensors)


def _cast_hook(
    recurse: bool,
) -> Callable[
    [nn.Module, tuple[Any, ...], dict[str, Any]], tuple[tuple[Any, ...], dict[str, Any]] | None
]:
    def hook(
        module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        dtype = module_dtype(module, recurse)
        if dtype is None or dtype == torch.float32:
            return None
        return cast_floating(args, dtype), cast_floating(kwargs, dtype)

    return hook
