"""FP32 -> BF16 stochastic rounding: unbiased, only the two neighbours, special values, seeded."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch

import xlamigrate_runtime.rounding as rounding
from tests.conftest import needs_c_compiler
from xlamigrate_runtime import native
from xlamigrate_runtime.rounding import (
    copy_all_stochastically_rounded_,
    copy_stochastically_rounded_,
    differ_from_nearest,
    is_bf16_rounding_of,
    stochastic_round_to_bf16,
)


@pytest.fixture(params=[pytest.param("native", marks=needs_c_compiler), "eager"])
def rounding_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs on both CPU paths: the C kernel, and eager PyTorch (no compiler)."""
    if request.param == "eager":
        monkeypatch.setattr(native, "kernel", lambda: None)
    else:
        assert native.kernel() is not None, native.describe()
    return str(request.param)


pytestmark = pytest.mark.usefixtures("rounding_path")


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


@pytest.mark.usefixtures("intra_op_threads")
@pytest.mark.parametrize("count", [1000, 300_000], ids=["whole-tensor", "chunked"])
def test_reproducible_with_a_generator(count: int) -> None:
    x = torch.randn(count)
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


# --- large tensors: the CPU path rounds in cache-sized chunks ----------------------------------


@pytest.fixture(params=["default-threads", "one-thread"])
def intra_op_threads(request: pytest.FixtureRequest) -> Iterator[None]:
    """The chunk loop with one intra-op thread and with several (ATen splits each chunk's
    kernels over them)."""
    before = torch.get_num_threads()
    if request.param == "one-thread":
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def special_bits(*patterns: int) -> torch.Tensor:
    return torch.tensor(patterns, dtype=torch.int64).to(torch.int32).view(torch.float32)


@pytest.mark.usefixtures("intra_op_threads")
def test_large_tensors_round_between_neighbours_and_keep_specials_in_every_chunk() -> None:
    generator = torch.Generator().manual_seed(11)
    count = 4 * 131_072 + 1234  # several chunks of either size, and a partial last one
    x = torch.randn(count, generator=generator) * torch.logspace(-30, 30, count)
    nans = [0x7F800001, 0x7FFFFFFF, 0xFFFFFFFF, 0xFF800001]  # payloads low, high, negative
    nan_at = torch.tensor([40_000, 300_000, count - 2, count - 1])
    x[nan_at] = special_bits(*nans)
    x[[5, 200_000, count - 3]] = torch.tensor([float("inf"), float("-inf"), -0.0])
    rounded = stochastic_round_to_bf16(x, generator).to(torch.float32)
    assert bool(rounded[nan_at].isnan().all())
    assert rounded[5].item() == float("inf") and rounded[200_000].item() == float("-inf")
    assert rounded[count - 3].item() == 0.0 and math.copysign(1.0, rounded[count - 3].item()) < 0
    finite = ~x.isnan()
    down, up = neighbours(x[finite])
    assert bool(((rounded[finite] == down) | (rounded[finite] == up)).all())


@pytest.mark.usefixtures("intra_op_threads")
def test_large_tensors_are_unbiased_and_their_noise_is_not_shared_between_elements() -> None:
    """A value halfway between two bf16 values rounds up for noise >= 2**15. Elements any
    distance apart (inside a chunk, one or several chunks apart) must decide independently:
    agreeing half of the time, where noise shared or XOR-ed with one key per chunk would make
    them agree always or never."""
    count = 8 * 131_072
    halfway = 1.0 + 2.0**-8  # 1 and 1 + 2**-7 are neighbouring bf16 values
    x = torch.full((count,), halfway)
    up = stochastic_round_to_bf16(x, torch.Generator().manual_seed(12)).to(torch.float32) > 1.0
    bound = 5 * 0.5 / math.sqrt(count // 2)
    assert abs(up.double().mean().item() - 0.5) < bound
    for distance in (1, 8, 16, 4095, 4096, 16_384, 32_760, 65_520, 131_072, 3 * 131_072):
        agree = (up[:-distance] == up[distance:]).double().mean().item()
        assert abs(agree - 0.5) < bound, distance


@pytest.mark.parametrize("count", [1000, 100_000])
def test_out_receives_the_same_rounding_in_place(count: int) -> None:
    x = torch.randn(count // 100, 100)
    out = torch.empty_like(x, dtype=torch.bfloat16)
    returned = stochastic_round_to_bf16(x, torch.Generator().manual_seed(3), out=out)
    assert returned is out
    assert torch.equal(out, stochastic_round_to_bf16(x, torch.Generator().manual_seed(3)))


def test_out_must_be_a_contiguous_bf16_tensor_of_the_same_shape() -> None:
    x = torch.randn(8, 4)
    for wrong in (
        torch.empty(8, 4),  # float32
        torch.empty(4, 8, dtype=torch.bfloat16),
        torch.empty(4, 8, dtype=torch.bfloat16).t(),  # right shape, not contiguous
    ):
        with pytest.raises(ValueError, match="contiguous bfloat16"):
            stochastic_round_to_bf16(x, out=wrong)


def test_non_contiguous_and_empty_inputs() -> None:
    x = torch.randn(300, 200).t()
    rounded = stochastic_round_to_bf16(x, torch.Generator().manual_seed(4))
    assert rounded.shape == x.shape and rounded.dtype == torch.bfloat16
    down, up = neighbours(x.contiguous())
    assert bool(((rounded.float() == down) | (rounded.float() == up)).all())
    empty = stochastic_round_to_bf16(torch.empty(0, 3))
    assert empty.shape == (0, 3) and empty.dtype == torch.bfloat16


def test_copy_stochastically_rounded_writes_into_any_bf16_destination() -> None:
    source = torch.randn(64, 32)
    for destination in (torch.empty(64, 32, dtype=torch.bfloat16), torch.empty(32, 64).t()):
        storage = destination.data_ptr()
        copy_stochastically_rounded_(destination, source, torch.Generator().manual_seed(5))
        assert destination.data_ptr() == storage
        down, up = neighbours(source)
        written = destination.float()
        assert bool(((written == down) | (written == up)).all())


def test_copy_all_rounds_many_tensors_with_shared_draws_and_independent_noise() -> None:
    """An optimizer's write-back rounds all its parameters in one call: tensors of any size and
    layout, sharing the random buffers, still each get their own independent noise."""
    halfway = 1.0 + 2.0**-8
    sizes = (1, 7, 5000, 40_000, 70_000, 200_000)
    sources = [torch.full((n,), halfway) for n in sizes] + [torch.randn(300, 200)]
    sources[-1][17, 3] = special_bits(0x7F800001)[0]  # a NaN that truncation would make inf
    destinations = [torch.empty(n, dtype=torch.bfloat16) for n in sizes]
    destinations.append(torch.empty(200, 300, dtype=torch.bfloat16).t())  # not contiguous

    def run(seed: int) -> list[torch.Tensor]:  # bit patterns: NaN == NaN
        copy_all_stochastically_rounded_(destinations, sources, torch.Generator().manual_seed(seed))
        return [d.clone().view(torch.int16) for d in destinations]

    first = run(21)
    assert all(torch.equal(a, b) for a, b in zip(first, run(21), strict=True))
    assert any(not torch.equal(a, b) for a, b in zip(first, run(22), strict=True))
    run(21)
    for destination, source in zip(destinations, sources, strict=True):
        finite = ~source.isnan()
        down, up = neighbours(source[finite])
        written = destination.float()[finite]
        assert bool(((written == down) | (written == up)).all())
    assert math.isnan(destinations[-1][17, 3].item())
    ups = [d.float() > 1.0 for d in destinations[2:-1]]
    bound = 5 * 0.5 / math.sqrt(5000)
    for index, a in enumerate(ups):
        assert abs(a.double().mean().item() - 0.5) < 5 * 0.5 / math.sqrt(a.numel())
        for b in ups[index + 1 :]:  # the same offsets in two tensors decide independently
            agree = (a[:5000] == b[:5000]).double().mean().item()
            assert abs(agree - 0.5) < bound


@pytest.mark.parametrize("rounding_path", ["eager"], indirect=True)
def test_noise_buffers_are_drawn_afresh_every_lap(monkeypatch: pytest.MonkeyPatch) -> None:
    """With 64-element chunks a lap is 8 chunks: over 40 chunks (5 laps, each drawing new
    buffers) every value still rounds to a neighbour, halfway values go up half the time, and
    no chunk's 64 roundings repeat those of the chunk a lap before it."""
    monkeypatch.setattr(rounding, "_CHUNK", 64)
    halfway = 1.0 + 2**-8  # exactly between two bf16 values
    x = torch.full((64 * 40,), halfway)
    rounded = stochastic_round_to_bf16(x, torch.Generator().manual_seed(5))
    assert bool(is_bf16_rounding_of(rounded, x).all())
    up = (rounded.float() > halfway).view(40, 64)
    assert abs(up.float().mean().item() - 0.5) < 5 * 0.5 / math.sqrt(up.numel())
    for chunk in range(8, 40):
        assert not torch.equal(up[chunk], up[chunk - 8]), chunk


# -- the arithmetic form (the one XLA and CUDA run: no bit cast), checked on the CPU -----------


def test_the_arithmetic_form_gives_only_the_two_neighbours_and_keeps_specials() -> None:
    generator = torch.Generator().manual_seed(11)
    x = torch.randn(20_000, generator=generator) * torch.logspace(-40, 38, 20_000)
    down, up = neighbours(x)
    for _ in range(10):
        rounded = rounding._round_whole(x, generator).to(torch.float32)
        assert bool(((rounded == down) | (rounded == up)).all())
    specials = torch.tensor([0.0, -0.0, 1.0, -2.0, float("inf"), float("-inf"), float("nan")])
    kept = rounding._round_whole(specials, generator)
    assert kept[:6].tolist() == specials[:6].tolist() and math.isnan(kept[6].item())
    assert bool(torch.signbit(kept[1]))  # (-0.0 stays negative)


def test_the_arithmetic_form_is_unbiased_at_binade_edges_tiny_values_and_the_largest() -> None:
    """Just below and above powers of two (the spacing halves below one), a subnormal, and a
    value beyond the largest bf16 (rounds to it or to inf)."""
    generator = torch.Generator().manual_seed(12)
    largest = torch.finfo(torch.bfloat16).max
    values = torch.tensor(
        [1.0 - 0.3 * 2**-8, 1.0 + 0.3 * 2**-7, -(2.0**-77) * (1 - 0.6 * 2**-8), 2.5 * 2.0**-133,
         1e-30, largest * (1 + 0.25 * 2**-8), -3.0e-3 * (1 + 0.7 * 2**-7)],
    )  # fmt: skip
    draws = 40_000
    samples = rounding._round_whole(values.repeat(draws, 1), generator).to(torch.float64)
    down, up = neighbours(values)
    spacing = (up.to(torch.float64) - down.to(torch.float64)).abs()
    finite = torch.isfinite(samples).all(dim=0)
    mean = samples.mean(dim=0)
    bound = 5 * spacing / (2 * math.sqrt(draws))
    for index in range(len(values)):
        if finite[index]:
            assert abs(mean[index] - values[index].double()) <= bound[index], index
    beyond = samples[:, 5]
    rate = torch.isinf(beyond).double().mean().item()
    assert set(beyond[torch.isfinite(beyond)].unique().tolist()) == {largest}
    assert abs(rate - 0.25) < 0.02  # (inf with the probability of the next grid point)


# --- differ_from_nearest: has anything but this rounding written the low-precision tensor? -----


@pytest.fixture(params=["memcmp", "torch-equal"])
def byte_compare(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The CPU comparison with the C library's memcmp, and without one (torch.equal)."""
    if request.param == "torch-equal":
        monkeypatch.setattr(rounding, "_MEMCMP", None)
    else:
        assert rounding._MEMCMP is not None
    return str(request.param)


@pytest.mark.usefixtures("byte_compare")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_differ_from_nearest_finds_one_changed_bit_in_any_chunk(dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(12)
    count = 2 * rounding._COMPARE_CHUNK + 776  # two whole chunks and a partial one
    exact = torch.randn(count, generator=generator).reshape(-1, 8)
    other = torch.randn(5, generator=generator)
    assert differ_from_nearest([exact.to(dtype), other.to(dtype)], [exact, other]) == [False] * 2
    for index in (0, rounding._COMPARE_CHUNK - 1, rounding._COMPARE_CHUNK, count - 1):
        written = exact.to(dtype)
        written.view(-1).view(torch.int16)[index] ^= 1  # the lowest bit of one element
        assert differ_from_nearest([written, other.to(dtype)], [exact, other]) == [True, False]
    signed_zero = torch.zeros(3)
    assert differ_from_nearest([(-signed_zero).to(dtype)], [signed_zero]) == [True]  # bits


def test_differ_from_nearest_compares_non_contiguous_tensors_on_the_device_path() -> None:
    exact = torch.randn(64, 32).t()
    written = exact.to(torch.bfloat16)
    assert not written.is_contiguous()
    assert differ_from_nearest([written], [exact]) == [False]
    written[3, 5] = 42.0
    assert differ_from_nearest([written, exact.to(torch.bfloat16)], [exact, exact]) == [True, False]
