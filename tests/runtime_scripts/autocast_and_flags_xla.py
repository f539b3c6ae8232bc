"""Scenario d: the autocast recipe on XLA, and when `enable_stochastic_rounding` warns.

`bf16_autocast(model)` on an fp32 model on the XLA device must be `torch.autocast("xla", bf16)`:
matmuls inside run in bf16, parameters (and their gradients) stay fp32. Setting
NEURON_RT_STOCHASTIC_ROUNDING_EN is only effective before the runtime starts, so
`enable_stochastic_rounding` must stay quiet until the XLA device has been used, then warn.
"""

from __future__ import annotations

import sys
import warnings

import torch
from _common import emit, mlp, regression_data

from xlamigrate_runtime import bf16_autocast, enable_stochastic_rounding


def runtime_warnings_from_enable() -> dict[str, object]:
    environ: dict[str, str] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        enable_stochastic_rounding(environ)
    runtime = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    return {
        "warnings": len(runtime),
        "mentions_variable": all(
            "NEURON_RT_STOCHASTIC_ROUNDING_EN" in str(w.message) for w in runtime
        ),
        "warned_at_caller": all(w.filename == __file__ for w in runtime),
        "value": environ.get("NEURON_RT_STOCHASTIC_ROUNDING_EN"),
    }


def main() -> None:
    before_import = runtime_warnings_from_enable()
    assert "torch_xla" not in sys.modules, "the scenario needs torch_xla not yet imported"
    import torch_xla

    before_device = runtime_warnings_from_enable()
    device = torch_xla.device()
    model = mlp(seed=0, dtype=torch.float32).to(device)
    torch_xla.sync()
    after_device = runtime_warnings_from_enable()

    inputs, targets = (t.to(device) for t in regression_data(seed=1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    layer_outputs: list[str] = []
    for layer in (model[0], model[2]):
        layer.register_forward_hook(lambda module, args, out: layer_outputs.append(str(out.dtype)))
    context = bf16_autocast(model)
    with context:
        matmul = torch.matmul(inputs, model[0].weight.t())
        output = model(inputs)
        loss = torch.nn.functional.mse_loss(output.float(), targets)
    matmul_outside = torch.matmul(inputs, model[0].weight.t())
    loss.backward()
    grads = [str(p.grad.dtype) for p in model.parameters()]
    optimizer.step()
    torch_xla.sync()
    context_without_argument = bf16_autocast()

    emit(
        {
            "autocast": {
                "device_type": context.device,
                "dtype": str(context.fast_dtype),
                "device_type_without_argument": context_without_argument.device,
                "matmul_inside": str(matmul.dtype),
                "matmul_outside": str(matmul_outside.dtype),
                "layer_outputs": layer_outputs,
                "param_dtypes": sorted({str(p.dtype) for p in model.parameters()}),
                "param_devices": sorted({p.device.type for p in model.parameters()}),
                "grad_dtypes": sorted(set(grads)),
                "loss_finite": bool(torch.isfinite(loss).item()),
            },
            "enable_stochastic_rounding": {
                "before_import": before_import,
                "before_device": before_device,
                "after_device": after_device,
            },
        }
    )


if __name__ == "__main__":
    main()
