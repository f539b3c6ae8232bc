"""A bf16 module accepts fp32 inputs again, the way the legacy flag made it."""

from __future__ import annotations

import copy
from collections import OrderedDict, defaultdict, namedtuple
from collections.abc import Callable, Iterator
from types import MappingProxyType
from typing import Any
from unittest import mock

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from xlamigrate_runtime import casting
from xlamigrate_runtime.casting import cast_floating, cast_inputs_to_module_dtype

Batch = namedtuple("Batch", ["features", "ids"])


class Recorder(nn.Module):
    """A bf16 linear layer that records the dtypes of everything it was called with."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 2)
        self.seen: list[Any] = []

    def forward(self, x: torch.Tensor, *extra: Any, **named: Any) -> torch.Tensor:
        self.seen.append((x.dtype, extra, named))
        return self.linear(x)


def test_bf16_model_without_the_helper_rejects_fp32_input() -> None:
    model = nn.Linear(4, 2).to(torch.bfloat16)
    try:
        model(torch.randn(3, 4))
    except RuntimeError as error:
        assert "dtype" in str(error)
    else:
        raise AssertionError("a float32 input was accepted by a bf16 model")


def test_floating_inputs_are_cast_to_the_parameter_dtype() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)).to(torch.bfloat16)
    cast_inputs_to_module_dtype(model)
    output = model(torch.randn(3, 4))
    assert output.dtype == torch.bfloat16


def test_nested_args_and_kwargs_are_cast_and_integers_untouched() -> None:
    model = Recorder().to(torch.bfloat16)
    cast_inputs_to_module_dtype(model)
    ids = torch.arange(3)
    model(
        torch.randn(3, 4),
        [torch.randn(2), ids],
        Batch(torch.randn(2, dtype=torch.float64), ids),
        mask={"weights": torch.rand(3), "ids": ids},
        flag=True,
    )
    x_dtype, extra, named = model.seen[-1]
    assert x_dtype == torch.bfloat16
    assert extra[0][0].dtype == torch.bfloat16 and extra[0][1].dtype == torch.int64
    assert isinstance(extra[1], Batch)
    assert extra[1].features.dtype == torch.bfloat16 and extra[1].ids is ids
    assert named["mask"]["weights"].dtype == torch.bfloat16 and named["mask"]["ids"] is ids
    assert named["flag"] is True


def test_fp32_module_is_left_alone() -> None:
    model = Recorder()
    cast_inputs_to_module_dtype(model)
    for dtype in (torch.float64, torch.bfloat16):
        with pytest.raises(RuntimeError):
            model(torch.randn(3, 4, dtype=dtype))  # nn.Linear rejects it: nothing was cast
        assert model.seen[-1][0] == dtype
    assert model(torch.randn(3, 4)).dtype == torch.float32


def test_handle_removes_the_cast() -> None:
    model = nn.Linear(4, 2).to(torch.bfloat16)
    handle = cast_inputs_to_module_dtype(model)
    assert model(torch.randn(1, 4)).dtype == torch.bfloat16
    handle.remove()
    try:
        model(torch.randn(1, 4))
    except RuntimeError:
        return
    raise AssertionError("the cast was still applied after handle.remove()")


def test_installing_twice_returns_the_same_handle() -> None:
    model = nn.Linear(4, 2).to(torch.bfloat16)
    first = cast_inputs_to_module_dtype(model)
    second = cast_inputs_to_module_dtype(model)
    assert first is second
    assert len(model._forward_pre_hooks) == 1
    first.remove()
    third = cast_inputs_to_module_dtype(model)
    assert third is not first and len(model._forward_pre_hooks) == 1


def test_dtype_is_read_at_each_call() -> None:
    model = nn.Linear(4, 2)
    cast_inputs_to_module_dtype(model)
    assert model(torch.randn(1, 4)).dtype == torch.float32
    model.to(torch.bfloat16)  # the model is cast after the helper was installed
    assert model(torch.randn(1, 4)).dtype == torch.bfloat16


def test_gradients_flow_to_bf16_parameters_through_cast_inputs() -> None:
    model = nn.Linear(4, 1).to(torch.bfloat16)
    cast_inputs_to_module_dtype(model)
    x = torch.randn(5, 4, requires_grad=True)
    model(x).float().sum().backward()
    assert model.weight.grad is not None and model.weight.grad.dtype == torch.bfloat16
    assert x.grad is not None and x.grad.dtype == torch.float32


def test_cast_floating_keeps_mapping_types() -> None:
    value = OrderedDict(a=torch.ones(1), b="text")
    cast = cast_floating(value, torch.bfloat16)
    assert (
        isinstance(cast, OrderedDict) and cast["a"].dtype == torch.bfloat16 and cast["b"] == "text"
    )


class FieldsOutput(OrderedDict[str, Any]):
    """Like a Hugging Face ModelOutput: fields set by keyword, None ones left out, attributes
    mirroring the items; a dict given as the first positional argument is that field's value."""

    def __init__(self, loss: Any = None, logits: Any = None) -> None:
        super().__init__()
        for key, value in (("loss", loss), ("logits", logits)):
            if value is not None:
                self[key] = value

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        object.__setattr__(self, key, value)


def test_cast_floating_keeps_output_classes_and_their_fields() -> None:
    """Rebuilding a ModelOutput from a dict put the dict into its first field (`loss`) when the
    model returned no loss; the cast output must hold the same fields, in the same type."""
    logits = torch.randn(2, 3).to(torch.bfloat16)
    cast = cast_floating(FieldsOutput(logits=logits), torch.float32)
    assert isinstance(cast, FieldsOutput) and list(cast) == ["logits"]
    assert cast.logits.dtype == torch.float32 and not hasattr(cast, "loss")
    factory = defaultdict(list, a=logits)
    cast_factory = cast_floating(factory, torch.float32)
    assert cast_factory.default_factory is list and cast_factory["a"].dtype == torch.float32
    assert factory["a"].dtype == torch.bfloat16  # the caller's mapping is left as it was
    frozen = cast_floating(MappingProxyType({"a": logits}), torch.float32)
    assert frozen["a"].dtype == torch.float32


def test_the_hook_looks_at_one_tensor_per_forward_not_all_of_them() -> None:
    """The hook built a tuple of every parameter and buffer on every call (31 ms per forward on a
    module of 4,000 tensors): it stops at the first floating one."""
    model = nn.Sequential(*(nn.Linear(2, 2) for _ in range(500))).to(torch.bfloat16)
    walked = 0
    every = model.parameters

    def parameters(recurse: bool = True) -> Iterator[nn.Parameter]:
        nonlocal walked
        for parameter in every(recurse):
            walked += 1
            yield parameter

    cast_inputs_to_module_dtype(model)
    with mock.patch.object(model, "parameters", parameters):
        model(torch.ones(2))
    assert walked == 1


class Block(nn.Module):
    """Linear, GELU, LayerNorm: two hooked submodules and three torch calls per block."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(nn.functional.gelu(self.linear(x)))


class CallRecorder(TorchFunctionMode):
    """Records every torch call dispatched to it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Callable[..., Any]] = []

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        self.calls.append(func)
        return func(*args, **(kwargs or {}))


def calls_through_the_cast(model: nn.Module, *inputs: torch.Tensor) -> list[Callable[..., Any]]:
    """The torch calls the input cast's mode saw during one forward of `model` (cast)."""
    seen: list[Callable[..., Any]] = []
    dispatch = casting._ModelForward.__torch_function__

    def recording(mode: Any, func: Callable[..., Any], *rest: Any) -> Any:
        seen.append(func)
        return dispatch(mode, func, *rest)

    with mock.patch.object(casting._ModelForward, "__torch_function__", recording):
        model(*inputs)
    return seen


def calls_of_the_forward(model: nn.Module, *inputs: torch.Tensor) -> list[Callable[..., Any]]:
    """The torch calls one forward of `model` makes itself (no cast installed)."""
    with CallRecorder() as recorder:
        model(*inputs)
    return recorder.calls


def test_the_mode_sees_the_forwards_own_torch_calls_and_none_of_its_hooks() -> None:
    """Issue 36: the hooks' dtype reads and casts went through the mode too, 803 of the 1,103
    calls it saw in this forward (fp32 in: one more, the model's own input cast). It must see
    exactly what the forward calls: what the same model in fp32, uncast, calls."""
    torch.manual_seed(0)
    fp32 = nn.Sequential(*(Block(8) for _ in range(100)))
    model = copy.deepcopy(fp32).to(torch.bfloat16)
    handle = cast_inputs_to_module_dtype(model, output_dtype=torch.float32)
    assert len(handle.handles) == 2 + 200  # the model's two, one per Linear and LayerNorm
    x = torch.randn(2, 8)  # fp32: the model's hook casts it
    expected = calls_of_the_forward(fp32, x)
    assert len(expected) == 300
    assert calls_through_the_cast(model, x) == expected
    assert model(x).dtype == torch.float32


class TimestepNet(nn.Module):
    """fp32 made inside forward (a timestep embedding, `arange` features) reaches a Conv and a
    Linear: hazard 7, aws-neuron-sdk #1318."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 2, 3, padding=1)
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(16, 1))

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        features = torch.arange(8).float() / 8 + t.float() / 1000  # fp32, whatever x is
        return self.head(self.conv(x + features.view(1, 1, 8)))


def test_fp32_made_inside_forward_reaches_bf16_submodules_cast() -> None:
    model = TimestepNet().to(torch.bfloat16)
    x, t = torch.randn(2, 1, 8), torch.tensor([3])
    with pytest.raises(RuntimeError):  # what a bf16 cast alone gives (the top-level cast too)
        only_top = TimestepNet().to(torch.bfloat16)
        only_top.register_forward_pre_hook(
            lambda module, args: tuple(a.to(torch.bfloat16) for a in args)
        )
        only_top(x, t)
    cast_inputs_to_module_dtype(model)
    out = model(x, t)
    assert out.dtype == torch.bfloat16
    out.float().sum().backward()
    assert model.conv.weight.grad is not None


def test_casts_in_submodule_hooks_are_not_seen_by_the_mode() -> None:
    """fp32 made inside forward reaching a bf16 Conv and Linear: their hooks cast it, outside
    the mode; the mode sees what the forward of the fp32 model calls, no `.to`."""
    fp32 = TimestepNet()
    model = copy.deepcopy(fp32).to(torch.bfloat16)
    cast_inputs_to_module_dtype(model)
    x, t = torch.randn(2, 1, 8), torch.tensor([3])
    assert calls_through_the_cast(model, x, t) == calls_of_the_forward(fp32, x, t)


def test_submodule_hooks_follow_later_dtype_changes_of_their_modules() -> None:
    model = TimestepNet()
    cast_inputs_to_module_dtype(model)
    x, t = torch.randn(2, 1, 8), torch.tensor([3])
    assert model(x, t).dtype == torch.float32
    model.to(torch.bfloat16)
    assert model(x, t).dtype == torch.bfloat16
    half = {key: value.half() for key, value in model.state_dict().items()}
    model.load_state_dict(half, assign=True)  # new Parameter objects, in fp16
    assert model.conv.weight.dtype == torch.float16
    assert model(x, t).dtype == torch.float16


class LinearThenFunctional(nn.Module):
    """A hooked submodule, then a functional linear of fp32 made inside forward."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.weight = nn.Parameter(torch.randn(3, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.linear(x) + torch.arange(4).float() / 4  # promoted to fp32
        return nn.functional.linear(hidden, self.weight)


def test_the_mode_is_back_after_a_submodule_hook_for_the_compute_that_follows() -> None:
    """The submodule hooks step the mode aside while they run; the functional linear after
    the submodule still gets its mixed operands in bf16, and no mode is left behind."""
    model = LinearThenFunctional().to(torch.bfloat16)
    cast_inputs_to_module_dtype(model)
    assert model(torch.randn(2, 4)).dtype == torch.bfloat16
    assert not torch.overrides._get_current_function_mode_stack()


def test_the_hooks_cast_under_an_outer_mode_and_leave_it_in_place() -> None:
    """Only the cast's own mode steps aside: a mode entered around the forward sees the
    forward's calls and the hooks' casts, and stays on the stack."""
    model = TimestepNet().to(torch.bfloat16)
    cast_inputs_to_module_dtype(model)
    with CallRecorder() as outer:
        assert model(torch.randn(2, 1, 8), torch.tensor([3])).dtype == torch.bfloat16
        assert torch.overrides._get_current_function_mode_stack() == [outer]
    assert torch.Tensor.to in outer.calls and torch.nn.functional.linear in outer.calls


def test_the_cast_hooks_every_submodule_with_parameters_and_removes_them_all() -> None:
    model = TimestepNet().to(torch.bfloat16)
    handle = cast_inputs_to_module_dtype(model)
    hooked = [m for m in model.modules() if m._forward_pre_hooks]
    assert hooked == [model, model.conv, model.head[1]]  # not the Sequential or the Flatten
    handle.remove()
    assert not any(m._forward_pre_hooks for m in model.modules())


class TwoHeads(nn.Module):
    """Returns a (tensor, dict) pair and records the dtype its inner layer answers in."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 3)
        self.inner_dtypes: list[torch.dtype] = []

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        hidden = self.body(x)
        self.inner_dtypes.append(hidden.dtype)
        return hidden, {"score": hidden.sum(dim=1), "argmax": hidden.argmax(dim=1)}


def test_a_loss_against_fp32_targets_fails_in_backward_without_the_output_cast() -> None:
    """Hazard 2: the input cast does not reach the targets; MSE promotes in the forward pass
    and its CPU backward then rejects the bf16 output (on Neuron: the HLO verifier)."""
    model = nn.Linear(4, 1).to(torch.bfloat16)
    cast_inputs_to_module_dtype(model)
    x, target = torch.randn(8, 4), torch.randn(8, 1)
    loss = nn.functional.mse_loss(model(x), target)
    with pytest.raises(RuntimeError, match="Found dtype Float but expected BFloat16"):
        loss.backward()


def test_output_dtype_returns_the_outputs_in_fp32_and_trains_the_bf16_model() -> None:
    model = nn.Linear(4, 1).to(torch.bfloat16)
    cast_inputs_to_module_dtype(model, output_dtype=torch.float32)
    x, target = torch.randn(8, 4), torch.randn(8, 1)
    output = model(x)
    assert output.dtype == torch.float32
    nn.functional.mse_loss(output, target).backward()
    assert model.weight.grad is not None and model.weight.grad.dtype == torch.bfloat16
    expected = nn.functional.mse_loss(model(x.to(torch.bfloat16)).float(), target)
    assert torch.equal(nn.functional.mse_loss(output, target), expected)


def test_output_dtype_casts_nested_floating_outputs_of_the_top_module_only() -> None:
    model = TwoHeads().to(torch.bfloat16)
    handle = cast_inputs_to_module_dtype(model, output_dtype=torch.float32)
    hidden, extra = model(torch.randn(2, 4))
    assert (hidden.dtype, extra["score"].dtype) == (torch.float32, torch.float32)
    assert extra["argmax"].dtype == torch.int64
    assert model.inner_dtypes == [torch.bfloat16]  # inside, the model still computes in bf16
    handle.remove()
    hidden, _ = model(torch.randn(2, 4).to(torch.bfloat16))
    assert hidden.dtype == torch.bfloat16


def test_output_dtype_leaves_an_fp32_module_alone() -> None:
    model = nn.Linear(4, 1)
    cast_inputs_to_module_dtype(model, output_dtype=torch.float32)
    x = torch.randn(2, 4)
    assert torch.equal(model(x), nn.functional.linear(x, model.weight, model.bias))


class FunctionalMixer(nn.Module):
    """Parameters used through functional calls, with operands `forward` makes in fp32."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(3, 4))
        self.kernel = nn.Parameter(torch.randn(2, 1, 3))
        self.seen: list[torch.dtype] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(4).float() / 4  # fp32, whatever x is
        mixed = nn.functional.linear(x + positions, self.weight)  # the sum promoted to fp32
        scaled = mixed @ (torch.ones(3, 3) / 3)  # an fp32 operand made here
        waves = nn.functional.conv1d(torch.sin(positions).view(1, 1, 4), self.kernel)
        self.seen += [mixed.dtype, scaled.dtype, waves.dtype]
        return scaled.sum(dim=1) + waves.sum()


def test_functional_compute_on_fp32_made_inside_forward_runs_in_the_module_dtype() -> None:
    """Hazard 1: no submodule call to hook; `F.linear`, `@` and `conv1d` of fp32 operands and
    bf16 parameters fail on the CPU and promote silently on XLA. Inside the cast model's forward
    they compute in bf16, as under the legacy flag."""
    model = FunctionalMixer().to(torch.bfloat16)
    with pytest.raises(RuntimeError):
        model(torch.randn(2, 4).to(torch.bfloat16))
    handle = cast_inputs_to_module_dtype(model)
    model.seen.clear()
    out = model(torch.randn(2, 4))
    assert model.seen == [torch.bfloat16] * 3
    out.float().sum().backward()
    assert model.weight.grad is not None and model.weight.grad.dtype == torch.bfloat16
    assert model.kernel.grad is not None and model.kernel.grad.dtype == torch.bfloat16
    handle.remove()
    with pytest.raises(RuntimeError):
        model(torch.randn(2, 4).to(torch.bfloat16))


def test_compute_outside_the_forward_and_in_fp32_models_is_left_alone() -> None:
    model = FunctionalMixer()  # fp32: nothing to do
    cast_inputs_to_module_dtype(model)
    model(torch.randn(2, 4))
    assert model.seen == [torch.float32] * 3
    bf16 = FunctionalMixer().to(torch.bfloat16)
    cast_inputs_to_module_dtype(bf16)
    with pytest.raises(RuntimeError):  # after the forward the mode is gone
        torch.matmul(torch.ones(2, 3), bf16.weight.T)


def test_a_forward_that_raises_leaves_no_mode_behind() -> None:
    class Failing(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("in forward")

    model = Failing().to(torch.bfloat16)
    cast_inputs_to_module_dtype(model)
    with pytest.raises(ValueError, match="in forward"):
        model(torch.randn(1, 2))
    with pytest.raises(RuntimeError):
        torch.matmul(torch.ones(2, 2), model.linear.weight)
    assert not torch.overrides._get_current_function_mode_stack()


def test_a_tensor_is_refused_saying_what_to_do() -> None:
    """A rewrite that took a tensor for the model crashed with "'Tensor' object has no
    attribute 'register_forward_pre_hook'"."""
    with pytest.raises(TypeError, match="got Tensor: a tensor needs no input cast"):
        cast_inputs_to_module_dtype(torch.zeros(1))  # type: ignore[arg-type]
