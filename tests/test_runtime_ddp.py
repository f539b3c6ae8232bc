"""FP32ParamsCopy under two-rank DistributedDataParallel (gloo on CPU, no torch-xla): ranks that
train on different data stay bit-identical, with round-to-nearest and with stochastic rounding
(whose default seed makes every rank draw the same roundings)."""

from __future__ import annotations

import socket
import subprocess
import sys
from typing import Any

import pytest
import torch

from tests.conftest import ROOT

SCRIPT = ROOT / "tests" / "runtime_scripts" / "ddp_fp32_params_copy.py"
SYNCHRONISED_MODES = ["nearest", "stochastic"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """Runs the two-rank job once; per mode, what rank 0 and rank 1 wrote."""
    out = tmp_path_factory.mktemp("ddp")
    result = subprocess.run(
        [
            sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
            "--master_addr=127.0.0.1", f"--master_port={free_port()}", str(SCRIPT), str(out),
        ],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    if result.returncode != 0:
        pytest.fail(f"the DDP job exited {result.returncode}:\n{result.stderr[-4000:]}")
    modes = [*SYNCHRONISED_MODES, "stochastic_seed_per_rank"]
    return {mode: [torch.load(out / f"{mode}_rank{rank}.pt") for rank in (0, 1)] for mode in modes}


def bits(tensor: Any) -> Any:
    """The bit pattern, so that equality is bit-identity (-0.0 != 0.0, NaN == same NaN)."""
    return tensor.view({torch.bfloat16: torch.int16, torch.float32: torch.int32}[tensor.dtype])


def same_bits(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(
        torch.equal(bits(x), bits(y)) for x, y in zip(a, b, strict=True)
    )


@pytest.mark.parametrize("mode", SYNCHRONISED_MODES)
def test_ddp_ranks_on_different_data_hold_bit_identical_params_and_masters(
    ranks: dict[str, list[dict[str, Any]]], mode: str
) -> None:
    rank0, rank1 = ranks[mode]
    assert rank0["losses"][0] != rank1["losses"][0]  # the ranks did see different data
    assert same_bits(rank0["params"], rank1["params"])
    assert same_bits(rank0["masters"], rank1["masters"])


@pytest.mark.parametrize("mode", SYNCHRONISED_MODES)
def test_ddp_params_stay_bf16_and_masters_fp32(
    ranks: dict[str, list[dict[str, Any]]], mode: str
) -> None:
    for rank in ranks[mode]:
        assert {p.dtype for p in rank["params"]} == {torch.bfloat16}
        assert {m.dtype for m in rank["masters"]} == {torch.float32}


def test_ddp_params_are_the_nearest_rounding_of_the_masters(
    ranks: dict[str, list[dict[str, Any]]],
) -> None:
    for rank in ranks["nearest"]:
        pairs = zip(rank["params"], rank["masters"], strict=True)
        assert all(torch.equal(p, m.to(torch.bfloat16)) for p, m in pairs)


def test_ddp_params_are_a_stochastic_rounding_of_the_masters(
    ranks: dict[str, list[dict[str, Any]]],
) -> None:
    for rank in ranks["stochastic"]:
        pairs = list(zip(rank["params"], rank["masters"], strict=True))
        for param, master in pairs:
            toward = bits(master) & -65536  # the bf16 neighbour toward zero, as fp32 bits
            away = toward + 65536
            value = bits(param.float())
            assert bool(((value == toward) | (value == away)).all())
        assert not all(torch.equal(p, m.to(torch.bfloat16)) for p, m in pairs)


@pytest.mark.parametrize("mode", SYNCHRONISED_MODES)
def test_ddp_training_moves_the_weights(ranks: dict[str, list[dict[str, Any]]], mode: str) -> None:
    for rank in ranks[mode]:
        moved = [
            not torch.equal(p, p0) for p, p0 in zip(rank["params"], rank["initial"], strict=True)
        ]
        assert all(moved)
        assert rank["losses"][-1] < rank["losses"][0]


def test_ddp_stochastic_rounding_with_a_seed_per_rank_desynchronises_the_params(
    ranks: dict[str, list[dict[str, Any]]],
) -> None:
    """The control: different roundings per rank show up in the comparison above. (The masters
    still agree: they are updated from the all-reduced gradients.)"""
    rank0, rank1 = ranks["stochastic_seed_per_rank"]
    assert not same_bits(rank0["params"], rank1["params"])
