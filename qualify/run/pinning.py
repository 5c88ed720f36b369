"""A run's pinned checkpoint in its report: what was pinned at the start, and what changed by the end.

The bytes are pinned by :func:`qualify.checkpoint.pinned.pin_folder`; this module puts
that on the run. The report's ``checkpoint.files`` are the pinned digests (the bytes
the checks read, hence the attestation's subjects), ``checkpoint.pinned`` says how and
what could not be pinned, and at the end :func:`reverify` voids a run whose folder
changed: the change is named in ``checkpoint.pinned.changed`` and in the run's errors,
so its verdict is "not qualified" and nothing is signed.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from qualify.checkpoint.pinned import PinnedFolder, pin_folder, verify_pinned
from qualify.report.model import Run

#: The report's ``checkpoint`` key that describes the pin.
PINNED_KEY = "pinned"
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
    """Hash the folder and the copy again; every change voids the run. Returns the changes (empty: none)."""
    changes = verify_pinned(pinned)
    info = run.checkpoint.setdefault(PINNED_KEY, {})
    info["changed"] = changes
    if changes:
        shown = "; ".join(changes[:10]) + (f"; and {len(changes) - 10} more" if len(changes) > 10 else "")
        message = (f"the checkpoint changed during the run, so the run vouches for none of its bytes and is not "
                   f"signed: {shown}")
        # Among the run's errors (so no verdict can be "qualified"), and named here as the checkpoint's doing.
        info["voided"] = message
        run.errors.append(message)
    return changes


@contextmanager
def pinned_copy(checkpoint: Path) -> Iterator[PinnedFolder]:
    """``checkpoint`` pinned into a private temporary folder, removed when the block ends.

    Raises:
        HarnessError: the copy cannot be written (a full disk).
    """
    scratch = Path(tempfile.mkdtemp(prefix="qualify-pinned-"))
    try:
        yield pin_folder(checkpoint, scratch / "draft")
    finally:
        # The copy's folders are this process's to write, so its read-only files can be unlinked.
        shutil.rmtree(scratch, ignore_errors=True)
