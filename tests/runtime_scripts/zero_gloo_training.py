"""A legacy-style script (it sets XLA_USE_BF16 itself) training a small MLP with
torch.distributed's ZeroRedundancyOptimizer over AdamW, on 2 gloo processes on CPU.

tests/test_zero_gloo_e2e.py rewrites a copy of it with `xlamigrate rewrite --mode <mode>` and
runs it: `python zero_gloo_training.py --master-port PORT`. The script spawns its two ranks
itself and, in one run, trains the same model three times from the same start:

* unbroken: STEPS steps in one go;
* resumed: CHECKPOINT_STEP steps, `consolidate_state_dict(to=0)`, rank 0 saves model and
  optimizer with torch.save; then a fresh model and a fresh ZeroRedundancyOptimizer (built
  from another seed) on every rank load that file, consolidated optimizer state included, and
  train the remaining steps;
* control: the same resume, but the fresh optimizer does not load its state (the negative
  control: its Adam moments and step counts start over).

Each rank trains on its own fixed batch (a function of the rank only, so a resumed run sees
exactly the data of the unbroken one, and the loss falls steadily: with a fresh batch per step
it went up and down, and "the last loss is below the first" had no margin); gradients are
averaged with all_reduce before the step, as xm.optimizer_step does. The losses are the mean
over both ranks. The last stdout line is one JSON object: the losses of each run, the parameter
dtype, and whether both ranks ended with bit-identical parameters.
"""

import os

os.environ["XLA_USE_BF16"] = "1"

import argparse
import json
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.optim import ZeroRedundancyOptimizer

WORLD_SIZE = 2
STEPS = 8
CHECKPOINT_STEP = 4


def build(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    optimizer = ZeroRedundancyOptimizer(
        model.parameters(), optimizer_class=torch.optim.AdamW, lr=0.02
    )
    return model, optimizer


def batch(rank):
    generator = torch.Generator().manual_seed(1000 * rank)
    inputs = torch.randn(32, 16, generator=generator)
    targets = torch.sin(inputs[:, :4].sum(dim=1, keepdim=True))
    return inputs, targets


def train(model, optimizer, steps, rank):
    loss_fn = torch.nn.MSELoss()
    inputs, targets = batch(rank)
    losses = []
    for _ in steps:
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        for param in model.parameters():
            dist.all_reduce(param.grad)
            param.grad /= WORLD_SIZE
        optimizer.step()
        total = loss.detach().float().clone()
        dist.all_reduce(total)
        losses.append(total.item() / WORLD_SIZE)
    return losses


def resume(checkpoint, rank, load_optimizer_state):
    model, optimizer = build(seed=1)  # other weights than the checkpoint's: loading must matter
    state = torch.load(checkpoint, map_location="cpu")
    model.load_state_dict(state["model"])
    if load_optimizer_state:
        optimizer.load_state_dict(state["optimizer"])  # the consolidated dict, on every rank
    return model, train(model, optimizer, range(state["step"], STEPS), rank)


def ranks_agree(model):
    mine = [param.detach().float().flatten().tolist() for param in model.parameters()]
    everyone = [None] * WORLD_SIZE
    dist.all_gather_object(everyone, mine)
    return all(other == everyone[0] for other in everyone)


def worker(rank, port, folder):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE)
    checkpoint = os.path.join(folder, "checkpoint.pt")
    try:
        model, optimizer = build(seed=0)
        unbroken = train(model, optimizer, range(STEPS), rank)

        model, optimizer = build(seed=0)
        before = train(model, optimizer, range(CHECKPOINT_STEP), rank)
        optimizer.consolidate_state_dict(to=0)
        if rank == 0:
            state = {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "step": CHECKPOINT_STEP,
            }
            torch.save(state, checkpoint)
        dist.barrier()
        del model, optimizer

        model, after = resume(checkpoint, rank, load_optimizer_state=True)
        agree = ranks_agree(model)
        _, control = resume(checkpoint, rank, load_optimizer_state=False)
        if rank == 0:
            results = {
                "unbroken": unbroken,
                "before_checkpoint": before,
                "resumed": after,
                "control_without_optimizer_state": control,
                "checkpoint_step": CHECKPOINT_STEP,
                "param_dtype": str(next(model.parameters()).dtype),
                "ranks_agree": agree,
            }
            with open(os.path.join(folder, "results.json"), "w") as out:
                json.dump(results, out)
    finally:
        dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--master-port", type=int, default=29500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(worker, args=(args.master_port, folder), nprocs=WORLD_SIZE)
        with open(os.path.join(folder, "results.json")) as results:
            print(json.dumps(json.load(results)), flush=True)


if __name__ == "__main__":
    main()
