"""Pretrains a tiny next-token model on random tokens, in the pre-2.5 style: the launcher sets
XLA_USE_BF16 (run_pretrain.sh, k8s/pretrain-job.yaml) and this script only reads it."""

import argparse
import os

import torch
import torch.nn.functional as F
import torch_xla.core.xla_model as xm


class TinyLM(torch.nn.Module):
    def __init__(self, vocab: int = 64, width: int = 32) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.mix = torch.nn.Linear(width, width)
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, tokens):
        hidden = torch.tanh(self.mix(self.embed(tokens)))
        return self.head(hidden)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()
    if os.environ.get("XLA_USE_BF16") == "1":
        print("training in bf16")
    torch.manual_seed(0)
    device = xm.xla_device()
    model = TinyLM().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        tokens = torch.randint(0, 64, (8, 16), device=device)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 64), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        xm.mark_step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
