"""The one model of "Python code touches a legacy flag here": every env-var access form, resolved.

A single walk over the module records *raw* accesses whose variable name and mapping are still
expressions; resolution then follows aliases (`env = os.environ`), dicts handed to other
processes (`env=`), module constants (`FLAG = "XLA_USE_BF16"`) and same-file helpers
(`def set_env(k, v): os.environ[k] = v`). Whatever names a flag but resolves to no access is
kept as a `FlagMention`, so nothing slips through silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import ast

    from xlamigrate.kinds.python.astwalk import DictItem

from xlamigrate.flagvalue import FlagValue
from xlamigrate.results import Access, Target

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
    node: ast.AST | DictItem = field(compare=False, repr=False)
    via: str | None = None  # the same-file helper the access goes through
    # The expression a write sets (`"1" if bf16 else "0"`), for the rewriter's conditions.
    value_node: ast.expr | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class FlagMention:
    """A flag's exact name in code that reaches no access xlamigrate understands."""

    variable: str
    context: MentionContext
    value: FlagValue | None
    node: ast.AST = field(compare=False, repr=False)


@dataclass(frozen=True)
class EnvAccessAnalysis:
    accesses: tuple[EnvAccess, ...]
    mentions: tuple[FlagMention, ...]
    # string literals that are shell command lines, for the shell engine (commands.py)
    commands: tuple[ast.expr, ...] = ()
    # Python scripts the module starts as child processes (`subprocess.run([sys.executable,
    # "train.py"])`): they inherit the process's environment unless given one.
    children: tuple[str, ...] = ()
