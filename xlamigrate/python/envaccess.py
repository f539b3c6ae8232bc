"""The one model of "Python code touches a legacy flag here": every env-var access form, resolved.

A single walk over the module records *raw* accesses whose variable name and mapping are still
expressions; resolution then follows aliases (`env = os.environ`), dicts handed to other
processes (`env=`), module constants (`FLAG = "XLA_USE_BF16"`) and same-file helpers
(`def set_env(k, v): os.environ[k] = v`). Whatever names a flag but resolves to no access is
kept as a `FlagMention`, so nothing slips through silently.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import libcst as cst
from libcst.metadata import MetadataWrapper, Scope, ScopeProvider

from xlamigrate.flagvalue import FlagValue
from xlamigrate.model import Access, Target

ENVIRON = "os.environ"
_ENV_FUNCTIONS: dict[str, Access] = {"os.getenv": "read", "os.putenv": "write", "os.unsetenv": "delete"}
_MAPPING_METHODS: dict[str, Access] = {"setdefault": "write", "get": "read", "pop": "delete"}
_COPY_FUNCTIONS = {"builtins.dict", "dict", "copy.copy", "copy.deepcopy"}
_SELF_NAMES = {"self", "cls"}

Form = Literal[
    "subscript", "setdefault", "update", "get", "pop", "del", "in", "getenv", "putenv",
    "unsetenv", "env-dict", "setenv", "delenv", "patch-dict", "helper",
]  # fmt: skip
MentionContext = Literal["string", "keyword", "shell-assignment"]


@dataclass(frozen=True)
class EnvAccess:
    """A resolved access to a legacy flag. `node` is the expression the access is reported at."""

    variable: str
    kind: Access
    target: Target
    form: Form
    value: FlagValue | None
    node: cst.CSTNode = field(compare=False, repr=False)
    via: str | None = None  # the same-file helper the access goes through


@dataclass(frozen=True)
class FlagMention:
    """A flag's exact name in code that reaches no access xlamigrate understands."""

    variable: str
    context: MentionContext
    value: FlagValue | None
    node: cst.CSTNode = field(compare=False, repr=False)


@dataclass(frozen=True)
class EnvAccessAnalysis:
    accesses: tuple[EnvAccess, ...]
    mentions: tuple[FlagMention, ...]


def analyse_env_accesses(wrapper: MetadataWrapper, flags: Collection[str]) -> EnvAccessAnalysis:
    walker = _Walker(frozenset(flags))
    wrapper.visit(walker)
    return _Resolver(walker).resolve()


# --- raw material recorded by the walk ---------------------------------------------------------


@dataclass(frozen=True)
class _Environ:
    """`os.environ` itself (process) or a fresh copy of it (child)."""

    target: Target


@dataclass(frozen=True)
class _Named:
    """A local name used as a mapping; whether it is an environment is decided after the walk."""

    scope: Scope | None
    name: str


_Receiver = _Environ | _Named


@dataclass(frozen=True)
class _Function:
    node: cst.FunctionDef
    is_method: bool

    @property
    def name(self) -> str:
        return self.node.name.value

    def positional(self) -> list[str]:
        params = [*self.node.params.posonly_params, *self.node.params.params]
        names = [param.name.value for param in params]
        return names[1:] if self.is_method and not self._is_static() else names

    def keyword_names(self) -> set[str]:
        params = self.node.params
        return {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}

    def star_kwargs(self) -> str | None:
        star = self.node.params.star_kwarg
        return star.name.value if star is not None else None

    def _is_static(self) -> bool:
        return any(
            isinstance(d.decorator, cst.Name) and d.decorator.value == "staticmethod"
            for d in self.node.decorators
        )


@dataclass(frozen=True)
class _RawAccess:
    kind: Access
    receiver: _Receiver
    key: cst.BaseExpression | str  # a str when the key is a keyword argument's name
    value: cst.BaseExpression | None
    node: cst.CSTNode
    form: Form
    function: _Function | None
    target: Target | None = None  # overrides the receiver's target (tests patch os.environ)


@dataclass(frozen=True)
class _KwargsForward:
    """`os.environ.update(kw)` inside `def f(**kw)`: keyword arguments of calls to f are writes."""

    receiver: _Receiver
    function: _Function


@dataclass(frozen=True)
class _HelperCall:
    name: str
    via_self: bool
    node: cst.Call
    function: _Function | None


@dataclass(frozen=True)
class _Constant:
    value: str
    literal: cst.CSTNode


_Key = tuple[Scope | None, str]


class _Walker(cst.CSTVisitor):
    # Qualified names are asked of the scope lazily, for the few nodes that need them: the eager
    # QualifiedNameProvider names every node of the file and costs more than the scopes do.
    METADATA_DEPENDENCIES = (ScopeProvider,)

    def __init__(self, flags: frozenset[str]) -> None:
        super().__init__()
        self.flags = flags
        self.shell_pattern = re.compile(
            r"(?<![A-Za-z0-9_])(" + "|".join(map(re.escape, sorted(flags))) + r")=(\S*)"
        )
        self.raws: list[_RawAccess] = []
        self.forwards: list[_KwargsForward] = []
        self.calls: list[_HelperCall] = []
        self.aliases: dict[_Key, Target] = {}
        self.sinks: dict[_Key, _Receiver] = {}  # dict names merged into an environment
        self.constants: dict[str, _Constant] = {}
        self.reassigned: set[str] = set()
        self.flag_literals: list[tuple[cst.CSTNode, str]] = []
        self.shell_strings: list[tuple[cst.CSTNode, str, str]] = []
        self.flag_keywords: list[cst.Arg] = []
        self.handled: set[cst.CSTNode] = set()  # dicts and calls already turned into raws
        self.stored: set[cst.Subscript] = set()  # subscripts written or deleted, not read
        self.frames: list[_Function | None] = []  # None marks a class body

    # -- frames --------------------------------------------------------------------------------

    @property
    def function(self) -> _Function | None:
        return self.frames[-1] if self.frames else None

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.frames.append(None)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.frames.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        is_method = bool(self.frames) and self.frames[-1] is None
        self.frames.append(_Function(node, is_method))

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.frames.pop()

    def visit_Expr(self, node: cst.Expr) -> bool:
        # A bare string statement is a docstring or documentation: never a finding.
        return not isinstance(node.value, (cst.SimpleString, cst.ConcatenatedString))

    # -- expressions that denote an environment ------------------------------------------------

    def _qualified(self, node: cst.CSTNode) -> set[str]:
        scope = self._scope(node)
        if scope is None or not isinstance(node, (cst.Name, cst.Attribute)):
            return set()
        return {q.name for q in scope.get_qualified_names_for(node)}

    def _scope(self, node: cst.CSTNode) -> Scope | None:
        return self.get_metadata(ScopeProvider, node, None)

    def _is_environ(self, expr: cst.BaseExpression) -> bool:
        return isinstance(expr, (cst.Name, cst.Attribute)) and ENVIRON in self._qualified(expr)

    def _is_environ_copy(self, expr: cst.BaseExpression) -> bool:
        if isinstance(expr, cst.Call):
            func = expr.func
            if isinstance(func, cst.Attribute) and func.attr.value == "copy":
                return self._is_environ(func.value)
            first = expr.args[0] if expr.args else None
            return (
                first is not None
                and first.keyword is None
                and self._is_environ(first.value)
                and bool(self._qualified(func) & _COPY_FUNCTIONS)
            )
        if isinstance(expr, cst.Dict):
            return any(
                isinstance(el, cst.StarredDictElement) and self._is_environ(el.value)
                for el in expr.elements
            )
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.BitOr):
            return self._is_environ(expr.left) or self._is_environ_copy(expr.left)
        return False

    def _environment_kind(self, expr: cst.BaseExpression) -> Target | None:
        if self._is_environ(expr):
            return "process"
        if self._is_environ_copy(expr):
            return "child"
        return None

    def _receiver(self, expr: cst.BaseExpression) -> _Receiver | None:
        kind = self._environment_kind(expr)
        if kind is not None:
            return _Environ(kind)
        if isinstance(expr, cst.Name):
            return _Named(self._scope(expr), expr.value)
        return None

    # -- recording -----------------------------------------------------------------------------

    def _raw(
        self,
        kind: Access,
        receiver: _Receiver,
        key: cst.BaseExpression | str,
        value: cst.BaseExpression | None,
        node: cst.CSTNode,
        form: Form,
        target: Target | None = None,
    ) -> None:
        self.raws.append(_RawAccess(kind, receiver, key, value, node, form, self.function, target))

    def _dict_writes(
        self, receiver: _Receiver, mapping: cst.Dict, form: Form, target: Target | None = None
    ) -> None:
        self.handled.add(mapping)
        for element in mapping.elements:
            if isinstance(element, cst.DictElement):
                self._raw("write", receiver, element.key, element.value, element, form, target)

    def _keyword_writes(
        self, receiver: _Receiver, args: Sequence[cst.Arg], form: Form, target: Target | None = None
    ) -> None:
        for arg in args:
            if arg.keyword is not None:
                self._raw("write", receiver, arg.keyword.value, arg.value, arg, form, target)

    def _merge_into(self, receiver: _Receiver, source: cst.BaseExpression, form: Form) -> None:
        """Records what `receiver.update(source)` / `env=source` puts into an environment."""
        if isinstance(source, cst.Dict):
            self._dict_writes(receiver, source, form)
        elif isinstance(source, cst.Call) and "builtins.dict" in self._qualified(source.func):
            self.handled.add(source)
            self._keyword_writes(receiver, source.args, form)
            first = source.args[0] if source.args else None
            if first is not None and first.keyword is None and first.star == "":
                self._merge_into(receiver, first.value, form)
        elif isinstance(source, cst.Name):
            function = self.function
            if function is not None and source.value == function.star_kwargs():
                self.forwards.append(_KwargsForward(receiver, function))
            else:
                self.sinks[(self._scope(source), source.value)] = receiver

    # -- statements ----------------------------------------------------------------------------

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._assignment(target.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._assignment(node.target, node.value)

    def _assignment(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        if isinstance(target, cst.Subscript):
            self.stored.add(target)
            receiver = self._receiver(target.value)
            key = _subscript_key(target)
            if receiver is not None and key is not None:
                self._raw("write", receiver, key, value, target, "subscript")
            return
        if not isinstance(target, cst.Name):
            return
        name_key = (self._scope(target), target.value)
        kind = self._environment_kind(value)
        if kind is not None:
            self.aliases[name_key] = kind
        elif isinstance(value, cst.Dict):
            # A plain dict literal: an environment only if it later reaches `env=` or `.update()`.
            self._dict_writes(_Named(*name_key), value, "env-dict")
        if not self.frames:
            self._module_constant(target.value, value)

    def _module_constant(self, name: str, value: cst.BaseExpression) -> None:
        text = _string_value(value)
        if name in self.constants or name in self.reassigned:
            self.constants.pop(name, None)
            self.reassigned.add(name)
        elif text is not None:
            self.constants[name] = _Constant(text, value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if isinstance(node.operator, cst.BitOrAssign):
            receiver = self._receiver(node.target)
            if receiver is not None:
                self._merge_into(receiver, node.value, "update")

    def visit_Del(self, node: cst.Del) -> None:
        targets = (
            [el.value for el in node.target.elements]
            if isinstance(node.target, (cst.Tuple, cst.List))
            else [node.target]
        )
        for target in targets:
            if isinstance(target, cst.Subscript):
                self.stored.add(target)
                receiver = self._receiver(target.value)
                key = _subscript_key(target)
                if receiver is not None and key is not None:
                    self._raw("delete", receiver, key, None, target, "del")

    # -- expressions ---------------------------------------------------------------------------

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if node in self.stored:  # its parent statement, visited first, recorded the write
            return
        receiver = self._receiver(node.value)
        key = _subscript_key(node)
        if receiver is not None and key is not None:
            self._raw("read", receiver, key, None, node, "subscript")

    def visit_Comparison(self, node: cst.Comparison) -> None:
        if len(node.comparisons) != 1:
            return
        comparison = node.comparisons[0]
        if isinstance(comparison.operator, (cst.In, cst.NotIn)):
            receiver = self._receiver(comparison.comparator)
            if receiver is not None:
                self._raw("read", receiver, node.left, None, node, "in")

    def visit_Dict(self, node: cst.Dict) -> None:
        if node not in self.handled and self._is_environ_copy(node):
            self._dict_writes(_Environ("child"), node, "env-dict")

    def visit_Call(self, node: cst.Call) -> None:
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == "env":
                self._merge_into(_Environ("child"), arg.value, "env-dict")
        if node in self.handled:
            return
        func = node.func
        qualified = self._qualified(func)
        args = [arg for arg in node.args if arg.keyword is None and arg.star == ""]
        for name, kind in _ENV_FUNCTIONS.items():
            if name in qualified and args:
                value = args[1].value if kind == "write" and len(args) > 1 else None
                form: Form = name.split(".")[1]  # type: ignore[assignment]
                self._raw(kind, _Environ("process"), args[0].value, value, node, form)
                return
        if qualified & {"unittest.mock.patch.dict", "mock.patch.dict"}:
            self._patch_dict(node, args)
            return
        if "builtins.dict" in qualified and args and self._is_environ(args[0].value):
            self._keyword_writes(_Environ("child"), node.args, "env-dict")
            return
        if isinstance(func, cst.Attribute):
            self._method_call(node, func, args)
        elif isinstance(func, cst.Name):
            self.calls.append(_HelperCall(func.value, False, node, self.function))

    def _method_call(self, node: cst.Call, func: cst.Attribute, args: list[cst.Arg]) -> None:
        method = func.attr.value
        if method in ("setenv", "delenv") and args:
            kind: Access = "write" if method == "setenv" else "delete"
            value = args[1].value if kind == "write" and len(args) > 1 else None
            self._raw(kind, _Environ("process"), args[0].value, value, node, method, "test")
            return
        if isinstance(func.value, cst.Name) and func.value.value in _SELF_NAMES:
            self.calls.append(_HelperCall(method, True, node, self.function))
            return
        receiver = self._receiver(func.value)
        if receiver is None:
            return
        if method in _MAPPING_METHODS and args:
            kind = _MAPPING_METHODS[method]
            value = args[1].value if kind == "write" and len(args) > 1 else None
            self._raw(kind, receiver, args[0].value, value, node, method)  # type: ignore[arg-type]
        elif method == "update":
            for arg in args:
                self._merge_into(receiver, arg.value, "update")
            self._keyword_writes(receiver, node.args, "update")

    def _patch_dict(self, node: cst.Call, args: list[cst.Arg]) -> None:
        if not args:
            return
        patched = args[0].value
        is_environ = self._is_environ(patched) or _string_value(patched) == ENVIRON
        if not is_environ:
            return
        if len(args) > 1 and isinstance(args[1].value, cst.Dict):
            self._dict_writes(_Environ("process"), args[1].value, "patch-dict", "test")
        keywords = [arg for arg in node.args if arg.keyword is not None and arg.keyword.value != "clear"]
        self._keyword_writes(_Environ("process"), keywords, "patch-dict", "test")

    # -- names of flags anywhere ---------------------------------------------------------------

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None and node.keyword.value in self.flags:
            self.flag_keywords.append(node)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        self._string(node, _string_value(node))

    def visit_ConcatenatedString(self, node: cst.ConcatenatedString) -> bool:
        self._string(node, _string_value(node))
        return False

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        text = "".join(
            part.value if isinstance(part, cst.FormattedStringText) else "\0"
            for part in node.parts
        )
        self._string(node, text)

    def _string(self, node: cst.CSTNode, text: str | None) -> None:
        if text is None:
            return
        if text in self.flags:
            self.flag_literals.append((node, text))
            return
        for match in self.shell_pattern.finditer(text):
            self.shell_strings.append((node, match.group(1), match.group(2)))


# --- resolution ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Param:
    name: str


@dataclass(frozen=True)
class _Helper:
    """A same-file function that accesses the variable named by one of its parameters."""

    function: _Function
    kind: Access
    target: Target
    key_param: str
    value: cst.BaseExpression | None


class _Resolver:
    def __init__(self, walk: _Walker) -> None:
        self.walk = walk
        self.accesses: list[EnvAccess] = []
        self.consumed: set[cst.CSTNode] = set()
        self.helpers: dict[tuple[str, bool], _Helper] = {}

    def resolve(self) -> EnvAccessAnalysis:
        for raw in self.walk.raws:
            self._resolve_raw(raw)
        self._resolve_helper_calls()
        return EnvAccessAnalysis(tuple(self.accesses), tuple(self._mentions()))

    # -- receivers and keys --------------------------------------------------------------------

    def _target(self, receiver: _Receiver, seen: frozenset[_Named] = frozenset()) -> Target | None:
        if isinstance(receiver, _Environ):
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
        self, key: cst.BaseExpression | str, function: _Function | None
    ) -> tuple[str, cst.CSTNode | None] | _Param | None:
        """The variable a key names (and the literal that names it), or the parameter it is."""
        if isinstance(key, str):
            return key, None
        text = _string_value(key)
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
        return _static_value(expr, self.walk.constants) if expr is not None else FlagValue.unknown()

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
        self.accesses.append(EnvAccess(variable, kind, target, form, flag_value, node, via))

    def _resolve_raw(self, raw: _RawAccess) -> None:
        target = self._target(raw.receiver)
        if target is None:
            return
        key = self._key(raw.key, raw.function)
        if isinstance(key, _Param):
            if raw.function is not None:
                helper = _Helper(raw.function, raw.kind, raw.target or target, key.name, raw.value)
                self.helpers.setdefault((raw.function.name, raw.function.is_method), helper)
            return
        if key is not None and key[0] in self.walk.flags:
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

    def _helper_call(self, call: _HelperCall, helper: _Helper) -> None:
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
        if key is None or key[0] not in self.walk.flags:
            return
        value = helper.value
        if isinstance(value, cst.Name) and value.value in helper.function.keyword_names():
            value = bound.get(value.value)
        variable, literal = key
        self._emit(
            variable, literal, helper.kind, helper.target, "helper", value, call.node,
            via=helper.function.name,
        )  # fmt: skip

    def _forwarded_keywords(self, call: _HelperCall, forward: _KwargsForward) -> None:
        target = self._target(forward.receiver)
        if target is None:
            return
        named = forward.function.keyword_names()
        for arg in call.node.args:
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword is not None and keyword in self.walk.flags and keyword not in named:
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
                value = _static_value(arg.value, walk.constants)
                yield FlagMention(arg.keyword.value, "keyword", value, arg)
        for node, variable, text in walk.shell_strings:
            value = FlagValue((text.strip("'\""),)) if "\0" not in text else FlagValue.unknown()
            yield FlagMention(variable, "shell-assignment", value, node)


def _bind(call: cst.Call, function: _Function) -> dict[str, cst.BaseExpression]:
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


def _subscript_key(node: cst.Subscript) -> cst.BaseExpression | None:
    if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
        return node.slice[0].slice.value
    return None


def _string_value(node: cst.BaseExpression) -> str | None:
    """The text of a plain string literal (bytes decoded as latin-1), else None."""
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
        try:
            value = node.evaluated_value
        except Exception:  # malformed escapes: treat as unknown rather than crash
            return None
        if isinstance(value, bytes):
            return value.decode("latin-1")
        return value
    if isinstance(node, cst.FormattedString) and all(
        isinstance(part, cst.FormattedStringText) for part in node.parts
    ):
        return "".join(part.value for part in node.parts)  # type: ignore[union-attr]
    return None


def _static_value(expr: cst.BaseExpression, constants: dict[str, _Constant]) -> FlagValue:
    """The value(s) an expression evaluates to, as far as can be told without running it."""
    text = _string_value(expr)
    if text is not None:
        return FlagValue((text,))
    if isinstance(expr, cst.Integer):
        try:
            return FlagValue((str(int(expr.value.replace("_", ""), 0)),))
        except ValueError:
            return FlagValue.unknown()
    if isinstance(expr, cst.Name):
        if expr.value in ("True", "False"):
            return FlagValue((expr.value,))
        constant = constants.get(expr.value)
        return FlagValue((constant.value,)) if constant else FlagValue.unknown()
    if isinstance(expr, cst.IfExp):
        body = _static_value(expr.body, constants).candidates
        orelse = _static_value(expr.orelse, constants).candidates
        if body is None or orelse is None:
            return FlagValue.unknown()
        return FlagValue(body + orelse)
    if (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Name)
        and expr.func.value == "str"
        and len(expr.args) == 1
    ):
        return _static_value(expr.args[0].value, constants)
    return FlagValue.unknown()
