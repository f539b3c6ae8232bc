"""FP32 -> BF16 stochastic rounding, bit-level and vectorised.

BF16 is the top half of an FP32 bit pattern. Adding a uniform random 16-bit integer to the
pattern and truncating the low 16 bits rounds away from zero with probability
(x - down(x)) / (up(x) - down(x)): the expectation is x. Sign-magnitude makes this hold for
negative numbers too; inf and -0 come out unchanged, NaN stays NaN, and bf16 denormals are
reached like any other grid point. Finite values beyond the largest bf16 round up to inf with
the same probability rule (round-to-nearest sends most of them to inf as well).
"""

from __future__ import annotations

import torch

_LOW_BITS = 1 << 16
_HIGH_MASK = -_LOW_BITS  # 0xFFFF0000 as a signed int32


def stochastic_round_to_bf16(
    tensor: torch.Tensor, generator: torch.Generator | None = None
) -> torch.Tensor:
    """A bf16 copy of an fp32 tensor, each element rounded up or down at random, unbiased.

    `generator` makes the draw reproducible; it must live on the tensor's device.
    """
    if tensor.dtype != torch.float32:
        raise TypeError(f"stochastic rounding takes float32, got {tensor.dtype}")
    noise = torch.randint(
        0, _LOW_BITS, tensor.shape, dtype=torch.int32, device=tensor.device, generator=generator
    )
    bits = tensor.view(torch.int32) + noise
    rounded = (bits & _HIGH_MASK).view(torch.float32).to(torch.bfloat16)
    # A NaN whose payload sits only in the low bits would otherwise truncate to inf.
    return torch.where(torch.isnan(tensor), tensor.to(torch.bfloat16), rounded)


def copy_stochastically_rounded_(
    destination: torch.Tensor, source: torch.Tensor, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Writes fp32 `source` into bf16 `destination` in place, stochastically rounded."""
    with torch.no_grad():
        return destination.copy_(stochastic_round_to_bf16(source, generator))


def is_bf16_rounding_of(rounded: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """Elementwise: is each bf16 value one of the two bf16 neighbours of the fp32 value?

    True for any rounding of `exact` (nearest or stochastic); False where `rounded` was set
    from elsewhere. Lets the master-weights optimizer tell its own writes from outside changes
    without keeping a copy of what it wrote.
    """
    # Compared as fp32 bit patterns with masks only: torch-xla's `>>` on negative int32 rounds
    # toward zero, so a shift would misjudge negative values there.
    toward_zero = exact.view(torch.int32) & _HIGH_MASK
    written = rounded.to(torch.float32).view(torch.int32)  # bf16 -> fp32 is exact
    away_from_zero = toward_zero + _LOW_BITS  # sign-magnitude: the next bf16 magnitude
    nan_both = torch.isnan(exact) & torch.isnan(rounded)
    return (written == toward_zero) | (written == away_from_zero) | nan_both
