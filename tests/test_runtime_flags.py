"""Environment helpers: stochastic rounding, --auto-cast=none merged, bf16 autocast per device."""

from __future__ import annotations

import pytest
import torch

from xlamigrate_runtime.flags import (
    autocast_device_type,
    bf16_autocast,
    disable_neuron_auto_cast,
    enable_stochastic_rounding,
    merge_auto_cast_none,
)


def test_enable_stochastic_rounding_sets_the_neuron_variable() -> None:
    environ: dict[str, str] = {}
    enable_stochastic_rounding(environ)
    assert environ == {"NEURON_RT_STOCHASTIC_ROUNDING_EN": "1"}


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("", "--auto-cast=none"),
        ("--model-type=transformer", "--model-type=transformer --auto-cast=none"),
        ("--auto-cast=all --model-type=transformer", "--model-type=transformer --auto-cast=none"),
        ("--auto-cast all -O1", "-O1 --auto-cast=none"),
        (
            "--cache_dir='/tmp/my cache' --auto-cast=matmult",
            "'--cache_dir=/tmp/my cache' --auto-cast=none",
        ),
        ("--auto-cast=none", "--auto-cast=none"),
    ],
)
def test_merge_auto_cast_none_keeps_other_flags(before: str, after: str) -> None:
    assert merge_auto_cast_none(before) == after


def test_merge_auto_cast_none_is_idempotent() -> None:
    once = merge_auto_cast_none("--model-type=transformer --auto-cast=all")
    assert merge_auto_cast_none(once) == once


def test_disable_neuron_auto_cast_appends_to_the_environment_value() -> None:
    environ = {"NEURON_CC_FLAGS": "--model-type=transformer --cache_dir=/c"}
    merged = disable_neuron_auto_cast(environ)
    assert merged == environ["NEURON_CC_FLAGS"]
    assert environ["NEURON_CC_FLAGS"] == "--model-type=transformer --cache_dir=/c --auto-cast=none"
    disable_neuron_auto_cast(environ)
    assert environ["NEURON_CC_FLAGS"].count("--auto-cast") == 1
    empty: dict[str, str] = {}
    disable_neuron_auto_cast(empty)
    assert empty == {"NEURON_CC_FLAGS": "--auto-cast=none"}


def test_autocast_device_type_follows_the_module_tensor_or_device() -> None:
    assert autocast_device_type(torch.nn.Linear(2, 2)) == "cpu"
    assert autocast_device_type(torch.ones(1)) == "cpu"
    assert autocast_device_type("cpu") == "cpu"
    assert autocast_device_type(torch.device("cuda", 0)) == "cuda"


def test_bf16_autocast_on_cpu_runs_matmuls_in_bf16_and_keeps_params_fp32() -> None:
    model = torch.nn.Linear(4, 3)
    with bf16_autocast(model):
        output = model(torch.randn(2, 4))
    assert output.dtype == torch.bfloat16
    assert model.weight.dtype == torch.float32
    with bf16_autocast(model, enabled=False):
        assert model(torch.randn(2, 4)).dtype == torch.float32
