"""FP32 -> BF16 stochastic rounding, vectorised.

BF16 is the top half of an FP32 bit pattern. Adding a uniform random 16-bit integer to the
pattern and truncating the low 16 bits rounds away from zero with probability
(x - down(x)) / (up(x) - down(x)): the expectation is x. Sign-magnitude makes this hold for
negative numbers too; inf and -0 come out unchanged, NaN stays NaN, and bf16 denormals are
reached like any other grid point. Finite values beyond the largest bf16 round up to inf with
the same probability rule (round-to-nearest sends most of them to inf as well).

Where the noise comes from depends on the device, not the rule above:

* on CPU, by default, a C kernel (`runtime/native/`, built on first use with the system C
  compiler) rounds in one pass, at about the cost of a plain cast. Its noise is a hash
  (murmur3's finaliser) of each element's index in the call, keyed by a word drawn from the
  generator per call: exactly uniform per element, a bijection of the index within a call,
  and the same whatever the thread count. NaN becomes torch's 0x7FC0 there;
* on CPU without a C compiler (or with XLAMIGRATE_NATIVE=0), eager PyTorch. Drawing 16
  random bits per element from the generator (a serial Mersenne Twister, ~1.2 ns per
  element) would cost several times the cast itself, so the tensor is processed in chunks
  that stay in cache. The noise of a chunk is the XOR of two cyclic buffers of independent
  16-bit draws (chunk-many, and an eighth of that), each read from an offset drawn for the
  chunk; the two offsets differ by a different amount in every chunk of a lap (size/8
  chunks, then fresh buffers; a lap's first chunk reads the first buffer alone). So no two
  noises share both of their draws: every noise is exactly uniform, noises within a chunk
  are mutually independent, any two noises are independent, and expectations and variances
  of sums of roundings are those of fully independent rounding. Each call draws fresh
  buffers, so calls (steps) are independent; one call can round many tensors
  (`copy_all_stochastically_rounded_`, an optimizer's write-back) for the cost of one draw;
* elsewhere (XLA, CUDA) the same rule in arithmetic (`_round_whole`): the nearest bf16 value,
  its neighbour on x's other side, and 16 random bits from the device RNG to choose. torch-xla
  lowers no bit cast (a `view(torch.int32)` ran on the host, with a transfer each way), so the
  bit pattern is not used there: each call is one graph, fused by XLA, with nothing moved to
  the host (tests/runtime_scripts/stochastic_rounding_graph_xla.py counts it).

`is_bf16_rounding_of` and `differ_from_nearest` let the master-weights optimizer tell its own
roundings from values written into its parameters from outside.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence

import torch

from xlamigrate_runtime import native

_LOW_BITS = 1 << 16
_HIGH_MASK = -_LOW_BITS  # 0xFFFF0000 as a signed int32
# 131072 elements: a chunk's int32 work (512 KiB) stays in a core's L2 cache, and ATen splits
# each elementwise kernel over the intra-op threads (from 32768 elements). Measured on 2 quiet
# cores: 2x faster than chunks kept under 32768 (one thread each); those were only faster on a
# host so oversubscribed that OpenMP threads waited for each other. A multiple of 8 (`period`).
_CHUNK = 1 << 17
_SMALL = 4096  # up to this many elements, the whole-tensor form is cheaper on CPU too
# `differ_from_nearest` rounds this many elements at a time on the CPU: 256 KiB of bf16, which
# stays in a core's L2 cache until it is compared, and all it allocates (a whole-tensor cast
# takes 2 bytes per element of the largest parameter, and page faults on every step).
_COMPARE_CHUNK = 1 << 17
_HIGH_MASK_TENSOR = torch.tensor(_HIGH_MASK, dtype=torch.int32, device="cpu")  # no per-call wrap
_BF16_MAX = float(torch.finfo(torch.bfloat16).max)
_MIN_NORMAL = 2.0**-126  # the smallest normal bf16 (and fp32) value
_SUBNORMAL_SPACING = 2.0**-133  # between bf16 subnormals (and at the smallest normal, both ways)
_SPACING_IN_BINADE = 2.0**-7  # bf16's spacing in [2**e, 2**(e + 1)), in units of 2**e


def stochastic_round_to_bf16(
    tensor: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """A bf16 copy of an fp32 tensor, each element rounded up or down at random, unbiased.

    `generator` makes the draw reproducible; it must live on the tensor's device. `out`, a
    contiguous bf16 tensor of the same shape and device, receives the result in place (saves
    allocating, e.g. when writing into a bf16 parameter).
    """
    if tensor.dtype != torch.float32:
        raise TypeError(f"stochastic rounding takes float32, got {tensor.dtype}")
    if out is not None:
        _check_out(out, tensor)
    source = tensor.detach()
    with torch.no_grad():  # `out` may be a parameter
        if source.device.type != "cpu" or (source.numel() <= _SMALL and native.kernel() is None):
            # Off CPU the device RNG is cheap; in eager PyTorch, so are a few thousand draws.
            rounded = _round_whole(source, generator)
            return rounded if out is None else out.copy_(rounded)
        result = torch.empty(source.shape, dtype=torch.bfloat16) if out is None else out
        _round_on_cpu([(source.reshape(-1), result.view(-1))], generator)
        return result


def copy_stochastically_rounded_(
    destination: torch.Tensor, source: torch.Tensor, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Writes fp32 `source` into bf16 `destination` in place, stochastically rounded."""
    copy_all_stochastically_rounded_([destination], [source], generator)
    return destination


def copy_all_stochastically_rounded_(
    destinations: Sequence[torch.Tensor],
    sources: Sequence[torch.Tensor],
    generator: torch.Generator | None = None,
) -> None:
    """`copy_stochastically_rounded_` for each pair, as one draw: on CPU the tensors share the
    random buffers, so that many small tensors (an optimizer's parameters) cost no more
    draws than one large one."""
    with torch.no_grad():
        chunked: list[tuple[torch.Tensor, torch.Tensor]] = []
        staged: list[tuple[torch.Tensor, torch.Tensor]] = []
        for destination, source in zip(destinations, sources, strict=True):
            if source.dtype != torch.float32:
                raise TypeError(f"stochastic rounding takes float32, got {source.dtype}")
            if (
                source.device.type != "cpu"
                or destination.device != source.device
                or destination.shape != source.shape  # copy_ broadcasts
            ):
                destination.copy_(_round_whole(source.detach(), generator))
                continue
            if source.numel() == 0:
                continue
            target = destination
            if destination.dtype != torch.bfloat16 or not destination.is_contiguous():
                target = torch.empty(source.shape, dtype=torch.bfloat16)
                staged.append((destination, target))
            chunked.append((source.detach().reshape(-1), target.view(-1)))
        if chunked:
            _round_on_cpu(chunked, generator)
        for destination, target in staged:
            destination.copy_(target)


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


def differ_from_nearest(
    rounded: Sequence[torch.Tensor], exact: Sequence[torch.Tensor]
) -> list[bool]:
    """For each pair: does the low-precision (bf16 or fp16) tensor hold other bits than its
    fp32 tensor rounded to nearest? Every element is read: a write through `p.data` leaves
    no other trace (its version counter is not the parameter's).

    On the CPU each fp32 tensor is rounded a chunk at a time into a buffer that stays in
    cache and compared with memcmp, which stops at the first difference: the two tensors are
    read once and nothing is allocated but the buffer. Elsewhere the pairs are compared on
    the device and read back with one host sync for all of them. Not for XLA, where that
    read-back is a sync of its own: keep the comparison in the step's graph there."""
    answers: list[bool | torch.Tensor] = []
    buffer: torch.Tensor | None = None
    for low, high in zip(rounded, exact, strict=True):
        if low.is_cpu and low.is_contiguous() and high.is_contiguous():
            if buffer is None or buffer.dtype != low.dtype:
                buffer = torch.empty(_COMPARE_CHUNK, dtype=low.dtype)
            answers.append(_differs_on_cpu(low.view(-1), high.view(-1), buffer))
        else:  # (a bool on the device, read back with the others below)
            ours = high.to(low.dtype)
            answers.append(torch.ne(ours.view(torch.int16), low.view(torch.int16)).any())
    on_device = [answer for answer in answers if isinstance(answer, torch.Tensor)]
    read_back = iter(torch.stack(on_device).tolist() if on_device else [])
    return [bool(next(read_back)) if isinstance(a, torch.Tensor) else a for a in answers]


def _differs_on_cpu(low: torch.Tensor, high: torch.Tensor, buffer: torch.Tensor) -> bool:
    """`differ_from_nearest` for one pair of flat contiguous CPU tensors."""
    count, size = low.numel(), low.element_size()
    for start in range(0, count, _COMPARE_CHUNK):
        stop = min(start + _COMPARE_CHUNK, count)
        ours = buffer[: stop - start]
        ours.copy_(high if stop - start == count else high[start:stop])
        if _MEMCMP is None:
            if not torch.equal(ours.view(torch.int16), low[start:stop].view(torch.int16)):
                return True
        elif _MEMCMP(ours.data_ptr(), low.data_ptr() + start * size, ours.nbytes):
            return True
    return False


def _memcmp() -> Callable[[int, int, int], int] | None:
    """The C library's memcmp, which compares bytes at the speed of memory: `torch.equal`
    reads its elements one at a time (on int16, over ten times memcmp's time here). None
    where the process has no C library to find it in (then `torch.equal`)."""
    try:
        memcmp = ctypes.CDLL(None).memcmp  # (the symbols of the process: libc's among them)
    except (OSError, AttributeError, TypeError):
        return None
    memcmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    memcmp.restype = ctypes.c_int
    function: Callable[[int, int, int], int] = memcmp
    return function


_MEMCMP = _memcmp()


def _check_out(out: torch.Tensor, tensor: torch.Tensor) -> None:
    if (
        out.dtype != torch.bfloat16
        or out.shape != tensor.shape
        or out.device != tensor.device
        or not out.is_contiguous()
    ):
        raise ValueError(
            f"out must be a contiguous bfloat16 tensor of shape {tuple(tensor.shape)} on "
            f"{tensor.device}, got {out.dtype} {tuple(out.shape)} on {out.device}"
        )


def _round_whole(tensor: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """The device-agnostic form, in arithmetic alone: torch-xla lowers no bit cast
    (`view(torch.int32)` ran on the host, a transfer each way per tensor and call), so the
    rule is written with the two neighbours instead of the bit pattern. `nearest` is x rounded
    to nearest; `other` the bf16 value on x's other side of it, one spacing away (the spacing
    of the binade toward which it lies: half of it below a power of two); x becomes `other`
    with probability |x - nearest| / spacing, else `nearest`: the expectation is x. All
    elementwise, so XLA fuses it into the step's graph.

    The binade comes from floor(log2 |nearest|), corrected by one where log2 is inexact (XLA's
    is, near some powers of two). Zero, inf and NaN stay; a finite value beyond the largest
    bf16 rounds to it or to inf by the same rule. Below the smallest normal (2**-126) the
    spacing is 2**-133, which a device that flushes subnormals (XLA's CPU backend) cannot
    hold: there values round to nearest."""
    x = tensor
    nearest = x.to(torch.bfloat16).to(torch.float32)
    beyond = torch.isinf(nearest) & torch.isfinite(x)  # (rounded to nearest past the largest)
    largest = torch.where(x < 0, -_BF16_MAX, _BF16_MAX)  # (copysign: torch-xla has none)
    nearest = torch.where(beyond, largest, nearest)
    difference = x - nearest  # (exact: at most half a spacing, in x's binade or the next)
    size = nearest.abs()
    exponent = torch.floor(torch.log2(size))
    power = _power_of_two(exponent)
    exponent = torch.where(power > size, exponent - 1, exponent)
    exponent = torch.where(power * 2 <= size, exponent + 1, exponent)
    power = _power_of_two(exponent)
    spacing = power * _SPACING_IN_BINADE  # between bf16 values of [power, 2 * power)
    spacing = torch.where(size < _MIN_NORMAL, _SUBNORMAL_SPACING, spacing)
    below = torch.where((size == power) & (size > _MIN_NORMAL), spacing / 2, spacing)
    # x further from zero than `nearest` (or that is zero); signs, not a product, which
    # underflows to zero for tiny values
    away = (torch.sign(difference) == torch.sign(nearest)) | (nearest == 0)
    step = torch.where(away, spacing, below)
    other = nearest + torch.sign(difference) * step
    # 16 random bits, as many as fp32 has below a bf16 spacing: |x - nearest| / step is a whole
    # number of 2**-16, so `other` comes with exactly that probability (an integer draw: XLA's
    # CPU backend makes one in a quarter of the time of a float one)
    draw = torch.randint(
        0, _LOW_BITS, x.shape, dtype=torch.int32, device=x.device, generator=generator
    )
    chosen = draw < difference.abs() / step * _LOW_BITS
    return torch.where(chosen, other, nearest).to(torch.bfloat16)


def _power_of_two(exponent: torch.Tensor) -> torch.Tensor:
    """2 ** exponent, exactly: `pow` may miss by an ulp (CPU's), which the bf16 grid absorbs."""
    return torch.pow(2.0, exponent).to(torch.bfloat16).to(torch.float32)


def _round_on_cpu(
    pairs: list[tuple[torch.Tensor, torch.Tensor]], generator: torch.Generator | None
) -> None:
    """Rounds each flat fp32 tensor into its flat contiguous bf16 one: with the C kernel where
    it built, else in eager chunks."""
    kernel = native.kernel()
    if kernel is not None:
        _round_natively(kernel, pairs, generator)
    else:
        _round_in_chunks(pairs, generator)


def _round_natively(
    kernel: native.NativeKernel,
    pairs: list[tuple[torch.Tensor, torch.Tensor]],
    generator: torch.Generator | None,
) -> None:
    """The CPU form with a C compiler: every flat contiguous pair in one kernel call, split over
    the intra-op threads. Each tensor's noise indices start at a multiple of 16 after the
    previous one's, so no two elements of a call share a hash input."""
    word = torch.empty(1, dtype=torch.int64).random_(-(1 << 63), None, generator=generator)
    key = int(word.item()) & 0xFFFF_FFFF_FFFF_FFFF
    pieces, first = [], 0
    for source, result in pairs:
        count = source.numel()
        pieces.append(native.Piece(source.data_ptr(), result.data_ptr(), count, first))
        first += -(-count // 16) * 16
    kernel.round_pieces(pieces, key & 0xFFFF_FFFF, key >> 32, torch.get_num_threads())


def _round_in_chunks(
    pairs: list[tuple[torch.Tensor, torch.Tensor]], generator: torch.Generator | None
) -> None:
    """The CPU form: rounds each flat fp32 tensor into its flat contiguous bf16 tensor, chunk by
    chunk while the chunk is in cache: noise from two rotated draw buffers, add, mask, cast."""
    longest = max(source.numel() for source, _ in pairs)  # every tensor holds elements
    size = min(_CHUNK, -(-longest // 8) * 8)  # chunks of the tensors, and the buffers' length
    period = size // 8  # the second buffer's length: divides `size`
    pieces: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    for source, result in pairs:
        splits = list(range(size, source.numel(), size))
        pieces += zip(
            source.tensor_split(splits),
            source.view(torch.int32).tensor_split(splits),
            result.tensor_split(splits),
            strict=True,
        )
    rotations = torch.randint(0, size, (len(pieces),), generator=generator).tolist()
    maxima = torch.empty(len(pieces))  # NaN-propagating maxima: which chunks hold a NaN
    work = torch.empty(size, dtype=torch.int32)
    first = second = work  # the buffers, drawn afresh for every lap of `period` chunks
    for index, ((values, bits, rounded), one, maximum) in enumerate(
        zip(pieces, rotations, maxima.unbind(), strict=True)
    ):
        length = values.numel()
        summed = work if length == size else work[:length]
        turn = index % period  # the chunk's place in its lap
        if turn == 0:  # a new lap: its first chunk takes the new first buffer as it is
            first = _cyclic_draws(size, size, generator)
            torch.add(first[:length], bits, out=summed)
        else:
            if turn == 1:
                second = _cyclic_draws(period, size, generator)
            # The offsets into the two buffers differ by `turn` modulo the second buffer's
            # length, which divides `size`: no two noises of a lap pair the same two draws.
            two = (one - turn) % period
            torch.bitwise_xor(first[one : one + length], second[two : two + length], out=summed)
            summed.add_(bits)
        summed.bitwise_and_(_HIGH_MASK_TENSOR)
        rounded.copy_(summed.view(torch.float32))  # exact: the low 16 bits are zero
        torch.amax(values, 0, out=maximum)
    for index in torch.nonzero(maxima.isnan()).flatten().tolist():
        # A NaN whose payload sits only in the low bits would otherwise truncate to inf.
        values, _, rounded = pieces[index]
        rounded.copy_(torch.where(torch.isnan(values), values.to(torch.bfloat16), rounded))


def _cyclic_draws(count: int, window: int, generator: torch.Generator | None) -> torch.Tensor:
    """`count` independent uniform integers in [0, 65536) as int32, four per 64-bit draw,
    repeated so that any `window` consecutive ones from any offset are one contiguous slice."""
    words = torch.empty(-(-count // 4), dtype=torch.int64)
    words.random_(-(1 << 63), None, generator=generator)  # all 64 bits random
    draws = words.view(torch.uint16)[:count].to(torch.int32)  # zero-extended: [0, 65536)
    return draws.repeat(-(-(count + window - 1) // count))[: count + window - 1]
