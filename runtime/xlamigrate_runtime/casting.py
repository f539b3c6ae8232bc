"""Make a bf16 module accept fp32 inputs the way the legacy flag did (hazard 1 in recipes.md)."""

from __future__ import annotations

import copy
import itertools
import operator
import threading
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, TypeVar

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.hooks import RemovableHandle

_HANDLE_ATTRIBUTE = "_xlamigrate_input_cast"
_LOW_PRECISION = (torch.bfloat16, torch.float16)
_T = TypeVar("_T")

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
    """Casts floating-point tensors nested in tuples, lists and dicts; leaves the rest alone. A
    container with nothing to cast comes back as it is, not copied (the hooks run on every
    forward of every hooked module, mostly on inputs already in their dtype)."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() and value.dtype != dtype:
            return value.to(dtype)
        return value
    if isinstance(value, (tuple, list)):
        items = [cast_floating(item, dtype) for item in value]
        if all(map(operator.is_, items, value)):
            return value
        if isinstance(value, list):
            return items
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, Mapping):
        cast = {key: cast_floating(item, dtype) for key, item in value.items()}
        if all(map(operator.is_, cast.values(), value.values())):
            return value
        if not isinstance(value, MutableMapping):
            return cast
        # A copy with the cast items set: keeps the type and what its constructor would not
        # rebuild from a dict (a defaultdict's factory; a Hugging Face ModelOutput took a dict
        # for its first field when that field was None).
        rebuilt = copy.copy(value)
        for key, item in cast.items():
            rebuilt[key] = item
        return rebuilt
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
        if sub is not module and _own_dtype(sub) is not None:
            handles.append(sub.register_forward_pre_hook(model.submodule_before, with_kwargs=True))
    cast = InputCast(handles)
    setattr(module, _HANDLE_ATTRIBUTE, cast)
    return cast


def _own_dtype(module: nn.Module) -> torch.dtype | None:
    """The dtype of the module's first floating parameter (or buffer) of its own, read now.

    Read from the module's own dicts, not through `parameters(recurse=False)` (generators three
    deep, 10x slower): about as cheap as checking that a cached dtype still holds (0.5 us
    against 0.2 us), and never stale after `.to()`, `.half()`, `load_state_dict(assign=True)`
    or a new Parameter.
    """
    for tensors in (module._parameters, module._buffers):
        for tensor in tensors.values():
            if tensor is not None and tensor.is_floating_point():
                return tensor.dtype
    return None


def _cast_to_own_dtype(
    module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """Floating inputs cast to the dtype of the module's own tensors."""
    dtype = _own_dtype(module)
    if dtype is None or dtype == torch.float32:
        return None
    return _cast_all(args, kwargs, dtype)


class _ModelForward(TorchFunctionMode):
    """The hooks of one model. Before its forward: floating inputs cast to its dtype, and,
    where that dtype is low-precision, this mode entered, in which the ops of `_COMPUTE_OPS`
    given operands of mixed floating dtypes get them all in that dtype. Before each hooked
    submodule's forward: its inputs cast to its own dtype. After the model's forward (even
    where it raised): the mode left, and the floating outputs cast to `output_dtype`."""

    def __init__(self, output_dtype: torch.dtype | None) -> None:
        super().__init__()
        self.output_dtype = output_dtype
        # Per thread (modes are): how deep in the model's forward (it may call itself), and
        # whether the mode was entered at the outermost call.
        self.local = threading.local()

    def before(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        depth = getattr(self.local, "depth", 0) + 1
        self.local.depth = depth
        dtype = self._aside(module_dtype, module)
        if dtype is None or dtype == torch.float32:
            return None
        cast: tuple[tuple[Any, ...], dict[str, Any]] = self._aside(_cast_all, args, kwargs, dtype)
        if depth == 1 and dtype in _LOW_PRECISION:
            self.__enter__()  # type: ignore[no-untyped-call]
            self.local.entered = True
        return cast

    def submodule_before(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """A hooked submodule's pre-hook."""
        return self._aside(_cast_to_own_dtype, module, args, kwargs)

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
        return self._aside(_cast_output, module, output, self.output_dtype)

    def _aside(self, work: Callable[..., _T], *arguments: Any) -> _T:
        """`work(*arguments)` with this mode taken off the stack where it is on top: the hooks'
        own dtype reads and casts are not the model's compute, and through the mode they were
        most of the calls it saw (802 of 1,102 per forward of 100 Linear-GELU-LayerNorm
        blocks, issue 36). Popping only this mode (0.8 us; `_pop_mode_temporarily` 1.9 us)
        lets other modes and tensor subclasses still see the casts, which
        `DisableTorchFunction` (0.3 us) would hide."""
        top = torch._C._len_torch_function_stack() - 1
        if top < 0 or torch._C._get_function_stack_at(top) is not self:
            return work(*arguments)
        torch._C._pop_torch_function_stack()
        try:
            return work(*arguments)
        finally:
            torch._C._push_on_torch_function_stack(self)

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


def _cast_all(
    args: tuple[Any, ...], kwargs: dict[str, Any], dtype: torch.dtype
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A hook's arguments cast (most forwards take no keyword arguments: nothing to look at)."""
    return cast_floating(args, dtype), cast_floating(kwargs, dtype) if kwargs else kwargs


def _cast_output(module: nn.Module, output: Any, dtype: torch.dtype) -> Any:
    """The model's floating outputs in `dtype`, unless the model computes in it already."""
    own = module_dtype(module)
    if own is None or own == dtype:
        return None
    return cast_floating(output, dtype)


def _mixed_low_precision(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.dtype | None:
    """The low-precision dtype among the floating operands, where they are of mixed dtypes."""
    dtypes = set()
    for value in itertools.chain(args, kwargs.values()):
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(item, torch.Tensor) and item.is_floating_point():
                dtypes.add(item.dtype)
    low = [dtype for dtype in _LOW_PRECISION if dtype in dtypes]
    return low[0] if len(dtypes) > 1 and low else None
