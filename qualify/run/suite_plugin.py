"""The pytest plugin that turns qualification suites into the report model.

Each test in ``suites/`` is one check: its module's level marker names the level, its
name the check id; its title is the one :mod:`qualify.checks.catalogue` declares (a test the
catalogue does not declare: its docstring's first line). A test hands the library's
:class:`~qualify.report.model.Evidence` to the ``record`` fixture, which attaches it to the
check and fails the test when there are findings. Outcomes map to statuses as a
release gate needs them:

- the evidence has no findings -> passed; it has findings -> failed;
- a :class:`~qualify.errors.CheckpointError` (the checkpoint is broken) -> failed,
  with the file and tensor it names;
- a skip -> skipped (never passed); any other exception -> error (result unknown).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from qualify.checkpoint.pinned import PinnedFolder
from qualify.checks.catalogue import by_id
from qualify.core import LEVELS, Evidence, Status
from qualify.errors import CheckpointError, HarnessError, QualifyError, RuntimeNotStarted, exhausted
from qualify.report.model import Check, Run
from qualify.run.context import RunContext
from qualify.run.pinning import reverify
from qualify.util.provenance import harness_source, loaded_files


class CheckFailed(AssertionError):
    """Raised by ``record`` so that pytest shows the findings as the failure text."""


class LevelNotRun(Exception):
    """Raised before a check of a runtime or serving level when an earlier required level did not pass."""


#: From this level on, a level runs only when every earlier required level passed: launching a
#: runtime for a checkpoint that failed its checks (or serving from one that did not load)
#: measures nothing a verdict could use. The checkpoint levels before it all run, since each
#: is a diagnosis of its own.
GATED_FROM = "load"


def add_options(parser: pytest.Parser) -> None:
    # For `pytest suites --checkpoint DIR ...` by hand only: the root conftest turns these into the run's
    # context once (qualify.run.context.context_from_pytest); qualify run passes its context in-process.
    group = parser.getgroup("qualify", "qualification suites")
    group.addoption("--checkpoint", type=Path, default=None, help="the checkpoint directory to qualify")
    group.addoption("--source", type=Path, default=None, help="the source (unquantized) checkpoint directory")
    group.addoption("--profile", default=None, help="qualification profile: a shipped name or a .toml path")
    group.addoption("--trust-local-source", action="store_true", default=False,
                    help="go on with a --source folder whose identity no proof establishes; the report and card "
                    "say so, and qualify gate refuses it unless --allow-untrusted-source")
    group.addoption("--report-dir", type=Path, default=None, help="write report.json and report.md here")
    group.addoption("--levels", default=None, help="comma-separated levels to run (default: the profile's)")
    group.addoption("--endpoint", default=None, help="OpenAI endpoint (default: the profile's runtime.endpoint)")
    group.addoption("--reference-endpoint", default=None, help="the target served without a speculator (losslessness)")
    group.addoption("--source-endpoint", default=None,
                    help="the target served with the source draft, same settings (the paired level)")
    # The runtime levels (load): how the pinned runtime container is launched.
    group.addoption("--draft-revision", default=None, help="the draft's immutable commit (DFLASH_MODEL_REVISION)")
    group.addoption("--allow-unpinned", action="store_true", default=False,
                    help="launch with a moving image tag or revision; the report then says not reproducible")
    group.addoption("--hf-cache", type=Path, default=None,
                    help="a Hugging Face hub cache mounted read-only into the runtime (else --checkpoint is mounted)")
    group.addoption("--pass-hf-token", action="store_true", default=False,
                    help="pass HF_TOKEN into the runtime by name (its value is never printed)")
    group.addoption("--startup-timeout", type=float, default=None,
                    help="seconds the runtime may take to serve (default: the profile's, else 1800)")
    group.addoption("--server-log", type=Path, default=None,
                    help="the log file of the --endpoint server, for the smoke level's log evidence")
    group.addoption("--source-server-log", type=Path, default=None,
                    help="the log file of the --source-endpoint server: with --server-log, the paired level compares "
                    "both servers' engine settings")
    group.addoption("--image-digest", default=None,
                    help="pin the runtime image to this sha256 digest (where the profile states none)")
    group.addoption("--build-image", action="store_true", default=False,
                    help="build the profile's runtime image ($.runtime.build) when the load level starts, and pin "
                    "the launch to the image ID built")
    group.addoption("--runtime-log-dir", type=Path, default=None,
                    help="where the runtime's server.log goes (default: the run's report folder)")


def level_of(item: pytest.Item) -> str | None:
    for name in LEVELS:
        if item.get_closest_marker(name) is not None:
            return name
    return None


def check_id(item: pytest.Item, level: str) -> str:
    name = getattr(item, "originalname", None) or item.name
    return f"{level}.{name.removeprefix('test_')}"


def check_title(item: pytest.Item, level: str) -> str:
    """The check's title as the catalogue declares it; for a test it does not declare, its docstring's first line."""
    spec = by_id(check_id(item, level))
    if spec is not None:
        return spec.title
    doc = getattr(getattr(item, "function", None), "__doc__", None) or ""
    return doc.strip().splitlines()[0] if doc.strip() else item.name


class QualifyPlugin:
    """Collects one :class:`Check` per suite test into ``run``; levels must already be laid out in ``run``."""

    def __init__(self, run: Run, context: RunContext, on_finish: Any = None, progress: Any = None,
                 local_serving: Any = None, pinned: PinnedFolder | None = None) -> None:
        self.run = run
        # What the run was asked to do, typed: the suites read this, never pytest's options.
        self.context = context
        # The checkpoint as the run pinned it (qualify.checkpoint.pinned): the checks read its copy, and the
        # folder is hashed again before the report is written.
        self.pinned = pinned
        # The profile the run was started with, parsed once: the suites read this object rather
        # than load the file again (which could have changed since the run hashed it).
        self.profile = context.profile
        # The local servers of a profile's [local_server], started by the caller (qualify.serving.local_servers).
        self.local_serving = local_serving
        self.on_finish = on_finish
        self.progress = progress  # called with each Check as it completes
        self._started: dict[str, float] = {}
        self._evidence: dict[str, Evidence] = {}
        self._done: set[str] = set()
        # A broken input shared by many checks (a session fixture) is reported once, as a
        # failure of the first check that needed it; the others did not run.
        self._input_failures: list[tuple[BaseException, str]] = []
        # Each says whether the machine broke a server this run measures (a container killed for memory, or by a
        # signal the harness did not send): a serving check that fails meanwhile is then no evidence, an error.
        self.fault_probes: list[Callable[[], HarnessError | None]] = []

    # ---- selection: only the levels laid out in the run are collected
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        wanted = {lvl.name for lvl in self.run.levels}
        keep: list[pytest.Item] = []
        drop: list[pytest.Item] = []
        for item in items:
            level = level_of(item)
            (keep if level in wanted else drop).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
        # Levels run in the order a full run performs them (structure before format, ...),
        # whatever the files' names; within a level, in file order.
        keep.sort(key=lambda it: LEVELS.index(level_of(it) or ""))
        items[:] = keep

    # ---- evidence handed over by the `record` fixture
    def attach(self, item: pytest.Item, evidence: Evidence) -> None:
        self._evidence[item.nodeid] = evidence

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self._started[item.nodeid] = time.perf_counter()
        level = level_of(item)
        if level is None or LEVELS.index(level) < LEVELS.index(GATED_FROM):
            return
        blocking = self.blocking_levels(level)
        if blocking:
            reason = "not run: " + ", ".join(f"level {lv.name} {lv.status}" for lv in blocking) + " before it"
            lvl = self.run.level(level)
            lvl.reason = lvl.reason or reason
            raise LevelNotRun(reason)

    def blocking_levels(self, level: str) -> list[Any]:
        """The earlier required levels of the run that did not pass (all checks of theirs ran before)."""
        index = LEVELS.index(level)
        return [lv for lv in self.run.levels
                if lv.required and LEVELS.index(lv.name) < index and lv.status is not Status.PASSED]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[Any]) -> Any:
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        level = level_of(item)
        if level is None or item.nodeid in self._done:
            return
        if report.when == "call" or (report.when == "setup" and not report.passed):
            self._done.add(item.nodeid)
            check = self._check(item, level, report, call)
            self.run.level(level).checks.append(check)
            if self.progress is not None:
                self.progress(check)

    def _check(self, item: pytest.Item, level: str, report: pytest.TestReport, call: pytest.CallInfo[Any]) -> Check:
        evidence = self._evidence.get(item.nodeid)
        status, message = Status.PASSED, ""
        if report.skipped:
            status = Status.SKIPPED
            longrepr = report.longrepr
            message = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            message = message.removeprefix("Skipped: ")
        elif report.failed:
            exc = call.excinfo.value if call.excinfo else None
            if isinstance(exc, LevelNotRun):
                status, message, evidence = Status.NOT_RUN, str(exc), None
            elif isinstance(exc, CheckFailed):
                status, message = Status.FAILED, evidence.summary if evidence else str(exc)
            elif isinstance(exc, CheckpointError | RuntimeNotStarted):
                # A broken input (or a runtime that never started) fails the first check that
                # needed it, once; the checks set up on the same failure are not run.
                broken, needs = (("the runtime did not start", "the runtime it needs did not start")
                                 if isinstance(exc, RuntimeNotStarted)
                                 else ("an input this check reads is broken", "an input it needs is broken"))
                first = next((cid for e, cid in self._input_failures if e is exc), None)
                if report.when == "setup" and first is not None:
                    status, message = Status.NOT_RUN, f"not run: {needs} (see {first})"
                else:
                    status, message = Status.FAILED, broken
                    evidence = Evidence(message)
                    if isinstance(exc, CheckpointError):
                        evidence.add(exc.detail, file=exc.file, tensor=exc.tensor)
                    else:
                        evidence.add(str(exc))
                    if report.when == "setup":
                        self._input_failures.append((exc, check_id(item, level)))
            elif isinstance(exc, QualifyError):
                status, message = Status.ERROR, str(exc)
            else:
                status = Status.ERROR
                message = f"{type(exc).__name__}: {exc}" if exc else str(report.longrepr).splitlines()[-1]
        elif evidence is None:
            # A suite test that recorded nothing has not shown anything: never a pass.
            status, message = Status.ERROR, "the check recorded no evidence"
        elif not evidence.ok:
            status, message = Status.FAILED, evidence.summary
        else:
            message = evidence.summary
        if status is Status.FAILED and LEVELS.index(level) > LEVELS.index("load"):
            fault = next((f for probe in self.fault_probes if (f := probe()) is not None), None)
            if fault is not None:
                status, message = Status.ERROR, f"not judged: {fault} (the check failed while its server was gone)"
        started = self._started.get(item.nodeid, time.perf_counter())
        return Check(
            id=check_id(item, level),
            level=level,
            title=check_title(item, level),
            status=status,
            message=message,
            evidence=evidence,
            duration_s=max(0.0, time.perf_counter() - started),
        )

    def pytest_internalerror(self, excrepr: Any, excinfo: pytest.ExceptionInfo[BaseException]) -> bool:
        """pytest itself broke (an import, its own files, at very few descriptors): a harness error of the run,
        named in one line; pytest's INTERNALERROR traceback is shown only with QUALIFY_DEBUG."""
        exc = excinfo.value
        fault = exhausted(exc, "running the qualification suites")
        self.run.errors.append(str(fault) if fault is not None else
                               f"the qualification suites stopped with an internal error: {type(exc).__name__}: {exc}")
        return not os.environ.get("QUALIFY_DEBUG")

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        # First of every plugin's: the report is written before pytest's own JUnit writer can fail.
        if exitstatus == pytest.ExitCode.INTERRUPTED and not self.run.interrupted:
            self.run.interrupted = "KeyboardInterrupt"
        for lvl in self.run.levels:
            if not lvl.checks and not lvl.reason:
                lvl.reason = "no check of this level was run"
        if self.pinned is not None:
            reverify(self.run, self.pinned)
        # Judged now that everything is loaded: each module imported on the way, and each conftest and suite
        # module pytest loaded (two conftests share the name "conftest", so sys.modules keeps only one).
        loaded = [*sys.modules.values(), *(p for p in session.config.pluginmanager.get_plugins()
                                           if isinstance(p, ModuleType))]
        self.run.environment["harness_source"] = harness_source(loaded=loaded_files(modules=loaded)).to_dict()
        if self.on_finish is not None:
            self.on_finish(self.run)


def find_plugin(config: pytest.Config) -> QualifyPlugin | None:
    for plugin in config.pluginmanager.get_plugins():
        if isinstance(plugin, QualifyPlugin):
            return plugin
    return None


def run_context(config: pytest.Config) -> RunContext:
    """The context of the run these suites belong to.

    Raises:
        HarnessError: the suites were started outside a qualification run (``qualify run``, or
            ``pytest suites --checkpoint DIR``), so there is nothing to qualify.
    """
    plugin = find_plugin(config)
    if plugin is None:
        raise HarnessError("the qualification suites run inside a qualification run: qualify run, or pytest suites "
                           "--checkpoint DIR")
    return plugin.context


def checkpoint_path(config: pytest.Config) -> Path | None:
    """The checkpoint folder the checks read: the run's pinned copy, else the folder as named."""
    plugin = find_plugin(config)
    if plugin is not None and plugin.pinned is not None:
        return plugin.pinned.copy
    return run_context(config).checkpoint


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Any:
    """``record(evidence)``: attach a library check's evidence to this check and fail on findings."""
    plugin = find_plugin(request.config)

    def _record(evidence: Evidence) -> Evidence:
        if plugin is not None:
            plugin.attach(request.node, evidence)
        if not evidence.ok:
            raise CheckFailed(evidence.failure_text())
        return evidence

    return _record
