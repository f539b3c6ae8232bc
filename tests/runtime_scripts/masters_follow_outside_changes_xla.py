"""Scenario c: FP32ParamsCopy's masters follow parameters changed outside the optimizer, on XLA.

After a few SGD steps small enough that the masters carry precision the bf16 parameters lack:
1. reloading the model's own state (same values, new version counters) must keep the masters
   bit for bit: the next step (without gradients, so nothing is updated) must not round them;
2. loading a different bf16 state must make the masters follow it: after one more step the
   masters are the new parameters minus lr * grad, not the stale masters minus lr * grad.
"""

from __future__ import annotations

import torch
import torch_xla
import torch_xla.core.xla_model as xm
from _common import emit, mlp, regression_data

from xlamigrate_runtime import FP32ParamsCopy

LR = 1e-3  # updates of ~1e-4, below a bf16 ulp at these weights: masters drift from the params
WARMUP_STEPS = 3


def main() -> None:
    device = torch_xla.device()
    model = mlp(seed=0).to(device)
    inputs, targets = (t.to(device=device, dtype=torch.bfloat16) for t in regression_data(seed=1))
    optimizer = FP32ParamsCopy(torch.optim.SGD(model.parameters(), lr=LR))

    def backward() -> None:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(inputs), targets).backward()

    def step() -> None:
        xm.optimizer_step(optimizer)
        torch_xla.sync()

    def masters() -> list[torch.Tensor]:
        torch_xla.sync()
        return [m.cpu().clone() for m in optimizer.master_params()]

    for _ in range(WARMUP_STEPS):
        backward()
        step()

    # 1. Reload the model's own current state: the values do not change.
    before = masters()
    params_before = [p.cpu().float() for p in model.parameters()]
    model.load_state_dict({k: v.clone() for k, v in model.state_dict().items()})
    optimizer.zero_grad(set_to_none=True)
    step()
    after = masters()
    changed = [a != b for a, b in zip(after, before, strict=True)]
    same_state = {
        "masters_finer_than_bf16": sum(
            int((b != p).sum()) for b, p in zip(before, params_before, strict=True)
        ),
        "masters_changed": sum(int(c.sum()) for c in changed),
        "masters_changed_negative": sum(
            int((c & (b < 0)).sum()) for c, b in zip(changed, before, strict=True)
        ),
        "masters_changed_to_param_value": sum(
            int((c & (a == p)).sum()) for c, a, p in zip(changed, after, params_before, strict=True)
        ),
        "elements": sum(b.numel() for b in before),
    }

    # 2. Load a different bf16 state (every value at least 0.5 away from its master), then step.
    stale = masters()
    other = {
        k: (v.cpu().float() * 0.5 + 1.0).to(torch.bfloat16) for k, v in model.state_dict().items()
    }
    model.load_state_dict(other)
    backward()
    grads = [p.grad.cpu().float() for p in model.parameters()]
    step()
    after = masters()
    new = [other[name].float() for name, _ in model.named_parameters()]
    expected = [n - LR * g for n, g in zip(new, grads, strict=True)]
    stale_expected = [s - LR * g for s, g in zip(stale, grads, strict=True)]
    other_state = {
        "max_error_vs_new_params_minus_lr_grad": max(
            float((a - e).abs().max()) for a, e in zip(after, expected, strict=True)
        ),
        "min_distance_to_stale_masters_minus_lr_grad": min(
            float((a - s).abs().min()) for a, s in zip(after, stale_expected, strict=True)
        ),
        "param_dtypes": sorted({str(p.dtype) for p in model.parameters()}),
        "master_dtypes": sorted({str(m.dtype) for m in optimizer.master_params()}),
        "master_devices": sorted({m.device.type for m in optimizer.master_params()}),
        "params_are_nearest_rounding_of_masters": all(
            torch.equal(p.cpu(), a.to(torch.bfloat16))
            for p, a in zip(model.parameters(), after, strict=True)
        ),
    }
    emit({"same_state": same_state, "other_state": other_state})


if __name__ == "__main__":
    main()
