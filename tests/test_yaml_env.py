"""YAML kind: where flags are set in Kubernetes, compose, Actions, NDT and accelerate files, and
the text edits that rewrite them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tests import snapshots
from tests.conftest import RECIPE_APPLIED
from xlamigrate.catalogue import Catalogue
from xlamigrate.engine import rewrite_source, scan_source
from xlamigrate.kinds.python.rewrite import MODES
from xlamigrate.kinds.textaccess import LineIndex, TextAccess, apply_edits, hash_comments
from xlamigrate.kinds.yaml.analysis import analyse, render
from xlamigrate.neuronflags import NEURON_CC_FLAGS, STOCHASTIC_ROUNDING

LEGACY = frozenset(
    {"XLA_USE_BF16", "XLA_DOWNCAST_BF16", "XLA_USE_FP16", "XLA_DOWNCAST_FP16", "XLA_USE_F16"}
)
NAMES = LEGACY | {STOCHASTIC_ROUNDING, NEURON_CC_FLAGS}


def yaml(source: str) -> str:
    return textwrap.dedent(source).lstrip("\n")


def accesses(text: str) -> list[TextAccess]:
    analysis = analyse(text, NAMES)
    assert analysis.problems == ()
    return list(analysis.accesses)


def only(text: str) -> TextAccess:
    (access,) = accesses(text)
    return access


def removed(text: str, access: TextAccess) -> str:
    assert access.removal is not None
    return apply_edits(text, [access.removal])


def rewrite(text: str, mode: str, catalogue: Catalogue) -> str:
    outcome = rewrite_source(
        "t.yaml",
        text.encode(),
        "yaml",
        catalogue,
        frozenset(catalogue.rules),
        mode,
        context=RECIPE_APPLIED,
    )
    assert outcome.errors == ()
    return (outcome.rewritten or outcome.original).decode()


# Kubernetes env lists -------------------------------------------------------------------------

K8S = yaml(
    """
    spec:
      containers:
        - name: trainer
          command: ["torchrun", "--nproc_per_node=2", "pretrain.py"]
          env:
            - name: PJRT_DEVICE
              value: NEURON
            - name: XLA_USE_BF16
              value: "1"  # legacy
            - name: LOG_LEVEL
              value: info
    """
)


def test_kubernetes_item_reports_the_name_scalar_and_spans_name_to_value() -> None:
    access = only(K8S)
    assert (access.variable, access.kind, access.form) == ("XLA_USE_BF16", "write", "yaml-env-list")
    assert K8S[access.start : access.end] == "XLA_USE_BF16"
    assert access.assignment is not None and access.value_range is not None
    assert K8S[slice(*access.assignment)] == 'XLA_USE_BF16\n          value: "1"'
    assert K8S[slice(*access.value_range)] == '"1"'
    assert access.value is not None and access.value.literal == "1"


def test_kubernetes_item_removal_takes_the_whole_item_and_its_comment() -> None:
    after = removed(K8S, only(K8S))
    assert "XLA_USE_BF16" not in after and "# legacy" not in after
    assert (
        "        - name: PJRT_DEVICE\n          value: NEURON\n        - name: LOG_LEVEL" in after
    )


def test_kubernetes_item_renders_another_variable_in_the_same_quoting() -> None:
    access = only(K8S)
    assert render(access.syntax, STOCHASTIC_ROUNDING, "1") == (
        f'{STOCHASTIC_ROUNDING}\n          value: "1"'
    )


def test_kubernetes_item_may_put_value_before_name() -> None:
    text = "env:\n- value: '0'\n  name: XLA_DOWNCAST_BF16\n"
    access = only(text)
    assert text[access.start : access.end] == "XLA_DOWNCAST_BF16"
    assert access.assignment == (text.index("'0'"), access.end)
    assert render(access.syntax, "A", "x'y") == "'x''y'\n  name: A"


def test_kubernetes_value_from_is_an_unknown_value_that_cannot_be_replaced() -> None:
    text = yaml(
        """
        env:
          - name: XLA_USE_BF16
            valueFrom:
              configMapKeyRef: {name: precision, key: bf16}
          - name: A
            value: b
        """
    )
    access = only(text)
    assert access.value is not None and access.value.candidates is None
    assert access.assignment is None
    assert removed(text, access) == "env:\n  - name: A\n    value: b\n"


def test_list_items_with_other_keys_are_not_env_vars() -> None:
    text = "parameters:\n  - name: XLA_USE_BF16\n    default: '1'\n"
    assert accesses(text) == []


def test_launched_scripts_are_read_from_the_container_command() -> None:
    assert only(K8S).launched == ("pretrain.py",)


# docker compose -------------------------------------------------------------------------------


def test_compose_map_and_list_forms() -> None:
    text = yaml(
        """
        services:
          a:
            environment:
              XLA_USE_BF16: 1
              B: c
          b:
            environment:
              - B=c
              - "XLA_DOWNCAST_BF16=0"
              - XLA_USE_FP16
        """
    )
    found = accesses(text)
    assert [(a.variable, a.form, a.value and a.value.candidates) for a in found] == [
        ("XLA_USE_BF16", "yaml-map", ("1",)),
        ("XLA_DOWNCAST_BF16", "yaml-list", ("0",)),
        ("XLA_USE_FP16", "yaml-list", None),  # no value: passed through from the host
    ]
    assert [text[a.start : a.end] for a in found] == [
        "XLA_USE_BF16",
        '"XLA_DOWNCAST_BF16=0"',
        "XLA_USE_FP16",
    ]
    assert render(found[1].syntax, NEURON_CC_FLAGS, "--a --auto-cast=none") == (
        '"NEURON_CC_FLAGS=--a --auto-cast=none"'
    )


def test_scalars_that_are_not_environment_list_items_are_not_writes() -> None:
    text = "build:\n  args:\n    - XLA_USE_BF16=1\ncommand: [XLA_USE_BF16=1]\n"
    assert accesses(text) == []


@pytest.mark.parametrize(
    "text",
    [
        "environment:\n  XLA_USE_BF16: ${USE_BF16:-1}\n",
        "environment:\n  - XLA_USE_BF16=$USE_BF16\n",
        "env:\n- name: XLA_USE_BF16\n  value: $(USE_BF16)\n",
        "env:\n  XLA_USE_BF16: ${{ matrix.bf16 }}\n",
    ],
)
def test_values_expanded_at_run_time_are_unknown(text: str) -> None:
    access = only(text)
    assert access.value is not None and access.value.candidates is None


def test_an_anchored_block_is_reported_once() -> None:
    text = (
        "x: &env\n  XLA_USE_BF16: '1'\na:\n  environment: *env\nb:\n  environment:\n    <<: *env\n"
    )
    assert text[only(text).start :].startswith("XLA_USE_BF16: '1'")


def test_removing_the_only_entry_leaves_an_empty_collection_not_null() -> None:
    text = "a:\n  environment:  # precision\n    # bf16\n    XLA_USE_BF16: '1'\n  image: x\n"
    assert (
        removed(text, only(text)) == "a:\n  environment: {}  # precision\n    # bf16\n  image: x\n"
    )
    text = "env: &e\n- name: XLA_USE_BF16\n  value: '1'\nnext: 1\n"
    assert removed(text, only(text)) == "env: &e []\nnext: 1\n"


def test_flow_collections_lose_the_entry_and_one_comma() -> None:
    text = "env: {A: b, XLA_USE_BF16: '1'}\n"
    assert removed(text, only(text)) == "env: {A: b}\n"
    text = "environment: [XLA_USE_BF16=1, A=b]\n"
    assert removed(text, only(text)) == "environment: [A=b]\n"
    text = "env: [{name: XLA_USE_BF16, value: '1'}]\n"
    assert removed(text, only(text)) == "env: []\n"


def test_an_entry_sharing_its_line_with_a_dash_is_not_removed_alone() -> None:
    assert only("- XLA_USE_BF16: 1\n").removal is None


# GitHub Actions -------------------------------------------------------------------------------


def test_github_actions_env_at_every_level() -> None:
    text = yaml(
        """
        env:
          XLA_USE_BF16: "1"
        jobs:
          test:
            env:
              XLA_DOWNCAST_BF16: "0"
            steps:
              - run: python train.py --steps 1
                env:
                  XLA_USE_FP16: true
        """
    )
    found = accesses(text)
    assert [(a.variable, a.value and a.value.literal) for a in found] == [
        ("XLA_USE_BF16", "1"),
        ("XLA_DOWNCAST_BF16", "0"),
        ("XLA_USE_FP16", "true"),  # torch-xla reads "true" as on
    ]
    assert [a.launched for a in found] == [("<repository root>/train.py",)] * 3  # the checkout


# Configs that set the flag for the user -------------------------------------------------------


def test_ndt_config_keys_stand_for_the_flags_and_are_manual() -> None:
    text = "precision:\n  type: manual\n  xla_use_bf16: '1'\n  xla_downcast_bf16: 0\n"
    found = accesses(text)
    assert [(a.variable, a.form, a.applicability) for a in found] == [
        ("XLA_USE_BF16", "yaml-config", "manual"),
        ("XLA_DOWNCAST_BF16", "yaml-config", "manual"),
    ]
    assert text[found[0].start : found[0].end] == "xla_use_bf16"
    assert "NeuronX-Distributed-Training config key" in found[0].note
    assert all(a.removal is None and a.assignment is None for a in found)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ("distributed_type: TPU\nmixed_precision: bf16\n", ("XLA_USE_BF16", "mixed_precision")),
        ("distributed_type: XLA\ndowncast_bf16: 'no'\nmixed_precision: 'bf16'\n",
         ("XLA_USE_BF16", "mixed_precision")),
        ("distributed_type: XLA\ndowncast_bf16: 'yes'\nmixed_precision: bf16\n",
         ("XLA_DOWNCAST_BF16", "downcast_bf16")),
        ("distributed_type: MULTI_GPU\nmixed_precision: bf16\n", None),
        ("distributed_type: TPU\nmixed_precision: 'no'\ndowncast_bf16: 'yes'\n", None),
    ],
)  # fmt: skip
def test_accelerate_bf16_on_xla_is_a_manual_write(
    config: str, expected: tuple[str, str] | None
) -> None:
    found = accesses(config)
    if expected is None:
        assert found == []
        return
    (access,) = found
    assert (access.variable, config[access.start : access.end]) == expected
    assert access.applicability == "manual" and "accelerate sets the legacy flag" in access.note
    assert access.value is not None and access.value.literal == "1"


def test_manual_configs_are_left_unchanged_by_every_mode(catalogue: Catalogue) -> None:
    text = "distributed_type: TPU\nmixed_precision: bf16\nprecision:\n  xla_use_bf16: '1'\n"
    for mode in MODES:
        assert rewrite(text, mode, catalogue) == text


# Streams, line ends, broken files -------------------------------------------------------------


def test_every_document_of_a_stream_is_read() -> None:
    text = (
        "kind: ConfigMap\ndata:\n  XLA_USE_BF16: '1'\n---\nenv:\n- name: XLA_USE_F16\n  value: 1\n"
    )
    found = accesses(text)
    assert [(a.variable, LineIndex(text).position(a.start)) for a in found] == [
        ("XLA_USE_BF16", (3, 3)),
        ("XLA_USE_F16", (6, 9)),
    ]


def test_crlf_offsets_and_edits_keep_the_line_ends(catalogue: Catalogue) -> None:
    text = K8S.replace("\n", "\r\n")
    access = only(text)
    assert text[access.start : access.end] == "XLA_USE_BF16"
    after = removed(text, access)
    assert "XLA_USE_BF16" not in after and after.count("\r\n") == after.count("\n")
    rewritten = rewrite(text, "full-bf16", catalogue)
    assert f'- name: {STOCHASTIC_ROUNDING}\r\n          value: "1"  # legacy\r\n' in rewritten
    assert "\n" not in rewritten.replace("\r\n", "")


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ("a: 'unclosed\nXLA_USE_BF16: 1\n", 3, 1),  # the end of the stream
        ("a:\n\tXLA_USE_BF16: 1\n", 2, 1),
        ("env:\n  XLA_USE_BF16: 1\n bad: 2\n", 3, 2),
        ("x: *missing\nXLA_USE_BF16: 1\n", 1, 4),
        ("XLA_USE_BF16: \x07\n", 1, 15),
        ("env:\n  XLA_USE_BF16: 1\n  XLA_USE_BF16: 2\n", 3, 3),  # the second of the keys
    ],
)
def test_invalid_yaml_is_a_problem_where_the_parser_stopped_and_no_accesses(
    text: str, line: int, column: int
) -> None:
    analysis = analyse(text, NAMES)
    assert analysis.accesses == ()
    (problem,) = analysis.problems
    assert (problem.line, problem.column) == (line, column) and problem.message


@pytest.mark.parametrize("depth", [201, 400])
def test_nesting_too_deep_for_the_parser_is_a_problem_not_a_crash(depth: int) -> None:
    analysis = analyse("[" * depth + "XLA_USE_BF16" + "]" * depth, NAMES)
    assert analysis.accesses == ()
    (problem,) = analysis.problems
    assert problem.line == 1 and "depth" in problem.message


def test_a_broken_file_is_reported_by_scan_with_its_line_column_and_ruamels_words(
    catalogue: Catalogue,
) -> None:
    data = b"env:\n  XLA_USE_BF16: [1\n  other: 2\n"
    result = scan_source("k.yaml", data, "yaml", catalogue, frozenset(catalogue.rules))
    assert result.findings == ()
    ((error,),) = [result.errors]
    assert (error.code, error.line, error.column) == ("XM901", 3, 8)  # the `:` in the sequence
    assert error.message == (
        "could not parse: expected ',' or ']', but got ':' while parsing a flow sequence"
    )


def test_files_that_name_no_flag_are_not_parsed() -> None:
    assert analyse("a: [unclosed\n", NAMES).problems == ()


def test_ruamel_is_imported_only_when_a_file_is_analysed() -> None:
    code = "import sys, xlamigrate.kinds.yaml, xlamigrate.cli; print('ruamel' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# Rendering ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("syntax", "value", "expected"),
    [
        ("{name:}: {value:}", "--auto-cast=none", "FLAGS: --auto-cast=none"),
        ("{name:}: {value:}", "1", 'FLAGS: "1"'),  # a plain 1 would be an int
        ("{name:}: {value:}", "true", 'FLAGS: "true"'),
        ("{name:}: {value:}", "--a --b", 'FLAGS: "--a --b"'),
        ("{name:}: {value:'}", "it's", "FLAGS: 'it''s'"),
        ('{name:"}: {value:"}', 'say "hi"', '"FLAGS": "say \\"hi\\""'),
        ("{{literal}} {entry:}", "1", "{literal} FLAGS=1"),
        ("{entry:}", "--a --b", '"FLAGS=--a --b"'),
    ],
)
def test_render_keeps_the_quoting_unless_the_value_needs_quotes(
    syntax: str, value: str, expected: str
) -> None:
    assert render(syntax, "FLAGS", value) == expected
    assert render(syntax, "FLAGS", value, append=True) == expected  # YAML cannot append


def test_autocast_merges_into_a_folded_block_value(catalogue: Catalogue) -> None:
    text = yaml(
        """
        services:
          train:
            environment:
              XLA_USE_BF16: "1"
              NEURON_CC_FLAGS: >-
                --model-type=transformer
                --auto-cast=matmult

              # logging
              LOG_LEVEL: info
        """
    )
    assert rewrite(text, "autocast", catalogue) == yaml(
        """
        services:
          train:
            environment:
              NEURON_CC_FLAGS: "--model-type=transformer --auto-cast=none"

              # logging
              LOG_LEVEL: info
        """
    )


# The rewrite fixtures -------------------------------------------------------------------------

REWRITES = snapshots.rewrites(".yaml")


def rewritten_lines(text: str) -> set[int]:
    """The lines of the input that a rewrite may drop or replace: those of legacy writes."""
    index = LineIndex(text)
    lines: set[int] = set()
    for access in analyse(text, NAMES).accesses:
        if access.variable not in LEGACY:
            continue
        ranges = [access.assignment] if access.assignment else []
        if access.removal is not None:
            ranges.append((access.removal.start, access.removal.end))
        for start, end in ranges:
            first, last = index.position(start)[0], index.position(max(start, end - 1))[0]
            lines.update(range(first, last + 1))
    return lines


def test_there_are_yaml_rewrite_fixtures_in_every_mode() -> None:
    for mode in MODES:
        assert len(snapshots.cases(mode, ".yaml")) >= 4, mode


@pytest.mark.parametrize(("mode", "case"), REWRITES, ids=lambda p: getattr(p, "name", p))
def test_rewritten_yaml_loads_and_keeps_the_comments_of_what_stayed(mode: str, case: Path) -> None:
    source = case.read_text(encoding="utf-8")
    result = snapshots.rewritten(snapshots.case_name(case), mode).decode("utf-8")
    list(YAML(typ="rt").load_all(result))  # every document still loads
    dropped = rewritten_lines(source)
    kept = Counter(comment for line, comment in hash_comments(source) if line not in dropped)
    assert kept <= Counter(comment for _, comment in hash_comments(result))


def test_neuron_cc_flags_from_another_variable_is_reported_not_dropped(
    catalogue: Catalogue,
) -> None:
    text = (
        "apiVersion: batch/v1\nkind: Job\nspec:\n  template:\n    spec:\n      containers:\n"
        "        - name: train\n          env:\n"
        "            - name: NEURON_CC_FLAGS\n              value: $(BASE_FLAGS) -O1\n"
        '            - name: XLA_USE_BF16\n              value: "1"\n'
        '          command: ["python", "train.py"]\n'
    )
    outcome = rewrite_source(
        "job.yaml",
        text.encode(),
        "yaml",
        catalogue,
        frozenset(catalogue.rules),
        "autocast",
        context=RECIPE_APPLIED,
    )
    assert outcome.rewritten is not None
    assert "XLA_USE_BF16" not in outcome.rewritten.decode()
    assert [(f.code, f.span.line) for f in outcome.remaining] == [("XM407", 9)]
