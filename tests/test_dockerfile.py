"""Dockerfile accesses: where each write, unset and read of a flag is, how it is removed or
rewritten, and which scripts run with it."""

from __future__ import annotations

import itertools
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import snapshots
from xlamigrate.catalogue import Catalogue
from xlamigrate.engine import scan_source
from xlamigrate.flagvalue import FlagValue
from xlamigrate.kinds.dockerfile.analysis import analyse, render
from xlamigrate.kinds.dockerfile.commands import shell_command
from xlamigrate.kinds.dockerfile.execform import exec_words
from xlamigrate.kinds.dockerfile.parse import parse
from xlamigrate.kinds.launch import as_written, launch
from xlamigrate.kinds.python.rewrite import MODES
from xlamigrate.kinds.shell.render import render as render_shell
from xlamigrate.kinds.textaccess import TextAccess, TextMention, apply_edits
from xlamigrate.neuronflags import NEURON_CC_FLAGS, STOCHASTIC_ROUNDING

LEGACY = ("XLA_USE_BF16", "XLA_DOWNCAST_BF16", "XLA_USE_FP16", "XLA_DOWNCAST_FP16", "XLA_USE_F16")
NAMES = frozenset({*LEGACY, NEURON_CC_FLAGS, STOCHASTIC_ROUNDING})


def accesses(text: str) -> list[TextAccess]:
    analysis = analyse(text, NAMES)
    assert analysis.problems == ()
    return list(analysis.accesses)


def only(text: str) -> TextAccess:
    [access] = accesses(text)
    return access


def cut(text: str, access: TextAccess) -> str:
    assert access.removal is not None
    return apply_edits(text, [access.removal])


def shell_scripts(text: str) -> list[str]:
    """What Docker hands to a shell: each shell-form RUN, CMD and ENTRYPOINT (its heredocs
    included, and the script of `RUN <<EOF`), and each `bash -c` string of exec form."""
    scripts: list[str] = []
    for instruction in parse(text).instructions:
        if instruction.keyword not in ("RUN", "CMD", "ENTRYPOINT"):
            continue
        words = exec_words(instruction.args)
        if words is not None:
            made = launch([word.text for word in words])
            scripts.extend(words[index].text for index in made.shell_strings)
            continue
        script = shell_command(instruction).text
        if instruction.heredocs:
            start = instruction.heredocs[0].body.start_of(0)
            script += "\n" + text[start : instruction.stop]
            scripts.extend(heredoc.body.text for heredoc in instruction.heredocs)
        scripts.append(script)
    return scripts


# The rewritten scripts are checked with bash itself where there is one (Linux, macOS, CI).
needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="bash -n is the judge")


def assert_bash_accepts(text: str) -> None:
    """Every shell text of the Dockerfile `text` is one `bash -n` accepts."""
    bash = shutil.which("bash")
    assert bash is not None
    for script in shell_scripts(text):
        result = subprocess.run([bash, "-n"], input=script.encode(), capture_output=True)
        assert result.returncode == 0, (script, result.stderr.decode())


def position(text: str, access: TextAccess | TextMention) -> tuple[int, int]:
    """The 1-based line and column a finding reports."""
    line = text.count("\n", 0, access.start) + 1
    return line, access.start - (text.rfind("\n", 0, access.start) + 1) + 1


def piece(text: str, span: tuple[int, int] | None) -> str:
    assert span is not None
    return text[span[0] : span[1]]


# -- ENV and ARG ----------------------------------------------------------------------------


def test_env_write_points_at_the_name_and_removes_the_instruction() -> None:
    text = "FROM x\nENV XLA_USE_BF16=1\nCMD true\n"
    access = only(text)
    assert (access.variable, access.kind, access.form) == ("XLA_USE_BF16", "write", "ENV")
    assert text[access.start : access.end] == "XLA_USE_BF16"
    assert piece(text, access.assignment) == "XLA_USE_BF16=1"
    assert piece(text, access.value_range) == "1"
    assert access.value == FlagValue(("1",))
    assert cut(text, access) == "FROM x\nCMD true\n"


def test_env_values_lose_their_quotes_and_expansions_are_unknown() -> None:
    values = [a.value for a in accesses("ENV XLA_USE_BF16=\"1\" XLA_DOWNCAST_BF16='0' A=1\n")]
    assert values == [FlagValue(("1",)), FlagValue(("0",))]
    assert only("ENV XLA_USE_BF16=${USE_BF16:-1}\n").value == FlagValue(None)
    assert only('ENV XLA_USE_BF16="a\\"b"\n').value == FlagValue(('a"b',))


def test_legacy_env_form_takes_the_rest_of_the_line() -> None:
    text = "ENV XLA_DOWNCAST_BF16 1\nENV XLA_USE_F16 yes please\n"
    first, second = accesses(text)
    assert piece(text, first.assignment) == "XLA_DOWNCAST_BF16 1"
    assert first.syntax == "ENV legacy"
    assert second.value == FlagValue(("yes please",))
    assert cut(text, first) == "ENV XLA_USE_F16 yes please\n"


def test_multi_variable_env_over_continuation_lines() -> None:
    text = (
        "ENV PJRT_DEVICE=NEURON \\\n"
        "    XLA_USE_BF16=1 \\\n"
        "    # a comment line inside the instruction\n"
        "    MALLOC_ARENA_MAX=64 \\\n"
        "    XLA_USE_FP16=0\n"
        "RUN true\n"
    )
    bf16, fp16 = accesses(text)
    assert text[bf16.start : bf16.end] == "XLA_USE_BF16"
    assert text.count("\n", 0, bf16.start) == 1
    assert text.count("\n", 0, fp16.start) == 4
    assert cut(text, bf16) == (
        "ENV PJRT_DEVICE=NEURON \\\n"
        "    # a comment line inside the instruction\n"
        "    MALLOC_ARENA_MAX=64 \\\n"
        "    XLA_USE_FP16=0\nRUN true\n"
    )
    assert cut(text, fp16).endswith("    MALLOC_ARENA_MAX=64\nRUN true\n")
    both = apply_edits(text, [bf16.removal, fp16.removal])  # type: ignore[list-item]
    assert both == (
        "ENV PJRT_DEVICE=NEURON \\\n"
        "    # a comment line inside the instruction\n"
        "    MALLOC_ARENA_MAX=64\nRUN true\n"
    )


@pytest.mark.parametrize(
    "text",
    [
        "ENV XLA_USE_BF16=1 XLA_DOWNCAST_BF16=1 A=1 XLA_USE_FP16=0 B=2\n",
        "ENV XLA_USE_BF16=1 \\\n    XLA_DOWNCAST_BF16=1 \\\n    A=1 \\\n    XLA_USE_FP16=0\n",
        "ENV A=1 \\\n  XLA_USE_BF16=1 \\\n  XLA_DOWNCAST_BF16=1 \\\n  XLA_USE_FP16=0\n",
        "ARG XLA_USE_BF16=1 XLA_DOWNCAST_BF16 A XLA_USE_FP16=0\n",
    ],
)
def test_any_set_of_removals_in_one_instruction_leaves_the_others_valid(text: str) -> None:
    found = accesses(text)
    for count in range(1, len(found) + 1):
        for removed in itertools.combinations(found, count):
            result = apply_edits(text, [a.removal for a in removed if a.removal is not None])
            kept = {a.variable for a in found} - {a.variable for a in removed}
            assert {a.variable for a in accesses(result)} == kept, result
            assert "\\\n\n" not in result and not result.rstrip("\n").endswith("\\"), result
            assert re.search(r"\bA=1\b|\bA\b", result), result


def test_replacing_an_assignment_keeps_the_instruction_form() -> None:
    text = "ENV PJRT_DEVICE=NEURON \\\n    XLA_USE_BF16=1\n"
    access = only(text)
    assert access.assignment is not None
    replacement = render(access.syntax, STOCHASTIC_ROUNDING, "1")
    assert cut(text, access) == "ENV PJRT_DEVICE=NEURON\n"
    start, end = access.assignment
    assert text[:start] + replacement + text[end:] == (
        "ENV PJRT_DEVICE=NEURON \\\n    NEURON_RT_STOCHASTIC_ROUNDING_EN=1\n"
    )


def test_arg_with_and_without_default() -> None:
    text = "ARG XLA_USE_BF16=1\nARG XLA_DOWNCAST_BF16\n"
    with_default, declared = accesses(text)
    assert (with_default.form, with_default.value) == ("ARG", FlagValue(("1",)))
    assert (declared.form, declared.value) == ("ARG", FlagValue(None))
    assert "build argument" in with_default.note
    assert with_default.launched == ()


def test_trailing_comment_after_env_is_not_a_variable() -> None:
    text = "ENV XLA_USE_BF16=1 # noqa: XM101\n"
    assert piece(text, only(text).assignment) == "XLA_USE_BF16=1"


def test_onbuild_env_is_a_write_for_images_built_from_this_one() -> None:
    text = "FROM x\nONBUILD ENV XLA_USE_BF16=1\nCMD python train.py\n"
    access = only(text)
    assert text[access.start : access.end] == "XLA_USE_BF16"
    assert "ONBUILD" in access.note
    assert access.launched == ()
    assert cut(text, access) == "FROM x\nCMD python train.py\n"


def test_lookalike_names_are_other_variables() -> None:
    assert analyse("ENV MY_XLA_USE_BF16=1 XLA_USE_BF16_X=1\n", NAMES).accesses == ()


# -- RUN, CMD, ENTRYPOINT ------------------------------------------------------------------


def test_run_prefix_assignment_applies_to_its_command() -> None:
    text = "RUN XLA_USE_BF16=1 python precompile.py && python other.py\n"
    access = only(text)
    assert (access.form, access.syntax, access.value) == (
        "prefix",
        "shell:prefix|line",
        FlagValue(("1",)),
    )
    # (a path of the image: a RUN before any FROM has no WORKDIR known here)
    assert access.launched == ("<image>$WORKDIR/precompile.py",)
    assert cut(text, access) == "RUN python precompile.py && python other.py\n"


def test_run_export_is_cut_with_its_operator() -> None:
    text = "RUN pip install . && \\\n    export XLA_DOWNCAST_BF16=1 && \\\n    python warmup.py\n"
    access = only(text)
    assert access.launched == ("<image>$WORKDIR/warmup.py",)
    assert text[access.start : access.end] == "XLA_DOWNCAST_BF16=1"  # the shell word, as in .sh
    assert cut(text, access) == "RUN pip install . && \\\n    python warmup.py\n"
    last = "RUN python a.py && export XLA_USE_BF16=1\n"
    assert cut(last, only(last)) == "RUN python a.py\n"
    alone = "FROM x\nRUN export XLA_USE_BF16=1\n"
    assert cut(alone, only(alone)) == "FROM x\n"


def test_run_env_command_writes_and_unsets() -> None:
    text = "RUN env -u XLA_USE_BF16 XLA_USE_FP16=1 python check.py\n"
    unset, write = accesses(text)
    assert (unset.kind, unset.variable) == ("delete", "XLA_USE_BF16")
    assert (write.kind, write.variable, write.launched) == (
        "write",
        "XLA_USE_FP16",
        ("<image>$WORKDIR/check.py",),
    )
    assert cut(text, unset) == "RUN env XLA_USE_FP16=1 python check.py\n"
    assert cut(text, write) == "RUN env -u XLA_USE_BF16 python check.py\n"


def test_run_unset_is_a_delete() -> None:
    text = "RUN python a.py; unset XLA_DOWNCAST_BF16\n"
    access = only(text)
    assert (access.kind, access.value) == ("delete", None)
    assert cut(text, access) == "RUN python a.py\n"


def test_run_writes_inside_a_condition_leave_the_branch_a_command() -> None:
    text = 'RUN if [ -n "$X" ]; then export XLA_USE_BF16=1; fi\n'
    assert cut(text, only(text)) == 'RUN if [ -n "$X" ]; then :; fi\n'


def test_run_quoted_text_and_docker_flags_are_not_writes() -> None:
    assert analyse("RUN echo 'XLA_USE_BF16=1 is text'\n", NAMES).accesses == ()
    text = "RUN --mount=type=cache,target=/root/.cache XLA_USE_BF16=1 pip install .\n"
    assert text[only(text).start :].startswith("XLA_USE_BF16=1 pip")


def test_run_heredoc_is_read_as_a_script() -> None:
    text = "RUN <<EOF\nset -e\nexport XLA_USE_BF16=1\npython train.py\nEOF\nCMD true\n"
    access = only(text)
    assert text.count("\n", 0, access.start) == 2
    assert access.launched == ("<image>$WORKDIR/train.py",)
    assert cut(text, access) == "RUN <<EOF\nset -e\npython train.py\nEOF\nCMD true\n"


def test_copy_heredoc_contents_are_not_writes() -> None:
    analysis = analyse("COPY <<EOF /app/.env\nXLA_USE_BF16=1\nEOF\n", NAMES)
    assert (analysis.accesses, analysis.mentions) == ((), ())


def test_a_script_a_run_heredoc_writes_out_is_read_with_a_note() -> None:
    text = "RUN cat > /app/env.sh <<'EOF' && chmod +x /app/env.sh\nexport XLA_USE_BF16=1\nEOF\n"
    access = only(text)
    assert "here-document" in access.note
    assert position(text, access) == (2, 8)


def test_shell_form_cmd_prefix_and_exec_form_env() -> None:
    text = (
        "CMD XLA_USE_BF16=1 exec torchrun train.py\n"
        'RUN ["env", "XLA_USE_BF16=1", "python", "t.py"]\n'
    )
    shell, exec_form = accesses(text)
    assert (shell.form, shell.launched) == ("prefix", ("<image>train.py",))  # from its WORKDIR
    assert cut(text, shell).startswith("CMD exec torchrun train.py\n")
    assert (exec_form.form, exec_form.value, exec_form.launched) == (
        "env-command",
        FlagValue(("1",)),
        ("<image>$WORKDIR/t.py",),
    )
    assert text[exec_form.start : exec_form.end] == "XLA_USE_BF16"
    assert exec_form.removal is None and exec_form.assignment is None  # no shell to append with


def test_reads_of_the_flag_are_found_in_expansions() -> None:
    text = (
        'RUN if [ "$XLA_USE_BF16" = 1 ]; then echo ${XLA_DOWNCAST_BF16:-0}; fi\n'
        "ENV A=\\$XLA_USE_FP16\n"  # escaped: a literal dollar sign
    )
    reads = accesses(text)
    assert [(a.kind, text[a.start : a.end]) for a in reads] == [
        ("read", "$XLA_USE_BF16"),
        ("read", "${XLA_DOWNCAST_BF16:-0}"),
    ]


# -- The shell engine in RUN, CMD and ENTRYPOINT -------------------------------------------

SCRIPT_DIR = 'SCRIPT_DIR=$( cd -- "$( dirname -- "${BASH_SOURCE[0]}" )" &> /dev/null && pwd )'


def test_run_with_the_script_dir_idiom_finds_the_export_after_it() -> None:
    text = (
        f"FROM x\nRUN {SCRIPT_DIR} && \\\n"
        "    export XLA_DOWNCAST_BF16=1 && \\\n"
        '    torchrun --nproc_per_node=2 "$SCRIPT_DIR/train.py"\n'
    )
    access = only(text)
    assert (access.variable, position(text, access)) == ("XLA_DOWNCAST_BF16", (3, 12))
    assert cut(text, access) == (
        f'FROM x\nRUN {SCRIPT_DIR} && \\\n    torchrun --nproc_per_node=2 "$SCRIPT_DIR/train.py"\n'
    )


@needs_bash
def test_run_if_elif_else_and_case_report_every_branch() -> None:
    text = (
        'RUN if [ "$P" = bf16 ]; then \\\n'
        "        export XLA_USE_BF16=1; \\\n"
        '    elif [ "$P" = downcast ]; then \\\n'
        "        export XLA_DOWNCAST_BF16=1; \\\n"
        '    elif [[ "$P" == fp16* ]]; then \\\n'
        "        export XLA_USE_FP16=1; \\\n"
        "    else \\\n"
        "        unset XLA_USE_BF16; \\\n"
        "    fi && python warmup.py\n"
        'RUN case "$P" in \\\n'
        "      bf16) export XLA_USE_BF16=1 ;; \\\n"
        "      *) XLA_DOWNCAST_BF16=1 python eval.py ;; \\\n"
        "    esac\n"
    )
    found = accesses(text)
    assert [(a.variable, a.kind, position(text, a)) for a in found] == [
        ("XLA_USE_BF16", "write", (2, 16)),
        ("XLA_DOWNCAST_BF16", "write", (4, 16)),
        ("XLA_USE_FP16", "write", (6, 16)),
        ("XLA_USE_BF16", "delete", (8, 15)),
        ("XLA_USE_BF16", "write", (11, 20)),
        ("XLA_DOWNCAST_BF16", "write", (12, 10)),
    ]
    assert [found[i].launched for i in (0, 1, 2, 5)] == [("<image>$WORKDIR/warmup.py",)] * 3 + [
        ("<image>$WORKDIR/eval.py",)
    ]
    # a branch keeps a command; a case arm may be empty; every result is still a RUN bash reads
    assert cut(text, found[0]).splitlines()[1] == "        :; \\"
    assert cut(text, found[4]).splitlines()[10] == "      bf16) ;; \\"
    for access in found:
        assert_bash_accepts(cut(text, access))


@needs_bash
def test_run_over_continuation_lines_maps_each_finding_to_its_line() -> None:
    text = (
        "RUN pip install -r requirements.txt && \\\n"
        "    # a comment line inside the instruction\n"
        "    export XLA_USE_BF16=1 \\\n"
        "           MALLOC_ARENA_MAX=64 && \\\n"
        "    XLA_DOWNCAST_BF16=1 \\\n"
        "        torchrun --nproc_per_node=2 \\\n"
        "        train.py\n"
    )
    export, prefix = accesses(text)
    assert (position(text, export), position(text, prefix)) == ((3, 12), (5, 5))
    assert prefix.launched == ("<image>$WORKDIR/train.py",)
    assert cut(text, prefix).splitlines()[4:] == [
        "    torchrun --nproc_per_node=2 \\",
        "        train.py",
    ]
    assert cut(text, export).splitlines()[2:4] == [
        "    export \\",
        "           MALLOC_ARENA_MAX=64 && \\",
    ]
    for access in (export, prefix):
        assert_bash_accepts(cut(text, access))


def test_run_flags_are_not_part_of_the_command() -> None:
    text = "RUN --mount=type=cache,target=/root/.cache --network=none export XLA_USE_BF16=1\n"
    assert cut(text, only(text)) == ""


def test_exec_form_bash_c_string_is_shell_mapped_through_its_json_escapes() -> None:
    text = (
        'CMD ["bash", "-c", "echo \\"\\u0062f16\\" && export XLA_USE_BF16=1 && '
        'python train.py --out \\"$OUT\\""]\n'
    )
    access = only(text)
    assert text[access.start :].startswith("XLA_USE_BF16=1 &&")
    assert (access.launched, access.syntax) == (
        ("<image>train.py",),
        "shell:export|yaml-double|line",
    )
    assert cut(text, access) == (
        'CMD ["bash", "-c", "echo \\"\\u0062f16\\" && python train.py --out \\"$OUT\\""]\n'
    )
    assert access.assignment is not None
    start, end = access.assignment
    appended = render_shell(access.syntax, NEURON_CC_FLAGS, "--auto-cast=none", append=True)
    assert text[:start] + appended + text[end:] == (
        'CMD ["bash", "-c", "echo \\"\\u0062f16\\" && export '
        'NEURON_CC_FLAGS=\\"${NEURON_CC_FLAGS:-} --auto-cast=none\\" && '
        'python train.py --out \\"$OUT\\""]\n'
    )


def test_exec_form_entrypoint_string_alone_becomes_empty() -> None:
    text = 'ENTRYPOINT ["/bin/sh", "-c", "export XLA_USE_BF16=1"]\n'
    assert cut(text, only(text)) == 'ENTRYPOINT ["/bin/sh", "-c", ""]\n'


def test_exec_form_env_settings_are_left_for_a_hand_edit() -> None:
    text = 'CMD ["env", "-u", "XLA_DOWNCAST_BF16", "XLA_USE_BF16=1", "torchrun", "train.py"]\n'
    delete, write = accesses(text)
    assert (delete.kind, position(text, delete)) == ("delete", (1, 20))
    assert (write.kind, write.value, write.launched) == (
        "write",
        FlagValue(("1",)),
        ("<image>train.py",),
    )
    assert {delete.applicability, write.applicability} == {"manual"}
    assert write.removal is None and write.assignment is None


def test_exec_form_arguments_naming_a_flag_are_for_review() -> None:
    text = 'RUN ["python", "-c", "import os; print(os.environ[\'XLA_USE_BF16\'])"]\n'
    analysis = analyse(text, NAMES)
    assert analysis.accesses == ()
    [mention] = analysis.mentions
    assert text[mention.start : mention.end] == "XLA_USE_BF16"
    assert "`python`" in mention.note


def test_shell_form_cmd_that_only_sets_a_flag_keeps_a_command() -> None:
    text = "FROM x\nCMD export XLA_USE_BF16=1\n"
    assert cut(text, only(text)) == "FROM x\nCMD :\n"


def test_run_bash_heredoc_is_the_script_and_its_only_command_takes_the_run_along() -> None:
    text = "FROM x\nRUN bash -e <<'EOF'\nexport XLA_USE_BF16=1\nEOF\nCMD true\n"
    access = only(text)
    assert (position(text, access), access.note) == ((3, 8), "")
    assert cut(text, access) == "FROM x\nCMD true\n"


def test_run_heredoc_with_another_interpreter_is_for_review() -> None:
    text = 'RUN <<EOF\n#!/usr/bin/env python3\nimport os\nos.environ["XLA_USE_BF16"] = "1"\nEOF\n'
    analysis = analyse(text, NAMES)
    assert (analysis.accesses, analysis.problems) == ((), ())
    [mention] = analysis.mentions
    assert (position(text, mention), "`python3`" in mention.note) == ((4, 13), True)


def test_a_shell_that_is_not_posix_leaves_its_commands_for_review() -> None:
    text = 'FROM x\nSHELL ["powershell", "-Command"]\nRUN $env:XLA_USE_BF16 = "1"; python t.py\n'
    analysis = analyse(text, NAMES)
    assert (analysis.accesses, analysis.problems) == ((), ())
    [mention] = analysis.mentions
    assert position(text, mention) == (3, 10)
    assert "powershell" in mention.note


def test_onbuild_run_is_read_and_removed_whole() -> None:
    text = "FROM x\nONBUILD RUN export XLA_USE_BF16=1\n"
    access = only(text)
    assert "ONBUILD" in access.note
    assert cut(text, access) == "FROM x\n"


# -- What runs with the environment ---------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "scripts"),
    [
        ('CMD ["torchrun", "--nproc_per_node=2", "train.py"]', ("train.py",)),
        ("CMD torchrun --nproc_per_node=2 train.py --lr 1e-4", ("train.py",)),
        ('ENTRYPOINT ["python"]\nCMD ["/app/train.py"]', ("/app/train.py",)),
        ('CMD ["sh", "-c", "python train.py --config=cfg.py"]', ("train.py",)),
        ("CMD python -m my_package.train", ()),
        ('CMD ["bash", "-c", "cd /app && exec torchrun train.py"]', ("/app/train.py",)),
        (
            'ENTRYPOINT ["torchrun", "--nproc_per_node=2"]\nCMD ["train.py", "--bf16"]',
            ("train.py",),
        ),
        ('ENTRYPOINT ["/entrypoint.sh"]\nCMD ["python", "train.py"]', ("train.py",)),
        ("ENTRYPOINT python serve.py\nCMD python train.py", ("serve.py",)),  # CMD is ignored
        ('ENTRYPOINT ["env", "PJRT_DEVICE=NEURON", "python3", "train.py"]', ("train.py",)),
        ("", ()),
    ],
)
def test_env_knows_the_scripts_the_image_launches(command: str, scripts: tuple[str, ...]) -> None:
    text = f"FROM x\nENV XLA_USE_BF16=1\n{command}\n"
    launched = only(text).launched
    assert launched == tuple(f"<image>{script}" for script in scripts)  # from the WORKDIR
    assert tuple(as_written(script) for script in launched) == scripts  # what messages show


def test_an_entrypoint_resets_the_command_its_stage_inherits() -> None:
    text = (
        "FROM x AS base\nENV XLA_USE_BF16=1\nCMD python train.py\n"
        'FROM base AS serve\nENTRYPOINT ["python", "serve.py"]\n'
    )
    assert only(text).launched == ("<image>train.py", "<image>serve.py")


def test_launched_scripts_follow_stages_built_from_the_stage() -> None:
    text = (
        "FROM x AS base\nENV XLA_USE_BF16=1\n"
        "FROM base AS train\nCMD python train.py\n"
        "FROM x AS serve\nENV XLA_DOWNCAST_BF16=1\nCMD python serve.py\n"
    )
    base, serve = accesses(text)
    assert base.launched == ("<image>train.py",)
    assert serve.launched == ("<image>serve.py",)


# -- Text forms -----------------------------------------------------------------------------


def test_crlf_input() -> None:
    text = "FROM x\r\nENV A=1 \\\r\n    XLA_USE_BF16=1\r\nENV XLA_DOWNCAST_BF16 1\r\nCMD true\r\n"
    first, second = accesses(text)
    assert text[first.start : first.end] == "XLA_USE_BF16"
    assert piece(text, first.assignment) == "XLA_USE_BF16=1"
    assert piece(text, second.assignment) == "XLA_DOWNCAST_BF16 1"
    result = apply_edits(text, [first.removal, second.removal])  # type: ignore[list-item]
    assert result == "FROM x\r\nENV A=1\r\nCMD true\r\n"


def test_escape_directive_backtick() -> None:
    text = '# escape=`\nFROM x\nENV A=1 `\n    XLA_USE_BF16="1" `\n    PATH="C:\\Python"\n'
    access = only(text)
    assert access.syntax == "ENV escape=`"
    assert access.value == FlagValue(("1",))
    assert cut(text, access) == '# escape=`\nFROM x\nENV A=1 `\n    PATH="C:\\Python"\n'


def test_escape_directive_backtick_joins_run_lines_too() -> None:
    text = "# escape=`\nFROM x\nRUN export XLA_USE_BF16=1 && `\n    python t.py\n"
    access = only(text)
    assert (position(text, access), access.launched) == ((3, 12), ("<image>/t.py",))  # from /
    assert cut(text, access) == "# escape=`\nFROM x\nRUN python t.py\n"


def test_render_spells_each_form() -> None:
    assert render("ENV", STOCHASTIC_ROUNDING, "1") == "NEURON_RT_STOCHASTIC_ROUNDING_EN=1"
    assert render("ENV legacy", STOCHASTIC_ROUNDING, "1") == "NEURON_RT_STOCHASTIC_ROUNDING_EN 1"
    assert render("ARG", "A", "a b") == 'A="a b"'
    assert render("ENV", NEURON_CC_FLAGS, "--auto-cast=none", append=True) == (
        'NEURON_CC_FLAGS="${NEURON_CC_FLAGS} --auto-cast=none"'
    )
    assert render("ENV legacy", NEURON_CC_FLAGS, "--a --auto-cast=none") == (
        "NEURON_CC_FLAGS --a --auto-cast=none"
    )
    assert render("ENV legacy", NEURON_CC_FLAGS, "--auto-cast=none", append=True) == (
        "NEURON_CC_FLAGS ${NEURON_CC_FLAGS} --auto-cast=none"
    )
    assert render("ENV escape=`", "A", 'say "hi"') == 'A="say `"hi`""'


def test_rendered_values_read_back_as_written() -> None:
    for value in ["1", "--a --b", "it's", 'q"uote', "dollar $5", "back\\slash"]:
        for syntax, template in [("ENV", "ENV {}\n"), ("ENV legacy", "ENV {}\n")]:
            text = template.format(render(syntax, NEURON_CC_FLAGS, value))
            assert only(text).value == FlagValue((value,)), (syntax, text)
        for template in ["RUN {} true\n", 'CMD ["bash", "-c", "{} true"]\n']:
            syntax = only(template.format("XLA_USE_BF16=1")).syntax  # the shell engine spells it
            text = template.format(render_shell(syntax, NEURON_CC_FLAGS, value))
            assert only(text).value == FlagValue((value,)), (syntax, text)


# -- What cannot be read --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "column", "message"),
    [
        ('FROM x\nENV XLA_USE_BF16="1\n', 2, 18, 'ENV: unterminated " quote'),
        ('FROM x\nENV XLA_USE_BF16 "1\n', 2, 18, 'ENV: unterminated " quote'),
        ("FROM x\nENV A=1\n    XLA_USE_BF16=1\n", 3, 5, "unknown instruction XLA_USE_BF16=1"),
        ("FROM x\nENV XLA_USE_BF16=1 FOO\n", 2, 20, "ENV: expected NAME=VALUE, found 'FOO'"),
        ("FROM x\nENV XLA_USE_BF16\n", 2, 5, "ENV: XLA_USE_BF16 has no value"),
        ("FROM x\nRUN <<EOF\nexport XLA_USE_BF16=1\n", 2, 5, "heredoc EOF is never closed"),
        ('RUN echo "$(echo XLA_USE_BF16\n', 1, 30, "RUN: bash: unexpected EOF"),  # (at the end)
        ("FROM x\nRUN export XLA_USE_BF16=1 && \\\n    echo ) \n", 3, 10, "RUN: bash: syntax"),
    ],
)
def test_problems_are_reported_where_the_parser_stopped(
    text: str, line: int, column: int, message: str
) -> None:
    [problem] = analyse(text, NAMES).problems
    assert (problem.line, problem.column) == (line, column)
    assert problem.message.startswith(message)


def test_instructions_without_a_flag_are_not_judged() -> None:
    assert analyse("RUN echo 'unbalanced\nFOO bar\nENV XLA_USE_BF16=1\n", NAMES).problems == ()


def test_random_input_never_raises() -> None:
    pieces = [
        "ENV ", "ARG ", "RUN ", "CMD ", "ONBUILD ", "FROM x AS y\n", "XLA_USE_BF16", "=", "1",
        " ", "\\\n", "\n", "\r\n", '"', "'", "$", "${", "}", "$(", ")", "&&", ";", "|",
        "export ", "env ", "-u ", "unset ", "<<EOF", "EOF", "<<-'E'", "#", "`", "[", "]",
        '"python"', "train.py", "2>&1", ">", "\t", "# escape=`\n", "NEURON_CC_FLAGS=",
        '["bash", "-c", "', '"]', "\\u0041", '\\"', "ENTRYPOINT ", 'SHELL ["pwsh"]\n', "bash ",
    ]  # fmt: skip
    rng = random.Random(7)
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 24)))
        for access in analyse(text, NAMES).accesses:
            assert 0 <= access.start <= access.end <= len(text)
            if access.kind != "read":
                assert text[access.start : access.end].startswith(access.variable)


# -- The rewrite fixtures -------------------------------------------------------------------

REWRITES = snapshots.rewrites(".dockerfile")


def test_there_are_dockerfile_rewrite_fixtures() -> None:
    assert len(REWRITES) >= 4 * len(MODES)


@needs_bash
@pytest.mark.parametrize(("mode", "case"), REWRITES, ids=lambda p: getattr(p, "name", p))
def test_rewritten_dockerfile_keeps_no_legacy_flag_and_balanced_continuations(
    mode: str, case: Path, catalogue: Catalogue
) -> None:
    name = snapshots.case_name(case)
    output = f"{name}.{mode}{case.suffix}"
    data = snapshots.rewritten(name, mode)
    text = data.decode("utf-8")
    assert_bash_accepts(text)
    lines = text.splitlines()
    escape = "`" if re.match(r"#\s*escape\s*=\s*`", text) else "\\"
    # XM4xx are the rewrite's own manual steps (e.g. XM405): scan never reports them.
    expected = [
        key for key in snapshots.read(name, mode).left if not key.split()[1].startswith("XM4")
    ]
    left = scan_source(output, data, "dockerfile", catalogue, frozenset(catalogue.rules))
    assert left.errors == ()
    assert len(left.findings) == len(expected)
    reported = {finding.span.line for finding in left.findings}
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if stripped.startswith("#") or re.search(r"#\s*(noqa|xlamigrate:\s*ignore)", line):
            continue
        if any(re.search(rf"\b{flag}\b", line) for flag in LEGACY):
            assert number in reported, f"{output}:{number}: {line}"
        if stripped.endswith(escape):
            assert number < len(lines), f"{output}:{number} continues past the end"
            assert lines[number].strip(), f"{output}:{number} continues into a blank line"
