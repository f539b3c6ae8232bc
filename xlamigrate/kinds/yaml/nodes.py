"""What the YAML kind reads of ruamel.yaml's composed node trees (no values are constructed, so
every scalar keeps its position, style and text as written)."""

from __future__ import annotations

import importlib
import re
import warnings
from collections.abc import Iterator
from typing import Any, Protocol

from xlamigrate.kinds.textaccess import LineIndex, Problem

NULL_TAG = "tag:yaml.org,2002:null"
MERGE_TAG = "tag:yaml.org,2002:merge"  # `<<`: may repeat
_CORE_TAGS = "tag:yaml.org,2002:"  # anything else (`!reference`, `!Ref`) is the tool's to read
_MAX_DEPTH = 200  # deeper than any config; the composer recurses, so fail early and cleanly


class Node(Protocol):
    """What is read of a ruamel.yaml node (`id` tells scalar, sequence and mapping apart;
    scalars have `style`, collections `flow_style`)."""

    id: str
    tag: str | None
    value: Any  # str; a list of nodes; a list of (key, value) node pairs
    start_mark: Any
    end_mark: Any
    style: str | None
    flow_style: bool | None


def compose(text: str) -> list[Node] | tuple[int | None, str]:
    """The documents' node trees, or (line, message) when the text is not YAML (see
    `documents`)."""
    found = documents(text)
    return (found.line, found.message) if isinstance(found, Problem) else found


def documents(text: str) -> list[Node] | Problem:
    """The documents' node trees, or where and why the text is not YAML.

    The text goes through libyaml's C parser where PyYAML has it, composed here as ruamel.yaml
    composes (its tags, resolved by its YAML 1.2 resolver, and its styles); text with a byte
    order mark or a YAML 1.1 line break (NEL, LS, PS: libyaml's marks count lines and
    characters otherwise there), and anything libyaml rejects, goes through ruamel.yaml, whose
    words the errors keep."""
    if not _LIBYAML_MISREADS.search(text):
        fast = _compose_with_libyaml(text)
        if fast is not None:
            return fast
    return _compose_with_ruamel(text)


_LIBYAML_MISREADS = re.compile("[\ufeff\x85\u2028\u2029]")


def _compose_with_ruamel(text: str) -> list[Node] | Problem:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError
    from ruamel.yaml.reader import ReaderError

    yaml = YAML(typ="rt")
    yaml.max_depth = _MAX_DEPTH
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a reused anchor is a warning, not a problem here
            return [document for document in yaml.compose_all(text) if document]
    except MarkedYAMLError as error:  # its mark: where the parser stopped (0-based)
        mark = error.problem_mark or error.context_mark
        message = " ".join(str(part) for part in (error.problem, error.context) if part)
        message = message or type(error).__name__
        if mark is None:
            return Problem(None, message)
        return Problem(mark.line + 1, message, mark.column + 1)
    except ReaderError as error:
        return LineIndex(text).problem(error.position, str(error).splitlines()[0])
    except Exception as error:  # whatever else the parser trips on, the run goes on
        return Problem(None, f"{type(error).__name__}: {error}")


class _Composed:
    """A node composed from libyaml's events (what ruamel.yaml's composer makes of them)."""

    __slots__ = ("end_mark", "flow_style", "id", "start_mark", "style", "tag", "value")

    def __init__(self, kind: str, tag: str, value: Any, event: Any) -> None:
        self.id = kind
        self.tag = tag
        self.value = value
        self.start_mark = event.start_mark
        self.end_mark = event.end_mark
        self.style = getattr(event, "style", None) or None  # plain: "" in PyYAML, None here
        self.flow_style = getattr(event, "flow_style", None)


def _compose_with_libyaml(text: str) -> list[Node] | None:
    """The documents, or None where ruamel.yaml must say it (no libyaml, a parse error, a
    `%YAML` directive, an unknown alias, nesting past _MAX_DEPTH)."""
    try:
        yaml: Any = importlib.import_module("yaml")  # PyYAML, with libyaml where it was built
        from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode
    except ImportError:
        return None
    loader = getattr(yaml, "CSafeLoader", None)
    if loader is None:
        return None
    resolve = _resolver().resolve
    documents: list[Any] = []
    anchors: dict[str, _Composed] = {}
    stack: list[tuple[_Composed, list[Any]]] = []  # open collections, with a pending key
    empty: _Composed | None = None  # a value left out (`key:`), placed at the next token
    try:
        for event in yaml.parse(text, Loader=loader):
            kind = type(event).__name__
            if empty is not None:  # (as ruamel.yaml places it; libyaml puts it after the `:`)
                empty.start_mark = empty.end_mark = event.start_mark
                empty = None
            node: _Composed | None = None
            if kind == "ScalarEvent":
                tag = event.tag
                if tag is None or tag == "!":
                    tag = resolve(ScalarNode, event.value, event.implicit)
                node = _Composed("scalar", tag, event.value, event)
                if event.value == "" and node.style is None:
                    empty = node
            elif kind in ("SequenceStartEvent", "MappingStartEvent"):
                if len(stack) >= _MAX_DEPTH:
                    return None
                sequence = kind == "SequenceStartEvent"
                tag = event.tag
                if tag is None or tag == "!":
                    tag = resolve(SequenceNode if sequence else MappingNode, None, event.implicit)
                opened = _Composed("sequence" if sequence else "mapping", tag, [], event)
                if event.anchor is not None:
                    anchors[event.anchor] = opened
                stack.append((opened, []))
                continue
            elif kind in ("SequenceEndEvent", "MappingEndEvent"):
                node, _ = stack.pop()
                node.end_mark = event.end_mark
            elif kind == "AliasEvent":
                node = anchors.get(event.anchor)
                if node is None:
                    return None
            elif kind == "DocumentStartEvent":
                if event.version is not None:
                    return None  # a `%YAML` directive: ruamel.yaml's resolver follows it
                anchors = {}  # an alias names an anchor of its own document
            if node is None:
                continue
            if kind == "ScalarEvent" and event.anchor is not None:
                anchors[event.anchor] = node
            if not stack:
                documents.append(node)
                continue
            parent, pending = stack[-1]
            if parent.id == "sequence":
                parent.value.append(node)
            elif pending:
                parent.value.append((pending.pop(), node))
            else:
                pending.append(node)
    except yaml.YAMLError:
        return None
    return documents


_RESOLVER: Any = None


def _resolver() -> Any:
    """ruamel.yaml's YAML 1.2 resolver (what its round-trip composer tags plain scalars with)."""
    global _RESOLVER
    if _RESOLVER is None:
        from ruamel.yaml.resolver import VersionedResolver

        _RESOLVER = VersionedResolver()
    return _RESOLVER


def each_node(roots: list[Node]) -> Iterator[Node]:
    """Every node under `roots` once (aliases share nodes), through mapping values and
    sequence items."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        if node.id == "mapping":
            stack.extend(value for _, value in node.value)
        elif node.id == "sequence":
            stack.extend(node.value)


def is_null(node: Node) -> bool:
    return node.id == "scalar" and node.tag == NULL_TAG and node.style is None


def is_string(node: Node) -> bool:
    """A scalar that is text to its reader: not null, and no tag of another tool."""
    return node.id == "scalar" and not is_null(node) and _core(node)


def is_list(node: Node) -> bool:
    return node.id == "sequence" and _core(node)


def _core(node: Node) -> bool:
    tag = node.tag
    return tag is None or str(tag).startswith(_CORE_TAGS)


def text(node: Node) -> str:
    """A scalar's string (ruamel marks the folds of a `>` scalar with BEL for round trips)."""
    value = str(node.value)
    return value.replace("\a", "") if node.style == ">" else value


def fields(mapping: Node) -> dict[str, Node]:
    """A mapping's values by their scalar keys (the first of a repeated key)."""
    found: dict[str, Node] = {}
    for name, value in mapping.value:
        if name.id == "scalar":
            found.setdefault(str(name.value), value)
    return found
