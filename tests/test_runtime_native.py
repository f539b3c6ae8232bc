"""The C kernel of CPU stochastic rounding: the noise formula bit for bit, the AVX2 and portable
paths and any thread count agreeing, and how it is built, cached and refused."""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.conftest import needs_c_compiler
from xlamigrate_runtime import native
from xlamigrate_runtime.rounding import stochastic_round_to_bf16

pytestmark = needs_c_compiler

MASK32 = 0xFFFF_FFFF


def fmix32(h: torch.Tensor) -> torch.Tensor:
    """murmur3's finaliser on uint32 values held in int64."""
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & MASK32
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & MASK32
    return h ^ (h >> 16)


def reference(source: torch.Tensor, first: int, mul: int, add: int) -> torch.Tensor:
    """The rounding as stochastic_rounding.c documents it, in int64 torch arithmetic: bf16 bit
    patterns (int16) of the fp32 `source` whose first element has noise index `first`."""
    e = first + torch.arange(source.numel(), dtype=torch.int64)
    c = (e >> 4) * 8 + (e & 7)
    hashed = fmix32((((c & MASK32) * (mul | 1)) + add + (c >> 32) * 0x9E3779B9) & MASK32)
    noise = torch.where((e & 8) != 0, hashed >> 16, hashed & 0xFFFF)
    bits = source.view(torch.int32).to(torch.int64) & MASK32
    rounded = (bits + noise) >> 16
    nan = (bits & 0x7FFF_FFFF) > 0x7F80_0000
    rounded = torch.where(nan, torch.full_like(rounded, 0x7FC0), rounded)
    return rounded.to(torch.int32).to(torch.int16)  # 0x8000.. wrap to negative int16


def values_with_specials(count: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(count, generator=generator) * torch.logspace(-40, 38, count)
    patterns = [0x7F800000, 0xFF800000, 0x7F800001, 0xFFFFFFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x80000000]
    specials = torch.tensor(patterns, dtype=torch.int64).to(torch.int32).view(torch.float32)
    x[torch.arange(len(patterns)) * (count // len(patterns))] = specials
    return x


@pytest.fixture(scope="module")
def kernel() -> native.NativeKernel:
    built = native.kernel()
    assert built is not None, native.describe()
    return built


def run(
    kernel: native.NativeKernel,
    sources: list[torch.Tensor],
    firsts: list[int],
    threads: int = 2,
    vector: bool = True,
    key: tuple[int, int] = (0x1234_5679, 0x9ABC_DEF0),
) -> list[torch.Tensor]:
    outputs = [torch.empty(s.numel(), dtype=torch.bfloat16) for s in sources]
    pieces = [
        native.Piece(s.data_ptr(), o.data_ptr(), s.numel(), first)
        for s, o, first in zip(sources, outputs, firsts, strict=True)
    ]
    kernel.round_pieces(pieces, *key, threads=threads, vector=vector)
    return [o.view(torch.int16) for o in outputs]


def test_kernel_computes_the_documented_noise_bit_for_bit(kernel: native.NativeKernel) -> None:
    """Specials included, and a piece whose counter's high word turns over inside it."""
    x = values_with_specials(100_003, seed=1)
    near_wrap = 2**33 - 16 * 40  # noise index 2**33 is counter 2**32
    for first in (0, 16 * 5, near_wrap):
        for vector in (True, False):
            (rounded,) = run(kernel, [x], [first], vector=vector)
            assert torch.equal(rounded, reference(x, first, 0x1234_5679, 0x9ABC_DEF0)), first


def test_avx2_and_portable_paths_and_every_thread_count_agree(kernel: native.NativeKernel) -> None:
    """Thread ranges split pieces at any place: edges, unaligned starts and the vector loop
    must produce the same bits as one thread of the portable path."""
    sources = [values_with_specials(n, seed=n) for n in (1, 15, 17, 40_001, 70_000, 300_007)]
    firsts, first = [], 0
    for s in sources:
        firsts.append(first)
        first += -(-s.numel() // 16) * 16
    expected = run(kernel, sources, firsts, threads=1, vector=False)
    for threads in (1, 2, 3, 7):
        for vector in (True, False):
            got = run(kernel, sources, firsts, threads=threads, vector=vector)
            assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True)), threads


def test_different_keys_give_different_noise(kernel: native.NativeKernel) -> None:
    halfway = torch.full((4096,), 1.0 + 2.0**-8)  # rounds up exactly when its noise >= 2**15
    (one,) = run(kernel, [halfway], [0], key=(3, 5))
    (other,) = run(kernel, [halfway], [0], key=(3, 6))
    (third,) = run(kernel, [halfway], [0], key=(7, 5))
    up = [(r != one.min()).double() for r in (one, other, third)]
    for a, b in ((0, 1), (0, 2), (1, 2)):
        assert abs((up[a] == up[b]).double().mean().item() - 0.5) < 5 * 0.5 / 64


def test_the_kernel_is_what_stochastic_round_to_bf16_uses_on_cpu(
    kernel: native.NativeKernel,
) -> None:
    x = values_with_specials(50_000, seed=3)
    generator = torch.Generator().manual_seed(9)
    word = int(torch.empty(1, dtype=torch.int64).random_(-(1 << 63), None, generator=generator))
    word &= 2**64 - 1
    rounded = stochastic_round_to_bf16(x, torch.Generator().manual_seed(9))
    assert torch.equal(rounded.view(torch.int16), reference(x, 0, word & MASK32, word >> 32))


def test_describe_names_the_path_in_use(kernel: native.NativeKernel) -> None:
    line = native.describe()
    assert line.startswith("native kernel, ") and str(kernel.path) in line


# --- building ----------------------------------------------------------------------------------


def system_compiler() -> str:
    return shlex.join(native.find_compiler())


def counting_compiler(folder: Path) -> tuple[list[str], Path]:
    """A compiler wrapper that logs each call, to see when the cache is used."""
    log = folder / "calls.log"
    script = folder / "cc-wrapper"
    script.write_text(f'#!/bin/sh\necho "$@" >> "{log}"\nexec {system_compiler()} "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return [str(script)], log


def test_a_build_is_cached_and_reused(tmp_path: Path) -> None:
    compiler, log = counting_compiler(tmp_path)
    first = native.load(cache_dir=tmp_path / "cache", compiler=compiler)
    second = native.load(cache_dir=tmp_path / "cache", compiler=compiler)
    assert first.path == second.path and first.path.parent == tmp_path / "cache"
    assert len(log.read_text().splitlines()) == 1
    built = sorted(p.name for p in (tmp_path / "cache").iterdir())  # no leftovers
    assert built == [first.path.name, first.path.name + ".sha256"]


def test_a_changed_source_is_rebuilt(tmp_path: Path) -> None:
    compiler, log = counting_compiler(tmp_path)
    source = tmp_path / "stochastic_rounding.c"
    source.write_text(native.SOURCE.read_text())
    old = native.load(source, cache_dir=tmp_path / "cache", compiler=compiler)
    source.write_text(native.SOURCE.read_text() + "\n/* changed */\n")
    new = native.load(source, cache_dir=tmp_path / "cache", compiler=compiler)
    assert old.path != new.path and len(log.read_text().splitlines()) == 2


def test_without_openmp_the_single_threaded_build_is_used(tmp_path: Path) -> None:
    """Apple's clang rejects -fopenmp: the kernel is built without it and runs on one thread."""
    wrapper = tmp_path / "no-openmp-cc"
    wrapper.write_text(
        '#!/bin/sh\nfor a in "$@"; do [ "$a" = -fopenmp ] && { echo "unsupported option '
        f'\'-fopenmp\'" >&2; exit 1; }}; done\nexec {system_compiler()} "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    built = native.load(cache_dir=tmp_path / "cache", compiler=[str(wrapper)])
    assert built.library.xm_threaded() == 0
    x = values_with_specials(70_000, seed=4)
    (rounded,) = run(built, [x], [0], threads=4)
    assert torch.equal(rounded, reference(x, 0, 0x1234_5679, 0x9ABC_DEF0))


def test_concurrent_builds_never_load_a_half_written_library(tmp_path: Path) -> None:
    """Data-parallel ranks start together and all build: each renames a finished file into
    place, so every one of them loads a working kernel."""
    loaded: list[native.NativeKernel] = []
    errors: list[BaseException] = []

    def build() -> None:
        try:
            loaded.append(native.load(cache_dir=tmp_path, compiler=native.find_compiler()))
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=build) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(loaded) == 4
    x = values_with_specials(1000, seed=5)
    for built in loaded:
        (rounded,) = run(built, [x], [0])
        assert torch.equal(rounded, reference(x, 0, 0x1234_5679, 0x9ABC_DEF0))
    assert len(list(tmp_path.iterdir())) == 2  # the library and its recorded hash


@pytest.mark.parametrize(
    ("compiler", "message"),
    [
        (["/nonexistent/cc"], "could not run /nonexistent/cc"),
        (["false"], "compiling stochastic_rounding.c with false -O3 -std=c11"),
    ],
)
def test_a_failed_build_says_why(tmp_path: Path, compiler: list[str], message: str) -> None:
    with pytest.raises(native.NativeBuildError) as raised:
        native.load(cache_dir=tmp_path, compiler=compiler)
    assert str(raised.value).startswith(message), raised.value
    assert list(tmp_path.iterdir()) == []  # no partial files left


def test_a_compile_error_shows_the_compiler_message(tmp_path: Path) -> None:
    source = tmp_path / "broken.c"
    source.write_text("int broken( {\n")
    with pytest.raises(native.NativeBuildError, match="error"):
        native.load(source, cache_dir=tmp_path / "cache", compiler=native.find_compiler())


@pytest.fixture
def fresh_kernel_cache() -> Iterator[None]:
    native.kernel.cache_clear()
    yield
    native.kernel.cache_clear()


@pytest.mark.usefixtures("fresh_kernel_cache")
def test_without_a_compiler_cpu_rounding_falls_back_to_eager(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path))  # nothing cached there
    monkeypatch.setenv("CC", "/nonexistent/cc")
    monkeypatch.delenv(native.ENV, raising=False)
    with pytest.warns(RuntimeWarning, match="eager PyTorch, several times slower.*could not run"):
        assert native.kernel() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert native.kernel() is None  # told once: the answer is kept
    assert native.describe().startswith("eager PyTorch (no native kernel: could not run")
    x = torch.full((10_000,), 1.0 + 2.0**-8)
    up = (stochastic_round_to_bf16(x, torch.Generator().manual_seed(1)).float() > 1.0).double()
    assert abs(up.mean().item() - 0.5) < 5 * 0.5 / 100


@pytest.mark.usefixtures("fresh_kernel_cache")
def test_xlamigrate_native_switches_the_kernel_off_or_makes_it_required(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(native.ENV, "0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # chosen: no warning
        assert native.kernel() is None
    assert native.describe() == f"eager PyTorch ({native.ENV}=0)"
    native.kernel.cache_clear()
    monkeypatch.setenv(native.ENV, "1")
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path))
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.raises(native.NativeBuildError, match="could not run /nonexistent/cc"):
        stochastic_round_to_bf16(torch.ones(3))


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX owners and modes")
@pytest.mark.parametrize("how", ["world-writable", "another-owner"])
def test_a_cache_folder_others_can_write_to_is_never_loaded_from(
    tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When ~/.cache was not writable the cache fell back to a predictable folder under $TMPDIR
    and loaded whatever library had the expected name there."""
    shared = tmp_path / "shared"
    fallback = shared / f"xlamigrate-{native._user()}"  # what an attacker creates first
    fallback.mkdir(parents=True)
    if how == "world-writable":
        shared.chmod(0o777)
        fallback.chmod(0o777)
    else:
        monkeypatch.setattr(os, "getuid", lambda: os.stat(shared).st_uid + 1)
    with pytest.raises(native.NativeBuildError, match="will not load code from"):
        native.load(cache_dir=shared, compiler=native.find_compiler())
    monkeypatch.setenv(native.CACHE_ENV, str(shared))
    monkeypatch.setenv("XDG_CACHE_HOME", str(shared))
    monkeypatch.setattr(native.tempfile, "gettempdir", lambda: str(shared))
    with pytest.raises(native.NativeBuildError, match="no private cache folder"):
        native._cache_dir()


def test_a_library_that_is_not_the_build_it_recorded_is_built_again(tmp_path: Path) -> None:
    """A file planted at the expected name (or a build changed since) is not loaded: the hash
    recorded beside the build does not match, so it is built again."""
    cache = tmp_path / "cache"
    build = (  # built in another process: a library is loaded once per process and path
        "import sys; from pathlib import Path; from xlamigrate_runtime import native; "
        "print(native.load(cache_dir=Path(sys.argv[1]), compiler=native.find_compiler()).path)"
    )
    done = subprocess.run(
        [sys.executable, "-c", build, str(cache)], capture_output=True, text=True, check=True
    )
    library = Path(done.stdout.strip().splitlines()[-1])
    genuine = library.read_bytes()
    planted = library.with_name("planted")
    planted.write_bytes(b"not the library this user built")
    os.replace(planted, library)
    again = native.load(cache_dir=cache, compiler=native.find_compiler())
    assert again.path == library
    assert library.read_bytes() != b"not the library this user built"
    assert len(library.read_bytes()) == len(genuine)
