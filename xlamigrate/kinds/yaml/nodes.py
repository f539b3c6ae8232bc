"""What the YAML kind reads of ruamel.yaml's composed node trees (no values are constructed, so
every scalar keeps its position, style and text as written)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any, Protocol

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
    """The documents' node trees, or (line, message) when the text is not YAML."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError
    from ruamel.yaml.reader import ReaderError

    yaml = YAML(typ="rt")
    yaml.max_depth = _MAX_DEPTH
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a reused anchor is a warning, not a problem here
            return [document for document in yaml.compose_all(text) if document]
    except MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        message = " ".join(str(part) for part in (error.problem, error.context) if part)
        return (mark.line + 1 if mark else None, message or type(error).__name__)
    except ReaderError as error:
        line = text.count("\n", 0, error.position) + 1
        return (line, str(error).splitlines()[0])
    except Exception as error:  # whatever else the parser trips on, the run goes on
        return (None, f"{type(error).__name__}: {error}")


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
