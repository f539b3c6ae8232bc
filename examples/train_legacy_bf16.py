"""A small training script in the pre-2.5 style: the XLA_USE_BF16 flag makes the model bf16.

`xlamigrate scan examples/` reports every place it touches the legacy flags.
"""

import argparse
import os

import torch
import torch_xla.core.xla_model as xm

parser = argparse.ArgumentParser()
parser.add_argument("--bf16", action="store_true")
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()

# The legacy way: every float32 tensor on the device silently becomes bf16.
os.environ["XLA_USE_BF16"] = "1" if args.bf16 else "0"
os.environ.setdefault("XLA_DOWNCAST_BF16", "0")


def uses_bf16() -> bool:
    # Code that reads the flag changes behaviour once the write is migrated.
    return "XLA_USE_BF16" in os.environ


device = xm.xla_device()
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
model = model.to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
loss_fn = torch.nn.MSELoss()
generator = torch.Generator().manual_seed(0)

for step in range(args.steps):
    inputs = torch.randn(64, 16, generator=generator).to(device)
    targets = inputs.sum(dim=1, keepdim=True)
    loss = loss_fn(model(inputs), targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    xm.mark_step()
    if step % 5 == 0:
        print(f"step {step} loss {loss.item():.4f} bf16={uses_bf16()}")
