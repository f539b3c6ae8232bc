"""An interrupted rewrite leaves every file either as it was or as the rewrite makes it: never a
mix, never empty. Shown deterministically (an interrupt raised at the Nth rename, in process)
and for real (`xlamigrate rewrite` killed with SIGKILL at points spread over its run)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from xlamigrate import writer
from xlamigrate.writer import write_atomically

FILES = 60
SCRIPT = (
    "import os\n\nimport torch\n\n"
    'os.environ["XLA_USE_BF16"] = "1"\n'
    "model = torch.nn.Linear({width}, 1)\n"
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
)


def make_tree(root: Path) -> dict[str, bytes]:
    root.mkdir(parents=True, exist_ok=True)
    originals = {}
    for index in range(FILES):
        data = SCRIPT.format(width=index + 1).encode()
        (root / f"train_{index:03}.py").write_bytes(data)
        originals[f"train_{index:03}.py"] = data
    return originals


def rewrite(root: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        # (a tree without requirements: XM409 is not this test's concern)
        [sys.executable, "-m", "xlamigrate.cli", "rewrite", "--mode", "fp32-copy", "-j", "1",
         "--ignore", "XM409", "."],
        cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """(originals, what a finished rewrite writes)."""
    root = tmp_path_factory.mktemp("complete")
    originals = make_tree(root)
    assert rewrite(root).wait(timeout=300) == 0
    rewritten = {name: (root / name).read_bytes() for name in originals}
    assert all(rewritten[name] != originals[name] for name in originals)
    return originals, rewritten


def kill_during_writes(root: Path, originals: dict[str, bytes], delay: float) -> None:
    """Plans run first, then the writes (in path order): the kill lands `delay` seconds after
    the first file was replaced, inside the write phase."""
    first = root / min(originals)
    process = rewrite(root)
    while process.poll() is None and first.read_bytes() == originals[first.name]:
        time.sleep(0.0005)
    time.sleep(delay)
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)


def test_an_interrupt_between_renames_leaves_each_file_old_or_new(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {tmp_path / f"f{index}.py": f"old {index}\n".encode() for index in range(10)}
    for path, data in files.items():
        path.write_bytes(data)
    renames = 0
    real_replace = os.replace

    def interrupted_replace(source: str, target: str) -> None:
        nonlocal renames
        renames += 1
        if renames == 5:
            raise KeyboardInterrupt  # Ctrl-C just before the 5th file's rename
        real_replace(source, target)

    monkeypatch.setattr(writer.os, "replace", interrupted_replace)
    with pytest.raises(KeyboardInterrupt):
        for path, data in files.items():
            write_atomically(path, data.replace(b"old", b"new"), data)
    states = [path.read_bytes() for path in files]
    assert states[:4] == [f"new {i}\n".encode() for i in range(4)]
    assert states[4:] == [f"old {i}\n".encode() for i in range(4, 10)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in files)  # no temp


@pytest.mark.parametrize("delay", [0.0, 0.005, 0.02, 0.08])
def test_a_rewrite_killed_while_writing_leaves_each_file_old_or_new(
    tmp_path: Path, expected: tuple[dict[str, bytes], dict[str, bytes]], delay: float
) -> None:
    originals, rewritten = expected
    make_tree(tmp_path)
    kill_during_writes(tmp_path, originals, delay)
    new = 0
    for name, old in originals.items():
        data = (tmp_path / name).read_bytes()
        assert data in (old, rewritten[name]), name
        new += data == rewritten[name]
    assert new >= 1  # the kill came after the first write
    leftovers = [p.name for p in tmp_path.iterdir() if p.name not in originals]
    # A kill between a temporary file's creation and its rename can leave that temporary file
    # (dot-prefixed, `.tmp`), never a damaged source file.
    assert all(name.startswith(".train_") and name.endswith(".tmp") for name in leftovers)
    print(f"killed {delay * 1000:.0f} ms into the writes: {new}/{FILES} files rewritten")


def test_a_second_run_after_a_kill_completes_the_migration(
    tmp_path: Path, expected: tuple[dict[str, bytes], dict[str, bytes]]
) -> None:
    originals, rewritten = expected
    make_tree(tmp_path)
    kill_during_writes(tmp_path, originals, 0.01)
    for leftover in tmp_path.glob(".*.tmp"):
        leftover.unlink()
    assert rewrite(tmp_path).wait(timeout=300) == 0
    assert {name: (tmp_path / name).read_bytes() for name in originals} == rewritten
