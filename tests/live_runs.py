"""The ``qualify run``s more than one scenario module reads: each run once per test session, side by side.

They are the longest steps of a session: make qualify's own (the CPU DFlash 2 fixture, profile
``fixture-dflash2-cpu``, through every level in the vLLM CPU container, its five arms one after another),
the damaged DFlash 2 variants', the CPU DFlash (1) fixture's in the same container, and the ``fixture``
profile's with its local vLLM servers. Each is mostly one core's work (a
server start is mostly single-threaded imports, and a run starts its servers one at a time), so they all
start in the background as the session starts (tests/conftest.py), while the unit tests, which use one
core, run beside them; a test waits only for the run it reads. :data:`RUNS` declares each run once: its
name, the session fixture that hands it out (tests/scenarios/conftest.py makes one per entry) and what it
is. A session whose tests read none of them (``make test-fast``, one unit module) starts none.

Sharing cannot move a verdict: each run is its own process with its own servers or containers, its own
free ports and its own report folder; every figure it measured reads counter deltas around its own
requests. A run still going when the session ends is stopped (SIGTERM: it tears its containers down).
"""

from __future__ import annotations

import functools
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from qualify.report.model import Run, read_json
from tests.helpers import FIXTURE, REPO, TRACEBACK, write_key

#: A guard against a hung run, not a speed claim (the runs share two cores with the rest of the session).
RUN_GUARD_S = 1800
#: How long a run stopped at the session's end may take to tear its containers down.
STOP_GRACE_S = 120
CPU_FIXTURE = REPO / "fixtures" / "dflash-cpu"
#: make qualify's fixture (the Makefile's default PROFILE, fixture-dflash2-cpu).
MAKE_QUALIFY_FIXTURE = REPO / "fixtures" / "dflash2-cpu"
#: The ``fixture`` run's levels: all but those make qualify's run covers on the real runtime.
FIXTURE_LEVELS = "structure,format,reproduction,load,smoke,acceptance,losslessness"


@dataclass(frozen=True)
class Finished:
    """What a run did: the process (its exit code and output), its report, and the report's path."""

    proc: subprocess.CompletedProcess[str]
    run: Run
    path: Path

    @property
    def code(self) -> int:
        return self.proc.returncode

    @property
    def output(self) -> str:
        return self.proc.stdout + self.proc.stderr

    @property
    def folder(self) -> Path:
        """The run's report folder (server.log beside report.json)."""
        return self.path.parent


class QualifyRun:
    """One ``qualify run`` in a process of its own, started in the background; :meth:`wait` reads what it did."""

    def __init__(self, name: str, folder: Path, args: Callable[[], list[str]]) -> None:
        self.name = name
        self.folder = folder
        self.report_dir = folder / "reports"
        self._args = args  # built when the run starts (it may need a fixture built first)
        self._proc: subprocess.Popen[str] | None = None
        self._files: list[IO[str]] = []
        self._done: Finished | None = None
        self.started_at = 0.0

    def start(self) -> None:
        if self._proc is not None:
            return
        self.report_dir.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "qualify.cli", "run", *self._args(), "--report-dir", str(self.report_dir)]
        # Files, not pipes: nothing reads the output until the run ends, and a full pipe would stall it.
        out = open(self.folder / "stdout.txt", "w", encoding="utf-8")  # noqa: SIM115 (closed by stop())
        err = open(self.folder / "stderr.txt", "w", encoding="utf-8")  # noqa: SIM115
        self._files = [out, err]
        self.started_at = time.monotonic()
        self._proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=err, text=True)

    def wait(self) -> Finished:
        """The run's outcome once it has ended (started now if it was not); fails the test if it hung or crashed."""
        self.start()
        assert self._proc is not None
        if self._done is None:
            left = RUN_GUARD_S - (time.monotonic() - self.started_at)
            try:
                code = self._proc.wait(timeout=max(left, 1.0))
            except subprocess.TimeoutExpired:
                self.stop()
                pytest.fail(f"qualify run ({self.name}) did not end within {RUN_GUARD_S} s", pytrace=False)
            for f in self._files:
                f.flush()
            stdout = (self.folder / "stdout.txt").read_text(encoding="utf-8", errors="replace")
            stderr = (self.folder / "stderr.txt").read_text(encoding="utf-8", errors="replace")
            proc = subprocess.CompletedProcess(self._proc.args, code, stdout, stderr)
            assert TRACEBACK not in stderr, stderr[-3000:]
            reports = sorted(self.report_dir.glob("*/report.json"))
            assert len(reports) == 1, f"qualify run ({self.name}) wrote {reports}:\n{stdout[-3000:]}\n{stderr[-3000:]}"
            self._done = Finished(proc, read_json(reports[0]), reports[0])
        return self._done

    def stop(self) -> None:
        """End the run if it is still going (SIGTERM, as a user's Ctrl-C would), and close its output files."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for f in self._files:
            f.close()
        self._files = []


@dataclass(frozen=True)
class RunSpec:
    """One shared run: its name, the session fixture that hands it out, what it is, and its arguments."""

    name: str
    fixture: str
    doc: str
    args: Callable[[SessionRuns], list[str]]


class SessionRuns:
    """The session's shared runs by name; :meth:`start` starts every run the session's tests read."""

    def __init__(self, root: Path) -> None:
        self.keys = write_key(_mkdir(root / "keys"), "release")  # (private, public): the fixture run is signed
        self.runs = {spec.name: QualifyRun(spec.name, _mkdir(root / spec.name), functools.partial(spec.args, self))
                     for spec in RUNS}

    def start(self, names: Iterable[str]) -> None:
        """Start the named runs (those already started are left as they are)."""
        from fixtures.serving import build

        names = sorted(set(names))
        if names:
            build()  # the target every run serves (reused when already built)
        for name in names:
            self.runs[name].start()

    def get(self, name: str) -> QualifyRun:
        """The named run, started."""
        self.start([name])
        return self.runs[name]

    def close(self) -> None:
        for run in self.runs.values():
            run.stop()


def needed(items: Iterable[pytest.Item]) -> set[str]:
    """The shared runs the collected tests read (through the fixtures :data:`RUNS` names)."""
    return {RUN_FIXTURES[f] for item in items for f in getattr(item, "fixturenames", ()) if f in RUN_FIXTURES}


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _make_qualify_args(_: SessionRuns) -> list[str]:
    return ["--profile", "fixture-dflash2-cpu", "--checkpoint", str(MAKE_QUALIFY_FIXTURE / "mxfp8"), "--source",
            str(MAKE_QUALIFY_FIXTURE / "source")]


def _dflash2_variant(name: str, levels: str) -> Callable[[SessionRuns], list[str]]:
    def args(_: SessionRuns) -> list[str]:
        from fixtures.dflash2_cpu import build_variants

        # The damaged DFlash 2 draft (built once, reused by stamp), against the good draft's BF16 source.
        return ["--profile", "fixture-dflash2-cpu", "--checkpoint", str(build_variants()[name] / "mxfp8"),
                "--source", str(MAKE_QUALIFY_FIXTURE / "source"), "--levels", levels]
    return args


def _dflash_cpu_args(_: SessionRuns) -> list[str]:
    return ["--profile", "fixture-dflash-cpu", "--checkpoint", str(CPU_FIXTURE / "mxfp8"), "--source",
            str(CPU_FIXTURE / "source"), "--levels", "load,smoke,acceptance"]


def _fixture_args(runs: SessionRuns) -> list[str]:
    return ["--profile", "fixture", "--checkpoint", str(FIXTURE / "mxfp8"), "--source", str(FIXTURE / "source"),
            "--levels", FIXTURE_LEVELS, "--sign-key", str(runs.keys[0])]


#: Every shared run, declared once.
RUNS = (
    RunSpec("make-qualify", "make_qualify_run",
            "make qualify's run: ``fixture-dflash2-cpu``, every level, in the vLLM CPU container.", _make_qualify_args),
    RunSpec("dflash2-wrong-layers", "dflash2_wrong_layers_run",
            "The DFlash 2 draft configured for the wrong target layers: the load level.",
            _dflash2_variant("wrong-target-layers-2-3", "load")),
    RunSpec("dflash2-scrambled", "dflash2_scrambled_run",
            "The DFlash 2 fixture with its candidate selector's codebooks scrambled: load, smoke, acceptance.",
            _dflash2_variant("scrambled-selector", "load,smoke,acceptance")),
    RunSpec("dflash2-scale", "dflash2_scale_run",
            "The DFlash 2 fixture's MXFP8 conversion with scale bytes off by one: load through paired.",
            _dflash2_variant("scale-damage", "load,smoke,acceptance,paired")),
    RunSpec("dflash-cpu", "dflash_cpu_run",
            "The CPU DFlash (1) fixture through load, smoke and acceptance in the vLLM CPU container.",
            _dflash_cpu_args),
    RunSpec("fixture", "fixture_run",
            "The ``fixture`` profile's run: checkpoint levels, the stand-in's load, local servers' serving levels, "
            "signed.", _fixture_args),
)
#: The session fixtures by the run each hands out.
RUN_FIXTURES = {spec.fixture: spec.name for spec in RUNS}
