"""verify's fork server (xlamigrate/verify/forkserver.py, zygote.py): each run is a child of one
interpreter that imported torch and torch-xla, and must behave as `python SCRIPT ARGS` in a new
interpreter would, precision first: torch-xla reads the legacy flag when the device starts, so a
child's own environment decides it.

One server for the module (its start is the torch-xla import the children save).
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import needs_torch_xla_platform
from tests.test_rewrite_e2e import clean_env
from xlamigrate.verify import forkserver
from xlamigrate.verify.runs import install_shim, run_environment

pytestmark = needs_torch_xla_platform

STORED = """\
import json, os, re, sys
import torch, torch_xla
device = torch_xla.device()
weight = torch.nn.Linear(4, 4).to(device).weight
info = torch_xla._XLAC._get_xla_tensor_debug_info(weight)
print(json.dumps({
    "stored": re.search(r"XLA Shape: (\\w+)\\[", info).group(1),
    "argv": sys.argv[1:], "cwd": os.getcwd(), "name": __name__, "file": __file__,
    "path0": sys.path[0], "main": sys.modules["__main__"].__file__,
}))
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[forkserver.ForkServer]:
    work = tmp_path_factory.mktemp("forkserver")
    shim = install_shim(work / "shim")
    started = forkserver.start(shim, run_environment(clean_env(), [shim]), work)
    assert started is not None, (work / "fork-server.log").read_text()
    yield started
    started.close()


def child(
    server: forkserver.ForkServer, folder: Path, text: str, *args: str, timeout: float = 120,
    **env: str,
) -> tuple[int | None, str, str]:  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "script.py"
    script.write_text(textwrap.dedent(text))
    out, err = folder / "out", folder / "err"
    outcome = server.run(
        [str(script), *args], folder, {**clean_env(), **env}, err, timeout, stdout=out
    )
    assert outcome is not None
    return outcome.returncode, out.read_text(), err.read_text()


def test_each_child_starts_the_device_with_its_own_legacy_flag(
    server: forkserver.ForkServer, tmp_path: Path
) -> None:
    """The server imported torch-xla without the flag; a child with XLA_USE_BF16=1 stores its
    weights bf16, the next one without it f32, as two new interpreters would."""
    stored = []
    for index, flag in enumerate(({"XLA_USE_BF16": "1"}, {}, {"XLA_DOWNCAST_BF16": "1"})):
        code, out, err = child(server, tmp_path / str(index), STORED, **flag)
        assert code == 0, err
        stored.append(json.loads(out.splitlines()[-1])["stored"])
    assert stored == ["bf16", "f32", "bf16"]


def test_a_child_is_the_script_run_as_main_in_its_folder(
    server: forkserver.ForkServer, tmp_path: Path
) -> None:
    code, out, err = child(server, tmp_path, STORED, "--lr", "0.1")
    assert code == 0, err
    seen = json.loads(out.splitlines()[-1])
    script = str(tmp_path / "script.py")
    assert seen["argv"] == ["--lr", "0.1"]
    assert seen["cwd"] == str(tmp_path)
    assert (seen["name"], seen["file"], seen["main"]) == ("__main__", script, script)
    assert seen["path0"] == os.path.realpath(tmp_path)


def test_exit_codes_and_tracebacks_are_the_scripts(
    server: forkserver.ForkServer, tmp_path: Path
) -> None:
    code, _, err = child(server, tmp_path / "exit", "import sys\nsys.exit(3)\n")
    assert code == 3
    failing = """\
        def load():
            raise FileNotFoundError(2, "No such file or directory", "data.bin")
        load()
    """
    code, _, err = child(server, tmp_path / "raise", failing)
    assert code == 1
    assert err.startswith("Traceback (most recent call last):\n  File ")
    assert "zygote" not in err  # the traceback starts at the script, as the interpreter's
    assert "No such file or directory: 'data.bin'" in err
    code, _, err = child(server, tmp_path / "message", "raise SystemExit('usage: no data')\n")
    assert (code, err) == (1, "usage: no data\n")


def test_a_child_past_its_timeout_is_killed(server: forkserver.ForkServer, tmp_path: Path) -> None:
    code, _, _ = child(server, tmp_path, "import time\ntime.sleep(60)\n", timeout=1)
    assert code is None


def test_atexit_handlers_run_before_a_child_ends(
    server: forkserver.ForkServer, tmp_path: Path
) -> None:
    """The recorder writes its record at exit: a child must exit as an interpreter does."""
    text = "import atexit\natexit.register(lambda: print('at exit', flush=True))\nprint('body')\n"
    code, out, _ = child(server, tmp_path, text)
    assert (code, out) == (0, "body\nat exit\n")


def test_switched_off_there_is_no_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(forkserver.SWITCH, "0")
    shim = install_shim(tmp_path / "shim")
    assert forkserver.start(shim, run_environment(clean_env(), [shim]), tmp_path) is None


def test_without_torch_xla_the_server_says_why(tmp_path: Path) -> None:
    """An interpreter that cannot import torch-xla: no server, and the reason in its log."""
    shim = install_shim(tmp_path / "shim")
    (tmp_path / "blocked").mkdir()
    (tmp_path / "blocked" / "torch_xla.py").write_text("raise ImportError('not here')\n")
    env = run_environment(clean_env(), [shim, tmp_path / "blocked"])
    server = forkserver.ForkServer(shim / forkserver.SERVER_FILE, env, tmp_path / "log")
    assert not server.wait_ready(timeout=300)
    assert server.error == "ImportError: not here"
    server.close()
