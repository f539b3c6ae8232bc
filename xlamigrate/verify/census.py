"""What a training run holds on the XLA device, each tensor named and typed as the device stores
it, and the element types of the step's compiled graph. The recorder takes it once, after the
warm-up steps, inside the training process.

The legacy flag changed every float32 tensor on the device, not only the optimizer's: a frozen
backbone, an EMA copy (`copy.deepcopy(model)`), a teacher, float64 data under DOWNCAST. A
rewrite that casts what the optimizer holds and forgets the rest trains differently; only a
census of the whole device shows it. Modules are known from their construction (the recorder
hooks `Module.__init__` and `__setstate__`, which `copy.deepcopy` and unpickling call), free
tensors and optimizers from the script's variables: no walk of the garbage collector's
objects, which costs a quarter of a second in a torch-xla process.

Standalone like the recorder (copied beside it into the shim folder): torch is imported by the
script, never here, and is reached through `sys.modules`.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from types import FrameType, ModuleType
from typing import Any

# Kinds of tensor, as the record names them.
PARAMETER, BUFFER, GRAD, STATE, MASTER, TENSOR = (
    "parameter", "buffer", "grad", "state", "master", "tensor",
)  # fmt: skip
# Element types of XLA shapes (what the device stores), from a torch dtype's name when the
# tensor is not on XLA.
TORCH_ELEMENT_TYPES = {"torch.bfloat16": "bf16", "torch.float16": "f16", "torch.float32": "f32",
                       "torch.float64": "f64"}  # fmt: skip
FLOATING = frozenset(TORCH_ELEMENT_TYPES.values())
_XLA_SHAPE = re.compile(r"XLA Shape: (\w+)\[")
# One HLO instruction: `%dot.15 = bf16[4,8]{1,0} dot(...)`.
_HLO_OP = re.compile(r"^\s*(?:ROOT\s+)?%\S+\s*=\s*(\w+)\[[^\]]*\](?:\{[^}]*\})?\s+([\w-]+)\(")
MATMULS = ("dot", "convolution")  # the ops autocast lowers to bf16; the flag made all bf16
SEARCH_DEPTH = 2  # how far into a named object's attributes and containers a module is looked for


def element_type(tensor: Any) -> str:
    """The element type the device stores `tensor` in (under the legacy flag an fp32 tensor's
    `.dtype` says float32 and its XLA shape bf16)."""
    if getattr(tensor.device, "type", None) == "xla":
        torch_xla = sys.modules.get("torch_xla")
        with contextlib.suppress(Exception):
            info = torch_xla._XLAC._get_xla_tensor_debug_info(tensor)  # type: ignore[union-attr]
            found = _XLA_SHAPE.search(info)
            if found:
                return found.group(1)
    return TORCH_ELEMENT_TYPES.get(str(tensor.dtype), str(tensor.dtype).removeprefix("torch."))


def take(
    modules: Iterable[Any], optimizers: Iterable[Any], extra: Iterable[Any] = (), graph: bool = True
) -> dict[str, Any]:
    """The census: every floating tensor on the XLA device that a module of the run, an
    optimizer or a variable of the script holds, and (`graph`) the op counts of the pending
    step graph. `modules`: every module the run built or copied (the recorder hooks their
    construction); `optimizers`: those that stepped (others are found through the script's
    variables); `extra` tensors (the step's pending losses) join the graph, not the census."""
    started = time.perf_counter()
    torch = sys.modules["torch"]
    names, loose = _variable_names(torch)
    entries: dict[int, tuple[str, str, str, Any]] = {}  # id -> (name, group, kind, tensor)

    def add(name: str, group: str, kind: str, tensor: Any) -> None:
        if id(tensor) not in entries and _on_device_floating(tensor):
            entries[id(tensor)] = (name, group, kind, tensor)

    param_names: dict[int, str] = {}
    everything = {id(module): module for module in modules}
    everything.update((id(v), v) for v in loose if _is_instance(v, torch.nn.Module))
    for root, name in _roots(list(everything.values()), names):
        for path, param in root.named_parameters(prefix=name, remove_duplicate=True):
            param_names.setdefault(id(param), path)
            add(path, name, PARAMETER, param)
            if param.grad is not None:
                add(f"{path}.grad", name, GRAD, param.grad)
        for path, buffer in root.named_buffers(prefix=name, remove_duplicate=True):
            add(path, name, BUFFER, buffer)
    unique = {id(optimizer): optimizer for optimizer in optimizers}
    unique.update((id(v), v) for v in loose if _is_instance(v, torch.optim.Optimizer))
    inner = {id(getattr(optimizer, "optimizer", None)) for optimizer in unique.values()}
    counters: Counter[str] = Counter()
    for key, optimizer in unique.items():
        if key not in inner:  # a wrapper's inner optimizer is read through the wrapper
            label = names.get(id(optimizer)) or _indexed(type(optimizer).__name__, counters)
            _add_optimizer(optimizer, label, param_names, add)
    for value in loose:
        if _is_instance(value, torch.Tensor):
            add(names[id(value)], "tensors", TENSOR, value)
    census: dict[str, Any] = {
        "tensors": [
            {
                "name": name,
                "group": group,
                "kind": kind,
                "type": element_type(tensor),
                "elements": int(tensor.numel()),
            }
            for name, group, kind, tensor in entries.values()
        ],
    }
    if graph:
        pending = [entry[3] for entry in entries.values()]
        census["graph"] = graph_types([*pending, *(t for t in extra if _on_xla(t))])
    census["seconds"] = round(time.perf_counter() - started, 4)
    return census


def evaluation(module: Any, output: Any, context: str) -> dict[str, Any]:
    """One forward of `module` outside a training step (`context`: "no_grad", or "eval mode"
    where gradients are on): its name in the script, where the script called it, and the element
    types of the graph that computes its output. Under the flag an evaluation, a test loop or a
    teacher ran bf16 like the training forward; a rewrite that puts only the training forward in
    its recipe (autocast around the step) runs them in f32, which the step graph cannot show."""
    name, site = _caller(module)
    tensors = [tensor for tensor in _tensors_in(output, SEARCH_DEPTH) if _on_xla(tensor)]
    return {"module": name, "context": context, "site": site, "graph": graph_types(tensors)}


def graph_types(tensors: list[Any]) -> dict[str, dict[str, int]]:
    """Op counts per element type of the HLO that would compute `tensors` now (the step's
    pending graph: forward, backward and update, unless the script synced in between):
    `{"ops": {"bf16": 120, ...}, "dot": {...}, "convolution": {...}}`."""
    torch_xla = sys.modules.get("torch_xla")
    if not tensors or torch_xla is None:
        return {}
    try:
        text = torch_xla._XLAC._get_xla_tensors_hlo(tensors)
    except Exception:  # a tensor without IR, a torch-xla without the call: no graph
        return {}
    ops: Counter[str] = Counter()
    matmuls: dict[str, Counter[str]] = {op: Counter() for op in MATMULS}
    for line in text.splitlines():
        found = _HLO_OP.match(line)
        if found is None:
            continue
        kind, op = found.group(1), found.group(2)
        if op in ("parameter", "constant", "tuple", "get-tuple-element"):
            continue
        ops[kind] += 1
        if op in matmuls:
            matmuls[op][kind] += 1
    return {"ops": dict(ops), **{op: dict(counts) for op, counts in matmuls.items()}}


def _add_optimizer(optimizer: Any, label: str, param_names: dict[int, str], add: Any) -> None:
    """Its state, named by the parameter each belongs to, and a wrapper's masters: the inner
    optimizer's parameters (`optimizer.optimizer`, as FP32ParamsCopy holds them), paired by
    position with the outer's, which are the model's."""
    current, seen, outer = optimizer, set(), None
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        groups = getattr(current, "param_groups", None) or []
        params = [p for group in groups for p in group.get("params", [])]
        if outer is not None:
            for index, master in enumerate(params):
                if id(master) in param_names:  # a wrapper that shares the model's parameters
                    continue
                mirrored = param_names.get(id(outer[index])) if index < len(outer) else None
                param_names[id(master)] = mirrored or f"{label}.param{index}"
                add(f"{label}.master[{param_names[id(master)]}]", label, MASTER, master)
        for index, param in enumerate(params):
            owner = param_names.get(id(param), f"{label}.param{index}")
            for key, value in getattr(current, "state", {}).get(param, {}).items():
                if key != "step" and _is_tensor(value):
                    add(f"{label}.state[{owner}].{key}", label, STATE, value)
        outer = params
        inner = getattr(current, "optimizer", None)
        current = inner if hasattr(inner, "state") else None


def _roots(modules: list[Any], names: dict[int, str]) -> Iterator[tuple[Any, str]]:
    """Modules on the device that no other module holds, each with its variable's name, else
    its class and index (in the order gc lists them)."""
    children = {id(child) for module in modules for child in _children(module)}
    counters: Counter[str] = Counter()
    for module in modules:
        if id(module) in children or not _holds_device_tensors(module):
            continue
        yield module, names.get(id(module)) or _indexed(type(module).__name__, counters)


def _variable_names(torch: Any) -> tuple[dict[int, str], list[Any]]:
    """id -> a name in the script: its globals, then the locals of its frames on the stack
    (outermost first: the first name found wins), then attributes and items of those
    (`trainer.model`, `models[teacher]`), up to SEARCH_DEPTH levels down."""
    main = sys.modules.get("__main__")
    scopes: list[dict[str, Any]] = [vars(main)] if main is not None else []
    scopes.extend(frame.f_locals for frame in reversed(list(_script_frames(main))))
    names: dict[int, str] = {}
    found: list[Any] = []
    visited: set[int] = set()
    queue: deque[tuple[str, Any, int]] = deque(
        (name, value, 0)
        for scope in scopes
        for name, value in list(scope.items())
        if not name.startswith("__")
    )
    named = (torch.Tensor, torch.nn.Module, torch.optim.Optimizer)
    while queue:
        name, value, depth = queue.popleft()
        if id(value) in visited or value is None or isinstance(value, (str, bytes, int, float)):
            continue
        visited.add(id(value))
        if _is_instance(value, named):
            names[id(value)] = name
            found.append(value)
        elif depth < SEARCH_DEPTH and _searchable(value):
            queue.extend((f"{name}{key}", item, depth + 1) for key, item in _members(value))
    return names, found


def _searchable(value: Any) -> bool:
    """Containers and the script's own objects; not classes, modules or library objects."""
    if isinstance(value, (dict, list, tuple)):
        return True
    kind = type(value)
    return (
        kind.__module__ not in ("builtins", "typing")
        and not kind.__module__.startswith(("torch", "numpy", "_"))
        and not isinstance(value, (type, ModuleType))
    )


def _members(value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in list(value.items())[:100]:
            if isinstance(key, (str, int)):
                yield f"[{key}]", item
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value[:100]):
            yield f"[{index}]", item
    else:
        attributes = getattr(value, "__dict__", None)
        if isinstance(attributes, dict):
            for key, item in list(attributes.items()):
                if not key.startswith("__"):
                    yield f".{key}", item


def _script_frames(main: Any, top_level: bool = False) -> Iterator[FrameType]:
    """The frames on the stack that run the script's own code (files of its folder, not of
    an environment inside it), innermost first; its top level (whose names are globals) only
    with `top_level`."""
    script = getattr(main, "__file__", None)
    if not script:
        return
    folder = os.path.dirname(os.path.abspath(script)) + os.sep
    top = vars(main)
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        library = "site-packages" in filename or "dist-packages" in filename
        if (
            filename.startswith(folder)
            and not library
            and (top_level or not (frame.f_globals is top and frame.f_code.co_name == "<module>"))
        ):
            yield frame
        frame = frame.f_back


def _caller(module: Any) -> tuple[str, str]:
    """(the script's name for `module` where it calls it, "file.py:line" of the call): the
    innermost frame of the script's folder on the stack, a local (or global) variable holding the
    module, else an attribute of one (`self.model`), else the module's class."""
    frame = next(_script_frames(sys.modules.get("__main__"), top_level=True), None)
    if frame is None:
        return type(module).__name__, ""
    site = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
    scope = list(frame.f_locals.items())
    for name, value in scope:
        if value is module:
            return name, site
    for name, value in scope:
        if _searchable(value) and not isinstance(value, (dict, list, tuple)):
            for member, item in _members(value):
                if item is module:
                    return f"{name}{member}", site
    return type(module).__name__, site


def _tensors_in(value: Any, depth: int) -> Iterator[Any]:
    """The tensors of a forward's output: itself, or in its tuples, lists and dicts (a
    transformers ModelOutput is a dict)."""
    if _is_tensor(value):
        yield value
    elif depth > 0 and isinstance(value, (dict, list, tuple)):
        items = value.values() if isinstance(value, dict) else value
        for item in list(items)[:100]:
            yield from _tensors_in(item, depth - 1)


def _indexed(name: str, counters: Counter[str]) -> str:
    counters[name] += 1
    return f"{name}#{counters[name]}"


def _children(module: Any) -> list[Any]:
    try:
        return list(module.children())
    except Exception:
        return []


def _holds_device_tensors(module: Any) -> bool:
    try:
        tensors = [*module.parameters(), *module.buffers()]
    except Exception:
        return False
    return any(_on_xla(tensor) for tensor in tensors)


def _is_instance(value: Any, cls: type | tuple[type, ...]) -> bool:
    try:
        return isinstance(value, cls)
    except Exception:  # a proxy whose __class__ raises
        return False


def _is_tensor(value: Any) -> bool:
    return callable(getattr(value, "numel", None)) and hasattr(value, "device")


def _on_xla(tensor: Any) -> bool:
    return getattr(getattr(tensor, "device", None), "type", None) == "xla"


def _on_device_floating(tensor: Any) -> bool:
    try:
        return _on_xla(tensor) and bool(tensor.is_floating_point())
    except Exception:
        return False
