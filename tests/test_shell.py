"""Shell scripts: what the shell engine (`kinds.shell.analysis`) finds (offsets, values, forms,
the scripts a command launches, how each write is removed), how it recovers around syntax
errors, and the rewritten `.out.sh` fixtures."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import snapshots
from tests.conftest import RECIPE_APPLIED
from xlamigrate.catalogue import Catalogue
from xlamigrate.engine import rewrite_source, scan_source
from xlamigrate.kinds.embedded import Embedded
from xlamigrate.kinds.launch import OWN_FOLDER
from xlamigrate.kinds.shell.analysis import analyse, analyse_source
from xlamigrate.kinds.shell.auto_cast import auto_cast_none_edits
from xlamigrate.kinds.shell.render import render
from xlamigrate.kinds.shell.syntax import parse
from xlamigrate.kinds.shell.words import literal
from xlamigrate.kinds.textaccess import TextAccess, TextEdit, apply_edits, hash_comments
from xlamigrate.suppression import parse_suppressions

LEGACY = frozenset(
    {"XLA_USE_BF16", "XLA_DOWNCAST_BF16", "XLA_USE_FP16", "XLA_DOWNCAST_FP16", "XLA_USE_F16"}
)
NAMES = LEGACY | {"NEURON_CC_FLAGS", "NEURON_RT_STOCHASTIC_ROUNDING_EN"}
FLAG = re.compile(r"\bXLA_(?:USE|DOWNCAST)_(?:BF16|FP16|F16)\b")
REWRITES = snapshots.rewrites(".sh")


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


@pytest.fixture(autouse=True)
def no_hang() -> Iterator[None]:
    """A test that hangs (a parser loop) fails instead."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def fail(*_: object) -> None:
        raise TimeoutError("analyse() did not finish in 10 s")

    previous = signal.signal(signal.SIGALRM, fail)
    signal.alarm(10)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# -- the forms -----------------------------------------------------------------------------------


def test_export_is_a_write_at_the_name_removed_with_its_line() -> None:
    text = "set -e\nexport XLA_USE_BF16=1\npython train.py\n"
    access = only(text)
    assert (access.kind, access.form, access.variable) == ("write", "export", "XLA_USE_BF16")
    assert text[access.start : access.end] == "XLA_USE_BF16=1"
    assert access.assignment == (access.start, access.end)
    assert access.value_range is not None and text[slice(*access.value_range)] == "1"
    assert access.value is not None and access.value.candidates == ("1",)
    assert removed(text, access) == "set -e\npython train.py\n"


def test_export_of_several_variables_has_one_access_per_flag_removed_alone() -> None:
    text = 'export PJRT_DEVICE=NEURON XLA_USE_BF16="1" NEURON_RT_NUM_CORES=2\n'
    access = only(text)
    assert text[access.start : access.end] == 'XLA_USE_BF16="1"'
    assert access.value is not None and access.value.literal == "1"
    assert removed(text, access) == "export PJRT_DEVICE=NEURON NEURON_RT_NUM_CORES=2\n"


def test_an_export_of_flags_only_can_go_whole() -> None:
    text = "export XLA_USE_F16=1 XLA_USE_FP16=1\npython train.py\n"
    first, second = accesses(text)
    assert first.container is not None and first.container == second.container
    assert apply_edits(text, [first.container]) == "python train.py\n"
    assert removed(text, first) == "export XLA_USE_FP16=1\npython train.py\n"
    assert removed(text, second) == "export XLA_USE_F16=1\npython train.py\n"


def test_prefix_assignment_is_removed_and_the_command_stays() -> None:
    text = "XLA_USE_BF16=1 python train.py --bf16\n"
    access = only(text)
    assert (access.form, access.syntax, access.launched) == (
        "prefix",
        "shell:prefix",
        ("train.py",),
    )
    assert access.start == 0 and text[access.start : access.end] == "XLA_USE_BF16=1"
    assert removed(text, access) == "python train.py --bf16\n"


def test_two_prefixes_are_removed_without_overlap() -> None:
    text = "XLA_USE_BF16=1 XLA_DOWNCAST_BF16=1 python train.py\n"
    first, second = accesses(text)
    assert first.removal is not None and second.removal is not None
    assert apply_edits(text, [first.removal, second.removal]) == "python train.py\n"


def test_env_command_assignment_and_unset_option() -> None:
    text = "env -u XLA_USE_FP16 XLA_USE_BF16=1 torchrun --nproc_per_node=2 train.py\n"
    unset, write = accesses(text)
    assert (unset.kind, unset.form, text[unset.start : unset.end]) == (
        "delete",
        "env-command",
        "XLA_USE_FP16",
    )
    assert (write.kind, write.form, write.launched) == ("write", "env-command", ("train.py",))
    assert removed(text, write) == "env -u XLA_USE_FP16 torchrun --nproc_per_node=2 train.py\n"
    assert removed(text, unset) == "env XLA_USE_BF16=1 torchrun --nproc_per_node=2 train.py\n"


def test_declare_and_typeset_with_x_are_exports() -> None:
    text = "declare -x XLA_USE_BF16=1\ntypeset -x XLA_DOWNCAST_BF16=0\n"
    first, second = accesses(text)
    assert (first.form, first.syntax, text[first.start : first.end]) == (
        "declare",
        "shell:declare",
        "XLA_USE_BF16=1",
    )
    assert second.value is not None and second.value.enabled is False
    assert removed(text, first) == "typeset -x XLA_DOWNCAST_BF16=0\n"


def test_plain_assignment_is_a_write_whose_replacement_is_exported() -> None:
    text = "XLA_USE_BF16=1\nexport XLA_USE_BF16\n"
    assignment, bare = accesses(text)
    assert (assignment.form, assignment.syntax) == ("assignment", "shell:statement")
    assert render(assignment.syntax, "NEURON_RT_STOCHASTIC_ROUNDING_EN", "1") == (
        "export NEURON_RT_STOCHASTIC_ROUNDING_EN=1"
    )
    # `export X` exports what the shell variable holds: the value of its assignments
    assert (bare.form, text[bare.start : bare.end]) == ("export", "XLA_USE_BF16")
    assert bare.value is not None and bare.value.candidates == ("1",)
    assert removed(text, bare) == "XLA_USE_BF16=1\n"


def test_bare_export_of_an_inherited_flag_has_an_unknown_value() -> None:
    access = only("export XLA_USE_BF16\n")
    assert access.value is not None and access.value.candidates is None


def test_unexporting_a_flag_is_a_delete() -> None:
    text = "export -n XLA_USE_BF16\ndeclare +x XLA_DOWNCAST_BF16\ndeclare XLA_USE_FP16\n"
    first, second = accesses(text)
    assert (first.kind, first.form) == ("delete", "export")
    assert (second.kind, second.form) == ("delete", "declare")


def test_unset_is_a_delete_at_the_name() -> None:
    text = "unset OTHER XLA_USE_BF16\nunset XLA_DOWNCAST_BF16\n"
    first, second = accesses(text)
    assert (first.kind, first.form, text[first.start : first.end]) == (
        "delete",
        "unset",
        "XLA_USE_BF16",
    )
    assert removed(text, first) == "unset OTHER\nunset XLA_DOWNCAST_BF16\n"
    assert removed(text, second) == "unset OTHER XLA_USE_BF16\n"


def test_reads_point_at_the_dollar_and_single_quotes_are_text() -> None:
    text = (
        'echo $XLA_USE_BF16 "${XLA_USE_BF16}" ${XLA_USE_BF16:-0}'
        " '$XLA_USE_BF16' \\$XLA_USE_BF16\n"
    )
    found = accesses(text)
    assert [(a.kind, a.form) for a in found] == [("read", "read")] * 3
    assert [text[a.start : a.end] for a in found] == [
        "$XLA_USE_BF16",
        "${XLA_USE_BF16}",
        "${XLA_USE_BF16:-0}",
    ]


def test_reads_in_tests_arithmetic_and_command_substitutions() -> None:
    text = (
        'if [[ -n "$XLA_USE_BF16" && $X == 1 ]]; then echo on; fi\n'
        "n=$(( XLA_DOWNCAST_BF16 + 1 ))\n"
        "v=$(echo ${XLA_USE_FP16:-0})\n"
    )
    found = accesses(text)
    assert [(a.variable, text[a.start : a.end]) for a in found] == [
        ("XLA_USE_BF16", "$XLA_USE_BF16"),
        ("XLA_DOWNCAST_BF16", "XLA_DOWNCAST_BF16"),
        ("XLA_USE_FP16", "${XLA_USE_FP16:-0}"),
    ]


def test_commented_out_lines_and_lookalike_names_are_not_accesses() -> None:
    text = "# export XLA_USE_BF16=1\n#XLA_USE_BF16=1 python x.py\nexport MY_XLA_USE_BF16=1\n"
    assert accesses(text) == []


def test_values_lose_their_quotes_and_expansions_are_unknown() -> None:
    assert literal('"1"') == "1"
    assert literal("'a b'") == "a b"
    assert literal('a"b"\\ c') == "ab c"
    assert literal('"$HOME/x"') is None
    assert literal("$(cat f)") is None
    access = only("export XLA_USE_BF16=${BF16:-1}\n")
    assert access.value is not None and access.value.candidates is None


# -- where a command sits ------------------------------------------------------------------------


def test_writes_in_if_case_and_function_bodies() -> None:
    text = (
        'if [ -n "$1" ]; then\n  export XLA_USE_BF16=1\nfi\n'
        "case $1 in\n  bf16) export XLA_USE_BF16=1 ;;\n  *)\n    export XLA_DOWNCAST_BF16=1\n"
        "    ;;\nesac\n"
        "setup() {\n  export XLA_USE_BF16=1\n  echo ready\n}\n"
    )
    found = accesses(text)
    assert [text.count("\n", 0, a.start) + 1 for a in found] == [2, 5, 7, 11]
    in_if, in_clause, in_multiline_clause, in_function = found
    # the only command of a `then` body must stay a command
    assert in_if.removal is not None and in_if.removal.replacement == ":"
    # a case clause may be empty; a function with another command loses the line
    assert removed(text, in_clause).splitlines()[4] == "  bf16) ;;"
    assert "export XLA_DOWNCAST_BF16" not in removed(text, in_multiline_clause)
    assert "  export XLA_USE_BF16=1\n  echo ready" not in removed(text, in_function)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "mkdir -p logs && export XLA_USE_BF16=1 && python t.py\n",
            "mkdir -p logs && python t.py\n",
        ),
        ("export XLA_USE_BF16=1; python t.py\n", "python t.py\n"),
        ("cd /x; export XLA_USE_BF16=1\n", "cd /x\n"),
        ("test -f x || export XLA_USE_BF16=1\n", "test -f x || :\n"),
    ],
)
def test_a_command_in_a_list_goes_with_its_operator(text: str, expected: str) -> None:
    assert removed(text, only(text)) == expected


def test_a_command_in_a_pipeline_is_not_removed_alone() -> None:
    assert only("export XLA_USE_BF16=1 | cat\n").removal is None


# -- launched scripts ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "script"),
    [
        ("python train.py --epochs 3", "train.py"),
        ("python3 -u scripts/train.py", "scripts/train.py"),
        ("torchrun --nproc_per_node 32 --nnodes 2 train.py --bf16", "train.py"),
        ("python -m torch.distributed.run --nproc_per_node 2 train.py", "train.py"),
        ("neuron_parallel_compile python train.py", "train.py"),
        ("srun --ntasks 2 torchrun train.py", "train.py"),
        ("./train.py --fast", "./train.py"),
    ],
)
def test_the_script_a_command_launches(command: str, script: str) -> None:
    assert only(f"XLA_USE_BF16=1 {command}\n").launched == (script,)


def test_commands_that_launch_no_python_script() -> None:
    assert only("XLA_USE_BF16=1 python -c 'print(1)'\n").launched == ()
    assert only("XLA_USE_BF16=1 cat train.py\n").launched == ()


def test_an_export_names_the_scripts_run_after_it() -> None:
    text = "python prepare.py\nexport XLA_USE_BF16=1\ntorchrun train.py\npython eval.py\n"
    assert only(text).launched == ("train.py", "eval.py")


# -- the launcher's own folder ------------------------------------------------------------------

SCRIPT_DIR_IDIOMS = [
    'SCRIPT_DIR=$( cd -- "$( dirname -- "${BASH_SOURCE[0]}" )" &> /dev/null && pwd )',
    'SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" >/dev/null 2>&1 && pwd -P)',
    'SCRIPT_DIR=$(dirname "$0")',
    "SCRIPT_DIR=`dirname $0`",
    'SCRIPT_DIR="$(dirname "$(realpath "$0")")"',
    'SCRIPT_DIR=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")',
    'SCRIPT_DIR=$(realpath "$(dirname "$0")")',
    'SCRIPT_DIR=$(cd "$(dirname "$0")"; pwd)',
    "export SCRIPT_DIR=$(cd $(dirname $0) && pwd)",
    "readonly SCRIPT_DIR=$(dirname ${BASH_SOURCE})",
    'SCRIPT_PATH=$(realpath "$0")\nSCRIPT_DIR=$(dirname "$SCRIPT_PATH")',
    'SCRIPT_DIR=$(dirname "$0")\nexport SCRIPT_DIR',
]


def launched(text: str) -> tuple[str, ...]:
    """The Python scripts the flag's export reaches, as the launch model names them."""
    (access,) = [a for a in accesses(text) if a.kind == "write"]
    return access.launched


@pytest.mark.parametrize("idiom", SCRIPT_DIR_IDIOMS)
def test_a_script_folder_variable_names_the_launchers_own_folder(idiom: str) -> None:
    text = f"{idiom}\nexport XLA_USE_BF16=1\ntorchrun --nproc_per_node=2 $SCRIPT_DIR/train.py\n"
    assert launched(text) == (f"{OWN_FOLDER}/train.py",)


@pytest.mark.parametrize(
    ("word", "script"),
    [
        ('"$SCRIPT_DIR/train.py"', "/train.py"),
        ('"${SCRIPT_DIR}/train.py"', "/train.py"),
        ('"${SCRIPT_DIR}"/train.py', "/train.py"),
        ("$SCRIPT_DIR/../pretrain/train.py", "/../pretrain/train.py"),
        ("$ROOT/train.py", "/../train.py"),
        ('"$(dirname "$0")/train.py"', "/train.py"),
        ("$(dirname ${BASH_SOURCE[0]})/tools/train.py", "/tools/train.py"),
        ('"$(cd "$(dirname "$0")/.." && pwd)/train.py"', "/../train.py"),
    ],
)
def test_a_script_path_below_the_launchers_folder(word: str, script: str) -> None:
    text = (
        'SCRIPT_DIR=$(cd "$(dirname "$0")" && pwd)\nROOT=$SCRIPT_DIR/..\n'
        f"export XLA_USE_BF16=1\ntorchrun --nproc_per_node=1 {word} --steps 20\n"
    )
    assert launched(text) == (OWN_FOLDER + script,)


@pytest.mark.parametrize(
    "text",
    [
        # reassigned, assigned in a branch or a function, only for one command, or after use
        'SCRIPT_DIR=$(dirname "$0")\nSCRIPT_DIR=/opt/code\n',
        'if [ -n "$1" ]; then SCRIPT_DIR=$(dirname "$0"); fi\n',
        'setup() {\n  SCRIPT_DIR=$(dirname "$0")\n}\nsetup\n',
        'SCRIPT_DIR=$(dirname "$0")\nfor SCRIPT_DIR in a b; do :; done\n',
        'SCRIPT_DIR=$(dirname "$0")\nread -r SCRIPT_DIR < dir.txt\n',
        'SCRIPT_DIR=$(dirname "$0")\nsetup() {\n  local SCRIPT_DIR\n}\n',
        # the folder of something else, or not a folder at all
        'SCRIPT_DIR=$(dirname "$CONFIG")\n',
        'SCRIPT_DIR=$(readlink "$0")\n',
        "SCRIPT_DIR=${0%/*}\n",  # `bash run.sh` from its folder: the file's own name
        "SCRIPT_DIR=$(pwd)\n",
        'SCRIPT_DIR="$(dirname "$0")"-old\n',
    ],
)
def test_a_variable_not_known_to_hold_the_launchers_folder_stays_unknown(text: str) -> None:
    script = launched(text + "export XLA_USE_BF16=1\ntorchrun $SCRIPT_DIR/train.py --steps 20\n")
    assert script == ("$SCRIPT_DIR/train.py",)


def test_a_variable_used_before_it_is_set_is_not_the_folder() -> None:
    text = 'export XLA_USE_BF16=1\ntorchrun $SCRIPT_DIR/train.py\nSCRIPT_DIR=$(dirname "$0")\n'
    assert launched(text) == ("$SCRIPT_DIR/train.py",)


def test_a_prefix_assignment_sets_the_variable_for_its_command_only() -> None:
    text = 'SCRIPT_DIR=$(dirname "$0") true\nexport XLA_USE_BF16=1\ntorchrun $SCRIPT_DIR/t.py\n'
    assert launched(text) == ("$SCRIPT_DIR/t.py",)


def test_dollar_zero_in_an_embedded_shell_text_is_not_a_launchers_folder() -> None:
    """`$0` in a Dockerfile RUN or a `bash -c` string is the shell, not a file."""
    text = 'export XLA_USE_BF16=1\npython "$(dirname "$0")/train.py"\n'
    (access,) = analyse_source(Embedded.whole(text), NAMES).accesses
    assert access.launched == ('"$(dirname "$0")/train.py"',)
    inner = 'bash -c \'export XLA_USE_BF16=1; python "$(dirname "$0")/train.py"\'\n'
    (nested,) = accesses(inner)
    assert OWN_FOLDER not in "".join(nested.launched)


def test_a_launch_through_the_folder_names_its_script_not_its_arguments() -> None:
    text = (
        'SCRIPT_DIR=$( cd -- "$( dirname -- "${BASH_SOURCE[0]}" )" &> /dev/null && pwd )\n'
        'DISTRIBUTED_ARGS="--nproc_per_node 32 --nnodes $NNODES"\n'
        "export XLA_DOWNCAST_BF16=1\n"
        "torchrun $DISTRIBUTED_ARGS $SCRIPT_DIR/train.py --steps 20 --lr 3e-4\n"
    )
    assert launched(text) == (f"{OWN_FOLDER}/train.py",)


# -- assignments a wrapper passes on -------------------------------------------------------------


def test_neuron_parallel_compile_assignment_is_a_write_for_its_command() -> None:
    text = "neuron_parallel_compile XLA_DOWNCAST_BF16=1 torchrun --nproc_per_node=32 train.py\n"
    analysis = analyse(text, NAMES)
    assert analysis.mentions == ()  # no XM301 "cannot follow"
    (access,) = analysis.accesses
    assert (access.form, access.launched) == ("env-command", ("train.py",))
    assert (
        removed(text, access) == "neuron_parallel_compile torchrun --nproc_per_node=32 train.py\n"
    )
    (site,) = analysis.launches
    assert access.start < site.start  # it comes before the launch it is for


def test_an_assignment_after_a_flag_of_env_is_removed_without_the_flag() -> None:
    text = "env -i XLA_USE_BF16=1 python train.py\n"
    access = only(text)
    assert access.form == "env-command"
    assert removed(text, access) == "env -i python train.py\n"


# -- here-documents and SLURM --------------------------------------------------------------------


def test_writes_inside_a_here_document_are_found_with_a_note() -> None:
    text = (
        "cat > job.sh <<'EOF'\nexport XLA_USE_BF16=1\npython train.py\nEOF\n"
        'cat > env.sh <<EOF\nBF16="$XLA_DOWNCAST_BF16"\nEOF\n'
    )
    write, read = accesses(text)
    assert (write.kind, write.launched, text[write.start : write.end]) == (
        "write",
        ("train.py",),
        "XLA_USE_BF16=1",
    )
    assert "here-document" in write.note
    assert removed(text, write).startswith("cat > job.sh <<'EOF'\npython train.py\nEOF\n")
    # an unquoted delimiter: this shell expands the body, so `$X` is its read
    assert (read.kind, text[read.start : read.end]) == ("read", "$XLA_DOWNCAST_BF16")


def test_sbatch_export_lists_are_writes_for_a_hand_edit() -> None:
    text = (
        "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --export=ALL,XLA_USE_BF16=1\n"
        "srun --export=ALL,XLA_DOWNCAST_BF16=1 python train.py\n"
        "#SBATCH --export=XLA_USE_FP16=1\n"
    )
    directive, srun = accesses(text)
    assert (directive.form, directive.applicability, directive.removal) == (
        "slurm-export",
        "manual",
        None,
    )
    assert text[directive.start : directive.end] == "XLA_USE_BF16=1"
    assert (srun.variable, srun.launched) == ("XLA_DOWNCAST_BF16", ("train.py",))


def test_the_command_string_of_bash_c_is_a_script() -> None:
    text = (
        'srun bash -c "export XLA_USE_BF16=1; python train.py --out $OUT"\n'
        "docker run img sh -c 'XLA_DOWNCAST_BF16=1 python train.py'\n"
    )
    export, prefix = accesses(text)
    assert (export.form, export.syntax, export.launched) == (
        "export",
        "shell:export|shell-double",
        ("train.py",),
    )
    assert "bash -c" in export.note
    assert removed(text, export).startswith('srun bash -c "python train.py --out $OUT"\n')
    assert (prefix.form, prefix.syntax) == ("prefix", "shell:prefix|shell-single")
    assert removed(text, prefix).endswith("sh -c 'python train.py'\n")


def test_a_bash_c_string_with_escapes_is_read_through_them() -> None:
    text = 'bash -c "echo \\"hi\\"; export XLA_USE_BF16=1; python t.py"\n'
    access = only(text)
    assert text[access.start : access.end] == "XLA_USE_BF16=1"
    assert access.launched == ("t.py",)
    assert removed(text, access) == 'bash -c "echo \\"hi\\"; python t.py"\n'


def test_sbatch_wrap_and_ssh_strings_are_scripts() -> None:
    text = (
        "sbatch --nodes 2 --wrap 'export XLA_USE_BF16=1; srun python train.py'\n"
        'ssh -i key worker-1 "XLA_DOWNCAST_BF16=1 python train.py"\n'
    )
    wrap, remote = accesses(text)
    assert (wrap.variable, wrap.launched) == ("XLA_USE_BF16", ("train.py",))
    assert "sbatch --wrap" in wrap.note
    assert (remote.form, remote.launched) == ("prefix", ("train.py",))
    assert "another machine" in remote.note


# -- line endings, render ------------------------------------------------------------------------


def test_crlf_offsets_are_in_the_decoded_text() -> None:
    text = "# launcher\r\nexport XLA_USE_BF16=1\r\nXLA_USE_BF16=1 python t.py\r\n"
    export, prefix = accesses(text)
    assert text[export.start : export.end] == "XLA_USE_BF16=1"
    assert export.value is not None and export.value.literal == "1"
    assert removed(text, export) == "# launcher\r\nXLA_USE_BF16=1 python t.py\r\n"
    assert removed(text, prefix) == "# launcher\r\nexport XLA_USE_BF16=1\r\npython t.py\r\n"


def test_render_keeps_the_construct_and_appends_to_the_environment() -> None:
    assert render("shell:export", "NEURON_RT_STOCHASTIC_ROUNDING_EN", "1") == (
        "NEURON_RT_STOCHASTIC_ROUNDING_EN=1"
    )
    assert render("shell:prefix", "NEURON_CC_FLAGS", "--auto-cast=none", append=True) == (
        'NEURON_CC_FLAGS="${NEURON_CC_FLAGS:-} --auto-cast=none"'
    )
    assert render(
        "shell:export", "NEURON_CC_FLAGS", "--model-type=transformer --auto-cast=none"
    ) == ('NEURON_CC_FLAGS="--model-type=transformer --auto-cast=none"')
    assert render("shell:assignment", "A", 'say "$x"') == 'A="say \\"\\$x\\""'
    assert render("shell:statement", "NEURON_RT_STOCHASTIC_ROUNDING_EN", "1") == (
        "export NEURON_RT_STOCHASTIC_ROUNDING_EN=1"
    )


def test_render_escapes_for_the_quoted_string_of_bash_c() -> None:
    appended = render(
        "shell:export|shell-double", "NEURON_CC_FLAGS", "--auto-cast=none", append=True
    )
    assert appended == 'NEURON_CC_FLAGS=\\"\\${NEURON_CC_FLAGS:-} --auto-cast=none\\"'
    merged = render("shell:export|shell-single", "NEURON_CC_FLAGS", "--x='a b' --auto-cast=none")
    assert merged == "NEURON_CC_FLAGS=\"--x='\\''a b'\\'' --auto-cast=none\""


# -- syntax errors -------------------------------------------------------------------------------


# bash itself is the judge of a syntax error where there is one (Linux, macOS, CI).
needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="bash -n is the judge")


@needs_bash
def test_a_syntax_error_is_a_problem_and_the_rest_is_still_read() -> None:
    text = (
        "export XLA_USE_BF16=1\n"
        'if [ -n "$X" ; then\n  export XLA_DOWNCAST_BF16=1\n'
        "XLA_USE_FP16=1 python train.py\n"
    )
    analysis = analyse(text, NAMES)
    (problem,) = analysis.problems  # bash's own verdict and words: `fi` is missing
    assert (problem.line, problem.column) == (5, 1)  # where bash stopped: the end of the file
    assert problem.message == "bash: syntax error: unexpected end of file"
    first, in_broken_if, prefix = analysis.accesses
    assert (first.applicability, first.note) == (None, "")
    assert in_broken_if.applicability == "manual" and "syntax error on line" in in_broken_if.note
    assert prefix.variable == "XLA_USE_FP16"


@needs_bash
def test_an_error_later_in_the_file_leaves_earlier_statements_editable() -> None:
    text = "case $1 in\n  a) export XLA_USE_BF16=1 ;;\nesac\necho )\n"
    analysis = analyse(text, NAMES)
    assert [(p.line, p.column) for p in analysis.problems] == [(4, 6)]  # the unexpected `)`
    (access,) = analysis.accesses
    assert (access.applicability, access.note) == (None, "")
    assert removed(text, access).startswith("case $1 in\n  a) ;;\n")


@pytest.mark.parametrize(
    "text",
    [
        'SCRIPT_DIR=$( cd -- "$( dirname -- "${BASH_SOURCE[0]}" )" &> /dev/null && pwd )\n',
        "select x in a b; do echo $x; done\n",
        "if [[ $A == x && ( -n $B || $C =~ ^v[0-9]+$ ) ]]; then :; fi\n",
        "coproc worker { sleep 1; }\n",
        'arr=(a \'b c\' "$d"); echo "${arr[@]:1}" ${#arr[@]} ${!arr[*]}\n',
        "f() ( cd /tmp && ls )\nfunction g { :; }\n",
        "cat <<-'EOF'\n\tliteral $X\n\tEOF\n",
        "x=$(( (1 + 2) << 3 )); (( x > 2 )) && echo big\n",
    ],
)
def test_what_bash_accepts_is_never_a_problem(text: str) -> None:
    bash = shutil.which("bash")
    if bash is not None:
        subprocess.run([bash, "-n"], input=text.encode(), check=True)
    assert analyse(text + "export XLA_USE_BF16=1\n", NAMES).problems == ()


@pytest.mark.parametrize(
    "text",
    [
        "echo '${'x $XLA_USE_BF16\n",
        "v=$(x # ${\n)\nexport XLA_USE_BF16=1\n",
        'echo "unterminated $XLA_USE_BF16\n',
        "export XLA_USE_BF16=$((\n",
        "case $XLA_USE_BF16 in\n",
        "cat <<EOF\nexport XLA_USE_BF16=1\n",
        "fi\nXLA_USE_BF16=1 \\\n",
        "coproc { export XLA_USE_BF16=1; }\n",
        "\x00XLA_USE_BF16\x00=\r",
    ],
)
def test_broken_scripts_never_crash_or_hang(text: str) -> None:
    analysis = analyse(text, NAMES)
    for access in analysis.accesses:
        assert 0 <= access.start <= access.end <= len(text)


# -- the rewritten fixtures ----------------------------------------------------------------------


def test_there_are_shell_rewrite_fixtures() -> None:
    assert len(REWRITES) >= 12


@pytest.mark.parametrize(("mode", "case"), REWRITES, ids=lambda p: getattr(p, "name", p))
def test_rewritten_script_parses_and_sets_no_legacy_flag(
    mode: str, case: Path, catalogue: Catalogue
) -> None:
    name = snapshots.case_name(case)
    output = f"{name}.{mode}.sh"
    data = snapshots.rewritten(name, mode)
    text = data.decode()
    assert not parse(text).root.has_error  # tree-sitter-bash reads it all
    bash = shutil.which("bash")
    if bash is not None:
        subprocess.run([bash, "-n"], input=data, check=True)
    noqa = parse_suppressions(hash_comments(text))
    lines = text.splitlines()
    listed = snapshots.read(name, mode).left
    kept = {int(line.split(":")[0]) for line in listed if " XM10" in line}  # manual by design
    for access in analyse(text, NAMES).accesses:
        line = text.count("\n", 0, access.start) + 1
        if access.variable in LEGACY and access.kind == "write":
            assert line in noqa or line in kept, f"{output}:{line}: {lines[line - 1]}"
    # XM4xx are the rewrite's own manual steps (e.g. XM405): scan never reports them.
    expected = [line for line in listed if line.strip() and not line.split()[1].startswith("XM4")]
    result = scan_source(output, data, "shell", catalogue, frozenset(catalogue.rules))
    assert len(result.findings) == len(expected)
    # in plain text too: a flag is left only on a noqa line or where a finding remains
    mentions = [n for n, line in enumerate(lines, 1) if FLAG.search(line) and n not in noqa]
    mentions = [n for n in mentions if n not in kept or n in {f.span.line for f in result.findings}]
    assert len(mentions) == len(result.findings)


# -- NEURON_CC_FLAGS -----------------------------------------------------------------------------


def test_neuron_cc_flags_with_expansions_gets_an_edit_that_keeps_them() -> None:
    text = 'export NEURON_CC_FLAGS="${NEURON_CC_FLAGS} --cache_dir=$HOME/c --auto-cast all"\n'
    (access,) = [a for a in accesses(text) if a.kind == "write"]
    assert access.value is not None and access.value.candidates is None
    assert access.auto_cast_none is not None
    assert apply_edits(text, access.auto_cast_none) == (
        'export NEURON_CC_FLAGS="${NEURON_CC_FLAGS} --cache_dir=$HOME/c --auto-cast=none"\n'
    )


def test_neuron_cc_flags_append_inside_bash_c_is_escaped_for_the_string() -> None:
    text = "bash -c 'NEURON_CC_FLAGS+=\" -O1\" python train.py'\n"
    access = only(text)
    assert access.auto_cast_none is not None
    assert apply_edits(text, access.auto_cast_none) == (
        "bash -c 'NEURON_CC_FLAGS+=\" -O1 --auto-cast=none\" python train.py'\n"
    )


@needs_bash
def test_neuron_cc_flags_next_to_a_syntax_error_is_reported_not_dropped(
    catalogue: Catalogue,
) -> None:
    text = (
        "export XLA_USE_BF16=1\n"
        'if [ -n "$CACHE" ]; then\n'
        '  export NEURON_CC_FLAGS="$NEURON_CC_FLAGS --cache_dir=$CACHE"\n'
        "python train.py\n"
    )
    outcome = rewrite_source(
        "run.sh",
        text.encode(),
        "shell",
        catalogue,
        frozenset(catalogue.rules),
        "autocast",
        context=RECIPE_APPLIED,
    )
    assert [e.line for e in outcome.errors] == [5]  # bash: the `if` never ends
    assert outcome.rewritten is not None
    assert outcome.rewritten.decode() == text.removeprefix("export XLA_USE_BF16=1\n")
    assert [(f.code, f.span.line) for f in outcome.remaining] == [("XM407", 3)]


def test_without_bash_a_tree_sitter_error_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)  # no bash to ask
    (problem,) = analyse("export XLA_USE_BF16=1\necho a )\n", NAMES).problems
    assert (problem.line, problem.column) == (2, 8)  # where tree-sitter's first error starts
    assert problem.message == "bash syntax: tree-sitter-bash cannot read `)`"
    (missing,) = analyse("export XLA_USE_BF16=1\nif [ -n x ]; then\n", NAMES).problems
    assert (missing.line, missing.column) == (2, 18)  # after `then`, where `fi` would be
    assert missing.message == "bash syntax: tree-sitter-bash finds `fi` missing"


@needs_bash
def test_bash_is_asked_with_no_startup_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """`bash -n` runs nothing, but BASH_ENV would be sourced: it is never passed on."""
    monkeypatch.setenv("BASH_ENV", "/nonexistent/evil.sh")
    calls: list[dict[str, str]] = []
    real_run = subprocess.run

    def spy(*args: object, **kwargs: object) -> object:
        calls.append(kwargs["env"])  # type: ignore[arg-type]
        return real_run(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(subprocess, "run", spy)
    analyse("if true; then\nexport XLA_USE_BF16=1\n", NAMES)
    assert calls and all("BASH_ENV" not in env for env in calls)


def test_a_here_document_of_another_language_is_no_parse_error() -> None:
    text = 'python3 <<EOF\nimport os\ndef f():\nos.environ["XLA_USE_BF16"] = "1"\nEOF\n'
    analysis = analyse(text, NAMES)
    assert analysis.problems == ()
    (mention,) = analysis.mentions  # still reported, for review
    assert text[mention.start : mention.end] == "XLA_USE_BF16"


def test_what_echo_prints_is_text_but_what_it_substitutes_is_not() -> None:
    text = 'echo "XLA_USE_BF16 is ${XLA_USE_BF16:-unset}" "$(printenv XLA_DOWNCAST_BF16)"\n'
    analysis = analyse(text, NAMES)
    assert [a.kind for a in analysis.accesses] == ["read"]
    assert [text[m.start : m.end] for m in analysis.mentions] == ["XLA_DOWNCAST_BF16"]


def test_what_echo_writes_to_a_file_or_a_pipe_is_reported() -> None:
    text = (
        'echo "XLA_USE_BF16=1" >> "$GITHUB_ENV"\n'
        'echo "XLA_DOWNCAST_BF16=1" | tee -a env.txt\n'
        'echo "set XLA_USE_BF16 for bf16"\n'
    )
    analysis = analyse(text, NAMES)
    assert [text.count("\n", 0, m.start) + 1 for m in analysis.mentions] == [1, 2]


@pytest.mark.parametrize(
    ("raw", "merged"),
    [
        ('"$NEURON_CC_FLAGS -O1"', '"$NEURON_CC_FLAGS -O1 --auto-cast=none"'),
        ('"${NEURON_CC_FLAGS} --auto-cast=all -O1"', '"${NEURON_CC_FLAGS} -O1 --auto-cast=none"'),
        ('" --auto-cast none"', '" --auto-cast=none"'),  # a += append stays its own word
        ("'--a'\"$HOME\"", "'--a'\"$HOME --auto-cast=none\""),
        ("$FLAGS", '$FLAGS" --auto-cast=none"'),
        ('"--auto-cast-type=bf16"', '"--auto-cast-type=bf16 --auto-cast=none"'),
        ('"$X --auto-cast=none"', '"$X --auto-cast=none"'),  # already so: no edit
    ],
)
def test_auto_cast_none_edits_keep_quotes_and_expansions(raw: str, merged: str) -> None:
    edits = [TextEdit(start, end, text) for start, end, text in auto_cast_none_edits(raw)]
    assert apply_edits(raw, edits) == merged
