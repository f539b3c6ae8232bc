"""The env-access walk on the standard library's `ast`: raw accesses (every form of touching the
environment: subscripts, get/setdefault/pop/update, getenv/putenv, `in`, `del`, env dicts handed
to child processes, mock.patch.dict), aliases, sinks, constants, helper calls, mentions, shell
command strings and child scripts, recorded from the C parser's tree (scopes from astscopes.py,
positions from the nodes), then resolved by envresolve.py."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xlamigrate.flagvalue import FlagValue
from xlamigrate.kinds.python.astscopes import Scope, Scopes
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
from xlamigrate.results import Access, Target


@dataclass(frozen=True)
class DictItem:
    """`key: value` in a dict display: ast has no node for it (libcst's DictElement)."""

    key: ast.expr
    value: ast.expr
    lineno: int
    col_offset: int
    end_lineno: int
    end_col_offset: int


@dataclass(frozen=True)
class AstFunction:
    """A `def` the walk is in (FunctionInfo's questions, asked of ast)."""

    node: ast.FunctionDef | ast.AsyncFunctionDef
    is_method: bool

    @property
    def name(self) -> str:
        return self.node.name

    def positional(self) -> list[str]:
        names = [a.arg for a in (*self.node.args.posonlyargs, *self.node.args.args)]
        return names[1:] if self.is_method and not self._is_static() else names

    def keyword_names(self) -> set[str]:
        args = self.node.args
        return {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}

    def star_kwargs(self) -> str | None:
        return self.node.args.kwarg.arg if self.node.args.kwarg is not None else None

    def _is_static(self) -> bool:
        return any(
            isinstance(d, ast.Name) and d.id == "staticmethod" for d in self.node.decorator_list
        )


def name_of(node: Any) -> str | None:
    """A bare name's identifier (None for anything else)."""
    return node.id if isinstance(node, ast.Name) else None


def is_keyword_argument(node: Any) -> bool:
    return isinstance(node, ast.keyword)


def keyword_of(node: Any) -> tuple[str, Any] | None:
    """A keyword argument's name and value (None for `**kwargs` or anything else)."""
    if isinstance(node, ast.keyword) and node.arg is not None:
        return node.arg, node.value
    return None


def arguments(call: ast.Call) -> list[tuple[str | None, Any, bool, Any]]:
    """(keyword, value, starred, node) of each argument, in source order."""
    found: list[tuple[str | None, Any, bool, Any]] = [
        (None, a, isinstance(a, ast.Starred), a) for a in call.args
    ]
    found += [(k.arg, k.value, k.arg is None, k) for k in call.keywords]
    return sorted(found, key=lambda item: (item[3].lineno, item[3].col_offset))


def string_value(node: Any) -> str | None:
    """The text of a plain string literal (bytes decoded as latin-1), else None."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, str):
            return node.value
        if isinstance(node.value, bytes):
            return node.value.decode("latin-1")
        return None
    if isinstance(node, ast.JoinedStr):
        parts = [v.value for v in node.values if isinstance(v, ast.Constant)]
        if len(parts) == len(node.values):  # an f-string without placeholders
            return "".join(map(str, parts))
    return None


def static_value(expr: Any, constants: Mapping[str, str]) -> FlagValue:
    """The value(s) an expression evaluates to, as far as can be told without running it."""
    text = string_value(expr)
    if text is not None:
        return FlagValue((text,))
    if isinstance(expr, ast.Constant):
        if isinstance(expr.value, bool):
            return FlagValue((str(expr.value),))
        if isinstance(expr.value, int):
            return FlagValue((str(expr.value),))
        return FlagValue.unknown()
    if isinstance(expr, ast.Name):
        constant = constants.get(expr.id)
        return FlagValue((constant,)) if constant is not None else FlagValue.unknown()
    if isinstance(expr, ast.IfExp):
        body = static_value(expr.body, constants).candidates
        orelse = static_value(expr.orelse, constants).candidates
        if body is None or orelse is None:
            return FlagValue.unknown()
        return FlagValue(body + orelse)
    if (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Name)
        and expr.func.id == "str"
        and len(expr.args) + len(expr.keywords) == 1
    ):
        only = expr.args[0] if expr.args else expr.keywords[0].value
        return (
            FlagValue.unknown() if isinstance(only, ast.Starred) else static_value(only, constants)
        )
    return FlagValue.unknown()


def _is_string(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (
        isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes))
    )


class AstEnvWalker:
    """Walks an ast module, recording what envraw.py describes."""

    def __init__(
        self,
        module: ast.Module,
        source: str,
        flags: frozenset[str],
        also: frozenset[str],
        scopes: Scopes | None = None,
    ) -> None:
        self.source = source
        self.flags = flags
        self.tracked = flags | also
        self.shell_pattern = re.compile(
            r"(?<![A-Za-z0-9_])(" + "|".join(map(re.escape, sorted(flags))) + r")=(\S*)"
        )
        self.raws: list[RawAccess] = []
        self.forwards: list[KwargsForward] = []
        self.calls: list[HelperCall] = []
        self.aliases: dict[tuple[Any, str], Target] = {}
        self.sinks: dict[tuple[Any, str], Receiver] = {}
        self.constants: dict[str, Constant] = {}
        self.reassigned: set[str] = set()
        self.flag_literals: list[tuple[Any, str]] = []
        self.shell_strings: list[tuple[Any, str, str]] = []
        self.commands: list[ast.expr] = []
        self.children: list[str] = []
        self.flag_keywords: list[ast.keyword] = []
        self.handled: set[int] = set()  # ids of dicts and calls already turned into raws
        self.stored: set[int] = set()  # ids of subscripts written or deleted, not read
        self.scopes = scopes if scopes is not None else Scopes(module)
        self.scope: Scope = self.scopes.module
        self.frame: ast.AST | None = None  # the innermost def or class
        self.current: AstFunction | None = None  # the innermost def, outside a class body
        self._walk()

    # -- the walk ------------------------------------------------------------------------------

    def _walk(self) -> None:
        functions: dict[int, AstFunction] = {}
        skipped: set[int] = set()  # docstrings' constants
        visitors = self._visitors
        walked = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Expr, *visitors)
        for node, scope, frame in self.scopes.of(*walked):
            kind = type(node)
            if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                is_method = isinstance(frame, ast.ClassDef)
                functions[id(node)] = AstFunction(node, is_method)  # type: ignore[arg-type]
                continue
            if kind is ast.Expr:
                value = node.value  # type: ignore[attr-defined]
                # a bare string statement is a docstring or documentation: never a finding
                if isinstance(value, ast.Constant) and isinstance(value.value, (str, bytes)):
                    skipped.add(id(value))
                continue
            visit = visitors.get(kind)
            if visit is None or id(node) in skipped:
                continue
            self.scope = scope  # (where the node is: what the visitors ask)
            self.frame = frame
            if frame is None or isinstance(frame, ast.ClassDef):
                self.current = None
            else:
                self.current = functions[id(frame)]
            visit(node)

    @property
    def _visitors(self) -> dict[type, Any]:
        return {
            ast.Assign: self._visit_assign,
            ast.AnnAssign: self._visit_ann_assign,
            ast.AugAssign: self._visit_aug_assign,
            ast.Delete: self._visit_delete,
            ast.Subscript: self._visit_subscript,
            ast.Compare: self._comparison,
            ast.Dict: self._visit_dict,
            ast.Call: self._call,
            ast.keyword: self._visit_keyword,
            ast.Constant: self._visit_constant,
            ast.JoinedStr: self._formatted,
        }

    def _visit_assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._assignment(target, node.value)

    def _visit_ann_assign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._assignment(node.target, node.value)

    def _visit_aug_assign(self, node: ast.AugAssign) -> None:
        if isinstance(node.op, ast.BitOr):
            receiver = self._receiver(node.target)
            if receiver is not None:
                self._merge_into(receiver, node.value, "update")

    def _visit_delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            items = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
            for item in items:
                if isinstance(item, ast.Subscript):
                    self.stored.add(id(item))
                    self._subscript("delete", item, None, "del")

    def _visit_subscript(self, node: ast.Subscript) -> None:
        if id(node) not in self.stored:
            self._subscript("read", node, None, "subscript")

    def _visit_dict(self, node: ast.Dict) -> None:
        if id(node) not in self.handled and self._is_environ_copy(node):
            self._dict_writes(Environ("child"), node, "env-dict")

    def _visit_keyword(self, node: ast.keyword) -> None:
        if node.arg is not None and node.arg in self.flags:
            self.flag_keywords.append(node)

    def _visit_constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, (str, bytes)):
            self._string(node, string_value(node))

    @property
    def function(self) -> AstFunction | None:
        return self.current

    # -- environments --------------------------------------------------------------------------

    def _qualified(self, node: ast.AST) -> set[str]:
        if not isinstance(node, (ast.Name, ast.Attribute)):
            return set()
        return self.scope.qualified(node)

    def _is_environ(self, expr: ast.AST) -> bool:
        return isinstance(expr, (ast.Name, ast.Attribute)) and ENVIRON in self._qualified(expr)

    def _is_environ_copy(self, expr: ast.AST) -> bool:
        if isinstance(expr, ast.Call):
            func = expr.func
            if isinstance(func, ast.Attribute) and func.attr == "copy":
                return self._is_environ(func.value)
            first = expr.args[0] if expr.args else None
            return (
                first is not None
                and not isinstance(first, ast.Starred)
                and _first_argument_is_positional(expr)
                and self._is_environ(first)
                and bool(self._qualified(func) & COPY_FUNCTIONS)
            )
        if isinstance(expr, ast.Dict):
            return any(
                key is None and self._is_environ(value)
                for key, value in zip(expr.keys, expr.values, strict=True)
            )
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):
            return self._is_environ(expr.left) or self._is_environ_copy(expr.left)
        return False

    def _environment_kind(self, expr: ast.AST) -> Target | None:
        if self._is_environ(expr):
            return "process"
        if self._is_environ_copy(expr):
            return "child"
        return None

    def _receiver(self, expr: ast.AST) -> Receiver | None:
        kind = self._environment_kind(expr)
        if kind is not None:
            return Environ(kind)
        if isinstance(expr, ast.Name):
            return Named(self.scope, expr.id)
        return None

    # -- recording -----------------------------------------------------------------------------

    def _raw(
        self,
        kind: Access,
        receiver: Receiver,
        key: Any,
        value: Any,
        node: Any,
        form: Form,
        target: Target | None = None,
    ) -> None:
        self.raws.append(RawAccess(kind, receiver, key, value, node, form, self.function, target))

    def _dict_writes(
        self, receiver: Receiver, mapping: ast.Dict, form: Form, target: Target | None = None
    ) -> None:
        self.handled.add(id(mapping))
        for key, value in zip(mapping.keys, mapping.values, strict=True):
            if key is not None:
                item = DictItem(
                    key, value, key.lineno, key.col_offset, value.end_lineno or value.lineno,
                    value.end_col_offset or value.col_offset,
                )  # fmt: skip
                self._raw("write", receiver, key, value, item, form, target)

    def _keyword_writes(
        self,
        receiver: Receiver,
        keywords: Sequence[ast.keyword],
        form: Form,
        target: Target | None = None,
    ) -> None:
        for keyword in keywords:
            if keyword.arg is not None:
                self._raw("write", receiver, keyword.arg, keyword.value, keyword, form, target)

    def _merge_into(self, receiver: Receiver, source: ast.AST, form: Form) -> None:
        if isinstance(source, ast.Dict):
            self._dict_writes(receiver, source, form)
        elif isinstance(source, ast.Call) and "builtins.dict" in self._qualified(source.func):
            self.handled.add(id(source))
            self._keyword_writes(receiver, source.keywords, form)
            first = source.args[0] if source.args else None
            positional = first is not None and not isinstance(first, ast.Starred)
            if positional and _first_argument_is_positional(source):
                self._merge_into(receiver, source.args[0], form)
        elif isinstance(source, ast.Name):
            function = self.function
            if function is not None and source.id == function.star_kwargs():
                self.forwards.append(KwargsForward(receiver, function))
            else:
                self.sinks[(self.scope, source.id)] = receiver

    # -- statements and expressions ------------------------------------------------------------

    def _assignment(self, target: ast.AST, value: ast.expr) -> None:
        if isinstance(target, ast.Subscript):
            self.stored.add(id(target))
            self._subscript("write", target, value, "subscript")
            return
        if not isinstance(target, ast.Name):
            return
        name_key = (self.scope, target.id)
        kind = self._environment_kind(value)
        if kind is not None:
            self.aliases[name_key] = kind
        elif isinstance(value, ast.Dict):
            self._dict_writes(Named(*name_key), value, "env-dict")
        if self.frame is None:
            self._module_constant(target.id, value)

    def _module_constant(self, name: str, value: ast.expr) -> None:
        text = string_value(value)
        if name in self.constants or name in self.reassigned:
            self.constants.pop(name, None)
            self.reassigned.add(name)
        elif text is not None:
            self.constants[name] = Constant(text, value)

    def _subscript(self, kind: Access, node: ast.Subscript, value: Any, form: Form) -> None:
        receiver = self._receiver(node.value)
        key = node.slice
        if isinstance(key, ast.Slice):
            return
        if receiver is not None:  # (a tuple key, `m[a, b]`, names no variable)
            self._raw(kind, receiver, key, value, node, form)

    def _comparison(self, node: ast.Compare) -> None:
        if len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            receiver = self._receiver(node.comparators[0])
            if receiver is not None:
                self._raw("read", receiver, node.left, None, node, "in")

    def _call(self, node: ast.Call) -> None:
        for keyword in node.keywords:
            if keyword.arg == "env":
                self._merge_into(Environ("child"), keyword.value, "env-dict")
        if id(node) in self.handled:
            return
        func = node.func
        qualified = self._qualified(func)
        args = [arg for arg in node.args if not isinstance(arg, ast.Starred)]
        if args and qualified & (ALWAYS_SHELL | SHELL_WHEN_ASKED):
            self._command(node, qualified, args[0])
        for name, kind in ENV_FUNCTIONS.items():
            if name in qualified and args:
                value = args[1] if kind == "write" and len(args) > 1 else None
                form: Form = name.split(".")[1]  # type: ignore[assignment]
                self._raw(kind, Environ("process"), args[0], value, node, form)
                return
        if qualified & {"unittest.mock.patch.dict", "mock.patch.dict"}:
            self._patch_dict(node, args)
            return
        if "builtins.dict" in qualified and args and self._is_environ(args[0]):
            self._keyword_writes(Environ("child"), node.keywords, "env-dict")
            return
        if isinstance(func, ast.Attribute):
            self._method_call(node, func, args)
        elif isinstance(func, ast.Name):
            self.calls.append(HelperCall(func.id, False, node, self.function))

    def _command(self, node: ast.Call, qualified: set[str], command: ast.expr) -> None:
        shell = any(
            k.arg == "shell" and isinstance(k.value, ast.Constant) and k.value.value is True
            for k in node.keywords
        )
        if qualified & ALWAYS_SHELL or shell:
            if _is_string(command):
                self.commands.append(command)
            return
        if isinstance(command, (ast.List, ast.Tuple)):
            from xlamigrate.kinds.launch import launch  # (the launch tables: a command list)

            items = list(command.elts)
            words = [_argv_word(item) for item in items]
            started = launch(words)
            if started.python_script is not None:
                self.children.append(started.python_script)
            for index in started.shell_strings:
                if _is_string(items[index]):
                    self.commands.append(items[index])

    def _method_call(self, node: ast.Call, func: ast.Attribute, args: list[ast.expr]) -> None:
        method = func.attr
        if method in ("setenv", "delenv") and args:  # pytest's monkeypatch
            kind: Access = "write" if method == "setenv" else "delete"
            form: Form = "setenv" if method == "setenv" else "delenv"
            value = args[1] if kind == "write" and len(args) > 1 else None
            self._raw(kind, Environ("process"), args[0], value, node, form, "test")
            return
        if isinstance(func.value, ast.Name) and func.value.id in SELF_NAMES:
            self.calls.append(HelperCall(method, True, node, self.function))
            return
        receiver = self._receiver(func.value)
        if receiver is None:
            return
        if method in MAPPING_METHODS and args:
            kind = MAPPING_METHODS[method]
            value = args[1] if kind == "write" and len(args) > 1 else None
            self._raw(kind, receiver, args[0], value, node, method)  # type: ignore[arg-type]
        elif method == "update":
            for arg in args:
                self._merge_into(receiver, arg, "update")
            self._keyword_writes(receiver, node.keywords, "update")

    def _patch_dict(self, node: ast.Call, args: list[ast.expr]) -> None:
        if not args:
            return
        patched = args[0]
        if not (self._is_environ(patched) or string_value(patched) == ENVIRON):
            return
        if len(args) > 1 and isinstance(args[1], ast.Dict):
            self._dict_writes(Environ("process"), args[1], "patch-dict", "test")
        keywords = [k for k in node.keywords if k.arg is not None and k.arg != "clear"]
        self._keyword_writes(Environ("process"), keywords, "patch-dict", "test")

    # -- names of flags anywhere ---------------------------------------------------------------

    def _formatted(self, node: ast.JoinedStr) -> None:
        """An f-string: its text with a NUL per placeholder. One implicitly concatenated with
        other literals has no text (libcst's ConcatenatedString with a formatted part)."""
        if any(node is command for command in self.commands):
            return
        text = "".join(str(v.value) if isinstance(v, ast.Constant) else "\0" for v in node.values)
        if self._names_something(text) and not self._concatenated(node):
            self._string(node, text)

    def _string(self, node: ast.expr, text: str | None) -> None:
        if text is None or any(node is command for command in self.commands):
            return
        if text in self.flags:
            self.flag_literals.append((node, text))
            return
        for match in self.shell_pattern.finditer(text):
            self.shell_strings.append((node, match.group(1), match.group(2)))

    def _names_something(self, text: str) -> bool:
        return text in self.flags or self.shell_pattern.search(text) is not None

    # -- source text ---------------------------------------------------------------------------

    def _segment(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.source, node) or ""

    def _concatenated(self, node: ast.expr) -> bool:
        """Whether the literal is several string tokens (`"a" f"{b}"`)."""
        tokens = tokenize.generate_tokens(io.StringIO(self._segment(node)).readline)
        starts = {tokenize.STRING, getattr(tokenize, "FSTRING_START", tokenize.STRING)}
        try:
            strings = sum(1 for token in tokens if token.type in starts)
        except (tokenize.TokenError, SyntaxError):
            return False
        return strings > 1


def _first_argument_is_positional(call: ast.Call) -> bool:
    """libcst reads `dict(k=v, x)` as x first only when x comes first; ast keeps positional
    arguments apart: the first positional is the first argument unless a keyword precedes."""
    if not call.args:
        return False
    first = call.args[0]
    return not any(
        (k.lineno, k.col_offset) < (first.lineno, first.col_offset) for k in call.keywords
    )


def _argv_word(item: ast.expr) -> str | None:
    """An argv item's value; `sys.executable` is the Python interpreter."""
    if (
        isinstance(item, ast.Attribute)
        and item.attr == "executable"
        and isinstance(item.value, ast.Name)
        and item.value.id == "sys"
    ):
        return "python"
    return string_value(item)
