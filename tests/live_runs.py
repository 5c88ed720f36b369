"""The ``qualify run``s more than one scenario module reads: each run once per test session, side by side.

Four runs are the longest steps of a session: make qualify's own (the CPU DFlash 2 fixture, profile
``fixture-dflash2-cpu``, through every level in the vLLM CPU container, its five arms one after another),
the CPU DFlash (1) fixture's and its scrambled variant's in the same container (load, smoke, acceptance),
and the ``fixture`` profile's with its local vLLM servers. Each is
mostly one core's work (a server start is mostly single-threaded imports, and a run starts its servers
one at a time), so they run side by side in the background: the first test that asks for any of them
starts every one the session's tests ask for, and a test waits only for the run it reads. The
fixtures that hand them out (``make_qualify_run``, ``dflash_cpu_run``, ``scrambled_run``, ``fixture_run``)
are tests/scenarios/conftest.py's.

Who reads them: tests/scenarios/test_qualify_run_live.py asserts what each run did;
tests/scenarios/test_dflash2_cpu_live.py reads make qualify's run (the DFlash 2 fixture qualified on real
vLLM); tests/scenarios/test_dflash_cpu_live.py reads the good DFlash (1) draft's acceptance from its run
and the scrambled draft's from the scrambled run, instead of serving those drafts again.

Sharing cannot move a verdict: each run is its own process with its own servers or containers, its own
free ports and its own report folder; every figure it measured reads counter deltas around its own
requests. A run still going when the session ends is stopped (SIGTERM: it tears its containers down).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
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


class SessionRuns:
    """The session's shared runs by name; :meth:`get` starts every run the session needs, the first time."""

    def __init__(self, root: Path) -> None:
        self.keys = write_key(_mkdir(root / "keys"), "release")  # (private, public): the fixture run is signed
        self.runs = {
            "make-qualify": QualifyRun("make-qualify", _mkdir(root / "make-qualify"), _make_qualify_args),
            "dflash-cpu": QualifyRun("dflash-cpu", _mkdir(root / "dflash-cpu"), _dflash_cpu_args),
            "dflash2-scrambled": QualifyRun(
                "dflash2-scrambled", _mkdir(root / "dflash2-scrambled"),
                lambda: _dflash2_variant_args("scrambled-selector", "load,smoke,acceptance")),
            "dflash2-scale": QualifyRun("dflash2-scale", _mkdir(root / "dflash2-scale"),
                                        lambda: _dflash2_variant_args("scale-damage", "load,smoke,acceptance,paired")),
            "scrambled": QualifyRun("scrambled", _mkdir(root / "scrambled"), _scrambled_args),
            "fixture": QualifyRun("fixture", _mkdir(root / "fixture"), lambda: self._fixture_args()),
        }

    def get(self, name: str, session: pytest.Session) -> QualifyRun:
        from fixtures.serving import build

        build()  # the target every run serves (reused when already built)
        needed = {RUN_FIXTURES[f] for item in session.items for f in getattr(item, "fixturenames", ())
                  if f in RUN_FIXTURES} | {name}
        for other in sorted(needed):
            self.runs[other].start()
        return self.runs[name]

    def _fixture_args(self) -> list[str]:
        return ["--profile", "fixture", "--checkpoint", str(FIXTURE / "mxfp8"), "--source", str(FIXTURE / "source"),
                "--levels", FIXTURE_LEVELS, "--sign-key", str(self.keys[0])]

    def close(self) -> None:
        for run in self.runs.values():
            run.stop()


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _make_qualify_args() -> list[str]:
    return ["--profile", "fixture-dflash2-cpu", "--checkpoint", str(MAKE_QUALIFY_FIXTURE / "mxfp8"), "--source",
            str(MAKE_QUALIFY_FIXTURE / "source")]


def _dflash2_variant_args(name: str, levels: str) -> list[str]:
    from fixtures.dflash2_cpu import build_variants

    # The damaged DFlash 2 draft (built once, reused by stamp), against the good draft's BF16 source.
    return ["--profile", "fixture-dflash2-cpu", "--checkpoint", str(build_variants()[name] / "mxfp8"), "--source",
            str(MAKE_QUALIFY_FIXTURE / "source"), "--levels", levels]


def _dflash_cpu_args() -> list[str]:
    return ["--profile", "fixture-dflash-cpu", "--checkpoint", str(CPU_FIXTURE / "mxfp8"), "--source",
            str(CPU_FIXTURE / "source"), "--levels", "load,smoke,acceptance"]


def _scrambled_args() -> list[str]:
    from fixtures.dflash_cpu import build_variants

    # Converted by the reference converter, with its manifest: values and statistics unchanged, rows scrambled.
    scrambled = build_variants()["scrambled"] / "mxfp8"
    return ["--profile", "fixture-dflash-cpu", "--checkpoint", str(scrambled), "--source", str(CPU_FIXTURE / "source"),
            "--levels", "load,smoke,acceptance"]


#: The session fixtures (tests/scenarios/conftest.py) by the run each hands out.
RUN_FIXTURES = {"make_qualify_run": "make-qualify", "dflash_cpu_run": "dflash-cpu", "scrambled_run": "scrambled",
                "fixture_run": "fixture", "dflash2_scrambled_run": "dflash2-scrambled",
                "dflash2_scale_run": "dflash2-scale"}
