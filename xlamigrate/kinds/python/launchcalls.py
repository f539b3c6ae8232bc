"""Legacy flags written into the environment dict of a launch API (rules/launch_apis.toml): a
SageMaker estimator's `environment=`, Metaflow's `@environment(vars=...)`, Ray's
`runtime_env={"env_vars": {...}}`. Such a flag is a name in a dict to the env analysis
(XM301, "cannot tell how this reaches the environment"); here its finding says which framework
passes it to which process and names the script that process runs, so the user knows where
the recipe goes. The write stays, manual: following these launches into the project model is
future work.

The dict is followed from the call's keyword through literal dicts, calls' keywords
(`RuntimeEnv(env_vars=...)`) and names bound in the file (`env = {}`, `env["X"] = "1"`,
`env.update(...)`), by the scopes' bindings, flow-insensitively."""

from __future__ import annotations

import ast
import posixpath
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from xlamigrate.flagvalue import FlagValue
from xlamigrate.kinds.python.astscopes import Scope, Scopes, last_name
from xlamigrate.kinds.python.envaccess import EnvAccess, FlagMention
from xlamigrate.kinds.python.frameworks import aliases
from xlamigrate.launchtable import LaunchApi, LaunchTable, launch_table
from xlamigrate.results import Finding

Pairs = list[tuple[EnvAccess | FlagMention, Finding]]
_Binding = tuple[int, str]  # (id of the scope that binds the name, the name)
_STORES = frozenset({"update", "setdefault", "__setitem__"})


@dataclass(frozen=True)
class Reach:
    """Where a flag written into a launch's environment goes."""

    api: LaunchApi
    value: str | None  # the value written, where a string literal
    script: str | None  # the entry point, as written (joined to its folder)
    function: str | None  # the function a decorator decorates


def launched(pairs: Pairs, scopes: Scopes) -> Pairs:
    """The pairs, each XM301 finding of a flag written into a launch API's environment worded
    to say where it goes (the rest as they were)."""
    mentions = [item for item, _ in pairs if isinstance(item, FlagMention)]
    if not mentions:
        return pairs
    table = launch_table()
    reaches = _reaches(scopes, table)
    if not reaches:
        return pairs
    worded: Pairs = []
    for item, finding in pairs:
        reach = reaches.get(id(item.node)) if isinstance(item, FlagMention) else None
        if reach is not None:
            value = FlagValue((reach.value,)) if reach.value is not None else None
            finding = replace(
                finding,
                message=_message(item.variable, value, reach, table),
                value=reach.value,
                enabled=value.enabled if value is not None else None,
            )
        worded.append((item, finding))
    return worded


def _message(variable: str, value: FlagValue | None, reach: Reach, table: LaunchTable) -> str:
    kind = (
        "entry"
        if reach.script
        else ("decorates" if reach.api.decorates else "runs")
        if reach.function
        else "other"
    )
    names = {"script": reach.script, "function": reach.function}
    template = table.off if value is not None and value.enabled is False else table.on
    return template.format(
        variable=variable,
        value=f" set to {value.describe()}" if value is not None else "",
        framework=reach.api.framework,
        process=reach.api.process,
        target=dict(table.target)[kind].format(**names),
        where=dict(table.where)[kind].format(**names),
    )


@dataclass(frozen=True)
class LaunchWrite:
    """A node naming a variable written into a launch's environment (a dict's key, a
    subscript's key, a keyword), the launch call (or decorator) and where it goes."""

    node: ast.AST
    call: ast.Call
    reach: Reach
    runner: ast.Call | None  # the call handed the function the process runs (`TorchTrainer`)


def launch_writes(scopes: Scopes, table: LaunchTable) -> list[LaunchWrite]:
    """Every node that writes into a launch API's environment, in walk order (one per node)."""
    called = table.last_names | aliases(scopes)
    calls = [
        (node, scope)
        for node, scope, _ in scopes.of(ast.Call)
        if isinstance(node, ast.Call) and last_name(node.func) in called
    ]
    if not calls:
        return []
    stores = _Stores(scopes)
    decorated = _decorated(scopes)
    found: dict[int, LaunchWrite] = {}
    for call, scope in calls:
        if not isinstance(call.func, (ast.Name, ast.Attribute)):
            continue
        names = scope.qualified(call.func)
        for api in table.apis:
            if not names & api.calls:
                continue
            script = _script(call, api, scope, stores)
            runners = [] if api.decorates else _runners(calls, api)
            function = (
                decorated.get(id(call))
                if api.decorates
                else "`, `".join(dict.fromkeys(name for _, name in runners)) or None
            )
            reach_runner = runners[0][0] if len(runners) == 1 else None
            for env in stores.at(call, api.env, scope):
                for node, value in stores.writes(env, scope):
                    if id(node) not in found:
                        reach = Reach(api, value, script, function)
                        found[id(node)] = LaunchWrite(node, call, reach, reach_runner)
    return list(found.values())


def _reaches(scopes: Scopes, table: LaunchTable) -> dict[int, Reach]:
    """The ids of the nodes that write into a launch's environment, each with where it goes."""
    return {id(write.node): write.reach for write in launch_writes(scopes, table)}


def _runners(calls: list[tuple[ast.Call, Scope]], api: LaunchApi) -> list[tuple[ast.Call, str]]:
    """The calls that run a function the file hands them in the launch's processes
    (`TorchTrainer(train_loop_per_worker, ...)`), each with that function's name."""
    if not api.runs:
        return []
    found: list[tuple[ast.Call, str]] = []
    for call, scope in calls:
        func = call.func
        if not isinstance(func, (ast.Name, ast.Attribute)) or not scope.qualified(func) & api.runs:
            continue
        argument = next((k.value for k in call.keywords if k.arg == api.runs_argument), None)
        position = api.runs_position
        if argument is None and position is not None and position < len(call.args):
            argument = call.args[position]
        if isinstance(argument, (ast.Name, ast.Attribute)):
            found.append((call, argument.id if isinstance(argument, ast.Name) else argument.attr))
    return found


def _script(call: ast.Call, api: LaunchApi, scope: Scope, stores: _Stores) -> str | None:
    entry = _first_string(stores, call, api.entry, scope)
    if entry is None:
        return None
    folder = _first_string(stores, call, api.folder, scope)
    if folder and "://" in folder:
        return f"{entry} (from {folder})"
    return posixpath.normpath(posixpath.join(folder, entry)) if folder else entry


def _first_string(
    stores: _Stores, call: ast.Call, paths: Sequence[tuple[str, ...]], scope: Scope
) -> str | None:
    for path in paths:
        for found in stores.at(call, path, scope):
            if isinstance(found, ast.Constant) and isinstance(found.value, str):
                return found.value
    return None


def _decorated(scopes: Scopes) -> dict[int, str]:
    """The id of each decorator call, with the name of what it decorates."""
    found: dict[int, str] = {}
    for node, _, _ in scopes.of(ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for decorator in node.decorator_list:
                found[id(decorator)] = node.name
    return found


class _Stores:
    """What the file binds to each name and writes into it (`env = {...}`, `env["X"] = "1"`,
    `env.update(...)`), by the scope that binds the name."""

    def __init__(self, scopes: Scopes) -> None:
        self.bound: dict[_Binding, list[ast.expr]] = {}
        self.items: dict[_Binding, list[tuple[ast.AST, ast.expr | None]]] = {}
        for node, scope, _ in scopes.of(ast.Assign, ast.AnnAssign, ast.Call):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    self._store(target, node.value, scope)
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                self._store(node.target, node.value, scope)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _STORES
                and isinstance(node.func.value, ast.Name)
            ):
                key = _binding(scope, node.func.value.id)
                if key is not None:
                    self.items.setdefault(key, []).append((node, None))

    def _store(self, target: ast.expr, value: ast.expr, scope: Scope) -> None:
        if isinstance(target, ast.Name):
            key = _binding(scope, target.id)
            if key is not None:
                self.bound.setdefault(key, []).append(value)
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            key = _binding(scope, target.value.id)
            if key is not None:
                self.items.setdefault(key, []).append((target.slice, value))

    def at(self, expr: ast.expr, path: Sequence[str], scope: Scope) -> Iterator[ast.expr]:
        """The expressions `path` leads to from `expr`: a call's keyword, a dict's key, through
        the names bound to either."""
        if not path:
            yield expr
            return
        head, rest = path[0], path[1:]
        if isinstance(expr, ast.Call):
            for keyword in expr.keywords:
                if keyword.arg == head:
                    yield from self.at(keyword.value, rest, scope)
        elif isinstance(expr, ast.Dict):
            for key, value in zip(expr.keys, expr.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == head:
                    yield from self.at(value, rest, scope)
        elif isinstance(expr, ast.Name):
            binding = _binding(scope, expr.id)
            for value in self.bound.get(binding, []) if binding is not None else []:
                yield from self.at(value, path, scope)

    def writes(self, env: ast.expr, scope: Scope) -> Iterator[tuple[ast.AST, str | None]]:
        """Each node that may name a variable written into the dict `env`, with the value
        written where it is a string literal."""
        if isinstance(env, ast.Dict):
            for key, value in zip(env.keys, env.values, strict=True):
                if key is not None:
                    yield key, _string(value)
                else:  # {**other}
                    yield from self.writes(value, scope)
        elif isinstance(env, ast.Call):
            for keyword in env.keywords:
                yield keyword, _string(keyword.value)
            for argument in env.args:
                yield from self.writes(argument, scope)
            for node in ast.walk(env):
                yield node, None
        elif isinstance(env, ast.Name):
            binding = _binding(scope, env.id)
            if binding is None:
                return
            for value in self.bound.get(binding, []):
                if not isinstance(value, ast.Name) or value.id != env.id:
                    yield from self.writes(value, scope)
            for node, written in self.items.get(binding, []):
                if isinstance(node, ast.Call):  # env.update({...}), env.update(X="1")
                    yield from self.writes(node, scope)
                else:  # env["X"] = written
                    for inner in ast.walk(node):
                        yield inner, _string(written)


def _binding(scope: Scope, name: str) -> _Binding | None:
    binder = scope.binder(name)
    return (id(binder), name) if binder is not None else None


def _string(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None
