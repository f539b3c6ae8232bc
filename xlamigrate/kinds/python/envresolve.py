"""Resolution of a walk: follows aliases, env-dict sinks, module constants and same-file helpers
to the flag each raw access names; what names a flag but resolves to nothing is a mention."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from xlamigrate.flagvalue import FlagValue
from xlamigrate.kinds.python.envaccess import EnvAccess, EnvAccessAnalysis, FlagMention, Form
from xlamigrate.kinds.python.envwalk import (
    Environ,
    EnvWalker,
    FunctionInfo,
    HelperCall,
    KwargsForward,
    Named,
    RawAccess,
    Receiver,
)
from xlamigrate.kinds.python.literals import static_value, string_value
from xlamigrate.model import Access, Target


def resolve_walk(walk: EnvWalker) -> EnvAccessAnalysis:
    return _Resolver(walk).resolve()


@dataclass(frozen=True)
class _Param:
    name: str


@dataclass(frozen=True)
class _Helper:
    """A same-file function that accesses the variable named by one of its parameters."""

    function: FunctionInfo
    kind: Access
    target: Target
    key_param: str
    value: cst.BaseExpression | None


class _Resolver:
    def __init__(self, walk: EnvWalker) -> None:
        self.walk = walk
        self.accesses: list[EnvAccess] = []
        self.consumed: set[cst.CSTNode] = set()
        self.helpers: dict[tuple[str, bool], _Helper] = {}
        self.constant_values = {name: c.value for name, c in walk.constants.items()}

    def resolve(self) -> EnvAccessAnalysis:
        for raw in self.walk.raws:
            self._resolve_raw(raw)
        self._resolve_helper_calls()
        return EnvAccessAnalysis(
            tuple(self.accesses),
            tuple(self._mentions()),
            tuple(self.walk.commands),
            tuple(dict.fromkeys(self.walk.children)),
        )

    # -- receivers and keys --------------------------------------------------------------------

    def _target(self, receiver: Receiver, seen: frozenset[Named] = frozenset()) -> Target | None:
        if isinstance(receiver, Environ):
            return receiver.target
        if receiver in seen:
            return None
        scope = receiver.scope
        visited: set[int] = set()
        while scope is not None and id(scope) not in visited:
            visited.add(id(scope))
            key = (scope, receiver.name)
            if key in self.walk.aliases:
                return self.walk.aliases[key]
            if key in self.walk.sinks:
                sink = self.walk.sinks[key]
                target = self._target(sink, seen | {receiver})
                # A dict merged into os.environ writes the process env; into a copy, a child's.
                return target
            scope = scope.parent
        return None

    def _key(
        self, key: cst.BaseExpression | str, function: FunctionInfo | None
    ) -> tuple[str, cst.CSTNode | None] | _Param | None:
        """The variable a key names (and the literal that names it), or the parameter it is."""
        if isinstance(key, str):
            return key, None
        text = string_value(key)
        if text is not None:
            return text, key
        if isinstance(key, cst.Name):
            if function is not None and key.value in function.keyword_names():
                return _Param(key.value)
            constant = self.walk.constants.get(key.value)
            if constant is not None:
                return constant.value, constant.literal
        return None

    def _value(self, expr: cst.BaseExpression | None) -> FlagValue:
        return static_value(expr, self.constant_values) if expr is not None else FlagValue.unknown()

    def _emit(
        self,
        variable: str,
        literal: cst.CSTNode | None,
        kind: Access,
        target: Target,
        form: Form,
        value: cst.BaseExpression | None,
        node: cst.CSTNode,
        via: str | None = None,
    ) -> None:
        if literal is not None:
            self.consumed.add(literal)
        if isinstance(node, cst.Arg):
            self.consumed.add(node)
        flag_value = self._value(value) if kind == "write" else None
        self.accesses.append(
            EnvAccess(variable, kind, target, form, flag_value, node, via, value_node=value)
        )

    def _resolve_raw(self, raw: RawAccess) -> None:
        target = self._target(raw.receiver)
        if target is None:
            return
        key = self._key(raw.key, raw.function)
        if isinstance(key, _Param):
            if raw.function is not None:
                helper = _Helper(raw.function, raw.kind, raw.target or target, key.name, raw.value)
                self.helpers.setdefault((raw.function.name, raw.function.is_method), helper)
            return
        if key is not None and key[0] in self.walk.tracked:
            variable, literal = key
            self._emit(
                variable, literal, raw.kind, raw.target or target, raw.form, raw.value, raw.node
            )

    # -- same-file helpers ---------------------------------------------------------------------

    def _resolve_helper_calls(self) -> None:
        forwards = {(f.function.name, f.function.is_method): f for f in self.walk.forwards}
        pending = list(self.walk.calls)
        progress = True
        while pending and progress:
            progress = False
            for call in list(pending):
                helper_key = (call.name, call.via_self)
                if helper_key in forwards:
                    self._forwarded_keywords(call, forwards[helper_key])
                    pending.remove(call)
                    progress = True
                elif helper_key in self.helpers:
                    self._helper_call(call, self.helpers[helper_key])
                    pending.remove(call)
                    progress = True

    def _helper_call(self, call: HelperCall, helper: _Helper) -> None:
        bound = _bind(call.node, helper.function)
        key_expr = bound.get(helper.key_param)
        if key_expr is None:
            return
        key = self._key(key_expr, call.function)
        if isinstance(key, _Param):
            if call.function is not None:
                outer = _Helper(call.function, helper.kind, helper.target, key.name, None)
                self.helpers.setdefault((call.function.name, call.function.is_method), outer)
            return
        if key is None or key[0] not in self.walk.tracked:
            return
        value = helper.value
        if isinstance(value, cst.Name) and value.value in helper.function.keyword_names():
            value = bound.get(value.value)
        variable, literal = key
        self._emit(
            variable, literal, helper.kind, helper.target, "helper", value, call.node,
            via=helper.function.name,
        )  # fmt: skip

    def _forwarded_keywords(self, call: HelperCall, forward: KwargsForward) -> None:
        target = self._target(forward.receiver)
        if target is None:
            return
        named = forward.function.keyword_names()
        for arg in call.node.args:
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword is not None and keyword in self.walk.tracked and keyword not in named:
                self._emit(keyword, None, "write", target, "helper", arg.value, arg,
                           via=forward.function.name)  # fmt: skip

    # -- what is left: mentions ----------------------------------------------------------------

    def _mentions(self) -> Iterator[FlagMention]:
        walk = self.walk
        for node, variable in walk.flag_literals:
            if node not in self.consumed:
                yield FlagMention(variable, "string", None, node)
        for arg in walk.flag_keywords:
            if arg not in self.consumed and arg.keyword is not None:
                value = static_value(arg.value, self.constant_values)
                yield FlagMention(arg.keyword.value, "keyword", value, arg)
        for node, variable, text in walk.shell_strings:
            value = FlagValue((text.strip("'\""),)) if "\0" not in text else FlagValue.unknown()
            yield FlagMention(variable, "shell-assignment", value, node)


def _bind(call: cst.Call, function: FunctionInfo) -> dict[str, cst.BaseExpression]:
    """Maps a call's arguments to the helper's parameter names (no *args/**kwargs expansion)."""
    bound: dict[str, cst.BaseExpression] = {}
    positional = function.positional()
    index = 0
    for arg in call.args:
        if arg.star:
            continue
        if arg.keyword is not None:
            bound[arg.keyword.value] = arg.value
        elif index < len(positional):
            bound[positional[index]] = arg.value
            index += 1
    return bound
