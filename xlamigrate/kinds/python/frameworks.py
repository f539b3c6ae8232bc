"""The precision options of a Python file that make a framework set a legacy flag itself
(XM104; the table: rules/frameworks.toml): `L.Trainer(accelerator="tpu", precision="bf16-true")`,
`Accelerator(mixed_precision="bf16")` in a torch-xla script, `TrainingArguments(bf16=True)`
for an optimum-neuron trainer. The flag is nowhere in such a file, yet the legacy path runs.

Calls are found on `ast` by the qualified names the file's scopes give them, as the torch-xla
API uses are (xlaapis.py), so every import spelling resolves alike. A finding is made only with
certainty: the option's value is a literal the table lists, the run is known to be on XLA, and
the project's pins (FileContext.frameworks) allow a release that sets the flag on a platform the
project may run on. It is never fixed: the option is the framework's configuration."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from xlamigrate.catalogue import Catalogue
from xlamigrate.frameworktable import (
    FRAMEWORK_OPTION_SETS_LEGACY_FLAG,
    FrameworkTable,
    Knob,
    Releases,
    framework_table,
)
from xlamigrate.kinds.python.astscopes import Scope, Scopes, last_name
from xlamigrate.kinds.python.source import PythonFile
from xlamigrate.request import FileContext
from xlamigrate.results import Finding

_PLATFORM_WORDS = {"tpu": "TPU", "neuron": "Neuron"}


@dataclass(frozen=True)
class OptionUse:
    """A call's option that makes its framework set a flag, with the knobs (releases) that do."""

    call: ast.Call
    node: ast.AST  # the option's value (the call itself where the call is the knob)
    knobs: tuple[Knob, ...]


@dataclass(frozen=True)
class _Known:
    """What the file and its pins tell of where it runs."""

    xla: bool  # on an XLA device (torch_xla imported or pinned)
    platforms: frozenset[str]  # the XLA platforms it is known to run on (empty: not known)
    imports: frozenset[str]  # the modules the file imports


def framework_findings(
    file: PythonFile, catalogue: Catalogue, context: FileContext
) -> list[Finding]:
    """The file's framework options that set a legacy flag, as XM104 findings (the caller
    asks only where the rule is enabled and the file names one of the options' calls)."""
    table = framework_table()
    uses = option_uses(file.scopes, table, context.frameworks)
    rule = catalogue.rule(FRAMEWORK_OPTION_SETS_LEGACY_FLAG)
    pins = dict(context.frameworks)
    return [
        rule.finding(
            file.path,
            file.lines.span(use.node),
            _subject(use, table, pins, file.lines.text),
            "manual",
            variable=use.knobs[0].sets,
        )
        for use in uses
    ]


def option_uses(
    scopes: Scopes, table: FrameworkTable, pinned: tuple[tuple[str, Releases], ...] = ()
) -> list[OptionUse]:
    """Each call whose option makes its framework set a flag, in walk order, with the knobs
    (releases) that do where the file runs."""
    known = _known(scopes, table, dict(pinned))
    pins = dict(pinned)
    constants = _constants(scopes)
    names_called = table.last_names | aliases(scopes)
    found: list[OptionUse] = []
    for node, scope, _ in scopes.of(ast.Call):
        if not isinstance(node, ast.Call) or last_name(node.func) not in names_called:
            continue
        names = (
            scope.qualified(node.func)
            if isinstance(node.func, (ast.Name, ast.Attribute))
            else set()
        )
        by_value: dict[int, tuple[ast.AST, list[Knob]]] = {}
        for knob in table.knobs:
            if not names & knob.calls:
                continue
            value = _option(node, knob, _Literals(scope, constants))
            if value is None or not _acts(knob, node, scope, known, table, pins, constants):
                continue
            by_value.setdefault(id(value), (value, []))[1].append(knob)
        found += [OptionUse(node, value, tuple(knobs)) for value, knobs in by_value.values()]
    return found


@dataclass(frozen=True)
class _Literals:
    """An argument's literal value: written there, or a module constant assigned once."""

    scope: Scope
    constants: dict[str, ast.Constant]

    def of(self, argument: ast.expr) -> ast.Constant | None:
        if isinstance(argument, ast.Constant):
            return argument
        if isinstance(argument, ast.Name):
            binder = self.scope.binder(argument.id)
            if binder is not None and binder.kind == "module":
                return self.constants.get(argument.id)
        return None


def _option(call: ast.Call, knob: Knob, literals: _Literals) -> ast.AST | None:
    """The argument that is the knob's option with one of its values (the call itself where
    the call is the knob); None where the call does not pass one for certain."""
    if not knob.option:
        return call
    argument = _argument(call, knob.option, knob.position)
    literal = literals.of(argument) if argument is not None else None
    if argument is None or literal is None:
        return None
    value = literal.value
    if any(type(value) is type(wanted) and value == wanted for wanted in knob.values):
        return argument
    return None


def _constants(scopes: Scopes) -> dict[str, ast.Constant]:
    """The module's names assigned once, to a literal (`PRECISION = "bf16-true"`)."""
    found: dict[str, ast.Constant] = {}
    targets = scopes.module.targets
    for node, scope, _ in scopes.of(ast.Assign):
        if scope is not scopes.module or not isinstance(node, ast.Assign):
            continue
        if len(node.targets) != 1 or not isinstance(node.value, ast.Constant):
            continue
        target = node.targets[0]
        if isinstance(target, ast.Name) and len(targets.get(target.id, [])) == 1:
            found[target.id] = node.value
    return found


def _argument(call: ast.Call, name: str, position: int | None) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    if position is not None and position < len(call.args):
        argument = call.args[position]
        if not any(isinstance(a, ast.Starred) for a in call.args[: position + 1]):
            return argument
    return None


def _acts(
    knob: Knob,
    call: ast.Call,
    scope: Scope,
    known: _Known,
    table: FrameworkTable,
    pins: dict[str, Releases],
    constants: dict[str, ast.Constant],
) -> bool:
    """Whether the knob sets the flag here, for certain: on XLA, not switched off by another
    option, with what it needs imported, on a platform and in a release the project may run."""
    if knob.requires and not any(_imports(known.imports, module) for module in knob.requires):
        return False
    if knob.xla == "file" and not known.xla:
        return False
    literals = _Literals(scope, constants)
    if knob.xla == "keywords" and not _on_xla(knob, call, literals):
        return False
    for keyword, values in knob.unless:
        argument = _argument(call, keyword, None)
        if argument is None:
            continue
        literal = literals.of(argument)
        if literal is None or literal.value in values:
            return False  # switched off, or not known not to be
    if known.platforms and not known.platforms & knob.platforms:
        return False
    framework = table.frameworks[knob.framework]
    allowed = [pins[p] for p in framework.packages if p in pins]
    return not allowed or any(r.overlaps(knob.first, knob.stops) for r in allowed)


def _on_xla(knob: Knob, call: ast.Call, literals: _Literals) -> bool:
    """Whether the call's own keywords put the run on XLA (`accelerator="tpu"`)."""
    for keyword, values in knob.device:
        argument = _argument(call, keyword, None)
        if argument is None:
            continue
        literal = literals.of(argument)
        if not values:
            if not (literal is not None and literal.value is None):
                return True
            continue
        if literal is not None and literal.value in values:
            return True
        built = argument.func if isinstance(argument, ast.Call) else argument
        if isinstance(built, (ast.Name, ast.Attribute)) and (
            literals.scope.qualified(built) & set(values)
        ):
            return True
    return False


def _known(scopes: Scopes, table: FrameworkTable, pins: dict[str, Releases]) -> _Known:
    imports = frozenset(_imported(scopes))
    platforms = {
        name
        for name, platform in table.platforms.items()
        if any(p in pins for p in platform.pins)
        or any(_imports(imports, module) for module in platform.imports)
    }
    xla = bool(platforms)
    return _Known(xla, frozenset(platforms - {"xla"}), imports)


def aliases(scopes: Scopes) -> frozenset[str]:
    """The names imports bind under another name (`import X as Args`): a call of one may be
    a table's call."""
    return frozenset(
        alias.asname
        for node, _, _ in scopes.of(ast.Import, ast.ImportFrom)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
        if alias.asname
    )


def _imported(scopes: Scopes) -> Iterator[str]:
    for node, _, _ in scopes.of(ast.Import, ast.ImportFrom):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _imports(imports: frozenset[str], module: str) -> bool:
    """Whether the file imports `module` or a module inside it."""
    return any(name == module or name.startswith(f"{module}.") for name in imports)


# -- what a finding says ----------------------------------------------------------------------


def _subject(
    use: OptionUse,
    table: FrameworkTable,
    pins: dict[str, Releases],
    code: Callable[[ast.AST], str],
) -> str:
    """`precision="bf16-true": Lightning sets XLA_USE_BF16=1 itself, in releases 2.1.0+ (...);
    ... Instead: ...`."""
    first = use.knobs[0]
    framework = table.frameworks[first.framework]
    flags = " and ".join(dict.fromkeys(f"{knob.sets}=1" for knob in use.knobs))
    said = f"{_spelled(use, code)}: {framework.name} sets {flags} itself, in releases "
    everywhere = frozenset().union(
        *(k.platforms for k in table.knobs if k.framework == first.framework)
    )
    said += ", and ".join(_releases(knob, everywhere) for knob in use.knobs)
    if any(knob.last is None for knob in use.knobs):
        said += f" ({framework.newest_read}, the newest read, still does)"
    pinned = [pins[p] for p in framework.packages if p in pins and pins[p].bounded]
    if not pinned:
        said += "; no pin says which release runs"
    elif not any(pinned[0].within(k.first, k.stops) for k in use.knobs):
        said += f"; the project pins {pinned[0].spelled}, which allows them"
    elif pinned[0].low is not None and pinned[0].low == pinned[0].high:
        said += f"; the project pins {pinned[0].spelled}, one of them"
    else:
        said += f"; the project pins {pinned[0].spelled}, within them"
    alsos = "; ".join(dict.fromkeys(knob.also for knob in use.knobs if knob.also))
    if alsos:
        said += f" ({alsos})"
    insteads = list(dict.fromkeys(knob.instead for knob in use.knobs))
    insteads = [a for a in insteads if not any(a != b and a in b for b in insteads)]
    instead = "; ".join(insteads)
    return f"{said}. The flag is not in the code, yet the legacy path runs. Instead: {instead}"


def _spelled(use: OptionUse, code: Callable[[ast.AST], str]) -> str:
    if use.node is use.call:
        return f"{code(use.call.func)}()"
    for keyword in use.call.keywords:
        if keyword.value is use.node:
            return f"{keyword.arg}={code(use.node)}"
    return f"{code(use.call.func)}({code(use.node)})"


def _releases(knob: Knob, everywhere: frozenset[str]) -> str:
    """The knob's releases, and its platforms where its framework's other knobs have others."""
    if knob.platforms >= everywhere:
        return knob.written
    on = " and ".join(_PLATFORM_WORDS[p] for p in sorted(knob.platforms))
    return f"{knob.written} on {on} only"
