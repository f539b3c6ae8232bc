"""The launcher's own folder in its words: `$(dirname "$0")`, `${BASH_SOURCE[0]}`'s folder
through `cd ... && pwd`, `realpath` or `readlink -f`, and the variables a launcher sets to one
of them once, at its top level (`SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>
/dev/null && pwd)`), so that `torchrun $SCRIPT_DIR/train.py` names the script beside the
launcher. Only a shell file run as a script has such a folder: `$0` in a Dockerfile RUN or a
`bash -c` string is something else, so the shell engine asks here for a file's own text only.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from xlamigrate.kinds.launch import OWN_FOLDER
from xlamigrate.kinds.shell.syntax import Node, Parsed, walk
from xlamigrate.kinds.shell.words import literal

_SELF_NAMES = frozenset({"0", "BASH_SOURCE"})  # the launcher's own path, as the shell has it
_CANONICAL = {  # programs whose output is their argument's path, symbolic links resolved
    "realpath": frozenset({"-e", "-m", "-s", "-q", "-P", "-L", "--"}),
    "readlink": frozenset({"-f", "-e", "-m", "-n", "-q", "-s", "-v", "--"}),
}
_READLINK_CANONICAL = frozenset({"-f", "-e", "-m"})  # without one, readlink reads a link only
_DECLARING = frozenset({"export", "declare", "typeset", "readonly"})  # `local` is a function's
# `export X` alone keeps X's value; `local X` (and `declare X` in a function) makes another X
_KEEPING = frozenset({"export", "readonly"})
_BINDERS = frozenset({"read", "unset", "mapfile", "readarray", "getopts", "let"})


@dataclass(frozen=True)
class _Value:
    """What a word expands to: `text` alone (base None), or after the launcher's own path
    (base "self") or its folder (base "folder")."""

    base: str | None
    text: str = ""

    def then(self, other: _Value) -> _Value | None:
        if other.base is None and (self.base != "self" or not other.text):
            return _Value(self.base, self.text + other.text)
        if self.base is None and not self.text:
            return other
        return None


_EMPTY = _Value(None)


class OwnFolder:
    """The folder variables of one launcher's text, and the values of its words through them."""

    def __init__(self, parsed: Parsed) -> None:
        self.parsed = parsed
        self.variables: dict[str, tuple[int, _Value]] = {}  # name -> (where set, its value)
        self._collect()

    def value(self, node: Node) -> str | None:
        """The word's value, the launcher's folder spelled `OWN_FOLDER`; None where it expands
        anything else (or only the launcher's own path)."""
        found = self._word(node, self.parsed.start(node))
        if found is None or found.base == "self":
            return None
        if found.base is None:
            return found.text
        return OWN_FOLDER + found.text if _below(found.text) else None

    # -- the variables ------------------------------------------------------------------------

    def _collect(self) -> None:
        """Each variable assigned exactly once, at the top level, to the launcher's folder (or a
        path below it) or its own path (`SCRIPT_PATH=$(realpath "$0")`), and bound nowhere else
        (a loop, `read`, `unset`, a function's `local`)."""
        assigned: dict[str, list[Node]] = {}
        rebound: set[str] = set()
        for node in walk(self.parsed.root):
            if node.type == "variable_assignment":
                name = node.child_by_field_name("name")
                if name is not None:
                    assigned.setdefault(self.parsed.raw(name), []).append(node)
            elif node.type == "for_statement" or (
                node.type == "declaration_command" and self._keyword(node) not in _KEEPING
            ):
                rebound.update(
                    self.parsed.raw(c) for c in node.children if c.type == "variable_name"
                )
            elif node.type == "command" and self._name(node) in _BINDERS:
                rebound.update(self.parsed.raw(c) for c in node.children[1:])
        once = sorted(
            (
                nodes[0]
                for name, nodes in assigned.items()
                if len(nodes) == 1 and name not in rebound
            ),
            key=lambda n: n.start_byte,
        )
        for node in once:
            if not self._top_level(node):
                continue
            value_node = node.child_by_field_name("value")
            if value_node is None:
                continue
            found = self._word(value_node, self.parsed.start(node))
            if found is not None and _path(found):
                name = self.parsed.raw(node.child_by_field_name("name"))
                self.variables[name] = (self.parsed.start(node), found)

    def _keyword(self, declaration: Node) -> str:
        return self.parsed.raw(declaration.children[0]) if declaration.children else ""

    def _top_level(self, assignment: Node) -> bool:
        """Runs once, whenever the launcher runs: not in a branch, a loop, a function or a
        command's prefix (`X=1 cmd` sets X for that command only)."""
        parent = assignment.parent
        if parent is not None and parent.type == "variable_assignments":
            parent = parent.parent
        if parent is not None and parent.type == "declaration_command":
            if self._keyword(parent) not in _DECLARING:
                return False
            parent = parent.parent
        return parent is not None and parent.type == "program"

    # -- words ----------------------------------------------------------------------------------

    def _word(self, node: Node, at: int) -> _Value | None:
        kind = node.type
        if kind in ("command_name", "concatenation", "string"):
            value: _Value | None = _EMPTY
            for child in node.children:
                if kind == "string" and child.type == '"':
                    continue
                part = self._word(child, at)
                if part is None or value is None:
                    return None
                value = value.then(part)
            return value
        if kind == "string_content":
            text = literal('"' + self.parsed.raw(node) + '"')
            return None if text is None else _Value(None, text)
        if kind == "raw_string":
            return _Value(None, self.parsed.raw(node)[1:-1])
        if kind in ("simple_expansion", "expansion"):
            return self._expansion(node, at)
        if kind == "command_substitution":
            return self._substitution(node, at)
        if node.child_count == 0 or kind in ("word", "number"):
            text = literal(self.parsed.raw(node))
            return None if text is None else _Value(None, text)
        return None

    def _expansion(self, node: Node, at: int) -> _Value | None:
        """`$0`, `${BASH_SOURCE[0]}`, `$SCRIPT_DIR`: no operator (`${0%/*}` is the file's own
        name when it was run from its folder)."""
        name: str | None = None
        for child in node.children:
            if child.type in ("$", "${", "}"):
                continue
            if child.type == "variable_name" and name is None:
                name = self.parsed.raw(child)
            elif child.type == "subscript" and name is None:
                variable = child.child_by_field_name("name")
                index = child.child_by_field_name("index")
                if variable is None or index is None or self.parsed.raw(index) != "0":
                    return None
                name = self.parsed.raw(variable)
                if name != "BASH_SOURCE":
                    return None
            else:
                return None
        if name in _SELF_NAMES:
            return _Value("self")
        known = self.variables.get(name or "")
        return known[1] if known is not None and known[0] < at else None

    def _substitution(self, node: Node, at: int) -> _Value | None:
        """`$(dirname X)`, `$(realpath X)`, `$(readlink -f X)`, `$(cd X && pwd)`."""
        commands = self._commands(node)
        if commands is None:
            return None
        if len(commands) == 2 and self._name(commands[1]) == "pwd":
            first, pwd = commands
            if self._name(first) != "cd" or not set(self._options(pwd)) <= {"-P", "-L"}:
                return None
            target = self._argument(first, frozenset({"-P", "-L", "--"}), at)
            return target if target is not None and target.base == "folder" else None
        if len(commands) != 1:
            return None
        (command,) = commands
        name = self._name(command)
        if name == "dirname":
            target = self._argument(command, frozenset({"--"}), at)
            if target is None or target.base is None:
                return None
            if target.base == "self":
                return _Value("folder") if not target.text else None
            return _Value("folder", posixpath.join(target.text or "/", "..").rstrip("/"))
        if name in _CANONICAL:
            options = self._options(command)
            canonical = any(o in _READLINK_CANONICAL or o.startswith("--canon") for o in options)
            if name == "readlink" and not canonical:
                return None
            target = self._argument(command, _CANONICAL[name], at)
            return target if target is not None and target.base is not None else None
        return None

    def _commands(self, node: Node) -> list[Node] | None:
        """The simple commands of a substitution run one after the other (`a && b`, `a; b`),
        their redirections dropped; None for any other shape."""
        out: list[Node] = []
        for child in node.children:
            if child.type in ("$(", ")", "`", ";", "&&", "\n", "comment"):
                continue
            if child.type == "list":
                inner = self._commands(child)
                if inner is None:
                    return None
                out.extend(inner)
            elif child.type == "redirected_statement":
                body = child.child_by_field_name("body")
                if body is None or body.type != "command":
                    return None
                out.append(body)
            elif child.type == "command":
                out.append(child)
            else:
                return None
        return out

    def _name(self, command: Node) -> str | None:
        name = command.child_by_field_name("name")
        return literal(self.parsed.raw(name)) if name is not None else None

    def _options(self, command: Node) -> list[str]:
        return [
            self.parsed.raw(c)
            for c in command.children[1:]
            if c.type == "word" and self.parsed.raw(c).startswith("-")
        ]

    def _argument(self, command: Node, options: frozenset[str], at: int) -> _Value | None:
        """The one operand of `command` after the options it may take."""
        operands = []
        for child in command.children[1:]:
            raw = self.parsed.raw(child)
            if child.type == "word" and raw.startswith("-"):
                if raw not in options and not raw.startswith("--canonicalize"):
                    return None
                continue
            operands.append(child)
        if len(operands) != 1:
            return None
        return self._word(operands[0], at)


def _path(value: _Value) -> bool:
    """The launcher's own path, or its folder or a path below it."""
    return (value.base == "self" and not value.text) or (
        value.base == "folder" and _below(value.text)
    )


def _below(text: str) -> bool:
    """Whether the text after the folder keeps it a folder path (`/train.py`, `/../x.py`)."""
    return not text or text.startswith("/")
