"""The env-access model: what each access form resolves to (variable, kind, target, value)."""

from __future__ import annotations

import ast
import textwrap

from xlamigrate.catalogue import Catalogue
from xlamigrate.kinds.python.envaccess import EnvAccess
from xlamigrate.kinds.python.envanalysis import analyse_env_accesses
from xlamigrate.kinds.python.scan import scan_python
from xlamigrate.request import FileTask
from xlamigrate.results import Finding


def accesses(source: str, catalogue: Catalogue) -> list[EnvAccess]:
    code = textwrap.dedent(source)
    return list(analyse_env_accesses(ast.parse(code), code, catalogue.flags).accesses)


def findings(source: str, catalogue: Catalogue) -> list[Finding]:
    data = textwrap.dedent(source).encode()
    task = FileTask("t.py", data, catalogue, frozenset(catalogue.rules))
    return list(scan_python(task).findings)


def test_str_of_int_is_a_known_value(catalogue: Catalogue) -> None:
    (access,) = accesses('import os\nos.environ["XLA_USE_BF16"] = str(1)\n', catalogue)
    assert (access.kind, access.form, access.value and access.value.literal) == (
        "write",
        "subscript",
        "1",
    )


def test_str_true_is_off_for_torch_xla(catalogue: Catalogue) -> None:
    (access,) = accesses('import os\nos.environ["XLA_USE_BF16"] = str(True)\n', catalogue)
    assert access.value is not None
    assert access.value.literal == "True"
    assert access.value.enabled is False


def test_conditional_value_keeps_both_branches(catalogue: Catalogue) -> None:
    (access,) = accesses(
        'import os\nos.environ["XLA_USE_BF16"] = "1" if bf16 else "0"\n', catalogue
    )
    assert access.value is not None and access.value.candidates == ("1", "0")


def test_value_from_a_module_constant(catalogue: Catalogue) -> None:
    source = 'import os\nON = "1"\nFLAG = "XLA_DOWNCAST_BF16"\nos.environ[FLAG] = ON\n'
    (access,) = accesses(source, catalogue)
    assert (access.variable, access.value and access.value.literal) == ("XLA_DOWNCAST_BF16", "1")


def test_variable_value_is_unknown(catalogue: Catalogue) -> None:
    (access,) = accesses('import os\nos.environ["XLA_USE_BF16"] = flag\n', catalogue)
    assert access.value is not None and access.value.candidates is None


def test_targets_of_process_child_and_test_environments(catalogue: Catalogue) -> None:
    source = """
    import os, subprocess
    os.environ["XLA_USE_BF16"] = "1"
    subprocess.run(["x"], env={**os.environ, "XLA_USE_BF16": "1"})
    def test_it(monkeypatch):
        monkeypatch.setenv("XLA_USE_BF16", "1")
    """
    assert [a.target for a in accesses(source, catalogue)] == ["process", "child", "test"]


def test_dict_merged_into_os_environ_is_a_process_write(catalogue: Catalogue) -> None:
    source = 'import os\nsettings = {"XLA_USE_BF16": "1"}\nos.environ.update(settings)\n'
    (access,) = accesses(source, catalogue)
    assert (access.kind, access.target) == ("write", "process")


def test_alias_defined_in_function_does_not_leak_to_other_functions(catalogue: Catalogue) -> None:
    source = """
    import os
    def a():
        env = os.environ
        env["XLA_USE_BF16"] = "1"
    def b(env):
        env["XLA_USE_BF16"] = "1"
    """
    found = findings(source, catalogue)
    # (XM401: the recipe of the kept write cannot go in, as its message says)
    assert [(f.span.line, f.code) for f in found] == [(5, "XM101"), (5, "XM401"), (7, "XM301")]


def test_helpers_are_followed_through_other_helpers(catalogue: Catalogue) -> None:
    source = """
    import os
    def _put(k, v):
        os.environ[k] = v
    def enable(name):
        _put(name, "1")
    enable("XLA_USE_BF16")
    """
    (access,) = accesses(source, catalogue)
    assert (access.variable, access.form, access.via) == ("XLA_USE_BF16", "helper", "enable")


def test_kwargs_forwarding_helper(catalogue: Catalogue) -> None:
    source = """
    import os
    def set_envs(**values):
        os.environ.update(values)
    set_envs(XLA_USE_BF16="1", PJRT_DEVICE="CPU")
    """
    (access,) = accesses(source, catalogue)
    assert (access.variable, access.kind, access.value and access.value.literal) == (
        "XLA_USE_BF16",
        "write",
        "1",
    )


def test_shell_command_string_is_a_mention_with_its_value(catalogue: Catalogue) -> None:
    (finding,) = findings('cmd = f"XLA_USE_BF16=1 torchrun {script}"\n', catalogue)
    assert (finding.code, finding.value, finding.enabled, finding.access) == (
        "XM301",
        "1",
        True,
        None,
    )


def test_bytes_and_concatenated_strings_name_flags(catalogue: Catalogue) -> None:
    source = 'import os\nos.environ["XLA_" "USE_BF16"] = "1"\nos.environb[b"XLA_USE_BF16"] = b"1"\n'
    codes = [(f.span.line, f.code) for f in findings(source, catalogue)]
    assert codes == [(2, "XM101"), (2, "XM401"), (3, "XM301")]  # (XM401: see the write's)


def test_fix_applicability_follows_context(catalogue: Catalogue) -> None:
    source = """
    import os, subprocess
    os.environ["XLA_USE_BF16"] = "1"
    os.environ["XLA_DOWNCAST_BF16"] = flag
    os.environ["XLA_USE_FP16"] = "0"
    subprocess.run(["x"], env={"XLA_USE_BF16": "1"})
    os.environ.pop("XLA_USE_BF16", None)
    model = torch.nn.Linear(4, 4)  # the model the recipe casts: the fix of line 3 is safe
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    """
    fixes = [(f.code, f.fix.applicability if f.fix else None) for f in findings(source, catalogue)]
    assert fixes == [
        ("XM101", "safe"),
        ("XM102", "unsafe"),
        ("XM103", "safe"),
        ("XM101", "manual"),
        ("XM202", "unsafe"),
    ]


def test_off_write_is_manual_when_the_file_reads_the_flag(catalogue: Catalogue) -> None:
    source = """
    import os
    os.environ["XLA_USE_BF16"] = "0"
    os.environ["XLA_DOWNCAST_BF16"] = "0"
    if "XLA_USE_BF16" in os.environ:
        pass
    """
    found = findings(source, catalogue)
    fixes = [(f.code, f.enabled, f.fix.applicability if f.fix else None) for f in found]
    assert fixes == [
        ("XM101", False, "manual"),
        ("XM102", False, "safe"),
        ("XM201", None, "manual"),
    ]
    assert "presence check" in found[2].message and "line 3" in found[2].message


def test_finding_span_covers_the_access(catalogue: Catalogue) -> None:
    (finding,) = findings('import os\nx = os.getenv("XLA_USE_BF16", "0")\n', catalogue)
    span = finding.span
    assert (span.line, span.column, span.end_line, span.end_column) == (2, 5, 2, 35)


def test_noqa_inside_a_string_is_not_a_suppression(catalogue: Catalogue) -> None:
    source = 'import os\nos.environ["XLA_USE_BF16"] = "# noqa"\n'
    assert [f.code for f in findings(source, catalogue)] == ["XM101"]


def test_noqa_prefix_and_comma_lists(catalogue: Catalogue) -> None:
    source = """
    import os
    os.environ["XLA_USE_BF16"] = os.getenv("XLA_DOWNCAST_BF16")  # noqa: XM1, XM201
    os.environ["XLA_USE_BF16"] = os.getenv("XLA_DOWNCAST_BF16")  # noqa: E501,XM201
    """
    assert [(f.span.line, f.code) for f in findings(source, catalogue)] == [(4, "XM101")]
