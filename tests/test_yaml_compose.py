"""YAML node trees from libyaml's C parser, composed as ruamel.yaml composes them: the same
kinds, tags (ruamel's YAML 1.2 resolver), styles, values and positions, so everything the YAML
kind reads and edits is the same whichever parser read the file. Text libyaml cannot stand in
for (a byte order mark or a YAML 1.1 line break: its marks differ; a `%YAML` directive;
anything it rejects; nesting past the limit) goes to ruamel.yaml, whose error messages the
scan keeps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests import snapshots
from tests.conftest import FIXTURES
from xlamigrate.kinds.textaccess import Problem
from xlamigrate.kinds.yaml import nodes

YAML_FIXTURES = sorted(p for p in FIXTURES.rglob("*") if p.suffix in (".yaml", ".yml"))
# (and what the rewrite makes of the fixture cases, from their snapshots)
YAML_REWRITES = {
    f"cases/{case.name} ({mode})": snapshots.rewritten(case.stem, mode).decode()
    for mode, case in snapshots.rewrites(".yaml")
}
YAML_REWRITES.update(
    (f"{snap.parent.relative_to(FIXTURES)}/{path} ({snap.stem})", text.decode())
    for tree in ("nxdt", "projects")
    for snap in sorted((FIXTURES / tree).glob("*/*.snap"))
    for path, text in snapshots.parse(snap.read_bytes()).files or ()
    if tree == "nxdt" or path.endswith((".yaml", ".yml"))
)


def described(node: Any, seen: dict[int, int] | None = None) -> tuple[object, ...]:
    """What the YAML kind reads of a node (the end mark's line is never read: at the end of a
    file without a final line break, libyaml counts one line more)."""
    seen = {} if seen is None else seen
    if id(node) in seen:
        return ("alias", seen[id(node)])
    seen[id(node)] = len(seen)
    head = (
        node.id,
        str(node.tag),
        node.style if node.id == "scalar" else node.flow_style,
        node.start_mark.index,
        node.end_mark.index,
        node.start_mark.line,
    )
    if node.id == "scalar":
        return (*head, nodes.text(node))
    if node.id == "sequence":
        return (*head, *(described(item, seen) for item in node.value))
    return (*head, *((described(k, seen), described(v, seen)) for k, v in node.value))


def both(text: str) -> tuple[object, object]:
    fast = nodes._compose_with_libyaml(text)
    slow = nodes._compose_with_ruamel(text)
    assert fast is not None, "libyaml should have read it"
    assert not isinstance(slow, Problem), slow
    return [described(d) for d in fast], [described(d) for d in slow]


def test_there_are_yaml_fixtures_to_compare() -> None:
    assert len(YAML_FIXTURES) + len(YAML_REWRITES) >= 50


@pytest.mark.parametrize("path", YAML_FIXTURES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_libyaml_composes_each_fixture_as_ruamel_does(path: Path) -> None:
    fast, slow = both(path.read_text())
    assert fast == slow


@pytest.mark.parametrize("name", sorted(YAML_REWRITES))
def test_libyaml_composes_each_rewritten_fixture_as_ruamel_does(name: str) -> None:
    fast, slow = both(YAML_REWRITES[name])
    assert fast == slow


@pytest.mark.parametrize(
    "text",
    [
        "a:\n\nb: 1\n",  # a value left out, before a blank line
        "env:\n  A:  # passed through\n  # B: 1\nnext: 2\n",  # ... before comments
        "a: [1, {b: c}, 'x']\nd: {}\n",  # flow collections
        "a: |\n  one\n  two\n\n\nb: >-\n  folded\n  text\n# end\n",  # block scalars
        "1: a\n'1': b\nyes: c\nnull: d\n~: e\n",  # keys the resolver tags differently
        "base: &b {x: 1}\nother:\n  <<: *b\n  y: 2\n",  # an anchor and a merge
        "a: 1\r\nb:\r\n  - x\r\n  - y\r\n",  # CRLF
        "a: 1\nb: last",  # no final line break
        "--- a\n--- {b: 1}\n...\n",  # several documents
        "k: !reference [a, b]\nv: !!str 1\n",  # explicit tags
        "é: 1\nk: '😀 ok'\nv: \"日本語\"\nw: |\n  ünï\n  😀\nz: [ä, ö]  # ç\n",  # not ASCII
        "a: 1\rb: 2\r",  # bare CR line breaks
    ],
)
def test_libyaml_composes_each_shape_as_ruamel_does(text: str) -> None:
    fast, slow = both(text)
    assert fast == slow


@pytest.mark.parametrize(
    "text",
    [
        "\ufeffa: 1\n",  # a byte order mark
        "a: b\u2028c\n",  # a YAML 1.1 line break (LS; NEL and PS too)
        "%YAML 1.1\n---\na: yes\n",  # another YAML version's resolver
        "a: [1, 2\n",  # an error: ruamel.yaml words it
        "--- &a x\n--- *a\n",  # an alias to another document's anchor
        "a: " + "[" * 300 + "]" * 300 + "\n",  # nested past the limit
    ],
)
def test_what_libyaml_cannot_stand_in_for_goes_to_ruamel(text: str) -> None:
    from ruamel.yaml.nodes import Node

    if not nodes._LIBYAML_MISREADS.search(text):
        assert nodes._compose_with_libyaml(text) is None
    composed = nodes.documents(text)
    if isinstance(composed, Problem):  # an error, in ruamel.yaml's words
        assert composed == nodes._compose_with_ruamel(text)
    else:
        assert all(isinstance(document, Node) for document in composed)


def test_errors_keep_ruamel_s_words_and_where_it_stopped() -> None:
    problem = nodes.documents("a: [1, 2\nb: 3\n")
    assert problem == nodes._compose_with_ruamel("a: [1, 2\nb: 3\n")
    assert isinstance(problem, Problem)
    assert (problem.line, problem.column) == (2, 2)  # ruamel.yaml's mark, 1-based: the `:`
    assert "flow sequence" in problem.message
    line, message = nodes.compose("a: [1, 2\nb: 3\n")  # type: ignore[misc]
    assert (line, message) == (problem.line, problem.message)  # (what other readers take)


def test_a_tab_before_a_value_is_read_as_kubernetes_reads_it() -> None:
    """YAML allows tabs as separation inside a line; libyaml (and Go's YAML, which Kubernetes
    and compose use) read `a:\t1`; ruamel.yaml refuses it. The scan reads it."""
    text = "env:\n  XLA_USE_BF16:\t'1'\n"
    assert isinstance(nodes._compose_with_ruamel(text), Problem)
    [document] = nodes.compose(text)  # type: ignore[misc]
    [(key, value)] = document.value[0][1].value
    assert (key.value, value.value) == ("XLA_USE_BF16", "1")
