"""A qualification run: lay out the levels, run the suites in-process, write the reports.

The CLI and a plain ``pytest suites --checkpoint ...`` both come through here, so both
produce the same report. The report is written when the session ends, whatever ended
it: a failed check, a harness error, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.metadata
import os
import platform
import signal
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from qualify import __version__
from qualify.checkpoint.checksums import sha256_files
from qualify.checkpoint.manifest import MANIFEST_NAME, list_checkpoint_files
from qualify.checkpoint.pinned import PinnedFolder
from qualify.core import LEVELS
from qualify.errors import HarnessError, QualifyError, RunFolderExists, UsageError, exhausted
from qualify.profile import Profile
from qualify.report.markdown import CHART_KEY, chart_file, chart_files, render_markdown
from qualify.report.model import Check, LevelResult, Run, write_json
from qualify.run.context import RunContext
from qualify.run.pinning import pinned_copy, record_pinned
from qualify.util.atomic import atomic_write_text
from qualify.util.identifiers import new_run_id
from qualify.util.provenance import harness_source
from qualify.util.redact import redact

REPO_ROOT = Path(__file__).resolve().parents[2]
SUITES_DIR = REPO_ROOT / "suites"
REPORTED_PACKAGES = ("torch", "safetensors", "huggingface_hub", "openai", "docker", "jsonschema", "pytest")


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def environment() -> dict[str, Any]:
    packages: dict[str, str | None] = {}
    for name in REPORTED_PACKAGES:
        try:
            packages[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            packages[name] = None
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "packages": packages,
    }


def describe_dir(root: Path | None) -> dict[str, Any]:
    """Identity of a checkpoint directory: every file's sha256 and size (what a gate compares)."""
    if root is None:
        return {"path": None, "files": []}
    root = Path(root)
    out: dict[str, Any] = {"path": str(root), "files": []}
    if not root.is_dir():
        return out
    rels = list_checkpoint_files(root)
    regular = [r for r in rels if (root / r).is_file()]
    try:
        digests = sha256_files([root / r for r in regular], labels=regular)
    except QualifyError:
        digests = {}
    out["files"] = [
        {"path": r, "sha256": digests.get(root / r), "size": (root / r).stat().st_size} for r in regular
    ]
    if root / MANIFEST_NAME in digests:
        out["manifest_sha256"] = digests[root / MANIFEST_NAME]
    return out


def new_run(
    profile: Profile,
    checkpoint: Path | None,
    source: Path | None,
    levels: Sequence[str],
    command: Sequence[str] = (),
) -> Run:
    run = Run(
        run_id=new_run_id(profile.name),
        harness_version=__version__,
        started_at=now(),
        command=[redact(arg) for arg in command],
        profile={"name": profile.name, "path": str(profile.path), "sha256": profile.sha256,
                 "conditions": profile.conditions()},
        checkpoint={"path": str(checkpoint) if checkpoint else None},
        source={"path": str(source) if source else None},
        environment=environment(),
    )
    # Every level asked for counts towards the verdict, but for the ones the profile lists as
    # measured only: those are recorded and shown as such, and never make a run qualified.
    measured = set(profile.measured_levels)
    for name in LEVELS:  # in the order a full run performs them
        if name in levels:
            run.levels.append(LevelResult(name, required=name not in measured))
    return run


def make_run_dir(reports_root: Path, run_id: str) -> Path:
    """A fresh folder for one run; an existing one is never reused or overwritten."""
    path = Path(reports_root) / run_id
    try:
        path.mkdir(parents=True, exist_ok=False)
    except FileExistsError:
        raise RunFolderExists(f"{path}: run folder already exists; refusing to overwrite another run") from None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:  # the folder the user named, not the machine
            raise UsageError(f"{path}: the run folder's path is longer than the system allows "
                             f"({exc.strerror}); name a shorter --report-dir") from None
        raise exhausted(exc, f"creating the run folder {path}") or HarnessError(
            f"{path}: cannot create the run folder: {exc.strerror or exc}") from None
    return path


def claim_run_dir(reports_root: Path, run: Run, attempts: int = 4) -> Path:
    """A fresh folder for ``run``; if another run holds its id, the run draws a new one.

    Two runs started in the same second share an id once in 16.7 million; that is no
    reason to fail a run, but a reason never to share a folder.
    """
    for _ in range(attempts - 1):
        try:
            return make_run_dir(reports_root, run.run_id)
        except RunFolderExists:
            run.run_id = new_run_id(run.profile["name"])
    return make_run_dir(reports_root, run.run_id)  # the last attempt's clash is raised


def finish_run(run: Run, report_dir: Path | None) -> None:
    """Record identities and the finish time, then write report.json and report.md atomically."""
    run.finished_at = now()
    # The harness's code by its commit (a version names every commit between two releases), judged at the end:
    # the suites' plugin records it with everything pytest loaded; a run that never reached them, here.
    if "harness_source" not in run.environment:
        run.environment["harness_source"] = harness_source().to_dict()
    for attr in ("checkpoint", "source"):
        info = getattr(run, attr)
        path = info.get("path")
        if path and "files" not in info:
            info.update(describe_dir(Path(path)))
    if report_dir is not None:
        write_json(run, Path(report_dir) / "report.json")
        for lvl in run.levels:  # charts first: report.md links to them
            for check in lvl.checks:
                name = chart_file(check)
                if name and check.evidence is not None:
                    atomic_write_text(Path(report_dir) / name, check.evidence.measured[CHART_KEY])
                for file, svg in chart_files(check).items():
                    atomic_write_text(Path(report_dir) / file, svg)
        atomic_write_text(Path(report_dir) / "report.md", render_markdown(run))


def print_check(check: Check) -> None:
    print(f"{check.id:<40} {check.status!s:<8} {check.duration_s:6.2f} s", flush=True)


@contextlib.contextmanager
def sigterm_as_interrupt(run: Run) -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt so the session ends through its normal finish (and writes its report)."""

    def handler(signum: int, frame: Any) -> None:
        run.interrupted = signal.Signals(signum).name
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: nothing to install
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_suites(
    run: Run,
    context: RunContext,
    *,
    report_dir: Path | None,
    junit_xml: Path | None = None,
    local_serving: Any = None,
    before_finish: Callable[[Run], None] | None = None,
    pinned: PinnedFolder | None = None,
) -> int:
    """Run the suites for the levels laid out in ``run``, under ``context``; returns pytest's exit code.

    ``junit_xml`` is where pytest writes its JUnit XML; ``local_serving`` is handed to the serving
    fixtures (:mod:`qualify.serving.local_servers`); ``before_finish`` runs before the report is
    written (to stop servers and record them); ``pinned`` is the checkpoint as the run pinned it
    (the checks read its copy, and it is verified again at the end).
    """
    import pytest

    from qualify.run.suite_plugin import QualifyPlugin

    if not SUITES_DIR.is_dir():
        raise HarnessError(f"{SUITES_DIR}: the qualification suites are missing (install qualify from its checkout)")
    # pytest's own terminal output (dots, "errors" for fixture failures) would speak of tests,
    # not checks; the plugin prints one line per check instead. Nothing of the run travels
    # here: the suites read the context the plugin carries. --confcutdir keeps conftests
    # outside this repository out (a checkpoint inside another checkout must not run its code).
    # --assert=plain: the suites assert nothing, and pytest's rewritten bytecode is a cache of its own that the
    # harness-source check (qualify.util.provenance) could not hold to the source; imported plainly, conftest
    # and the suites run from their source or from bytecode that check compares with it.
    args = [str(SUITES_DIR), "-o", "addopts=", "--strict-markers", "-p", "no:cacheprovider", "-p", "no:terminal",
            "--assert=plain", f"--confcutdir={REPO_ROOT}"]
    if junit_xml is not None:
        args.append(f"--junitxml={junit_xml}")
    checkpoint = context.checkpoint

    def finish(r: Run) -> None:
        if before_finish is not None:
            before_finish(r)
        finish_run(r, report_dir)

    with contextlib.ExitStack() as stack:
        if pinned is None and checkpoint is not None and Path(checkpoint).is_dir():
            # A caller that did not pin the checkpoint gets it pinned here, for this call only.
            pinned = stack.enter_context(pinned_copy(Path(checkpoint)))
            record_pinned(run, pinned)
        plugin = QualifyPlugin(run, context, on_finish=finish, progress=print_check, local_serving=local_serving,
                               pinned=pinned)
        with sigterm_as_interrupt(run):
            try:
                return int(pytest.main(args, plugins=[plugin]))
            except KeyboardInterrupt:
                run.interrupted = run.interrupted or "KeyboardInterrupt"
                finish(run)
                return int(pytest.ExitCode.INTERRUPTED)

