"""The walk over a module that records raw env accesses: keys, values and mappings still as
expressions, to be resolved once the whole file has been seen (see envresolve.py)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import libcst as cst
from libcst.metadata import Scope, ScopeProvider

from xlamigrate.flagvalue import FlagValue
from xlamigrate.kinds.launch import launch
from xlamigrate.kinds.python.envaccess import Form
from xlamigrate.kinds.python.envraw import (
    ALWAYS_SHELL,
    COPY_FUNCTIONS,
    ENV_FUNCTIONS,
    ENVIRON,
    MAPPING_METHODS,
    SELF_NAMES,
    SHELL_WHEN_ASKED,
    Constant,
    Environ,
    HelperCall,
    KwargsForward,
    Named,
    RawAccess,
    Receiver,
)
from xlamigrate.kinds.python.literals import static_value, string_value
from xlamigrate.model import Access, Target

_STRINGS = (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


@dataclass(frozen=True)
class FunctionInfo:
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
        return {
            p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)
        }

    def star_kwargs(self) -> str | None:
        star = self.node.params.star_kwarg
        return star.name.value if star is not None else None

    def _is_static(self) -> bool:
        return any(
            isinstance(d.decorator, cst.Name) and d.decorator.value == "staticmethod"
            for d in self.node.decorators
        )


class CstSyntax:
    """The questions asked of libcst's nodes."""

    def string_value(self, node: Any) -> str | None:
        return string_value(node)

    def static_value(self, node: Any, constants: Mapping[str, str]) -> FlagValue:
        return static_value(node, constants)

    def name(self, node: Any) -> str | None:
        return node.value if isinstance(node, cst.Name) else None

    def is_argument(self, node: Any) -> bool:
        return isinstance(node, cst.Arg)

    def keyword(self, node: Any) -> tuple[str, Any] | None:
        if isinstance(node, cst.Arg) and node.keyword is not None:
            return node.keyword.value, node.value
        return None

    def arguments(self, call: Any) -> list[tuple[str | None, Any, bool, Any]]:
        return [
            (arg.keyword.value if arg.keyword is not None else None, arg.value, bool(arg.star), arg)
            for arg in call.args
        ]


ScopedName = tuple[Scope | None, str]


class EnvWalker(cst.CSTVisitor):
    # Qualified names are asked of the scope lazily, for the few nodes that need them: the eager
    # QualifiedNameProvider names every node of the file and costs more than the scopes do.
    METADATA_DEPENDENCIES = (ScopeProvider,)

    def __init__(self, flags: frozenset[str], also: frozenset[str] = frozenset()) -> None:
        super().__init__()
        self.syntax = CstSyntax()
        self.flags = flags  # named anywhere, they are findings (mentions included)
        self.tracked = flags | also  # their accesses are resolved (also: the recipes' variables)
        self.shell_pattern = re.compile(
            r"(?<![A-Za-z0-9_])(" + "|".join(map(re.escape, sorted(flags))) + r")=(\S*)"
        )
        self.raws: list[RawAccess] = []
        self.forwards: list[KwargsForward] = []
        self.calls: list[HelperCall] = []
        self.aliases: dict[ScopedName, Target] = {}
        self.sinks: dict[ScopedName, Receiver] = {}  # dict names merged into an environment
        self.constants: dict[str, Constant] = {}
        self.reassigned: set[str] = set()
        self.flag_literals: list[tuple[cst.CSTNode, str]] = []
        self.shell_strings: list[tuple[cst.CSTNode, str, str]] = []
        # string literals that are shell command lines (os.system, shell=True, bash -c)
        self.commands: list[cst.BaseExpression] = []
        self.children: list[str] = []  # Python scripts started from an argv list, as written
        self.flag_keywords: list[cst.Arg] = []
        self.handled: set[cst.CSTNode] = set()  # dicts and calls already turned into raws
        self.stored: set[cst.Subscript] = set()  # subscripts written or deleted, not read
        self.frames: list[FunctionInfo | None] = []  # None marks a class body

    # -- frames --------------------------------------------------------------------------------

    @property
    def function(self) -> FunctionInfo | None:
        return self.frames[-1] if self.frames else None

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.frames.append(None)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.frames.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        is_method = bool(self.frames) and self.frames[-1] is None
        self.frames.append(FunctionInfo(node, is_method))

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
                and bool(self._qualified(func) & COPY_FUNCTIONS)
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

    def _receiver(self, expr: cst.BaseExpression) -> Receiver | None:
        kind = self._environment_kind(expr)
        if kind is not None:
            return Environ(kind)
        if isinstance(expr, cst.Name):
            return Named(self._scope(expr), expr.value)
        return None

    # -- recording -----------------------------------------------------------------------------

    def _raw(
        self,
        kind: Access,
        receiver: Receiver,
        key: cst.BaseExpression | str,
        value: cst.BaseExpression | None,
        node: cst.CSTNode,
        form: Form,
        target: Target | None = None,
    ) -> None:
        self.raws.append(RawAccess(kind, receiver, key, value, node, form, self.function, target))

    def _dict_writes(
        self, receiver: Receiver, mapping: cst.Dict, form: Form, target: Target | None = None
    ) -> None:
        self.handled.add(mapping)
        for element in mapping.elements:
            if isinstance(element, cst.DictElement):
                self._raw("write", receiver, element.key, element.value, element, form, target)

    def _keyword_writes(
        self, receiver: Receiver, args: Sequence[cst.Arg], form: Form, target: Target | None = None
    ) -> None:
        for arg in args:
            if arg.keyword is not None:
                self._raw("write", receiver, arg.keyword.value, arg.value, arg, form, target)

    def _merge_into(self, receiver: Receiver, source: cst.BaseExpression, form: Form) -> None:
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
                self.forwards.append(KwargsForward(receiver, function))
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
            self._subscript("write", target, value, "subscript")
            return
        if not isinstance(target, cst.Name):
            return
        name_key = (self._scope(target), target.value)
        kind = self._environment_kind(value)
        if kind is not None:
            self.aliases[name_key] = kind
        elif isinstance(value, cst.Dict):
            # A plain dict literal: an environment only if it later reaches `env=` or `.update()`.
            self._dict_writes(Named(*name_key), value, "env-dict")
        if not self.frames:
            self._module_constant(target.value, value)

    def _module_constant(self, name: str, value: cst.BaseExpression) -> None:
        text = string_value(value)
        if name in self.constants or name in self.reassigned:
            self.constants.pop(name, None)
            self.reassigned.add(name)
        elif text is not None:
            self.constants[name] = Constant(text, value)

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
                self._subscript("delete", target, None, "del")

    # -- expressions ---------------------------------------------------------------------------

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if node not in self.stored:  # its parent statement, visited first, recorded the write
            self._subscript("read", node, None, "subscript")

    def _subscript(
        self, kind: Access, node: cst.Subscript, value: cst.BaseExpression | None, form: Form
    ) -> None:
        """`mapping[key]` as a write, delete or read, if the mapping may be an environment."""
        receiver = self._receiver(node.value)
        key = _subscript_key(node)
        if receiver is not None and key is not None:
            self._raw(kind, receiver, key, value, node, form)

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
            self._dict_writes(Environ("child"), node, "env-dict")

    def visit_Call(self, node: cst.Call) -> None:
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == "env":
                self._merge_into(Environ("child"), arg.value, "env-dict")
        if node in self.handled:
            return
        func = node.func
        qualified = self._qualified(func)
        args = [arg for arg in node.args if arg.keyword is None and arg.star == ""]
        if args and qualified & (ALWAYS_SHELL | SHELL_WHEN_ASKED):
            self._command(node, qualified, args[0].value)
        for name, kind in ENV_FUNCTIONS.items():
            if name in qualified and args:
                value = args[1].value if kind == "write" and len(args) > 1 else None
                form: Form = name.split(".")[1]  # type: ignore[assignment]
                self._raw(kind, Environ("process"), args[0].value, value, node, form)
                return
        if qualified & {"unittest.mock.patch.dict", "mock.patch.dict"}:
            self._patch_dict(node, args)
            return
        if "builtins.dict" in qualified and args and self._is_environ(args[0].value):
            self._keyword_writes(Environ("child"), node.args, "env-dict")
            return
        if isinstance(func, cst.Attribute):
            self._method_call(node, func, args)
        elif isinstance(func, cst.Name):
            self.calls.append(HelperCall(func.value, False, node, self.function))

    def _command(self, node: cst.Call, qualified: set[str], command: cst.BaseExpression) -> None:
        """The shell command line a call runs: its string, or the `-c` string of its list."""
        shell = any(
            arg.keyword is not None
            and arg.keyword.value == "shell"
            and isinstance(arg.value, cst.Name)
            and arg.value.value == "True"
            for arg in node.args
        )
        if qualified & ALWAYS_SHELL or shell:
            if isinstance(command, _STRINGS):
                self.commands.append(command)
            return
        if isinstance(command, (cst.List, cst.Tuple)):
            items = [element.value for element in command.elements]
            words = [_argv_word(item) for item in items]
            started = launch(words)
            if started.python_script is not None:
                self.children.append(started.python_script)
            for index in started.shell_strings:
                if isinstance(items[index], _STRINGS):
                    self.commands.append(items[index])

    def _method_call(self, node: cst.Call, func: cst.Attribute, args: list[cst.Arg]) -> None:
        method = func.attr.value
        if method in ("setenv", "delenv") and args:  # pytest's monkeypatch
            kind: Access = "write" if method == "setenv" else "delete"
            form: Form = "setenv" if method == "setenv" else "delenv"
            value = args[1].value if kind == "write" and len(args) > 1 else None
            self._raw(kind, Environ("process"), args[0].value, value, node, form, "test")
            return
        if isinstance(func.value, cst.Name) and func.value.value in SELF_NAMES:
            self.calls.append(HelperCall(method, True, node, self.function))
            return
        receiver = self._receiver(func.value)
        if receiver is None:
            return
        if method in MAPPING_METHODS and args:
            kind = MAPPING_METHODS[method]
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
        is_environ = self._is_environ(patched) or string_value(patched) == ENVIRON
        if not is_environ:
            return
        if len(args) > 1 and isinstance(args[1].value, cst.Dict):
            self._dict_writes(Environ("process"), args[1].value, "patch-dict", "test")
        keywords = [
            arg for arg in node.args if arg.keyword is not None and arg.keyword.value != "clear"
        ]
        self._keyword_writes(Environ("process"), keywords, "patch-dict", "test")

    # -- names of flags anywhere ---------------------------------------------------------------

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None and node.keyword.value in self.flags:
            self.flag_keywords.append(node)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        self._string(node, string_value(node))

    def visit_ConcatenatedString(self, node: cst.ConcatenatedString) -> bool:
        self._string(node, string_value(node))
        return False

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        if any(node is command for command in self.commands):
            return
        text = "".join(
            part.value if isinstance(part, cst.FormattedStringText) else "\0" for part in node.parts
        )
        self._string(node, text)

    def _string(self, node: cst.CSTNode, text: str | None) -> None:
        if text is None or any(node is command for command in self.commands):  # the shell's
            return
        if text in self.flags:
            self.flag_literals.append((node, text))
            return
        for match in self.shell_pattern.finditer(text):
            self.shell_strings.append((node, match.group(1), match.group(2)))


def _argv_word(item: cst.BaseExpression) -> str | None:
    """An argv item's value; `sys.executable` is the Python interpreter."""
    if isinstance(item, cst.Attribute) and cst.Module([]).code_for_node(item) == "sys.executable":
        return "python"
    return string_value(item)


def _subscript_key(node: cst.Subscript) -> cst.BaseExpression | None:
    if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
        return node.slice[0].slice.value
    return None
