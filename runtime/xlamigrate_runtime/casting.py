"""Make a bf16 module accept fp32 inputs the way the legacy flag did (hazard 1 in recipes.md)."""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.hooks import RemovableHandle

_HANDLE_ATTRIBUTE = "_xlamigrate_input_cast"
_LOW_PRECISION = (torch.bfloat16, torch.float16)

# The ops that carry a model's compute and, fed an fp32 operand beside a bf16 one inside
# `forward`, promote to fp32 on XLA without a word (or fail on the CPU): under the legacy flag
# they computed in bf16. Elementwise ops are left to promote: their result meets one of these,
# or a hooked submodule, before it meets a weight.
_COMPUTE_OPS = frozenset(
    {
        torch.nn.functional.linear,
        torch.nn.functional.bilinear,
        torch.nn.functional.scaled_dot_product_attention,
        torch.matmul,
        torch.Tensor.matmul,
        torch.mm,
        torch.Tensor.mm,
        torch.bmm,
        torch.Tensor.bmm,
        torch.addmm,
        torch.baddbmm,
        torch.einsum,
        torch.conv1d,
        torch.conv2d,
        torch.conv3d,
        torch.conv_transpose1d,
        torch.conv_transpose2d,
        torch.conv_transpose3d,
    }
)


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
    if isinstance(value, MutableMapping):
        # A copy with the cast items set: keeps the type and what its constructor would not
        # rebuild from a dict (a defaultdict's factory; a Hugging Face ModelOutput took a dict
        # for its first field when that field was None).
        rebuilt = copy.copy(value)
        for key, item in value.items():
            rebuilt[key] = cast_floating(item, dtype)
        return rebuilt
    if isinstance(value, Mapping):
        return {key: cast_floating(item, dtype) for key, item in value.items()}
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


def cast_inputs_to_module_dtype(
    module: nn.Module, output_dtype: torch.dtype | None = None
) -> InputCast:
    """Casts floating inputs to the parameter dtype before every forward of `module` and of
    each submodule holding floating parameters or buffers of its own.

    What the legacy flag did for every fp32 tensor on the device: a bf16 model fed fp32 batches
    works, and so does an fp32 tensor made inside `forward` (a timestep `t.float() / N`,
    `torch.arange(...).float()` features) reaching a bf16 Conv or Linear (hazard 7 in
    recipes.md). During the forward of `module` a matmul, linear, attention or convolution
    given fp32 and bf16 operands (`F.linear(fp32, self.weight)`) computes in bf16 as well: on
    XLA it promoted to fp32 silently, and that part of the model trained in fp32 (hazard 1).
    Integer tensors (token ids, labels) are untouched; an fp32 module is left alone. The dtype
    is read at each call, so a later `module.to(...)` is respected.

    `output_dtype=torch.float32` also returns the floating outputs of `module` (not of its
    submodules) in fp32, as the flag reported them: a loss or metric against fp32 targets then
    computes in fp32 (hazard 2: `F.mse_loss(bf16 output, fp32 target)` fails in backward, on
    the CPU with "Found dtype Float but expected BFloat16", on Neuron in the HLO verifier; what
    autocast does for losses too). It costs an fp32 copy of the outputs, 2 more bytes per
    output element where the loss saves its input (an LM's logits). The rewrite asks for it.

    Installing twice returns the first handle (with the first call's `output_dtype`);
    `handle.remove()` undoes it.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(
            f"cast_inputs_to_module_dtype takes the model (an nn.Module), got"
            f" {type(module).__name__}: a tensor needs no input cast; remove this call"
        )
    existing: InputCast | None = getattr(module, _HANDLE_ATTRIBUTE, None)
    if existing is not None and existing.active:
        return existing
    model = _ModelForward(output_dtype)
    handles = [
        module.register_forward_pre_hook(model.before, with_kwargs=True),
        module.register_forward_hook(model.after, always_call=True),
    ]
    for sub in module.modules():
        if sub is not module and _owns_floating(sub):
            handles.append(sub.register_forward_pre_hook(_cast_to_own_dtype, with_kwargs=True))
    cast = InputCast(handles)
    setattr(module, _HANDLE_ATTRIBUTE, cast)
    return cast


def _owns_floating(module: nn.Module) -> bool:
    tensors = itertools.chain(module.parameters(recurse=False), module.buffers(recurse=False))
    return any(tensor.is_floating_point() for tensor in tensors)


def _cast_to_own_dtype(
    module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """A submodule's pre-hook: floating inputs cast to the dtype of its own tensors."""
    dtype = module_dtype(module, recurse=False)
    if dtype is None or dtype == torch.float32:
        return None
    return cast_floating(args, dtype), cast_floating(kwargs, dtype)


class _ModelForward(TorchFunctionMode):
    """The hooks on the model itself. Before its forward: floating inputs cast to its dtype,
    and, where that dtype is low-precision, this mode entered, in which the ops of
    `_COMPUTE_OPS` given operands of mixed floating dtypes get them all in that dtype. After it
    (even where it raised): the mode left, and the floating outputs cast to `output_dtype`."""

    def __init__(self, output_dtype: torch.dtype | None) -> None:
        super().__init__()
        self.output_dtype = output_dtype
        # Per thread (modes are): how deep in the model's forward (it may call itself), and
        # whether the mode was entered at the outermost call.
        self.local = threading.local()

    def before(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        dtype = module_dtype(module)
        depth = getattr(self.local, "depth", 0) + 1
        self.local.depth = depth
        if dtype is None or dtype == torch.float32:
            return None
        if depth == 1 and dtype in _LOW_PRECISION:
            self.__enter__()  # type: ignore[no-untyped-call]
            self.local.entered = True
        return cast_floating(args, dtype), cast_floating(kwargs, dtype)

    def after(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> Any:
        depth = getattr(self.local, "depth", 0)
        if depth == 0:  # a pre-hook before ours failed
            return None
        self.local.depth = depth - 1
        if depth == 1 and getattr(self.local, "entered", False):
            self.local.entered = False
            self.__exit__(None, None, None)  # type: ignore[no-untyped-call]
        if self.output_dtype is None or output is None:
            return None
        dtype = module_dtype(module)
        if dtype is None or dtype == self.output_dtype:
            return None
        return cast_floating(output, self.output_dtype)

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func in _COMPUTE_OPS:
            dtype = _mixed_low_precision(args, kwargs)
            if dtype is not None:
                args, kwargs = cast_floating(args, dtype), cast_floating(kwargs, dtype)
        return func(*args, **kwargs)


def _mixed_low_precision(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.dtype | None:
    """The low-precision dtype among the floating operands, where they are of mixed dtypes."""
    dtypes = set()
    for value in itertools.chain(args, kwargs.values()):
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(item, torch.Tensor) and item.is_floating_point():
                dtypes.add(item.dtype)
    low = [dtype for dtype in _LOW_PRECISION if dtype in dtypes]
    return low[0] if len(dtypes) > 1 and low else None
