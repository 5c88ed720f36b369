"""Progress of the harness's long steps, for the person at a terminal and for CI logs.

Two kinds of step take long: work counted in bytes (hashing, statistics, reproduction:
:class:`StepProgress`) and waits with a deadline (a server starting:
:class:`WaitProgress`). On a terminal each shows a transient rich display; elsewhere
(CI logs, pipes) a step that runs longer than :data:`LINE_INTERVAL_S` prints a plain
line that often and a closing line, so short steps and test runs print nothing and a
long one shows a heartbeat instead of silence.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from types import TracebackType
from typing import Any, TextIO

from qualify.util.escape import escape_terminal


def _keep_original_stderr() -> TextIO | None:
    """A private handle on stderr as it was when qualify was imported.

    ``qualify check`` runs the suites under pytest, which captures file descriptor 2
    while a check runs, so a bar drawn on ``sys.stderr`` there would land in the
    capture, not on the user's terminal (and a CI log would never see a line). The
    descriptor is duplicated before pytest starts, and close-on-exec, so no child
    process inherits it.
    """
    try:
        fd = os.dup(2)
    except OSError:
        return None
    try:
        return open(fd, "w", buffering=1, encoding="utf-8", errors="replace", closefd=True)
    except OSError:
        os.close(fd)
        return None


_ORIGINAL_STDERR = _keep_original_stderr()

#: Seconds between plain progress lines when not on a terminal; a step shorter than this prints nothing.
LINE_INTERVAL_S = 30.0


def _terminal() -> TextIO | None:
    """Where a progress bar may draw: stderr, or stderr as qualify found it, if it is a terminal."""
    for stream in (sys.stderr, _ORIGINAL_STDERR):
        try:
            if stream is not None and stream.isatty():
                return stream
        except (AttributeError, OSError, ValueError):
            continue
    return None


def _format_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


class _Display:
    """What both kinds share: a rich display on a terminal, else heartbeat lines on the original stderr.

    ``show=False`` prints nothing; ``show=True`` forces the rich display (on stderr when
    there is no terminal). Subclasses say what the display shows (:meth:`_make_bar`,
    :meth:`_text`) and what its closing word is.
    """

    done_word = "done"

    def __init__(self, *, show: bool | None, interval: float) -> None:
        self.interval = interval
        self._lock = threading.Lock()
        self._bar: Any = None
        self._task: Any = None
        self._lines: TextIO | None = None
        self._start = self._next_line = 0.0
        self._printed = False
        terminal = _terminal()
        if show is True or (show is None and terminal is not None):
            from rich.console import Console

            self._bar = self._make_bar(Console(file=terminal or sys.stderr))
        elif show is None:
            self._lines = _ORIGINAL_STDERR

    def _make_bar(self, console: Any) -> Any:
        raise NotImplementedError

    def _add_task(self) -> Any:
        raise NotImplementedError

    def _text(self, elapsed: float) -> str:
        raise NotImplementedError

    @property
    def active(self) -> bool:
        return self._bar is not None or self._lines is not None

    def __enter__(self) -> _Display:
        self._start = time.monotonic()
        self._next_line = self._start + self.interval
        if self._bar is not None:
            self._bar.__enter__()
            self._task = self._add_task()
        return self

    def _heartbeat(self, tail: str = "") -> None:
        """A plain line if one is due (call with the lock held, or from one thread)."""
        now = time.monotonic()
        if self._lines is None or now < self._next_line:
            return
        self._next_line = now + self.interval
        self._printed = True
        self._line(now, tail)

    def _line(self, now: float, tail: str) -> None:
        assert self._lines is not None
        try:
            # Escaped like every other line: what a step names may come from a checkpoint.
            print(escape_terminal(self._text(max(now - self._start, 1e-9)) + tail), file=self._lines, flush=True)
        except (OSError, ValueError):
            self._lines = None  # the log went away; the step itself must not fail for it

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.__exit__(exc_type, exc, tb)
        elif self._lines is not None and self._printed:
            self._line(time.monotonic(), f", {self.done_word}" if exc_type is None else ", stopped")


class StepProgress(_Display):
    """Progress of one long step (hashing, statistics, reproduction), counted in bytes.

    On a terminal: a transient rich bar. Elsewhere (CI logs, pipes): plain lines, at most
    one every :data:`LINE_INTERVAL_S` seconds and only once the step has run that long,
    then one closing line. :meth:`advance` may be called from any thread.
    """

    def __init__(self, verb: str, what: str, total: int, *, show: bool | None = None,
                 interval: float = LINE_INTERVAL_S) -> None:
        self.verb, self.what, self.total = verb, what, total
        self.done = 0
        super().__init__(show=show, interval=interval)

    def _make_bar(self, console: Any) -> Any:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        return Progress(TextColumn(f"[bold]{self.verb}[/bold] {{task.description}}"), BarColumn(), DownloadColumn(),
                        TransferSpeedColumn(), TimeRemainingColumn(), console=console, transient=True)

    def _add_task(self) -> Any:
        return self._bar.add_task(self.what, total=self.total)

    def __enter__(self) -> StepProgress:
        super().__enter__()
        return self

    def advance(self, n: int) -> None:
        # rich's Progress.advance takes its own lock; ours keeps the hot path to one call
        # per chunk and makes the counter's thread-safety explicit.
        with self._lock:
            if self._bar is not None:
                self._bar.advance(self._task, n)
            elif self._lines is not None:
                self.done += n
                self._heartbeat()

    def _text(self, elapsed: float) -> str:
        share = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        return (f"{self.verb} {self.what}: {_format_bytes(self.done)} of {_format_bytes(self.total)}{share} "
                f"in {elapsed:.0f} s, {_format_bytes(self.done / elapsed)}/s")


class WaitProgress(_Display):
    """A wait with a deadline (a server starting, a container becoming ready).

    On a terminal: a transient spinner with the elapsed time and the latest state.
    Elsewhere: a line every ``interval`` seconds once the wait has lasted that long
    ("waiting for the vLLM server: 60 s of at most 600 s; ..."), and a closing line.
    Call :meth:`tick` from the polling loop; it never raises.
    """

    done_word = "ready"

    def __init__(self, what: str, deadline_s: float, *, show: bool | None = None,
                 interval: float = LINE_INTERVAL_S) -> None:
        self.what, self.deadline_s = what, deadline_s
        super().__init__(show=show, interval=interval)

    def _make_bar(self, console: Any) -> Any:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        return Progress(SpinnerColumn(), TextColumn(f"[bold]waiting[/bold] for {self.what}"), TimeElapsedColumn(),
                        TextColumn("{task.description}"), console=console, transient=True)

    def _add_task(self) -> Any:
        return self._bar.add_task("", total=None)

    def __enter__(self) -> WaitProgress:
        super().__enter__()
        return self

    def tick(self, state: str = "") -> None:
        if self._bar is not None:
            self._bar.update(self._task, description=state)
        else:
            self._heartbeat(f"; {state}" if state else "")

    def _text(self, elapsed: float) -> str:
        return f"waiting for {self.what}: {elapsed:.0f} s of at most {self.deadline_s:.0f} s"


__all__ = ["LINE_INTERVAL_S", "StepProgress", "WaitProgress"]
