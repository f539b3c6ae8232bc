"""Environment helpers for the recipes: stochastic rounding on Neuron, `--auto-cast=none` in
NEURON_CC_FLAGS (merged, never clobbering), and a bf16 autocast context for the device in use."""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

import torch

from xlamigrate_runtime.neuronflags import (
    NEURON_CC_FLAGS,
    STOCHASTIC_ROUNDING,
    merge_auto_cast_none,
)

__all__ = [
    "autocast_device_type",
    "bf16_autocast",
    "disable_neuron_auto_cast",
    "enable_stochastic_rounding",
    "merge_auto_cast_none",
]


def enable_stochastic_rounding(environ: Any = None) -> None:
    """Sets NEURON_RT_STOCHASTIC_ROUNDING_EN=1, which the legacy flags used to imply on Neuron.

    The Neuron runtime reads it when it starts: warns if the XLA device is already in use.
    """
    environ = os.environ if environ is None else environ
    if _xla_runtime_started():
        warnings.warn(
            f"{STOCHASTIC_ROUNDING} set after the XLA device was first used: the Neuron runtime "
            "may not see it. Set it before the first tensor is placed on the device.",
            RuntimeWarning,
            stacklevel=2,
        )
    environ[STOCHASTIC_ROUNDING] = "1"


def disable_neuron_auto_cast(environ: Any = None) -> str:
    """Merges `--auto-cast=none` into NEURON_CC_FLAGS (for the autocast recipe); returns it."""
    environ = os.environ if environ is None else environ
    merged = merge_auto_cast_none(environ.get(NEURON_CC_FLAGS, ""))
    environ[NEURON_CC_FLAGS] = merged
    return merged


def autocast_device_type(where: Any = None) -> str:
    """The autocast device type for a module, tensor, device or device string ("xla", "cuda",
    "cpu"); without one, "xla" when torch_xla is loaded, else "cuda" if available, else "cpu"."""
    device = _device_of(where)
    if device is not None:
        return device.type
    if "torch_xla" in sys.modules:
        return "xla"
    return "cuda" if torch.cuda.is_available() else "cpu"


def bf16_autocast(where: Any = None, enabled: bool = True) -> torch.autocast:
    """`torch.autocast(device_type, dtype=torch.bfloat16)` for the device in use.

    On XLA this is `torch.autocast("xla", ...)`, which works off TPU, unlike
    `torch_xla.amp.autocast`.
    """
    return torch.autocast(
        device_type=autocast_device_type(where), dtype=torch.bfloat16, enabled=enabled
    )


def _device_of(where: Any) -> torch.device | None:
    if where is None:
        return None
    if isinstance(where, torch.nn.Module):
        for tensor in (*where.parameters(), *where.buffers()):
            return tensor.device
        return None
    if isinstance(where, torch.Tensor):
        return where.device
    return torch.device(where)


def _xla_runtime_started() -> bool:
    """Whether torch_xla has already created its runtime client (a device was used)."""
    if "torch_xla" not in sys.modules:
        return False
    try:
        import torch_xla

        return bool(torch_xla._XLAC._xla_runtime_is_initialized())  # type: ignore[attr-defined]
    except (ImportError, AttributeError):
        return False
