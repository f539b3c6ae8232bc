"""Make a bf16 module accept fp32 inputs the way the legacy flag did (hazard 1 in recipes.md)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

_HANDLE_ATTRIBUTE = "_xlamigrate_input_cast"


def module_dtype(module: nn.Module) -> torch.dtype | None:
    """The dtype of the module's first floating-point parameter (or buffer), if any: the walk
    stops there (the input-cast hook asks on every forward; a model of thousands of tensors
    was walked whole each time)."""
    for tensor in itertools.chain(module.parameters(), module.buffers()):
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


def cast_inputs_to_module_dtype(module: nn.Module) -> RemovableHandle:
    """Casts the floating inputs of `module` to its parameter dtype before every forward.

    Integer tensors (token ids, labels) are untouched; an fp32 module is left alone. The dtype
    is read at each call, so a later `module.to(...)` is respected. Installing twice returns the
    first handle; `handle.remove()` undoes it.
    """
    existing: RemovableHandle | None = getattr(module, _HANDLE_ATTRIBUTE, None)
    if existing is not None and existing.id in module._forward_pre_hooks:
        return existing

    def hook(
        module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        dtype = module_dtype(module)
        if dtype is None or dtype == torch.float32:
            return None
        return cast_floating(args, dtype), cast_floating(kwargs, dtype)

    handle = module.register_forward_pre_hook(hook, with_kwargs=True)
    setattr(module, _HANDLE_ATTRIBUTE, handle)
    return handle
