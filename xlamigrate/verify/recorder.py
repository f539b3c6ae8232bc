"""The shim `xlamigrate verify` loads into each training run, as `sitecustomize`.

It observes a script without editing it: every scalar `backward()` gives a loss, every outermost
`Optimizer.step` closes a step (a wrapper's inner step is the same step), the first step notes the
dtypes of the parameters, optimizer state and master weights, the first step after the warm-up
takes a census of everything on the device (census.py), and the process ends after the
requested number of steps. Each process that stepped writes `record-<pid>.json`.

Standalone on purpose: it runs in the script's interpreter, which needs torch, not xlamigrate's
CLI dependencies; it imports torch only when the script does, and does nothing unless
XLAMIGRATE_VERIFY_RECORD names the folder for the records.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import itertools
import json
import os
import random
import re
import resource
import statistics
import sys
import time
import weakref
from collections import Counter
from collections.abc import Sequence
from types import ModuleType
from typing import Any

RECORD_DIR = "XLAMIGRATE_VERIFY_RECORD"
STEP_LIMIT = "XLAMIGRATE_VERIFY_STEPS"
CENSUS = "XLAMIGRATE_VERIFY_CENSUS"  # "0": no census of the device (to measure what it costs)
# Every run starts torch's, Python's and numpy's global generators from this seed (an integer;
# "none": as the interpreter seeds them). torch 2.9 seeds its default generator afresh in each
# process, so an unseeded script would draw other initial weights in each run it is compared in.
SEED = "XLAMIGRATE_VERIFY_SEED"
DEFAULT_SEED = 0
CENSUS_MODULE = "xlamigrate_verify_census"  # census.py, copied beside this shim
# Bytes per element of the element types XLA reports for a tensor's storage (under the legacy
# flag an fp32 tensor is stored as bf16: its `.dtype` says float32, its XLA shape bf16).
XLA_ELEMENT_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "f32": 4,
                     "s32": 4, "f64": 8, "s64": 8}  # fmt: skip
WARM_UP_STEPS = 2  # compilation happens in these: not counted in the time per step
# The census of the device is taken at the end of this step (the first after the warm-up:
# whatever the script builds or moves lazily is there by then), or at the step limit if sooner.
CENSUS_STEP = WARM_UP_STEPS + 1
WATCHED_FLAGS = (
    "XLA_USE_BF16",
    "XLA_DOWNCAST_BF16",
    "PJRT_DEVICE",
    "NEURON_RT_STOCHASTIC_ROUNDING_EN",
    "NEURON_CC_FLAGS",
)


class Recorder:
    """Losses per optimizer step and the dtypes after the first one, for one process."""

    def __init__(self, folder: str, limit: int, census: bool = True) -> None:
        self.folder = folder
        self.limit = limit
        self.census_on = census
        self.census: dict[str, Any] = {}  # census.take(), once
        # forwards outside training (evaluations, teachers), by "name (context)": what the
        # step's graph does not hold (census.evaluation); the first call of each only
        self.evaluations: dict[str, dict[str, Any]] = {}
        self.evaluated: set[tuple[int, str]] = set()
        self.paused = 0.0  # seconds spent taking the census: not the script's time
        # every module the run built or copied, and every optimizer that stepped (by id)
        self.modules: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        self.optimizers: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        self.started = time.monotonic()
        self.pending: list[Any] = []  # detached losses since the last step
        self.steps: list[list[Any]] = []  # the losses of each finished step
        self.depth = 0  # nesting of Optimizer.step calls
        self.dtypes: dict[str, dict[str, int]] = {}
        self.devices: dict[str, int] = {}
        self.flags: dict[str, str | None] = {}
        self.exit_registered = False
        self.finished = False
        self.step_ends: list[float] = []  # monotonic time at the end of each step
        self.memory: dict[str, int] = {}  # bytes at the first step, and the parameter count
        # The mechanism of autocast, seen from outside: whether an XLA bf16 autocast region
        # was active when the model's forward began (the outermost call of a module holding
        # parameters), and whether one was active around backward().
        self.module_depth = 0
        self.forwards_since_backward: list[bool] = []  # autocast on, per model forward
        self.mechanism = {
            "backwards": 0,
            "backwards_after_autocast_forward": 0,
            "backwards_in_autocast": 0,
        }

    def on_forward_start(self, module: Any, autocast_on: bool, grad_enabled: bool = True) -> None:
        self.module_depth += 1
        if (
            self.module_depth == 1
            and grad_enabled  # an evaluation's forward is the census's (on_forward_end)
            and next(iter(module.parameters()), None) is not None
        ):
            self.forwards_since_backward.append(autocast_on)

    def on_forward_end(self, module: Any, output: Any, grad_enabled: bool) -> None:
        self.module_depth = max(0, self.module_depth - 1)
        if self.module_depth == 0 and self.census_on and not (grad_enabled and module.training):
            self._note_evaluation(module, output, "eval mode" if grad_enabled else "no_grad")

    def _note_evaluation(self, module: Any, output: Any, context: str) -> None:
        """The first forward outside training of each module holding parameters, in each
        context (census.evaluation): not its later calls, which run the same graph."""
        key = (id(module), context)
        if key in self.evaluated or next(iter(module.parameters()), None) is None:
            return
        self.evaluated.add(key)
        started = time.monotonic()
        try:
            seen = _census_module().evaluation(module, output, context)
        except Exception as error:  # the census observes; it never stops the run
            seen = {"module": type(module).__name__, "context": context, "error": str(error)}
        seen["seconds"] = round(time.monotonic() - started, 4)
        self.evaluations.setdefault(f"{seen['module']} ({context})", seen)
        self.paused += time.monotonic() - started

    def on_backward(self, tensors: Any, autocast_on: bool = False) -> None:
        self._register_exit()
        forwards, self.forwards_since_backward = self.forwards_since_backward, []
        self.mechanism["backwards"] += 1
        if forwards and all(forwards):
            self.mechanism["backwards_after_autocast_forward"] += 1
        if autocast_on:
            self.mechanism["backwards_in_autocast"] += 1
        tensor = tensors[0] if isinstance(tensors, Sequence) and len(tensors) == 1 else tensors
        if getattr(tensor, "is_floating_point", None) and tensor.numel() == 1:
            # Kept on the device, read when the run ends: reading it now would cut the graph.
            self.pending.append(tensor.detach())

    def on_module(self, module: Any) -> None:
        with contextlib.suppress(TypeError):  # a class without weak references
            self.modules[id(module)] = module

    def before_step(self, optimizer: Any = None) -> None:
        self._register_exit()
        self.depth += 1
        if optimizer is not None:
            with contextlib.suppress(TypeError):
                self.optimizers[id(optimizer)] = optimizer

    def after_step(self, optimizer: Any) -> None:
        self.depth -= 1
        if self.depth > 0:
            return
        self.steps.append(self.pending)
        self.pending = []
        self.step_ends.append(time.monotonic() - self.paused)
        if len(self.steps) == 1:
            self._note_types(optimizer)
            self._note_memory(optimizer)
        if len(self.steps) == min(CENSUS_STEP, self.limit or CENSUS_STEP):
            self._take_census([optimizer], self.steps[-1])
        if self.limit and len(self.steps) >= self.limit:
            self.finish(stopped=True)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

    def _register_exit(self) -> None:
        # Registered at the first event, after torch_xla's own handlers: atexit runs in reverse,
        # so the losses are read before torch_xla shuts its runtime down.
        if not self.exit_registered:
            self.exit_registered = True
            atexit.register(self.finish, stopped=False)

    def _take_census(self, optimizers: list[Any], losses: list[Any]) -> None:
        if not self.census_on or self.census:
            return
        started = time.monotonic()
        try:
            modules = list(self.modules.values())
            known = [*optimizers, *self.optimizers.values()]
            census = _census_module().take(modules, known, losses)
        except Exception as error:  # the census observes; it never stops the run
            census = {"error": f"{type(error).__name__}: {error}"}
        census["step"] = len(self.steps)
        self.census = census
        self.paused += time.monotonic() - started

    def _note_types(self, optimizer: Any) -> None:
        self.flags = {name: os.environ.get(name) for name in WATCHED_FLAGS}
        params = [p for group in optimizer.param_groups for p in group["params"]]
        self.dtypes["params"] = _dtype_counts(params)
        self.devices = dict(Counter(str(p.device.type) for p in params))
        state: list[Any] = []
        masters: list[Any] = []
        current, seen = optimizer, set()
        while current is not None and id(current) not in seen:  # a wrapper's inner optimizers
            seen.add(id(current))
            for values in current.state.values():
                state.extend(v for key, v in values.items() if key != "step")
            inner = getattr(current, "optimizer", None)
            if hasattr(inner, "state") and not isinstance(current.state, dict):
                state.clear()  # (a wrapper's state is a view of its inner optimizer's: once)
            if inner is not None and hasattr(inner, "param_groups") and hasattr(inner, "state"):
                masters = [p for group in inner.param_groups for p in group["params"]]
            current = inner if hasattr(inner, "state") else None
        self.dtypes["state"] = _dtype_counts(state)
        self.dtypes["masters"] = _dtype_counts(masters)

    def _note_memory(self, optimizer: Any) -> None:
        """Bytes held by the weights, their gradients and the optimizer (its state and any fp32
        masters a wrapper keeps), as stored on the device, after the first step."""
        params = [p for group in optimizer.param_groups for p in group["params"]]
        ids = {id(p) for p in params}
        held: list[Any] = []
        current, seen = optimizer, set()
        while current is not None and id(current) not in seen:  # a wrapper's inner optimizers
            seen.add(id(current))
            for values in current.state.values():  # (not the scalar step counters)
                held.extend(v for k, v in values.items() if k != "step" and _is_tensor(v))
            held.extend(p for group in current.param_groups for p in group["params"])
            inner = getattr(current, "optimizer", None)
            current = inner if hasattr(inner, "state") else None
        unique = {id(t): t for t in held if id(t) not in ids}
        self.memory = {
            "parameters": sum(p.numel() for p in params),
            "weights": sum(_stored_bytes(p) for p in params),
            "grads": sum(_stored_bytes(p.grad) for p in params if p.grad is not None),
            "optimizer": sum(_stored_bytes(t) for t in unique.values()),
        }

    def _seconds_per_step(self) -> float | None:
        """The median time between step ends after the warm-up steps (XLA compiles there)."""
        times = self.step_ends[WARM_UP_STEPS:]
        gaps = [after - before for before, after in itertools.pairwise(times)]
        return statistics.median(gaps) if gaps else None

    def finish(self, stopped: bool) -> None:
        if self.finished or not self.steps:
            return
        self.finished = True
        self._take_census([], [])  # a script that ended before the census step
        _sync_device()
        losses = [_mean(step) for step in self.steps]
        record = {
            "pid": os.getpid(),
            "stopped_at_limit": stopped,
            "steps": len(self.steps),
            "losses": losses,
            "dtypes": self.dtypes,
            "devices": self.devices,
            "flags": self.flags,
            "mechanism": self.mechanism,
            "memory": self.memory,
            "census": {**self.census, "evaluations": list(self.evaluations.values())}
            if self.census
            else {},
            "seconds_per_step": self._seconds_per_step(),
            "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "seconds": time.monotonic() - self.started,
        }
        path = os.path.join(self.folder, f"record-{os.getpid()}.json")
        with open(path + ".part", "w", encoding="utf-8") as stream:
            json.dump(record, stream)
        os.replace(path + ".part", path)


def _census_module() -> ModuleType:
    """census.py: beside this shim in a run, in the package where the recorder is imported."""
    try:
        return importlib.import_module(CENSUS_MODULE)
    except ImportError:
        return importlib.import_module("xlamigrate.verify.census")


def _is_tensor(value: Any) -> bool:
    return callable(getattr(value, "numel", None)) and callable(
        getattr(value, "element_size", None)
    )


def _stored_bytes(tensor: Any) -> int:
    """The bytes a tensor takes where it is stored: on XLA, from the element type of its XLA
    shape (what the device holds), else from its dtype."""
    if getattr(tensor.device, "type", None) == "xla":
        torch_xla = sys.modules.get("torch_xla")
        with contextlib.suppress(Exception):
            info = torch_xla._XLAC._get_xla_tensor_debug_info(tensor)  # type: ignore[union-attr]
            found = re.search(r"XLA Shape: (\w+)\[", info)
            if found and found.group(1) in XLA_ELEMENT_BYTES:
                return int(tensor.numel()) * XLA_ELEMENT_BYTES[found.group(1)]
    return int(tensor.numel()) * int(tensor.element_size())


def _dtype_counts(tensors: list[Any]) -> dict[str, int]:
    floating = (t for t in tensors if callable(getattr(t, "is_floating_point", None)))
    return dict(Counter(str(t.dtype) for t in floating if t.is_floating_point()))


def _mean(losses: list[Any]) -> float | None:
    """A step's loss: the mean over its backward passes (gradient accumulation); None if none."""
    values = []
    for loss in losses:
        try:
            values.append(float(loss))
        except Exception:  # a poisoned device: the run's own error says why
            return None
    return sum(values) / len(values) if values else None


def _sync_device() -> None:
    """One graph for every loss still pending on the XLA device, instead of one per loss."""
    torch_xla = sys.modules.get("torch_xla")
    sync = getattr(torch_xla, "sync", None)
    if sync is not None:
        with contextlib.suppress(Exception):  # then each loss is read on its own, or is missing
            sync()


def install(torch: ModuleType, recorder: Recorder) -> None:
    """Seeds the global generators, wraps `torch.autograd.backward` (which `Tensor.backward`
    calls) and hooks every step."""
    _seed(torch)
    original_backward = torch.autograd.backward

    def xla_bf16_autocast() -> bool:
        try:
            return bool(
                torch.is_autocast_enabled("xla")
                and torch.get_autocast_dtype("xla") == torch.bfloat16
            )
        except Exception:  # a torch without per-device autocast queries
            return False

    def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        recorder.on_backward(tensors, xla_bf16_autocast())
        return original_backward(tensors, *args, **kwargs)

    torch.autograd.backward = backward
    modules = importlib.import_module("torch.nn.modules.module")
    _note_modules(modules.Module, recorder)
    modules.register_module_forward_pre_hook(
        lambda module, args: recorder.on_forward_start(
            module, xla_bf16_autocast(), torch.is_grad_enabled()
        )
    )
    modules.register_module_forward_hook(
        lambda module, args, output: recorder.on_forward_end(
            module, output, torch.is_grad_enabled()
        ),
        always_call=True,
    )
    optimizer_module = importlib.import_module("torch.optim.optimizer")
    optimizer_module.register_optimizer_step_pre_hook(lambda opt, a, k: recorder.before_step(opt))
    optimizer_module.register_optimizer_step_post_hook(lambda opt, a, k: recorder.after_step(opt))


def _seed(torch: ModuleType) -> None:
    """The same random draws in every run of a verify, before the script's first one (a script
    that seeds itself still does, after this)."""
    value = os.environ.get(SEED, str(DEFAULT_SEED))
    if not value.isdigit():
        return
    torch.manual_seed(int(value))
    random.seed(int(value))
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        with contextlib.suppress(Exception):
            numpy.random.seed(int(value))


def _note_modules(module_class: Any, recorder: Recorder) -> None:
    """Every module the run makes, for the census: built (`__init__`, which every subclass
    calls) or copied (`__setstate__`, which `copy.deepcopy` and unpickling call)."""
    original_init = module_class.__init__
    original_setstate = module_class.__setstate__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        recorder.on_module(self)

    def __setstate__(self: Any, state: Any) -> None:
        original_setstate(self, state)
        recorder.on_module(self)

    module_class.__init__ = __init__
    module_class.__setstate__ = __setstate__


class _AfterTorchImport(importlib.abc.MetaPathFinder):
    """Installs the recorder once `import torch` has finished, without importing torch itself."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            install(module, self.recorder)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _chain_next_sitecustomize() -> None:
    """Runs the `sitecustomize` this shim shadows, if the environment has one."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


def activate_recorder() -> None:
    """Starts recording if XLAMIGRATE_VERIFY_RECORD names a folder: at once where torch is
    imported (a child of verify's fork server, zygote.py), else when the script imports it."""
    folder = os.environ.get(RECORD_DIR)
    if folder:
        census = os.environ.get(CENSUS, "1") != "0"
        recorder = Recorder(folder, int(os.environ.get(STEP_LIMIT, "0") or 0), census)
        torch = sys.modules.get("torch")
        if torch is not None:
            install(torch, recorder)
        else:
            sys.meta_path.insert(0, _AfterTorchImport(recorder))


def _activate() -> None:
    activate_recorder()
    _chain_next_sitecustomize()


if __name__ == "sitecustomize":
    _activate()
