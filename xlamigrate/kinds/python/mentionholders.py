"""A legacy flag named as a key of a dict the file keeps under a name (`ENV = {...}`, a class
attribute, `SimpleNamespace(ENV={...})`) is an XM301 to the env analysis, which cannot follow
the dict into the environment. Here its finding says what xlamigrate saw: the name that holds
the dict and, where the file hands a mapping of that name to the environment
(`os.environ.update(config.ENV)`), that call, which it cannot read through; else that nothing
in the file uses it (another module may: `import config; os.environ.update(config.ENV)`)."""

from __future__ import annotations

import ast
from dataclasses import replace

from xlamigrate.kinds.python.astscopes import Scopes, last_name
from xlamigrate.kinds.python.envaccess import EnvAccess, FlagMention
from xlamigrate.results import Finding

Pairs = list[tuple[EnvAccess | FlagMention, Finding]]
_ENVIRON_STORES = frozenset({"os.environ.update", "os.environ.setdefault"})


def held(pairs: Pairs, scopes: Scopes, source: str) -> Pairs:
    """The pairs, each XM301 of a flag that is a key of a dict held under a name worded to say
    which name, and what the file does with it."""
    holders = _holders(scopes.tree)
    if not holders or not any(isinstance(item, FlagMention) for item, _ in pairs):
        return pairs
    handed = _handed_to_environ(scopes)
    worded: Pairs = []
    for item, finding in pairs:
        holder = holders.get(id(item.node)) if isinstance(item, FlagMention) else None
        if holder is not None and isinstance(item, FlagMention) and item.context == "string":
            finding = replace(finding, message=_message(item.variable, holder, handed, source))
        worded.append((item, finding))
    return worded


def _message(variable: str, holder: str, handed: list[ast.Call], source: str) -> str:
    name = holder.rsplit(".", 1)[-1]
    spelled = [(call, ast.get_source_segment(source, call.args[0]) or "") for call in handed]
    uses = [pair for pair in spelled if pair[1] == holder] or [
        pair for pair in spelled if last_name(pair[0].args[0]) == name
    ]
    if not uses:
        return (
            f"{variable} named as a key of the dict `{holder}`; no environment access in this"
            f" file uses it, and where another module hands it to the environment"
            f" (`os.environ.update(config.{name})`, say) xlamigrate cannot read it there:"
            f' write the flag there with `os.environ["{variable}"] = ...`, which `rewrite`'
            " migrates, or migrate it by hand"
        )
    call, mapping = uses[0]
    code = ast.get_source_segment(source, call) or f"os.environ.update({mapping})"
    return (
        f"{variable} named as a key of the dict `{holder}`; `{code}` at line {call.lineno}"
        f" puts it into the environment, but xlamigrate does not read a mapping through"
        f' `{mapping}`: write the flag with `os.environ["{variable}"] = ...` there, which'
        " `rewrite` migrates, or migrate it by hand"
    )


def _holders(module: ast.Module) -> dict[int, str]:
    """By id of a dict key: what the dict is kept under, as the file spells it (`ENV`, a
    class's `config.ENV`, `settings.ENV` for `settings = SimpleNamespace(ENV={...})`)."""
    holders: dict[int, str] = {}
    for node in ast.walk(module):
        owner = f"{node.name}." if isinstance(node, ast.ClassDef) else ""
        statements = node.body if isinstance(node, (ast.Module, ast.ClassDef)) else []
        for statement in statements:
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                target, value = statement.targets[0], statement.value
            elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
                target, value = statement.target, statement.value
            else:
                continue
            name = ast.unparse(target)
            if isinstance(value, ast.Dict):
                holders.update(_keys_of(value, owner + name))
            elif isinstance(value, ast.Call):
                for keyword in value.keywords:
                    if keyword.arg is not None and isinstance(keyword.value, ast.Dict):
                        holders.update(_keys_of(keyword.value, f"{owner}{name}.{keyword.arg}"))
    return holders


def _keys_of(mapping: ast.Dict, name: str) -> dict[int, str]:
    return {id(key): name for key in mapping.keys if key is not None}


def _handed_to_environ(scopes: Scopes) -> list[ast.Call]:
    """`os.environ.update(X)` calls of the module (any import spelling), in source order."""
    calls = [
        node
        for node, scope, _ in scopes.of(ast.Call)
        if isinstance(node, ast.Call) and node.args and _ENVIRON_STORES & scope.qualified(node.func)
    ]
    return sorted(calls, key=lambda call: (call.lineno, call.col_offset))
