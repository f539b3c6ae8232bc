"""Two-rank DDP (gloo, CPU, no torch-xla) with FP32ParamsCopy: ranks see different data, yet
must end with bit-identical bf16 parameters and fp32 masters, for round-to-nearest and for
stochastic rounding with the default seed (every rank draws the same roundings). A third run
seeds each rank differently: the control that shows the comparison can tell the difference.

Launched by `python -m torch.distributed.run --nproc_per_node=2 ... ddp_fp32_params_copy.py OUT`;
each rank writes OUT/<mode>_rank<r>.pt with its initial and final parameters, masters, losses.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from _common import mlp, regression_data
from torch.nn.parallel import DistributedDataParallel

from xlamigrate_runtime import FP32ParamsCopy

STEPS = 10
MODES = {
    "nearest": {"stochastic_rounding": False},
    "stochastic": {"stochastic_rounding": True},
    "stochastic_seed_per_rank": {"stochastic_rounding": True, "seed": None},  # control
}


def train(rank: int, options: dict[str, object]) -> dict[str, object]:
    options = dict(options)
    if "seed" in options:
        options["seed"] = 1000 + rank
    model = DistributedDataParallel(mlp(seed=0))
    initial = [p.detach().clone() for p in model.parameters()]
    inputs, targets = (t.to(torch.bfloat16) for t in regression_data(seed=100 + rank))
    optimizer = FP32ParamsCopy(torch.optim.AdamW(model.parameters(), lr=1e-2), **options)
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return {
        "initial": initial,
        "params": [p.detach().clone() for p in model.parameters()],
        "masters": [m.detach().clone() for m in optimizer.master_params()],
        "losses": losses,
    }


def main() -> None:
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        for mode, options in MODES.items():
            torch.save(train(rank, options), out / f"{mode}_rank{rank}.pt")
            dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
