"""Resolution of a walk: follows aliases, env-dict sinks, module constants and same-file helpers
to the flag each raw access names; what names a flag but resolves to nothing is a mention. The
walk is astwalk.py's."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from xlamigrate.flagvalue import FlagValue
from xlamigrate.kinds.python.astwalk import (
    AstEnvWalker,
    arguments,
    is_keyword_argument,
    keyword_of,
    name_of,
    static_value,
    string_value,
)
from xlamigrate.kinds.python.envaccess import EnvAccess, EnvAccessAnalysis, FlagMention, Form
from xlamigrate.kinds.python.envraw import (
    Environ,
    Function,
    HelperCall,
    KwargsForward,
    Named,
    RawAccess,
    Receiver,
)
from xlamigrate.results import Access, Target


def resolve_walk(walk: AstEnvWalker) -> EnvAccessAnalysis:
    """The accesses and mentions of a finished walk."""
    return _Resolver(walk).resolve()


@dataclass(frozen=True)
class _Param:
    name: str


@dataclass(frozen=True)
class _Helper:
    """A same-file function that accesses the variable named by one of its parameters."""

    function: Function
    kind: Access
    target: Target
    key_param: str
    value: Any


class _Resolver:
    def __init__(self, walk: AstEnvWalker) -> None:
        self.walk = walk
        self.accesses: list[EnvAccess] = []
        self.consumed: set[Any] = set()
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
                alias: Target = self.walk.aliases[key]
                return alias
            if key in self.walk.sinks:
                sink = self.walk.sinks[key]
                target = self._target(sink, seen | {receiver})
                # A dict merged into os.environ writes the process env; into a copy, a child's.
                return target
            scope = scope.parent
        return None

    def _key(self, key: Any, function: Function | None) -> tuple[str, Any] | _Param | None:
        """The variable a key names (and the literal that names it), or the parameter it is."""
        if isinstance(key, str):
            return key, None
        text = string_value(key)
        if text is not None:
            return text, key
        name = name_of(key)
        if name is not None:
            if function is not None and name in function.keyword_names():
                return _Param(name)
            constant = self.walk.constants.get(name)
            if constant is not None:
                return constant.value, constant.literal
        return None

    def _value(self, expr: Any) -> FlagValue:
        if expr is None:
            return FlagValue.unknown()
        return static_value(expr, self.constant_values)

    def _emit(
        self,
        variable: str,
        literal: Any,
        kind: Access,
        target: Target,
        form: Form,
        value: Any,
        node: Any,
        via: str | None = None,
    ) -> None:
        if literal is not None:
            self.consumed.add(literal)
        if is_keyword_argument(node):
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
        bound = self._bind(call.node, helper.function)
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
        name = name_of(value) if value is not None else None
        if name is not None and name in helper.function.keyword_names():
            value = bound.get(name)
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
        for keyword, value, _, arg in arguments(call.node):
            if keyword is not None and keyword in self.walk.tracked and keyword not in named:
                self._emit(keyword, None, "write", target, "helper", value, arg,
                           via=forward.function.name)  # fmt: skip

    def _bind(self, call: Any, function: Function) -> dict[str, Any]:
        """Maps a call's arguments to the helper's parameter names (no *args/**kwargs
        expansion)."""
        bound: dict[str, Any] = {}
        positional = function.positional()
        index = 0
        for keyword, value, starred, _ in arguments(call):
            if starred:
                continue
            if keyword is not None:
                bound[keyword] = value
            elif index < len(positional):
                bound[positional[index]] = value
                index += 1
        return bound

    # -- what is left: mentions ----------------------------------------------------------------

    def _mentions(self) -> Iterator[FlagMention]:
        walk = self.walk
        for node, variable in walk.flag_literals:
            if node not in self.consumed:
                yield FlagMention(variable, "string", None, node)
        for arg in walk.flag_keywords:
            keyword = keyword_of(arg)
            if arg not in self.consumed and keyword is not None:
                value = static_value(keyword[1], self.constant_values)
                yield FlagMention(keyword[0], "keyword", value, arg)
        for node, variable, text in walk.shell_strings:
            value = FlagValue((text.strip("'\""),)) if "\0" not in text else FlagValue.unknown()
            yield FlagMention(variable, "shell-assignment", value, node)
