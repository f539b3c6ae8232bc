"""What the env-access walk (astwalk.py) records: raw accesses whose keys and values are still
expressions, aliases, sinks, constants and helper calls, resolved by envresolve.py once the
whole file has been seen. Nothing here imports a parser: the nodes are the walk's own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from xlamigrate.kinds.python.envaccess import Form
from xlamigrate.results import Access, Target

ENVIRON = "os.environ"
# Calls whose first argument is a shell command line: always, or with `shell=True`.
ALWAYS_SHELL = frozenset(
    {
        "os.system", "os.popen", "subprocess.getoutput", "subprocess.getstatusoutput",
        "asyncio.create_subprocess_shell",
    }
)  # fmt: skip
SHELL_WHEN_ASKED = frozenset(
    {
        "subprocess.run", "subprocess.call", "subprocess.check_call", "subprocess.check_output",
        "subprocess.Popen",
    }
)  # fmt: skip

# Calls and methods that touch the environment, by what they do.
ENV_FUNCTIONS: dict[str, Access] = {
    "os.getenv": "read",
    "os.putenv": "write",
    "os.unsetenv": "delete",
}
MAPPING_METHODS: dict[str, Access] = {"setdefault": "write", "get": "read", "pop": "delete"}
COPY_FUNCTIONS = frozenset({"builtins.dict", "dict", "copy.copy", "copy.deepcopy"})
SELF_NAMES = frozenset({"self", "cls"})


class Function(Protocol):
    """A `def` the walk is in, as the resolver asks about it."""

    @property
    def name(self) -> str: ...
    @property
    def is_method(self) -> bool: ...
    def positional(self) -> list[str]: ...
    def keyword_names(self) -> set[str]: ...
    def star_kwargs(self) -> str | None: ...


@dataclass(frozen=True)
class Environ:
    """`os.environ` itself (process) or a fresh copy of it (child)."""

    target: Target


@dataclass(frozen=True)
class Named:
    """A local name used as a mapping; whether it is an environment is decided after the walk."""

    scope: Any  # the walk's scope object
    name: str


Receiver = Environ | Named


@dataclass(frozen=True)
class RawAccess:
    kind: Access
    receiver: Receiver
    key: Any  # a str when the key is a keyword argument's name
    value: Any
    node: Any
    form: Form
    function: Function | None
    target: Target | None = None  # overrides the receiver's target (tests patch os.environ)


@dataclass(frozen=True)
class KwargsForward:
    """`os.environ.update(kw)` inside `def f(**kw)`: keyword arguments of calls to f are writes."""

    receiver: Receiver
    function: Function


@dataclass(frozen=True)
class HelperCall:
    name: str
    via_self: bool
    node: Any
    function: Function | None


@dataclass(frozen=True)
class Constant:
    value: str
    literal: Any
