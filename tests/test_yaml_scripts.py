"""YAML kind, shell scripts: the `run:` of GitHub Actions, GitLab CI `script:` lists, and the
`bash -c` string of a Kubernetes, Argo or compose command go through the one shell engine, mapped
character by character to the YAML file, so findings land on the flag and edits keep the
scalar's quoting."""

from __future__ import annotations

import shutil
import subprocess
import sys
from difflib import SequenceMatcher
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests import snapshots
from tests.test_yaml_env import NAMES, accesses, only, removed, rewrite, yaml
from xlamigrate.catalogue import Catalogue
from xlamigrate.kinds.textaccess import LineIndex, TextAccess
from xlamigrate.kinds.yaml.analysis import analyse
from xlamigrate.kinds.yaml.nodes import Node, compose, each_node, fields
from xlamigrate.kinds.yaml.nodetext import Positions
from xlamigrate.kinds.yaml.scalar import scalar_source
from xlamigrate.kinds.yaml.scripts import Scripts
from xlamigrate.kinds.yaml.sites import find_sites
from xlamigrate.neuronflags import NEURON_CC_FLAGS, STOCHASTIC_ROUNDING


def at(text: str, access: TextAccess) -> tuple[int, int]:
    return LineIndex(text).position(access.start)


def documents(text: str) -> list[Node]:
    found = compose(text)
    assert not isinstance(found, tuple), found
    return found


# Scalars as mapped texts ----------------------------------------------------------------------

SCALARS = [
    "k: plain text\n",
    "k: plain\n  folded   over\n\n  lines\n",
    "k: 'it''s  \n\n   single'\n",
    'k: "tab\\t hex\\x41 \\u00e9 \\U0001F600 \\" \\/ \\\\ \\N"\n',
    'k: "folded  \n   and\\\n   escaped\\ \n  break"\n',
    "k: |\n  line\n    more indented\n\n  last\n\n",
    "k: |-\n  strip\n\n",
    "k: |+\n  keep\n\n\nnext: 1\n",
    "k: |2\n    leading spaces kept\n  then\n",
    "k: >\n  folded\n  text\n\n  new paragraph\n    spaced\n  back\n",
    "k: >-\n  a\n  b\n",
    "k: |\r\n  crlf\r\n  lines\r\n",
    "k: [bash, -c, 'x && y', \"z\"]\n",
    "- - |\n    nested\n    block\n",
]


@pytest.mark.parametrize("text", SCALARS)
def test_every_scalar_style_maps_each_character_to_where_it_is_written(text: str) -> None:
    for node in each_node(documents(text)):
        if node.id != "scalar" or node.value == "k":
            continue
        source = scalar_source(text, node, flow=False)
        assert source.editable, repr(text)
        value = str(node.value).replace("\a", "")
        assert source.text == value
        assert source.starts is not None and source.ends is not None
        previous_end = 0
        for char, start, end in zip(source.text, source.starts, source.ends, strict=True):
            written = text[start:end]
            assert previous_end <= start < end
            previous_end = end
            if char in " \n" and "\n" in written:  # a fold, or a line break with its blanks
                assert not written.strip(" \t\r\n")
            elif written != char:  # an escape or a doubled quote
                assert written.startswith("\\") or written == "''", (char, written)


@pytest.mark.parametrize(
    ("text", "encodings"),
    [
        ("k: plain\n", ("yaml-plain",)),
        ("k: [plain]\n", ("yaml-flow-plain",)),
        ("k: 'single'\n", ("yaml-single",)),
        ('k: "double"\n', ("yaml-double",)),
        ("k:\n    - |\n      literal\n", ("indent:6",)),
        ("k: >\n   folded\n", ("line", "indent:3")),
    ],
)
def test_each_scalar_style_names_the_encoding_a_replacement_goes_through(
    text: str, encodings: tuple[str, ...]
) -> None:
    (node,) = [n for n in each_node(documents(text)) if n.id == "scalar"]
    flow = "[" in text
    assert scalar_source(text, node, flow=flow).encodings == encodings


def test_a_scalar_read_otherwise_than_the_map_says_is_for_findings_only() -> None:
    """Where ruamel.yaml's string differs from the decoded one, nothing is edited."""
    host = "k: export XLA_USE_BF16=1\n"
    mark = SimpleNamespace
    node: Any = SimpleNamespace(
        id="scalar",
        tag="tag:yaml.org,2002:str",
        value="export XLA_USE_BF16=0",
        start_mark=mark(index=3),
        end_mark=mark(index=24),
        style=None,
        flow_style=None,
    )
    source = scalar_source(host, node, flow=False)
    assert source.text == "export XLA_USE_BF16=0" and not source.editable
    assert source.span(7, 19) == (3, 24)  # the whole scalar: the finding is on its line


# GitHub Actions -------------------------------------------------------------------------------

WORKFLOW = yaml(
    """
    on: [push]
    jobs:
      train:
        runs-on: ubuntu-latest
        env:
          PJRT_DEVICE: NEURON
        steps:
          - name: Train
            run: |
              # the legacy switch
              export XLA_USE_BF16=1
              python train.py
    """
)


def test_actions_run_block_finding_is_on_the_flag_own_line_and_column() -> None:
    access = only(WORKFLOW)
    assert (access.variable, access.form) == ("XLA_USE_BF16", "export")
    assert at(WORKFLOW, access) == (11, 18)
    assert WORKFLOW[access.start : access.end] == "XLA_USE_BF16=1"
    assert access.syntax == "shell:export|indent:10"
    assert access.launched == ("<repository root>/train.py",)  # a step runs in the checkout


def test_actions_run_block_edits_are_whole_lines_at_the_block_indentation(
    catalogue: Catalogue,
) -> None:
    assert removed(WORKFLOW, only(WORKFLOW)) == WORKFLOW.replace(
        "          export XLA_USE_BF16=1\n", ""
    )
    rewritten = rewrite(WORKFLOW, "autocast", catalogue)
    assert f'          export {NEURON_CC_FLAGS}="${{{NEURON_CC_FLAGS}:-}} --auto-cast=none"\n' in (
        rewritten
    )


def test_the_env_of_a_job_names_what_its_steps_run_through_the_launch_model() -> None:
    text = WORKFLOW.replace("PJRT_DEVICE: NEURON", "XLA_DOWNCAST_BF16: '1'")
    job_env, _ = accesses(text)
    assert job_env.form == "yaml-map" and job_env.launched == ("<repository root>/train.py",)


@pytest.mark.parametrize(
    ("run", "column"),
    [
        ("run: XLA_USE_BF16=1 python train.py", 14),
        ("run: 'cd src; export XLA_USE_BF16=1'", 30),
        ('run: "cd src\\n  export XLA_USE_BF16=1"', 32),
        ("run: >\n          export XLA_USE_BF16=1", 18),
        ("{run: XLA_USE_BF16=1 python train.py}", 15),
    ],
)
def test_actions_run_in_every_scalar_style(run: str, column: int) -> None:
    text = f"jobs:\n  a:\n    steps:\n      - {run}\n"
    access = only(text)
    assert at(text, access) == (4 + run.count("\n"), column)
    assert text[access.start :].startswith("XLA_USE_BF16=1")


def test_actions_expressions_are_opaque_words_and_a_flag_in_one_is_a_mention() -> None:
    text = yaml(
        """
        jobs:
          a:
            steps:
              - run: export XLA_USE_BF16=${{ matrix.bf16 }} && python t.py ${{ env.XLA_USE_FP16 }}
        """
    )
    analysis = analyse(text, NAMES)
    (access,) = analysis.accesses
    assert access.value is not None and access.value.candidates is None
    assert access.applicability is None  # no syntax error near it: the expression is one word
    (mention,) = analysis.mentions
    assert mention.variable == "XLA_USE_FP16"
    assert text[mention.start : mention.end] == "XLA_USE_FP16"


@pytest.mark.parametrize(
    "job",
    [
        "steps:\n      - shell: pwsh\n        run: $env:XLA_USE_BF16 = 1",
        "steps:\n      - shell: python\n        run: XLA_USE_BF16 = 1",
        "runs-on: windows-latest\n    steps:\n      - run: set XLA_USE_BF16=1",
        "defaults: {run: {shell: cmd}}\n    steps:\n      - run: set XLA_USE_BF16=1",
    ],
)
def test_steps_whose_shell_is_not_a_posix_shell_are_not_read(job: str) -> None:
    assert analyse(f"jobs:\n  a:\n    {job}\n", NAMES).accesses == ()


def test_a_windows_job_that_asks_for_bash_is_read() -> None:
    text = "jobs:\n  a:\n    runs-on: windows-2022\n    steps:\n      - shell: bash\n"
    text += "        run: export XLA_USE_BF16=1\n"
    assert only(text).variable == "XLA_USE_BF16"


def test_removing_the_only_command_of_a_plain_run_leaves_a_no_op() -> None:
    text = "jobs:\n  a:\n    steps:\n      - run: export XLA_USE_BF16=1  # bf16\n"
    assert removed(text, only(text)) == "jobs:\n  a:\n    steps:\n      - run: ':'  # bf16\n"


def test_a_script_bash_rejects_is_a_problem_on_its_yaml_line() -> None:
    text = "jobs:\n  a:\n    steps:\n      - run: |\n          export XLA_USE_BF16=1\n"
    text += "          python t.py )\n"
    analysis = analyse(text, NAMES)
    (problem,) = analysis.problems
    assert (problem.line, problem.column) == (6, 23)  # the `)`, in the YAML file
    assert problem.message == "bash: syntax error near unexpected token `)'"


# GitLab CI ------------------------------------------------------------------------------------

GITLAB = yaml(
    """
    train:
      before_script:
        - export XLA_DOWNCAST_BF16=1
      script:
        - cd training
        - torchrun --nproc_per_node=2 train.py
      after_script:
        - python report.py
    """
)


def test_gitlab_items_of_one_job_share_a_shell_and_name_what_later_items_run() -> None:
    access = only(GITLAB)
    assert at(GITLAB, access) == (3, 14)
    # (the `cd` of one item moves the shell the next item runs in; not report.py:
    # after_script is another shell)
    assert access.launched == ("training/train.py",)


def test_a_gitlab_items_cd_moves_the_items_after_it() -> None:
    text = yaml(
        """
        train:
          script:
            - cd jobs/llama
            - XLA_USE_BF16=1 python train.py
            - cd "$SOMEWHERE"
            - XLA_USE_BF16=1 python eval.py
        other:
          script:
            - XLA_USE_BF16=1 python train.py
        """
    )
    first, second, third = accesses(text)
    assert first.launched == ("jobs/llama/train.py",)
    (unknown,) = second.launched  # (moved to a folder not known here, and said where)
    assert unknown.startswith('<folder not known: `cd "$SOMEWHERE"` at line 5 ')
    assert unknown.endswith(">/eval.py")
    assert third.launched == ("train.py",)  # (another job: another shell)


def test_gitlab_item_removal_takes_its_line_and_an_only_item_keeps_a_no_op() -> None:
    assert removed(GITLAB, only(GITLAB)) == GITLAB.replace("export XLA_DOWNCAST_BF16=1", "':'")
    text = "job:\n  script:\n    - export XLA_USE_BF16=1\n    - python t.py\n"
    assert removed(text, only(text)) == "job:\n  script:\n    - python t.py\n"
    text = "job:\n  script:\n    - export XLA_USE_BF16=1  # bf16\n"
    assert removed(text, only(text)) == "job:\n  script:\n    - ':'  # bf16\n"


def test_gitlab_script_as_a_string_a_flow_list_and_a_list_nested_by_an_anchor() -> None:
    text = yaml(
        """
        .env: &env
          - export XLA_USE_BF16=1
        a:
          script: ["export XLA_DOWNCAST_BF16=1", python t.py]
        b:
          script:
            - *env
            - python t.py
        c:
          script: XLA_USE_FP16=1 python t.py
        """
    )
    found = accesses(text)
    assert [(a.variable, at(text, a)) for a in found] == [
        ("XLA_USE_BF16", (2, 12)),
        ("XLA_DOWNCAST_BF16", (4, 20)),
        ("XLA_USE_FP16", (10, 11)),
    ]
    assert removed(text, found[1]) == text.replace('"export XLA_DOWNCAST_BF16=1", ', "")


def test_a_tagged_list_is_another_tool_s_to_read() -> None:
    text = "a:\n  script: !reference [.setup, XLA_USE_BF16=1]\n"
    assert accesses(text) == []


# Kubernetes, Argo ------------------------------------------------------------------------------

POD = yaml(
    """
    apiVersion: v1
    kind: Pod
    spec:
      containers:
        - name: trainer
          command: ["bash", "-c", "python prepare.py; export XLA_USE_BF16=1 && python train.py"]
          env:
            - name: XLA_DOWNCAST_BF16
              value: "1"
    """
)


def test_kubernetes_bash_c_string_is_a_script_mapped_into_the_yaml_string() -> None:
    access = next(a for a in accesses(POD) if a.form == "export")
    assert at(POD, access) == (6, 58)
    assert access.syntax == "shell:export|kubernetes|yaml-double"
    assert access.launched == ("<image>train.py",)  # from the image's WORKDIR


def test_a_container_env_entry_names_what_the_bash_c_string_runs() -> None:
    entry = next(a for a in accesses(POD) if a.form == "yaml-env-list")
    assert entry.launched == ("<image>prepare.py", "<image>train.py")


def test_a_container_launches_the_script_it_runs_not_the_files_its_arguments_name() -> None:
    text = yaml(
        """
        containers:
          - command: [torchrun, --nproc_per_node=2, train.py, --eval-script, evaluate.py]
            env: [{name: XLA_USE_BF16, value: "1"}]
        """
    )
    assert only(text).launched == ("train.py",)


def test_kubernetes_command_and_args_form_one_argv() -> None:
    text = yaml(
        """
        containers:
          - name: a
            command: ["/bin/sh", "-c"]
            args: [ "XLA_USE_BF16=1 torchrun --nproc_per_node=2 train.py" ]
          - name: b
            command: [bash]
            args: [-c, 'export XLA_DOWNCAST_BF16=1']
          - name: c
            command: [python, -c, "import os; os.environ['XLA_USE_FP16'] = '1'"]
        """
    )
    found = accesses(text)
    assert [(a.variable, a.form, at(text, a)) for a in found] == [
        ("XLA_USE_BF16", "prefix", (4, 14)),
        ("XLA_DOWNCAST_BF16", "export", (7, 24)),
    ]
    assert found[0].launched == ("train.py",)
    assert analyse(text, NAMES).mentions == ()  # python -c is not a shell string


def test_kubernetes_dollars_are_read_as_kubernetes_writes_them() -> None:
    """`$$` is a `$` to the shell: `$$XLA_USE_BF16` is a read; a replacement's `$(` doubles."""
    text = 'apiVersion: v1\ncommand: [bash, -c, "echo $$XLA_USE_BF16 > /tmp/$$(hostname)"]\n'
    (read,) = accesses(text)
    assert read.kind == "read" and text[read.start : read.end] == "$$XLA_USE_BF16"


def test_a_plain_word_in_a_flow_sequence_takes_no_flow_indicators(catalogue: Catalogue) -> None:
    text = "apiVersion: v1\ncommand: [bash, -c, XLA_USE_BF16=1 python t.py]\n"
    access = only(text)
    assert access.syntax == "shell:prefix|kubernetes|yaml-flow-plain"
    assert rewrite(text, "full-bf16", catalogue) == text.replace(
        "XLA_USE_BF16", STOCHASTIC_ROUNDING
    )
    # the autocast recipe's `${NEURON_CC_FLAGS:-}` cannot be written in a flow plain scalar
    assert rewrite(text, "autocast", catalogue) == text


def test_argo_parameters_are_unknown_values_and_a_script_template_source_is_read() -> None:
    text = yaml(
        """
        apiVersion: argoproj.io/v1alpha1
        kind: Workflow
        spec:
          templates:
            - name: train
              container:
                command: [sh, -c]
                args: ["export XLA_USE_BF16={{inputs.parameters.bf16}} && python t.py"]
            - name: evaluate
              script:
                command: [bash]
                source: |
                  export XLA_DOWNCAST_BF16=1
                  python evaluate.py
        """
    )
    parameter, source = accesses(text)
    assert parameter.value is not None and parameter.value.candidates is None
    assert (source.variable, at(text, source)) == ("XLA_DOWNCAST_BF16", (13, 18))
    assert source.launched == ("<image>evaluate.py",)


def test_args_that_are_not_a_shell_string_are_not_scripts() -> None:
    text = "apiVersion: v1\ncommand: [python, train.py]\nargs: ['XLA_USE_BF16=1']\n"
    assert accesses(text) == []


# docker compose -------------------------------------------------------------------------------


def test_compose_string_command_is_read_as_a_command_line(catalogue: Catalogue) -> None:
    text = yaml(
        """
        services:
          train:
            command: bash -c "export XLA_USE_BF16=1 && python train.py --log $${HOME}/log"
        """
    )
    access = only(text)
    assert at(text, access) == (3, 30)
    assert access.syntax == "shell:export|shell-double|compose|yaml-plain"
    assert access.launched == ("<image>train.py",)
    rewritten = rewrite(text, "autocast", catalogue)
    # compose turns `$$` into the `$` that bash -c expands; the other `$$` stays as written
    assert 'NEURON_CC_FLAGS=\\"\\$${NEURON_CC_FLAGS:-} --auto-cast=none\\"' in rewritten
    assert "--log $${HOME}/log" in rewritten


def test_compose_entrypoint_and_command_lists_form_one_argv() -> None:
    text = yaml(
        """
        services:
          a:
            entrypoint: ["/bin/sh", "-c"]
            command: ["XLA_DOWNCAST_BF16=1 python evaluate.py"]
            environment:
              - XLA_USE_BF16=1
        """
    )
    script, entry = accesses(text)
    assert (script.form, at(text, script)) == ("prefix", (4, 16))
    assert entry.form == "yaml-list" and entry.launched == ("<image>evaluate.py",)


# Edits are checked against the YAML they land in -----------------------------------------------


def test_an_edit_that_would_leave_a_plain_scalar_starting_with_a_quote_is_refused() -> None:
    text = 'jobs:\n  a:\n    steps:\n      - run: export XLA_USE_BF16=1 && "$PY" train.py\n'
    assert only(text).removal is None


def test_an_edit_that_would_move_a_block_s_indentation_is_refused() -> None:
    text = yaml(
        """
        jobs:
          a:
            steps:
              - run: |
                  export XLA_USE_BF16=1
                    python train.py \\
                  --epochs 3
        """
    )
    assert only(text).removal is None


@pytest.mark.parametrize(
    ("run", "left"),
    [
        ("|2\n            indented\n          export XLA_USE_BF16=1\n          python t.py",
         "  indented\npython t.py\n"),
        ('"export XLA_USE_BF16=1\\n\\\n          python t.py"', "python t.py"),
        ("'export XLA_USE_BF16=1;\n          python t.py'", "python t.py"),
        ("export XLA_USE_BF16=1 &&\n          python t.py", "python t.py"),
        (">\n          export XLA_USE_BF16=1 &&\n          python t.py", "python t.py\n"),
    ],
)  # fmt: skip
def test_removals_in_multi_line_scalars_leave_the_rest_of_the_script(run: str, left: str) -> None:
    text = f"jobs:\n  a:\n    steps:\n      - run: {run}\n"
    after = removed(text, only(text))
    (step,) = fields(fields(fields(documents(after)[0])["jobs"])["a"])["steps"].value
    assert str(fields(step)["run"].value).replace("\a", "") == left


# Start-up -------------------------------------------------------------------------------------


def test_the_shell_engine_is_imported_only_for_a_yaml_file_that_runs_a_flag() -> None:
    code = (
        "import sys\n"
        "from xlamigrate.kinds.yaml.analysis import analyse\n"
        "analyse('env:\\n  XLA_USE_BF16: 1\\n', frozenset({'XLA_USE_BF16'}))\n"
        "print('tree_sitter' in sys.modules)\n"
        "analyse('steps:\\n- run: export XLA_USE_BF16=1\\n', frozenset({'XLA_USE_BF16'}))\n"
        "print('tree_sitter' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


# The rewrite fixtures -------------------------------------------------------------------------

REWRITES = snapshots.rewrites(".yaml")


def rewritten(mode: str, case: Path) -> str:
    return snapshots.rewritten(snapshots.case_name(case), mode).decode("utf-8")


def scripts_of(text: str) -> list[str]:
    """The shell text of every script the file runs, as the engine reads it."""
    reader = Scripts(text, NAMES)
    return [
        reader.source(script).shell.text
        for document in documents(text)
        for site in find_sites(document, Positions(text))
        for script in site.scripts
    ]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash here")
@pytest.mark.parametrize(("mode", "case"), REWRITES, ids=lambda p: getattr(p, "name", p))
def test_rewritten_yaml_scripts_are_accepted_by_bash(mode: str, case: Path) -> None:
    for script in scripts_of(rewritten(mode, case)):
        result = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
        assert result.returncode == 0, (script, result.stderr)


@pytest.mark.parametrize(("mode", "case"), REWRITES, ids=lambda p: getattr(p, "name", p))
def test_rewrites_of_crlf_files_are_the_same_with_crlf_line_ends(
    mode: str, case: Path, catalogue: Catalogue
) -> None:
    crlf = case.read_text(encoding="utf-8").replace("\n", "\r\n")
    expected = rewritten(mode, case).replace("\n", "\r\n")
    assert rewrite(crlf, mode, catalogue) == expected


def scalar_styles(text: str) -> set[tuple[str, str | None, int]]:
    """Every scalar's string with its quoting and its first line."""
    return {
        (str(node.value), node.style, node.start_mark.line + 1)
        for node in each_node(documents(text))
        if node.id == "scalar"
    }


@pytest.mark.parametrize(("mode", "case"), REWRITES, ids=lambda p: getattr(p, "name", p))
def test_rewrites_change_only_the_lines_of_flag_writes_and_keep_every_quoting(
    mode: str, case: Path
) -> None:
    source = case.read_text(encoding="utf-8")
    result = rewritten(mode, case)
    index = LineIndex(source)
    allowed: set[int] = set()
    # (an NxDT config's fix is its mode's precision.type)
    for access in analyse(source, NAMES, mode=mode).accesses:
        spans = [(access.start, access.end)]
        if access.assignment:
            spans.append(access.assignment)
        if access.removal:
            spans.append((access.removal.start, access.removal.end))
        for start, end in spans:
            first, last = index.position(start)[0], index.position(max(start, end - 1))[0]
            allowed.update(range(first, last + 1))
    before, after = source.splitlines(), result.splitlines()
    unchanged: set[int] = set()  # lines of the result, 1-based
    for tag, first, last, out_first, out_last in SequenceMatcher(None, before, after).get_opcodes():
        if tag == "equal":
            unchanged.update(range(out_first + 1, out_last + 1))
            continue
        changed = set(range(first + 1, last + 1)) or {first, first + 1}
        assert changed & allowed, (case.name, before[first:last])
        assert changed <= allowed | {first}, (case.name, before[first:last])
    written = scalar_styles(source)
    strings = {string for string, _, _ in written}
    kept = {
        (string, style)
        for string, style, line in scalar_styles(result)
        if string in strings and line in unchanged
    }
    assert kept <= {(string, style) for string, style, _ in written}


def test_a_null_args_does_not_hide_a_container_script_nor_its_ssh_here_document(
    catalogue: Catalogue,
) -> None:
    from xlamigrate.engine import scan_source

    case = snapshots.case_input("kubernetes_null_args_tpu_job")
    result = scan_source(case.name, case.read_bytes(), "yaml", catalogue, catalogue.select((), ()))
    found = {(f.span.line, f.code): f.message for f in result.findings}
    assert "XRT_TPU_CONFIG" in found[(20, "XM503")]
    assert "in a command run on another machine (`ssh`)" in found[(21, "XM102")]
