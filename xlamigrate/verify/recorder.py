"""The shim `xlamigrate verify` loads into each training run, as `sitecustomize`.

It observes a script without editing it: every scalar `backward()` gives a loss, every outermost
`Optimizer.step` closes a step (a wrapper's inner step is the same step), the first step notes the
dtypes of the parameters, optimizer state and master weights, and the process ends after the
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
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from types import ModuleType
from typing import Any

RECORD_DIR = "XLAMIGRATE_VERIFY_RECORD"
STEP_LIMIT = "XLAMIGRATE_VERIFY_STEPS"
WATCHED_FLAGS = ("XLA_USE_BF16", "XLA_DOWNCAST_BF16", "PJRT_DEVICE")


class Recorder:
    """Losses per optimizer step and the dtypes after the first one, for one process."""

    def __init__(self, folder: str, limit: int) -> None:
        self.folder = folder
        self.limit = limit
        self.started = time.monotonic()
        self.pending: list[Any] = []  # detached losses since the last step
        self.steps: list[list[Any]] = []  # the losses of each finished step
        self.depth = 0  # nesting of Optimizer.step calls
        self.dtypes: dict[str, dict[str, int]] = {}
        self.devices: dict[str, int] = {}
        self.flags: dict[str, str | None] = {}
        self.exit_registered = False
        self.finished = False

    def on_backward(self, tensors: Any) -> None:
        self._register_exit()
        tensor = tensors[0] if isinstance(tensors, Sequence) and len(tensors) == 1 else tensors
        if getattr(tensor, "is_floating_point", None) and tensor.numel() == 1:
            # Kept on the device, read when the run ends: reading it now would cut the graph.
            self.pending.append(tensor.detach())

    def before_step(self) -> None:
        self._register_exit()
        self.depth += 1

    def after_step(self, optimizer: Any) -> None:
        self.depth -= 1
        if self.depth > 0:
            return
        self.steps.append(self.pending)
        self.pending = []
        if len(self.steps) == 1:
            self._note_types(optimizer)
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
            if inner is not None and hasattr(inner, "param_groups") and hasattr(inner, "state"):
                masters = [p for group in inner.param_groups for p in group["params"]]
            current = inner if hasattr(inner, "state") else None
        self.dtypes["state"] = _dtype_counts(state)
        self.dtypes["masters"] = _dtype_counts(masters)

    def finish(self, stopped: bool) -> None:
        if self.finished or not self.steps:
            return
        self.finished = True
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
            "seconds": time.monotonic() - self.started,
        }
        path = os.path.join(self.folder, f"record-{os.getpid()}.json")
        with open(path + ".part", "w", encoding="utf-8") as stream:
            json.dump(record, stream)
        os.replace(path + ".part", path)


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
    """Wraps `torch.autograd.backward` (which `Tensor.backward` calls) and hooks every step."""
    original_backward = torch.autograd.backward

    def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        recorder.on_backward(tensors)
        return original_backward(tensors, *args, **kwargs)

    torch.autograd.backward = backward
    optimizer_module = importlib.import_module("torch.optim.optimizer")
    optimizer_module.register_optimizer_step_pre_hook(lambda opt, a, k: recorder.before_step())
    optimizer_module.register_optimizer_step_post_hook(lambda opt, a, k: recorder.after_step(opt))


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


def _activate() -> None:
    folder = os.environ.get(RECORD_DIR)
    if folder:
        recorder = Recorder(folder, int(os.environ.get(STEP_LIMIT, "0") or 0))
        torch = sys.modules.get("torch")
        if torch is not None:
            install(torch, recorder)
        else:
            sys.meta_path.insert(0, _AfterTorchImport(recorder))
    _chain_next_sitecustomize()


if __name__ == "sitecustomize":
    _activate()
