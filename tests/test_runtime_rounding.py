"""FP32 -> BF16 stochastic rounding: unbiased, only the two neighbours, special values, seeded."""

from __future__ import annotations

import math

import torch

from xlamigrate.runtime.rounding import is_bf16_rounding_of, stochastic_round_to_bf16


def neighbours(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The bf16 values just below and above (toward and away from zero) each fp32 value."""
    down = (x.view(torch.int32) & -65536).view(torch.float32)
    up = ((x.view(torch.int32) & -65536) + 65536).view(torch.float32)
    return down, up


def test_only_the_two_neighbouring_bf16_values_are_produced() -> None:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(10_000, generator=generator) * torch.logspace(-30, 30, 10_000)
    down, up = neighbours(x)
    for _ in range(5):
        rounded = stochastic_round_to_bf16(x, generator).to(torch.float32)
        assert bool(((rounded == down) | (rounded == up)).all())


def test_rounding_is_unbiased_within_statistical_bounds() -> None:
    generator = torch.Generator().manual_seed(2)
    values = torch.tensor([1.0 + 1 / 3 * 2**-7, -3.0e-3 * (1 + 0.7 * 2**-7), 12345.678, 0.1])
    draws = 20_000
    samples = stochastic_round_to_bf16(values.repeat(draws, 1), generator).to(torch.float64)
    mean = samples.mean(dim=0)
    down, up = neighbours(values)
    spacing = (up - down).abs().to(torch.float64)
    # Each draw is down or up: the mean's standard error is at most spacing / (2 sqrt(n)).
    bound = 5 * spacing / (2 * math.sqrt(draws))
    assert bool(((mean - values.to(torch.float64)).abs() <= bound).all()), (mean, values)
    # Round-to-nearest is biased by a large fraction of the spacing for the same values.
    nearest_error = (values.to(torch.bfloat16).to(torch.float64) - values.to(torch.float64)).abs()
    assert bool((nearest_error[:2] > 10 * bound[:2]).all())


def test_probability_of_rounding_up_is_the_fractional_position() -> None:
    generator = torch.Generator().manual_seed(3)
    down = torch.tensor(1.0)
    x = down + 0.25 * 2**-7  # a quarter of the way from 1.0 to the next bf16 value
    samples = stochastic_round_to_bf16(x.repeat(40_000), generator).to(torch.float32)
    fraction_up = (samples > down).double().mean().item()
    assert abs(fraction_up - 0.25) < 0.01


def test_special_values_are_preserved() -> None:
    bf16_max = torch.finfo(torch.bfloat16).max
    smallest_denormal = 2.0**-133  # the smallest positive bf16 denormal
    x = torch.tensor(
        [
            float("inf"),
            float("-inf"),
            float("nan"),
            -0.0,
            0.0,
            bf16_max,
            -bf16_max,
            smallest_denormal,
        ]
    )
    for seed in range(20):
        rounded = stochastic_round_to_bf16(x, torch.Generator().manual_seed(seed))
        assert rounded.dtype == torch.bfloat16
        assert rounded[0].item() == float("inf") and rounded[1].item() == float("-inf")
        assert math.isnan(rounded[2].item())
        assert rounded[3].item() == 0.0 and math.copysign(1.0, rounded[3].item()) == -1.0
        assert rounded[4].item() == 0.0 and math.copysign(1.0, rounded[4].item()) == 1.0
        assert rounded[5].item() == bf16_max and rounded[6].item() == -bf16_max
        assert rounded[7].item() == smallest_denormal


def test_nan_with_payload_only_in_low_bits_stays_nan() -> None:
    nan = torch.tensor([0x7F800001], dtype=torch.int32).view(torch.float32)
    assert math.isnan(nan.item())
    for seed in range(10):
        assert math.isnan(stochastic_round_to_bf16(nan, torch.Generator().manual_seed(seed)).item())


def test_denormals_round_between_their_neighbours_unbiased() -> None:
    generator = torch.Generator().manual_seed(4)
    x = torch.tensor(2.5 * 2.0**-133)  # between the 2nd and 3rd bf16 denormals
    samples = stochastic_round_to_bf16(x.repeat(20_000), generator).to(torch.float64)
    assert set(samples.unique().tolist()) == {2 * 2.0**-133, 3 * 2.0**-133}
    assert abs(samples.mean().item() / (2.5 * 2.0**-133) - 1) < 0.02


def test_reproducible_with_a_generator() -> None:
    x = torch.randn(1000)
    first = stochastic_round_to_bf16(x, torch.Generator().manual_seed(7))
    second = stochastic_round_to_bf16(x, torch.Generator().manual_seed(7))
    other = stochastic_round_to_bf16(x, torch.Generator().manual_seed(8))
    assert torch.equal(first, second)
    assert not torch.equal(first, other)


def test_rejects_non_float32_input() -> None:
    try:
        stochastic_round_to_bf16(torch.ones(2, dtype=torch.float64))
    except TypeError as error:
        assert "float32" in str(error)
    else:
        raise AssertionError("float64 input was accepted")


def test_is_bf16_rounding_of_accepts_both_neighbours_and_rejects_others() -> None:
    exact = torch.tensor([1.0 + 0.3 * 2**-7, -2.0 - 0.6 * 2**-6, 0.0, 5.0])
    down, up = neighbours(exact)
    assert bool(is_bf16_rounding_of(down.to(torch.bfloat16), exact).all())
    assert bool(is_bf16_rounding_of(up.to(torch.bfloat16), exact).all())
    assert bool(is_bf16_rounding_of(exact.to(torch.bfloat16), exact).all())
    elsewhere = torch.tensor([1.5, -2.0 + 2**-6, 1.0, -5.0], dtype=torch.bfloat16)
    assert not bool(is_bf16_rounding_of(elsewhere, exact).any())
