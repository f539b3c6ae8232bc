"""YAML files: Kubernetes/Argo `env:` lists, docker compose `environment:` (map and list), GitHub
Actions `env:` maps, and the NeuronX-Distributed-Training and accelerate configs that set a flag
for the user. Positions come from ruamel.yaml's nodes, so a rewrite is a text edit and comments,
key order and quoting stay as written."""

from __future__ import annotations

import json
import re
import shlex
import string
import warnings
from collections.abc import Iterator
from typing import Any, Protocol

from xlamigrate.flagvalue import FlagValue
from xlamigrate.kinds.textaccess import TextAccess, TextAnalysis, TextEdit, line_removal


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


# NeuronX-Distributed-Training config keys that NDT turns into the legacy flags.
_CONFIG_KEYS = {"xla_use_bf16": "XLA_USE_BF16", "xla_downcast_bf16": "XLA_DOWNCAST_BF16"}
_CONFIG_NOTE = " (NeuronX-Distributed-Training config key: set the precision in the config instead)"
_ACCELERATE_NOTE = (
    " (accelerate sets the legacy flag for you when {reason} on XLA: set mixed_precision to 'no'"
    " and apply a recipe in the training script)"
)
_ACCELERATE_XLA = frozenset({"TPU", "XLA"})
_YES = frozenset({"yes", "true", "on", "1"})
_ENV_ITEM_KEYS = frozenset({"name", "value", "valueFrom"})  # a Kubernetes EnvVar
_LIST_PARENTS = frozenset({"environment"})  # docker compose `- NAME=VALUE` lists
_LAUNCH_KEYS = frozenset({"command", "args", "entrypoint", "run"})
_NULL_TAG = "tag:yaml.org,2002:null"
_MERGE_TAG = "tag:yaml.org,2002:merge"  # `<<`: may repeat
_MAX_DEPTH = 200  # deeper than any config; the composer recurses, so fail early and cleanly
# A value that expands something at run time: compose `${X}`, Kubernetes `$(X)`, Actions `${{ }}`.
_EXPANSION = re.compile(r"\$[{(A-Za-z_]")
_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./=+-]*|--?[A-Za-z][A-Za-z0-9_./=+-]*")
# Words YAML 1.1 (Kubernetes, compose) reads as booleans or null: they stay quoted.
_TYPED_WORDS = frozenset(["y", "n", "yes", "no", "true", "false", "on", "off", "null"])


def analyse(text: str, names: frozenset[str]) -> TextAnalysis:
    if not _mentions(text, names):
        return TextAnalysis()
    documents = _compose(text)
    if isinstance(documents, tuple):
        return TextAnalysis(problems=(documents,))
    duplicate = _duplicate_key(documents)
    if duplicate is not None:
        return TextAnalysis(problems=(duplicate,))
    finder = _Finder(text, names)
    for document in documents:
        finder.visit(document)
    return TextAnalysis(tuple(sorted(finder.accesses, key=lambda a: (a.start, a.variable))))


def render(syntax: str, name: str, value: str, append: bool = False) -> str:
    """The construct of `syntax` (a template of the original text) naming `name` = `value`, each
    scalar in its original quoting where that still reads back as the same string.

    YAML cannot refer to the environment it extends (a Kubernetes `$(NAME)` only sees variables
    defined earlier in the same list, not the image's), so an append is the value alone."""
    out = []
    for literal, field, style, _ in string.Formatter().parse(syntax):
        out.append(literal)
        if field == "name":
            out.append(_scalar(name, style or ""))
        elif field == "value":
            out.append(_scalar(value, style or ""))
        elif field == "entry":
            out.append(_scalar(f"{name}={value}", style or ""))
    return "".join(out)


def _mentions(text: str, names: frozenset[str]) -> bool:
    """Whether parsing can find anything: most YAML files never name a flag."""
    return (
        any(name in text for name in names)
        or any(key in text for key in _CONFIG_KEYS)
        or "mixed_precision" in text
    )


def _compose(text: str) -> list[Node] | tuple[int | None, str]:
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


def _duplicate_key(documents: list[Node]) -> tuple[int, str] | None:
    """The first key (in the file) that a mapping names twice, as (line, message). YAML forbids
    it and Kubernetes, compose and Actions reject such a file: which value counts would be a
    guess, and a rewrite built on a guess could drop the value that did."""
    first: tuple[int, str] | None = None
    for node in _each_node(documents):
        if node.id != "mapping":
            continue
        lines: dict[tuple[str, str], int] = {}
        for name, _ in node.value:
            if name.id != "scalar" or str(name.tag) == _MERGE_TAG:
                continue
            key, line = (str(name.tag), str(name.value)), name.start_mark.line + 1
            if key in lines and (first is None or line < first[0]):
                first = line, f"duplicate key {name.value!r} (first on line {lines[key]})"
            lines.setdefault(key, line)
    return first


def _each_node(roots: list[Node]) -> Iterator[Node]:
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


def _scalar(value: str, style: str) -> str:
    """`value` as a YAML scalar: in `style` ("" plain, `'` or `"`) unless that would change it."""
    if style == "'" and "\n" not in value:
        return "'" + value.replace("'", "''") + "'"
    if style == "" and _PLAIN.fullmatch(value) and value.lower() not in _TYPED_WORDS:
        return value
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a YAML double-quoted one


def _style(node: Node) -> str:
    style: str | None = node.style
    return style if style in ("'", '"') else "" if style is None else '"'


def _is_null(node: Node) -> bool:
    return node.id == "scalar" and node.tag == _NULL_TAG and node.style is None


def _text(node: Node) -> str:
    """A scalar's string (ruamel marks the folds of a `>` scalar with BEL for round trips)."""
    value = str(node.value)
    return value.replace("\a", "") if node.style == ">" else value


def _flag_value(node: Node) -> FlagValue:
    value = _text(node)
    return FlagValue.unknown() if _EXPANSION.search(value) else FlagValue((value,))


class _Finder:
    """Walks the node trees of one file and collects its flag accesses."""

    def __init__(self, text: str, names: frozenset[str]) -> None:
        self.text = text
        self.names = names
        self.accesses: list[TextAccess] = []
        self._seen: set[int] = set()  # an anchored node is visited once, however often aliased
        self._launched: dict[int, tuple[str, ...]] = {}

    def visit(self, root: Node) -> None:
        # (node, the key scalar it is the value of, the mapping that holds that key)
        stack: list[tuple[Node, Node | None, Node | None]] = [(root, None, None)]
        while stack:
            node, key, owner = stack.pop()
            if id(node) in self._seen:
                continue
            self._seen.add(id(node))
            if node.id == "mapping":
                self._mapping(node, key, owner)
                stack.extend((value, name, node) for name, value in reversed(node.value))
            elif node.id == "sequence":
                self._sequence(node, key, owner)
                stack.extend((item, None, owner) for item in reversed(node.value))

    def _mapping(self, mapping: Node, key: Node | None, owner: Node | None) -> None:
        for index, (name, value) in enumerate(mapping.value):
            if name.id != "scalar" or value.id != "scalar":
                continue
            if name.value in self.names:
                self._map_entry(mapping, index, key, owner)
            elif name.value in _CONFIG_KEYS and _CONFIG_KEYS[name.value] in self.names:
                self._manual(_CONFIG_KEYS[name.value], "yaml-config", name, value, _CONFIG_NOTE)
        self._accelerate(mapping)

    def _sequence(self, sequence: Node, key: Node | None, owner: Node | None) -> None:
        in_environment = key is not None and key.value in _LIST_PARENTS
        for index, item in enumerate(sequence.value):
            if item.id == "mapping":
                self._env_item(sequence, index, key, owner)
            elif in_environment and item.id == "scalar" and not _is_null(item):
                self._list_entry(sequence, index, key, owner)

    def _map_entry(self, mapping: Node, index: int, key: Node | None, owner: Node | None) -> None:
        """`NAME: value` in a compose `environment:`, an Actions `env:`, a ConfigMap's `data:`."""
        name, value = mapping.value[index]
        start, end = self._span(name)
        known = not _is_null(value)
        self.accesses.append(
            TextAccess(
                variable=name.value,
                kind="write",
                form="yaml-map",
                value=_flag_value(value) if known else FlagValue.unknown(),
                start=start,
                end=end,
                assignment=self._range(name, value) if known else None,
                value_range=self._span(value) if known else None,
                removal=self._removal(mapping, index, key),
                syntax=self._template(name, value, "name", "value") if known else "",
                launched=self._scripts(owner),
            )
        )

    def _env_item(self, sequence: Node, index: int, key: Node | None, owner: Node | None) -> None:
        """`- name: NAME` with `value:` or `valueFrom:` (Kubernetes, Argo, ECS)."""
        pairs = sequence.value[index].value
        if any(field.id != "scalar" for field, _ in pairs):
            return
        fields = {field.value: (field, value) for field, value in pairs}
        if not set(fields) <= _ENV_ITEM_KEYS or "name" not in fields:
            return
        name = fields["name"][1]
        if name.id != "scalar" or name.value not in self.names:
            return
        value = fields["value"][1] if "value" in fields else None
        if value is not None and value.id != "scalar":
            return
        known = value is not None and not _is_null(value)
        flag_value = FlagValue.unknown() if "valueFrom" in fields else FlagValue(("",))
        start, end = self._span(name)
        self.accesses.append(
            TextAccess(
                variable=name.value,
                kind="write",
                form="yaml-env-list",
                value=_flag_value(value) if known and value is not None else flag_value,
                start=start,
                end=end,
                assignment=self._range(name, value) if known and value is not None else None,
                value_range=self._span(value) if known and value is not None else None,
                removal=self._removal(sequence, index, key),
                syntax=self._template(name, value, "name", "value") if known else "",
                launched=self._scripts(owner),
            )
        )

    def _list_entry(self, sequence: Node, index: int, key: Node | None, owner: Node | None) -> None:
        """`- NAME=value` (or `- NAME`, passed through from the host) in a compose list."""
        item = sequence.value[index]
        variable, equals, value = _text(item).partition("=")
        if variable not in self.names:
            return
        start, end = self._span(item)
        self.accesses.append(
            TextAccess(
                variable=variable,
                kind="write",
                form="yaml-list",
                value=FlagValue.unknown()
                if not equals or _EXPANSION.search(value)
                else FlagValue((value,)),
                start=start,
                end=end,
                assignment=(start, end) if equals else None,
                removal=self._removal(sequence, index, key),
                syntax=self._template(item, None, "entry", "") if equals else "",
                launched=self._scripts(owner),
            )
        )

    def _manual(self, variable: str, form: str, at: Node, value: Node, note: str) -> None:
        start, end = self._span(at)
        self.accesses.append(
            TextAccess(
                variable=variable,
                kind="write",
                form=form,
                value=FlagValue.unknown() if _is_null(value) else _flag_value(value),
                start=start,
                end=end,
                note=note,
                applicability="manual",
            )
        )

    def _accelerate(self, mapping: Node) -> None:
        """An accelerate config for XLA with bf16: accelerate sets XLA_USE_BF16 (or, with
        downcast_bf16, XLA_DOWNCAST_BF16) to "1" before the script runs."""
        fields = {
            name.value: (name, value)
            for name, value in mapping.value
            if name.id == "scalar" and value.id == "scalar"
        }
        platform = fields.get("distributed_type")
        precision = fields.get("mixed_precision")
        if platform is None or precision is None:
            return
        if str(platform[1].value).upper() not in _ACCELERATE_XLA or precision[1].value != "bf16":
            return
        downcast = fields.get("downcast_bf16")
        if downcast is not None and str(downcast[1].value).lower() in _YES:
            variable, at, reason = "XLA_DOWNCAST_BF16", downcast[0], "downcast_bf16 is on with bf16"
        else:
            variable, at, reason = "XLA_USE_BF16", precision[0], "mixed_precision is bf16"
        if variable not in self.names:
            return
        start, end = self._span(at)
        self.accesses.append(
            TextAccess(
                variable=variable,
                kind="write",
                form="yaml-accelerate",
                value=FlagValue(("1",)),
                start=start,
                end=end,
                note=_ACCELERATE_NOTE.format(reason=reason),
                applicability="manual",
            )
        )

    # Positions -------------------------------------------------------------------------------

    def _span(self, node: Node) -> tuple[int, int]:
        """A scalar's text, quotes and block indicators included."""
        start: int = node.start_mark.index
        if node.style in ("|", ">"):
            return start, self._block_end(node)
        end: int = node.end_mark.index
        return start, end

    def _block_end(self, node: Node) -> int:
        """The end of a block scalar's last content line (its end mark lies past the blank and
        comment lines that follow it)."""
        text = self.text
        stop: int = node.end_mark.index
        end = text.find("\n", node.start_mark.index, stop)
        if end == -1:
            return stop
        end = end - 1 if text[end - 1] == "\r" else end
        indent: int | None = None
        position = end + 1
        while position < stop:
            line_end = text.find("\n", position, stop)
            line_end = stop if line_end == -1 else line_end
            line = text[position:line_end].rstrip("\r")
            if line.strip():
                width = len(line) - len(line.lstrip(" "))
                if indent is None:
                    indent = width
                elif width < indent:
                    break
                end = position + len(line)
            position = line_end + 1
        return end

    def _content_end(self, node: Node) -> int:
        """Where a node's own text ends (a block collection's end mark is the next token's)."""
        if node.id == "scalar":
            return self._span(node)[1]
        if node.flow_style or not node.value:
            end: int = node.end_mark.index
            return end
        last = node.value[-1]
        if node.id == "sequence":
            return self._content_end(last)
        name, value = last
        return self._span(name)[1] if _is_null(value) else self._content_end(value)

    def _range(self, first: Node, second: Node) -> tuple[int, int]:
        spans = (self._span(first), self._span(second))
        return min(s for s, _ in spans), max(e for _, e in spans)

    def _template(self, name: Node, value: Node | None, name_field: str, value_field: str) -> str:
        """The text of the name and value scalars with `{name:STYLE}` and `{value:STYLE}` where
        they were (or one `{entry:STYLE}` for a `NAME=value` scalar), braces escaped."""
        slots = [(*self._span(name), name_field, _style(name))]
        if value is not None:
            slots.append((*self._span(value), value_field, _style(value)))
        slots.sort()
        parts = []
        position = slots[0][0]
        for start, end, field, style in slots:
            parts.append(_escape(self.text[position:start]))
            parts.append(f"{{{field}:{style}}}")
            position = end
        return "".join(parts)

    def _entries(self, collection: Node) -> list[tuple[int, int]]:
        """Each entry's text: a block sequence item from its `-`, a mapping entry from its key."""
        entries = []
        for entry in collection.value:
            if collection.id == "mapping":
                name, value = entry
                start: int = name.start_mark.index
                end = self._span(name)[1] if _is_null(value) else self._content_end(value)
            else:
                start = entry.start_mark.index
                if not collection.flow_style:
                    start = self._dash(start)
                end = self._content_end(entry)
            entries.append((start, end))
        return entries

    def _dash(self, start: int) -> int:
        position = start - 1
        while position >= 0 and self.text[position] in " \t\r\n":
            position -= 1
        return position if position >= 0 and self.text[position] == "-" else start

    def _removal(self, collection: Node, index: int, key: Node | None) -> TextEdit | None:
        """Removes one entry: its lines in a block collection (an only entry leaves `[]`/`{}`, so
        that `environment:` does not become null), its text and comma in a flow one."""
        entries = self._entries(collection)
        start, end = entries[index]
        if collection.flow_style:
            if len(entries) == 1:
                return TextEdit(start, end, "")
            if index + 1 < len(entries):
                return TextEdit(start, entries[index + 1][0], "")
            return TextEdit(entries[index - 1][1], end, "")
        if collection.id == "sequence" and self.text[start] != "-":
            return None  # an item whose dash could not be found (an anchor, a tag)
        edit = line_removal(self.text, start, end)
        whole_lines = edit.start == self.text.rfind("\n", 0, start) + 1 and (
            edit.end == len(self.text) or self.text[edit.end - 1] == "\n"
        )
        if not whole_lines:
            return None  # `- NAME: v` or `? NAME`: what would be left is not the user's to guess
        if len(entries) > 1 or key is None:
            return edit
        insert = self._after_key(key)
        if insert is None or insert > edit.start:
            return edit
        empty = " []" if collection.id == "sequence" else " {}"
        return TextEdit(insert, edit.end, empty + self.text[insert : edit.start])

    def _after_key(self, key: Node) -> int | None:
        """Where an empty flow collection goes on a key's line: after the colon and any anchor or
        tag, before a comment."""
        text = self.text
        colon = self._span(key)[1]
        while colon < len(text) and text[colon] in " \t":
            colon += 1
        if colon >= len(text) or text[colon] != ":":
            return None
        line_end = text.find("\n", colon)
        line = text[colon + 1 : len(text) if line_end == -1 else line_end]
        match = re.match(r"(?:[ \t]+[^\s#][^\s]*)*", line)
        return colon + 1 + (match.end() if match else 0)

    # Launched scripts ------------------------------------------------------------------------

    def _scripts(self, owner: Node | None) -> tuple[str, ...]:
        """The Python scripts that the container, service, job or step holding the variables
        runs (`command`, `args`, `entrypoint`, `run`), as written."""
        if owner is None:
            return ()
        if id(owner) not in self._launched:
            scripts: dict[str, None] = {}
            for word in _launch_words(owner):
                if word.endswith(".py"):
                    scripts[word] = None
            self._launched[id(owner)] = tuple(scripts)
        return self._launched[id(owner)]


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _launch_words(root: Node) -> Iterator[str]:
    for node in _each_node([root]):
        if node.id == "mapping":
            for name, value in node.value:
                if name.id == "scalar" and name.value in _LAUNCH_KEYS:
                    yield from _words(value)


def _words(node: Node) -> Iterator[str]:
    items: list[Any] = [node] if node.id == "scalar" else list(node.value)
    for item in items:
        if getattr(item, "id", None) != "scalar" or not isinstance(item.value, str):
            continue
        try:
            yield from shlex.split(item.value, comments=True)
        except ValueError:
            yield from item.value.split()
