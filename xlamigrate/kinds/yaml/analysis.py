"""YAML files: Kubernetes/Argo `env:` lists, docker compose `environment:` (map and list), GitHub
Actions `env:` maps, the NeuronX-Distributed-Training and accelerate configs that set a flag
for the user, and the shell scripts the file runs (Actions `run:`, GitLab `script:`, the
`bash -c` string of a container's or service's command; see `sites.py` and `scripts.py`).
Positions come from ruamel.yaml's nodes, so a rewrite is a text edit and comments, key order and
quoting stay as written."""

from __future__ import annotations

import json
import re
import string

from xlamigrate.apitable import Version
from xlamigrate.flagvalue import FlagValue
from xlamigrate.kinds.textaccess import Problem, TextAccess, TextAnalysis
from xlamigrate.kinds.yaml import nxdt
from xlamigrate.kinds.yaml.nodes import MERGE_TAG, Node, documents, each_node, is_null, text
from xlamigrate.kinds.yaml.scripts import Scripts
from xlamigrate.kinds.yaml.sites import Site, find_sites
from xlamigrate.recipes import DEFAULT_MODE

# NeuronX-Distributed-Training config keys that NDT turns into the legacy flags (in a document
# not recognised as an NxDT config: see nxdt.py for those).
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
# A value that expands something at run time: compose `${X}`, Kubernetes `$(X)`, Actions `${{ }}`.
_EXPANSION = re.compile(r"\$[{(A-Za-z_]")
_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./=+-]*|--?[A-Za-z][A-Za-z0-9_./=+-]*")
# Words YAML 1.1 (Kubernetes, compose) reads as booleans or null: they stay quoted.
_TYPED_WORDS = frozenset(["y", "n", "yes", "no", "true", "false", "on", "off", "null"])


def analyse(
    text: str,
    names: frozenset[str],
    mode: str = DEFAULT_MODE,
    nxdt_floor: Version | None = None,
) -> TextAnalysis:
    """The file's accesses; an NxDT config's are worded and fixed for `mode` (`nxdt_floor`: the
    oldest neuronx-distributed-training the project pins)."""
    if not _mentions(text, names):
        return TextAnalysis()
    composed = documents(text)
    if isinstance(composed, Problem):
        return TextAnalysis(problems=(composed,))
    duplicate = _duplicate_key(composed)
    if duplicate is not None:
        return TextAnalysis(problems=(duplicate,))
    scripts = Scripts(text, names)
    finder = _Finder(text, names, scripts, mode, nxdt_floor)
    for document in composed:
        finder.visit(document)
    found = scripts.result
    accesses = sorted([*finder.accesses, *found.accesses], key=lambda a: (a.start, a.variable))
    mentions = sorted(found.mentions, key=lambda m: (m.start, m.variable))
    return TextAnalysis(tuple(accesses), tuple(found.problems), tuple(mentions))


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
        or "bf16SR" in text
    )


def _duplicate_key(composed: list[Node]) -> Problem | None:
    """The first key (in the file) that a mapping names twice, at its second place. YAML forbids
    it and Kubernetes, compose and Actions reject such a file: which value counts would be a
    guess, and a rewrite built on a guess could drop the value that did."""
    first: Problem | None = None
    for node in each_node(composed):
        if node.id != "mapping":
            continue
        lines: dict[tuple[str, str], int] = {}
        for name, _ in node.value:
            if name.id != "scalar" or str(name.tag) == MERGE_TAG:
                continue
            key, mark = (str(name.tag), str(name.value)), name.start_mark
            line, column = mark.line + 1, mark.column + 1
            if key in lines and (first is None or (line, column) < (first.line, first.column)):
                message = f"duplicate key {name.value!r} (first on line {lines[key]})"
                first = Problem(line, message, column)
            lines.setdefault(key, line)
    return first


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


def _flag_value(node: Node) -> FlagValue:
    value = text(node)
    return FlagValue.unknown() if _EXPANSION.search(value) else FlagValue((value,))


class _Finder:
    """Walks the node trees of one file and collects its flag accesses."""

    def __init__(
        self,
        text: str,
        names: frozenset[str],
        scripts: Scripts,
        mode: str = DEFAULT_MODE,
        nxdt_floor: Version | None = None,
    ) -> None:
        self.text = text
        self.names = names
        self.mode = mode
        self.nxdt_floor = nxdt_floor
        self._nxdt_precision: set[int] = set()  # NxDT configs' `precision:` (read by nxdt.py)
        self.scripts = scripts
        self.positions = scripts.positions
        self.accesses: list[TextAccess] = []
        self._seen: set[int] = set()  # an anchored node is visited once, however often aliased
        self._sites: dict[int, Site] = {}  # by the mapping that holds what a site runs
        self._launched: dict[int, tuple[str, ...]] = {}

    def visit(self, root: Node) -> None:
        config = nxdt.config_of(root)
        if config is not None:
            self._nxdt_precision.add(id(config.precision))
            found = nxdt.accesses(config, self.positions, self.names, self.mode, self.nxdt_floor)
            self.accesses.extend(found)
        for site in find_sites(root, self.positions):
            self._sites.setdefault(id(site.owner), site)
            self.scripts.analyse(site)
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
            elif (
                name.value in _CONFIG_KEYS
                and _CONFIG_KEYS[name.value] in self.names
                and id(mapping) not in self._nxdt_precision
            ):
                self._manual(_CONFIG_KEYS[name.value], "yaml-config", name, value, _CONFIG_NOTE)
        self._accelerate(mapping)

    def _sequence(self, sequence: Node, key: Node | None, owner: Node | None) -> None:
        in_environment = key is not None and key.value in _LIST_PARENTS
        for index, item in enumerate(sequence.value):
            if item.id == "mapping":
                self._env_item(sequence, index, key, owner)
            elif in_environment and item.id == "scalar" and not is_null(item):
                self._list_entry(sequence, index, key, owner)

    def _map_entry(self, mapping: Node, index: int, key: Node | None, owner: Node | None) -> None:
        """`NAME: value` in a compose `environment:`, an Actions `env:`, a ConfigMap's `data:`."""
        name, value = mapping.value[index]
        start, end = self.positions.span(name)
        known = not is_null(value)
        self.accesses.append(
            TextAccess(
                variable=name.value,
                kind="write",
                form="yaml-map",
                value=_flag_value(value) if known else FlagValue.unknown(),
                start=start,
                end=end,
                assignment=self.positions.range(name, value) if known else None,
                value_range=self.positions.span(value) if known else None,
                removal=self.positions.removal(mapping, index, key),
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
        given = value if value is not None and not is_null(value) else None
        flag_value = FlagValue.unknown() if "valueFrom" in fields else FlagValue(("",))
        start, end = self.positions.span(name)
        self.accesses.append(
            TextAccess(
                variable=name.value,
                kind="write",
                form="yaml-env-list",
                value=_flag_value(given) if given is not None else flag_value,
                start=start,
                end=end,
                assignment=self.positions.range(name, given) if given is not None else None,
                value_range=self.positions.span(given) if given is not None else None,
                removal=self.positions.removal(sequence, index, key),
                syntax=self._template(name, given, "name", "value") if given is not None else "",
                launched=self._scripts(owner),
            )
        )

    def _list_entry(self, sequence: Node, index: int, key: Node | None, owner: Node | None) -> None:
        """`- NAME=value` (or `- NAME`, passed through from the host) in a compose list."""
        item = sequence.value[index]
        variable, equals, value = text(item).partition("=")
        if variable not in self.names:
            return
        start, end = self.positions.span(item)
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
                removal=self.positions.removal(sequence, index, key),
                syntax=self._template(item, None, "entry", "") if equals else "",
                launched=self._scripts(owner),
            )
        )

    def _manual(self, variable: str, form: str, at: Node, value: Node, note: str) -> None:
        start, end = self.positions.span(at)
        self.accesses.append(
            TextAccess(
                variable=variable,
                kind="write",
                form=form,
                value=FlagValue.unknown() if is_null(value) else _flag_value(value),
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
        start, end = self.positions.span(at)
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

    def _template(self, name: Node, value: Node | None, name_field: str, value_field: str) -> str:
        """The text of the name and value scalars with `{name:STYLE}` and `{value:STYLE}` where
        they were (or one `{entry:STYLE}` for a `NAME=value` scalar), braces escaped."""
        slots = [(*self.positions.span(name), name_field, _style(name))]
        if value is not None:
            slots.append((*self.positions.span(value), value_field, _style(value)))
        slots.sort()
        parts = []
        position = slots[0][0]
        for start, end, field, style in slots:
            parts.append(_escape(self.text[position:start]))
            parts.append(f"{{{field}:{style}}}")
            position = end
        return "".join(parts)

    # Launched scripts ------------------------------------------------------------------------

    def _scripts(self, owner: Node | None) -> tuple[str, ...]:
        """The Python scripts that the container, service, job or step holding the variables
        runs, and everything below it runs (a workflow's jobs' steps), as written."""
        if owner is None:
            return ()
        if id(owner) not in self._launched:
            found = (
                script
                for node in each_node([owner])
                if id(node) in self._sites
                for script in self.scripts.launched(self._sites[id(node)])
            )
            self._launched[id(owner)] = tuple(dict.fromkeys(found))
        return self._launched[id(owner)]


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")
