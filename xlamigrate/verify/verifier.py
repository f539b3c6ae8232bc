"""`xlamigrate verify` as a function: rewrite a script per mode into a temporary folder, run the
original and every rewrite under the recorder, and compare each rewrite with the original."""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from xlamigrate.apitable import REMOVED_XLA_API
from xlamigrate.catalogue import Catalogue
from xlamigrate.kinds.python.planner import FLAG_SET_AFTER_DEVICE_START
from xlamigrate.request import DEFAULT_MODE, STANDALONE, RewriteRequest
from xlamigrate.results import Finding
from xlamigrate.verify import forkserver
from xlamigrate.verify.compare import (
    PASSING,
    RTOL,
    WINDOW,
    Comparison,
    compare,
    no_flag_effect,
    not_verified,
    reference_problem,
)
from xlamigrate.verify.launcher import (
    install_launch_shims,
    is_launcher,
    launch_environment,
    migrated_copy,
    project_root,
)
from xlamigrate.verify.manifest import (
    ContainerCommand,
    ManifestError,
    is_dockerfile,
    is_manifest,
    launcher_text,
    manifest_commands,
    select,
    unmapped_scripts,
)
from xlamigrate.verify.runs import (
    RunResult,
    RunSpec,
    install_shim,
    legacy_flags_on,
    link_siblings,
    run,
    run_environment,
)

ORIGINAL = "original"
# findings on a legacy flag write that the rewrite leaves where it is
WRITES_LEFT = frozenset({FLAG_SET_AFTER_DEVICE_START})
# What the original ran with, where it crashed before recording it and the rewrite shows that
# the script sets a legacy flag itself.
SCRIPT_SETS_A_FLAG = "the legacy flag the script sets"


class VerifyError(Exception):
    """A problem with what verify was asked to do (exit code 2), said with the path."""


@dataclass(frozen=True)
class VerifyOptions:
    modes: tuple[str, ...]
    steps: int = 20
    rtol: float = RTOL
    window: int = WINDOW
    args: tuple[str, ...] = ()
    legacy_env: Mapping[str, str] | None = None  # for the original only (a launcher's flags)
    timeout: float = 600.0
    jobs: int = 2
    rewritten: Path | None = None  # a rewrite made by hand, instead of xlamigrate's
    unsafe_fixes: bool = False
    target: str = STANDALONE.platform  # the platform the rewrites are for (and checked on)


@dataclass(frozen=True)
class Rewrite:
    """The script one mode runs: xlamigrate's rewrite, or the user's own file."""

    mode: str
    text: bytes
    changed: bool  # the precision migration changed it (not only its torch-xla API calls)
    remaining: tuple[Finding, ...] = ()
    given: Path | None = None
    api_calls: bool = False  # it changed torch-xla API calls (XM5xx)


@dataclass(frozen=True)
class VerifyReport:
    script: str
    options: VerifyOptions
    rewrites: tuple[Rewrite, ...]
    runs: Mapping[str, RunResult]  # ORIGINAL and one per mode
    comparisons: tuple[Comparison, ...]
    legacy_on: tuple[str, ...]  # "XLA_USE_BF16=1": the flags the original ran with
    notes: tuple[str, ...]
    ineffective: tuple[str, ...] = ()  # flags on in its environment that took no effect

    @property
    def equivalent(self) -> bool:
        """Every rewrite passed: it trains like the original, or, where the original is no
        reference, it trains on its own."""
        return all(comparison.verdict in PASSING for comparison in self.comparisons)

    @property
    def reference_problem(self) -> str | None:
        """Why the original is no reference (a crash, a NaN loss), or None."""
        return reference_problem(self.runs[ORIGINAL])


def verify(
    script: Path,
    options: VerifyOptions,
    catalogue: Catalogue,
    enabled: frozenset[str],
    progress: Callable[[str], None] = lambda message: None,
) -> VerifyReport:
    script = script.resolve()
    launcher = is_launcher(script) and options.rewritten is None
    rewrites = [] if launcher else _rewrites(script, options, catalogue, enabled)
    notes = _rewrite_notes(rewrites)
    with tempfile.TemporaryDirectory(prefix="xlamigrate-verify-") as folder:
        work = Path(folder)
        shim = install_shim(work / "shim")
        if launcher:
            specs, rewrites, copies = _launcher_specs(script, options, shim, work, notes)
        else:
            copies = {}
            runnable = _runnable_original(script, catalogue)
            if runnable is not None:
                notes.append(
                    "the original runs with the torch-xla calls torch-xla 2.9 no longer has "
                    "migrated (XM501: `xlamigrate rewrite --select XM501`), its precision as "
                    "written"
                )
            specs = [_original_spec(script, options, shim, work, runnable)]
            for rewrite in rewrites:
                specs.append(_rewrite_spec(script, rewrite, options, shim, work))
        progress(
            f"running {', '.join(spec.label for spec in specs)} on torch-xla (PJRT_DEVICE=CPU), "
            f"{options.steps} optimizer steps each"
        )
        server = None
        if any(spec.interpreter is None for spec in specs):
            server = forkserver.start(shim, run_environment(os.environ, [shim]), work)
        try:
            with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
                ran = pool.map(lambda spec: run(spec, server), specs)
                results = {result.label: _named(result, work) for result in ran}
        finally:
            if server is not None:
                server.close()
    for mode, root in copies.items():  # the copy's paths, as the original's, in its launches
        original_root = str(project_root(script))
        launched = tuple(line.replace(root, original_root) for line in results[mode].launches)
        results[mode] = replace(results[mode], launches=launched)
    original = results[ORIGINAL]
    legacy_on = tuple(legacy_flags_on(original.flags))
    if not original.flags:  # it crashed before its first step: what it ran with is unknown
        legacy_on = tuple(legacy_flags_on(options.legacy_env or {})) or (
            (SCRIPT_SETS_A_FLAG,) if any(r.changed for r in rewrites) else ()
        )
    ineffective = legacy_on if legacy_on and no_flag_effect(original.census) else ()
    if ineffective:
        notes.append(
            f"{', '.join(ineffective)} was on in the original's environment but took no effect: "
            "it held everything on the device in float32 (a flag set after the device started, "
            "XM411), so it trained in float32 and every rewrite must too"
        )
        legacy_on = ()
    if original.ok and not legacy_on and launcher:
        notes.append(
            "this configuration of the launcher sets no legacy flag: every migration must "
            "launch the same commands and train in float32, as it did"
        )
    elif original.ok and not legacy_on and not ineffective:
        notes.append(
            "the original ran without a legacy flag on, so it trained in float32 and every "
            "rewrite must too; pass the script's options that set the flag after `--`, or "
            "--legacy-env XLA_USE_BF16=1 when a launcher sets it"
        )
    comparisons = tuple(
        compare(original, results[r.mode], catalogue.modes[r.mode], bool(legacy_on),
                options.rtol, options.window,
                catalogue.modes[r.mode].environment_on(options.target), ineffective)
        for r in rewrites
    )  # fmt: skip
    if original.ok and not legacy_on and not launcher:
        hint = _unverified_hint(rewrites, bool(ineffective))
        comparisons = tuple(not_verified(comparison, hint) for comparison in comparisons)
    return VerifyReport(
        script=_display(script),
        options=options,
        rewrites=tuple(rewrites),
        runs=results,
        comparisons=comparisons,
        legacy_on=legacy_on,
        notes=tuple(notes),
        ineffective=ineffective,
    )


def _rewrites(
    script: Path, options: VerifyOptions, catalogue: Catalogue, enabled: frozenset[str]
) -> list[Rewrite]:
    try:
        data = script.read_bytes()
    except OSError as error:
        raise VerifyError(f"{_display(script)}: cannot read: {error.strerror or error}") from error
    if options.rewritten is not None:
        try:
            text = options.rewritten.read_bytes()
        except OSError as error:
            raise VerifyError(f"{options.rewritten}: cannot read: {error.strerror}") from error
        (mode,) = options.modes
        return [Rewrite(mode, text, text != data, given=options.rewritten.resolve())]
    from xlamigrate.apitable import api_table
    from xlamigrate.engine import rewrite_source

    rewrites = []
    for mode in options.modes:
        request = RewriteRequest(mode, options.unsafe_fixes, target=options.target)
        outcome = rewrite_source(_display(script), data, "python", catalogue, enabled, request)
        if outcome.errors:
            problem = outcome.errors[0]
            where = f"{problem.path}:{problem.line}" if problem.line else problem.path
            raise VerifyError(f"{where}: {problem.message}")
        text = outcome.rewritten if outcome.rewritten is not None else data
        apis = api_table().rules()
        changed = any(finding.code not in apis for finding in outcome.fixed)
        api_calls = any(finding.code in apis for finding in outcome.fixed)
        rewrites.append(Rewrite(mode, text, changed, outcome.remaining, api_calls=api_calls))
    return rewrites


def _unverified_hint(rewrites: list[Rewrite], ineffective: bool = False) -> str:
    """What to run instead, where the original trained without a legacy flag."""
    if ineffective:
        return (
            "the script's flag took no effect (XM411): if bf16 was meant, move the write before "
            "the first tensor goes to the device and verify again; else remove it"
        )
    if any(rewrite.changed for rewrite in rewrites):  # the script sets it under a condition
        return (
            "give the script the options that set the flag after `--` (xlamigrate verify "
            "SCRIPT -- --bf16), or --legacy-env XLA_USE_BF16=1 where a launcher sets it"
        )
    return (
        "if a launcher sets the flag, verify that launcher instead (xlamigrate verify run.sh "
        "-- CONFIG), or give the original its flag: --legacy-env XLA_USE_BF16=1"
    )


def _rewrite_notes(rewrites: list[Rewrite]) -> list[str]:
    """What the rewrites did not do, each said once with the modes it concerns."""
    unchanged = [r.mode for r in rewrites if r.given is None and not r.changed]
    notes = []
    left_writes = any(  # a flag write the rewrite leaves for manual work (XM411: set too late)
        finding.code in WRITES_LEFT for r in rewrites for finding in r.remaining
    )
    if unchanged and left_writes:
        notes.append(
            f"xlamigrate rewrite leaves this script's legacy flag write for manual work "
            f"({', '.join(unchanged)}): see the findings below"
        )
    elif unchanged:
        named = ", ".join(unchanged)
        if any(r.api_calls for r in rewrites if r.mode in unchanged):
            notes.append(
                f"xlamigrate rewrite changes only torch-xla API calls in this script ({named}), "
                "not its precision: it does not set a legacy flag itself"
            )
        else:
            notes.append(
                f"xlamigrate rewrite changes nothing in this script ({named}): it does not set a "
                "legacy flag itself, so the rewrite runs as the original without the flag"
            )
    manual: dict[tuple[int, str, str], list[str]] = {}
    for rewrite in rewrites:
        for finding in rewrite.remaining:
            key = (finding.span.line, finding.code, finding.message)
            manual.setdefault(key, []).append(rewrite.mode)
    for (line, code, message), modes in sorted(manual.items()):
        notes.append(f"left for manual work ({', '.join(modes)}): line {line}: {code} {message}")
    return notes


_FINDING = re.compile(r":\d+:\d+: XM\d{3} ")


def _launcher_specs(
    launcher: Path, options: VerifyOptions, shim: Path, work: Path, notes: list[str]
) -> tuple[list[RunSpec], list[Rewrite], dict[str, str]]:
    """The launcher as it is and, per mode, a migrated copy of the project: each run with its
    launch commands intercepted (one local process) and logged. A manifest (YAML, Dockerfile)
    runs as the shell launcher of the container that `--` names."""
    shims = install_launch_shims(work / "launch-shims")
    manifest = is_manifest(launcher)

    def spec(label: str, script: Path, cwd: Path, env: dict[str, str]) -> RunSpec:
        log = work / f"launches-{label}.log"
        args = options.args
        if manifest:  # its container's command, environment and paths, as a shell launcher
            command = _container(script, options.args, notes if label == ORIGINAL else None)
            script = work / f"{label}-{launcher.name}.sh"
            script.write_text(launcher_text(command, cwd, _display(launcher)), encoding="utf-8")
            args = ()
        return RunSpec(
            label=label, script=script, args=args, cwd=cwd,
            env=launch_environment(env, shims, log), records=work / "records" / label,
            steps=options.steps, timeout=options.timeout, interpreter="bash", launch_log=log,
        )  # fmt: skip

    original_env = run_environment(os.environ, [shim], options.legacy_env or {})
    cwd = project_root(launcher) if manifest else Path.cwd()
    specs = [spec(ORIGINAL, launcher, cwd, original_env)]
    rewrites, copies = [], {}
    manual: dict[str, list[str]] = {}  # a finding left for manual work, and the modes it is in
    for mode in options.modes:
        copy = migrated_copy(launcher, mode, work, options.target)
        copies[mode] = str(copy.root)
        text = copy.launcher.read_bytes()
        rewrites.append(Rewrite(mode, text, text != launcher.read_bytes()))
        for line in copy.output.splitlines():
            if _FINDING.search(line) and "[fix: manual]" in line:
                manual.setdefault(line, []).append(mode)
        cwd = copy.root if manifest else copy.cwd
        specs.append(spec(mode, copy.launcher, cwd, run_environment(os.environ, [shim])))
    notes.extend(
        f"left for manual work ({', '.join(modes)}): {line}" for line, modes in manual.items()
    )
    return specs, rewrites, copies


def _container(manifest: Path, words: tuple[str, ...], notes: list[str] | None) -> ContainerCommand:
    """The command of the manifest's container that `words` selects (a Dockerfile: the image's,
    `words` replacing its CMD)."""
    where = _display(manifest)
    try:
        commands = manifest_commands(manifest, words)
    except (ManifestError, OSError, UnicodeDecodeError) as error:
        raise VerifyError(f"{where}: {error}") from error
    if is_dockerfile(manifest):
        (command,) = commands
    elif len(words) > 1:
        raise VerifyError(f"{where}: after `--`, name one container (not its arguments)")
    else:
        try:
            command = select(commands, words, where)
        except ManifestError as error:
            raise VerifyError(str(error)) from error
    if notes is not None:  # the original's: checked once
        missing = unmapped_scripts(command, project_root(manifest))
        if missing:
            raise VerifyError(
                f"{where}: {command.name} runs {missing[0]}, a path in the image that no file of "
                "this project ends with: run verify from the project's folder"
            )
        for name in command.unknown:
            notes.append(
                f"{command.name} runs without {name} here: its value is set in the cluster"
            )
    return command


def _runnable_original(script: Path, catalogue: Catalogue) -> bytes | None:
    """The script with the torch-xla APIs 2.9 no longer has migrated (XM501's safe fixes), so
    that its legacy run can start at all; None where it uses none (it runs as it is)."""
    from xlamigrate.engine import rewrite_source

    try:
        data = script.read_bytes()
    except OSError:
        return None
    request = RewriteRequest(DEFAULT_MODE)  # (no recipe: XM501 alone is enabled)
    outcome = rewrite_source(
        _display(script), data, "python", catalogue, frozenset({REMOVED_XLA_API}), request
    )
    return outcome.rewritten if outcome.changed and not outcome.errors else None


def _original_spec(
    script: Path, options: VerifyOptions, shim: Path, work: Path, text: bytes | None = None
) -> RunSpec:
    """The original's run: the script itself, or (`text`) its copy beside links to its
    folder's files."""
    paths = [shim]
    if text is not None:
        folder = work / ORIGINAL
        link_siblings(script, folder)
        (folder / script.name).write_bytes(text)
        script, paths = folder / script.name, [shim, script.parent]
    return RunSpec(
        label=ORIGINAL,
        script=script,
        args=options.args,
        cwd=Path.cwd(),
        env=run_environment(os.environ, paths, options.legacy_env or {}),
        records=work / "records" / ORIGINAL,
        steps=options.steps,
        timeout=options.timeout,
    )


def _rewrite_spec(
    script: Path, rewrite: Rewrite, options: VerifyOptions, shim: Path, work: Path
) -> RunSpec:
    folder = work / rewrite.mode
    link_siblings(script, folder)
    copy = folder / script.name
    copy.write_bytes(rewrite.text)
    return RunSpec(
        label=rewrite.mode,
        script=copy,
        args=options.args,
        cwd=Path.cwd(),
        env=run_environment(os.environ, [shim, script.parent]),
        records=work / "records" / rewrite.mode,
        steps=options.steps,
        timeout=options.timeout,
    )


def _named(result: RunResult, work: Path) -> RunResult:
    """A copy's traceback (a rewrite's, the original's with its APIs migrated) names the copy,
    in a folder that is gone when verify ends."""
    folder = f"{work / result.label}{os.sep}"
    return replace(result, stderr_tail=result.stderr_tail.replace(folder, f"<{result.label}>/"))


def _display(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return str(path)


def torch_xla_missing() -> str | None:
    """Why verify cannot run here, or None; checked without importing torch or torch-xla."""
    import importlib.util

    for module, what in (("torch", "torch"), ("torch_xla", "torch-xla")):
        if importlib.util.find_spec(module) is None:
            return (
                f"{what} is not installed for {sys.executable}; verify runs the scripts on "
                "torch-xla's CPU device: python -m pip install 'xlamigrate[xla]'"
            )
    return None
