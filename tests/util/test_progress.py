"""Tests for qualify.util.progress: off a terminal, plain progress lines only for steps and waits long
enough to need them, each closed with how it ended."""

from __future__ import annotations

import io

import pytest

from qualify.util import progress


def test_plain_progress_lines_only_for_long_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    log = io.StringIO()
    monkeypatch.setattr(progress, "_ORIGINAL_STDERR", log)
    monkeypatch.setattr(progress, "_terminal", lambda: None)
    with progress.StepProgress("reproduce", "3 tensors", 3000) as bar:  # a short step
        bar.advance(3000)
    assert log.getvalue() == ""
    with progress.StepProgress("reproduce", "3 tensors", 3000, interval=0.0) as bar:
        for _ in range(3):
            bar.advance(1000)
    lines = log.getvalue().splitlines()
    assert len(lines) == 4 and lines[0].startswith("reproduce 3 tensors: 1.0 kB of 3.0 kB (33%)")
    assert lines[-1].endswith(", done")
    with progress.StepProgress("sha256", "1 file", 10, show=False) as bar:
        assert not bar.active


def test_a_long_wait_prints_a_heartbeat_and_a_short_one_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    log = io.StringIO()
    monkeypatch.setattr(progress, "_ORIGINAL_STDERR", log)
    monkeypatch.setattr(progress, "_terminal", lambda: None)
    with progress.WaitProgress("the vLLM server", 600) as wait:  # ready before the first interval
        wait.tick("/v1/models not answering yet")
    assert log.getvalue() == ""
    with progress.WaitProgress("the vLLM server", 600, interval=0.0) as wait:
        wait.tick("/v1/models not answering yet")
        wait.tick("")
    lines = log.getvalue().splitlines()
    assert len(lines) == 3, lines
    assert lines[0].startswith("waiting for the vLLM server: ") and lines[0].endswith(
        " s of at most 600 s; /v1/models not answering yet")
    assert lines[-1].endswith(", ready")
    log.truncate(0)
    log.seek(0)
    with pytest.raises(RuntimeError), progress.WaitProgress("the runtime", 60, interval=0.0) as wait:
        wait.tick()
        raise RuntimeError("the server died")
    assert log.getvalue().splitlines()[-1].endswith(", stopped")

