"""A run's pinned checkpoint in its report: what was pinned at the start, and what changed by the end.

The bytes are pinned by :func:`qualify.checkpoint.pinned.pin_folder`; this module puts
that on the run. The report's ``checkpoint.files`` are the pinned digests (the bytes
the checks read, hence the attestation's subjects), ``checkpoint.pinned`` says how and
what could not be pinned, and at the end :func:`reverify` voids a run whose folder
changed: the change is named in ``checkpoint.pinned.changed`` and in the run's errors,
so its verdict is "not qualified" and nothing is signed.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from qualify.checkpoint.pinned import PinnedFolder, pin_folder, verify_pinned
from qualify.errors import ResourceExhausted, exhausted
from qualify.report.model import PINNED_KEY, Run

#: How the bytes were pinned, as the report says it.
METHOD = ("copied once into a private read-only folder at the start of the run and hashed as written; the checks "
          "read that copy and the runtime mounts it")


def record_pinned(run: Run, pinned: PinnedFolder) -> None:
    """Make the pinned digests the run's identity of the checkpoint."""
    run.checkpoint["files"] = pinned.record()
    run.checkpoint[PINNED_KEY] = {"method": METHOD,
                                  "not_pinned": [{"path": rel, "why": why} for rel, why in pinned.problems],
                                  "changed": []}


def reverify(run: Run, pinned: PinnedFolder) -> list[str]:
    """Hash the folder and the copy again; every change voids the run. Returns the changes (empty: none).

    A machine that runs out of descriptors or memory meanwhile leaves the bytes unverified: a harness
    error of the run (no verdict), never a change blamed on the checkpoint.
    """
    info = run.checkpoint.setdefault(PINNED_KEY, {})
    try:
        changes = verify_pinned(pinned)
    except ResourceExhausted as exc:
        info["changed"] = []
        run.errors.append(f"the checkpoint could not be hashed again at the end of the run, so the run vouches for "
                          f"none of its bytes: {exc}")
        return []
    info["changed"] = changes
    if changes:
        shown = "; ".join(changes[:10]) + (f"; and {len(changes) - 10} more" if len(changes) > 10 else "")
        message = (f"the checkpoint changed during the run, so the run vouches for none of its bytes and is not "
                   f"signed: {shown}")
        # Among the run's errors (so no verdict can be "qualified"), and named here as the checkpoint's doing.
        info["voided"] = message
        run.errors.append(message)
    return changes


#: Descriptors held back while a copy exists and given back just before it is removed: a run that ends because
#: the process ran out of them can still open the folders it must remove (a tree of depth d needs about d).
SPARE_DESCRIPTORS = 8


@contextmanager
def pinned_copy(checkpoint: Path) -> Iterator[PinnedFolder]:
    """``checkpoint`` pinned into a private temporary folder, removed when the block ends.

    However it ends: an error, descriptors running out (some are held back for the removal), Ctrl-C or
    SIGTERM (turned into an interrupt while the copy exists, so this block's cleanup runs).

    Raises:
        HarnessError: the copy cannot be written (a full disk).
        ResourceExhausted: no descriptor is left to begin with.
    """
    try:
        spare = [os.open(os.devnull, os.O_RDONLY) for _ in range(SPARE_DESCRIPTORS)]
    except OSError as exc:
        raise exhausted(exc, "setting up the run's copy of the checkpoint") or ResourceExhausted(str(exc)) from None
    try:
        with _sigterm_interrupts():
            scratch = Path(tempfile.mkdtemp(prefix="qualify-pinned-"))
            try:
                yield pin_folder(checkpoint, scratch / "draft")
            finally:
                for fd in spare:
                    os.close(fd)
                spare = []
                remove_copy(scratch)
    finally:
        for fd in spare:
            os.close(fd)


def remove_copy(scratch: Path) -> bool:
    """Remove a pinned copy's folder; False (and the folder named on stderr) when it could not be.

    The copy's folders are this process's to write, so its read-only files can be unlinked.
    """
    problems: list[str] = []

    def noted(_function: Any, path: str, info: Any) -> None:
        problems.append(f"{path}: {info[1]}")

    shutil.rmtree(scratch, onerror=noted)
    if scratch.exists():
        print(f"qualify: the run's copy of the checkpoint {scratch} could not be removed: "
              f"{'; '.join(problems[:3]) or 'it is still there'}", file=sys.stderr)
        return False
    return True


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    # SIGTERM's default ends the process at once, leaving the copy; as an interrupt, the removal above runs. A
    # handler installed inside (the runner's, which records the signal) takes over and gives this one back.
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
