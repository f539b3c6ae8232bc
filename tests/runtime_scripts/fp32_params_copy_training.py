"""Scenario a: FP32ParamsCopy(AdamW) trains a bf16 MLP for 10 steps with an LR scheduler and
gradient clipping. `--device xla` steps with `xm.optimizer_step`; `--device cpu` is the eager
reference (its own process: a CPU backward before the XLA device exists breaks XLA backward)."""

from __future__ import annotations

import argparse

import torch
from _common import emit, mlp, regression_data, values

from xlamigrate_runtime import FP32ParamsCopy

STEPS = 10
LR = 1e-2


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=["cpu", "xla"], required=True)
    on_xla = parser.parse_args().device == "xla"
    if on_xla:
        import torch_xla
        import torch_xla.core.xla_model as xm

        device = torch_xla.device()
    else:
        device = torch.device("cpu")

    model = mlp(seed=0).to(device)
    initial = values(list(model.parameters()))
    inputs, targets = (t.to(device=device, dtype=torch.bfloat16) for t in regression_data(seed=1))
    optimizer = FP32ParamsCopy(torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01))
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)

    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
        if on_xla:
            xm.optimizer_step(optimizer)
        else:
            optimizer.step()
        scheduler.step()
        if on_xla:
            torch_xla.sync()
        losses.append(loss.detach().float().item())

    params = list(model.parameters())
    masters = optimizer.master_params()
    emit(
        {
            "device": device.type,
            "first_lr": LR,
            "losses": losses,
            "param_dtypes": sorted({str(p.dtype) for p in params}),
            "param_devices": sorted({p.device.type for p in params}),
            "master_dtypes": sorted({str(m.dtype) for m in masters}),
            "master_devices": sorted({m.device.type for m in masters}),
            "master_is_param": [m is p for m, p in zip(masters, params, strict=True)],
            "outer_lr": optimizer.param_groups[0]["lr"],
            "inner_lr": optimizer.optimizer.param_groups[0]["lr"],
            "inner_state_dtypes": sorted(
                {
                    str(v.dtype)
                    for s in optimizer.optimizer.state.values()
                    for k, v in s.items()
                    if k in ("exp_avg", "exp_avg_sq")
                }
            ),
            "params_are_nearest_rounding_of_masters": all(
                torch.equal(p.cpu(), m.cpu().to(torch.bfloat16))
                for p, m in zip(params, masters, strict=True)
            ),
            "initial_params": initial,
            "params": values(params),
            "masters": values(masters),
        }
    )


if __name__ == "__main__":
    main()
