"""Which code of the harness is running: the git commit of its checkout, and whether its code is as committed.

A version number names a release of the harness, not the code that ran: every commit between
two releases says the same version. An attestation names the harness by its commit instead,
and says whether the code that judged the checkpoint had uncommitted changes (a release may
be signed only by committed code, which anyone can read at that commit).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

#: The checkout the package runs from (a wheel install has none).
CHECKOUT = Path(__file__).resolve().parents[2]
#: The folders whose changes change what a run checks: the package and the suites.
CODE_PATHS = ("qualify", "suites")


@dataclass(frozen=True)
class HarnessSource:
    """The harness's code: its commit (None outside a git checkout) and whether it is as committed."""

    commit: str | None
    clean: bool | None

    def to_dict(self) -> dict[str, object]:
        return {"commit": self.commit, "clean": self.clean}


def _git(root: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def harness_source(root: Path = CHECKOUT) -> HarnessSource:
    """The commit ``root`` is checked out at, and whether the harness's tracked code there is unchanged.

    Untracked files (reports, caches) do not count; a modified or staged file under
    :data:`CODE_PATHS` does. Outside a git checkout both are None: unknown, never assumed.
    """
    head = _git(root, "rev-parse", "--verify", "HEAD")
    commit = head.strip() if head and len(head.strip()) == 40 else None
    if commit is None:
        return HarnessSource(None, None)
    status = _git(root, "status", "--porcelain", "--untracked-files=no", "--", *CODE_PATHS)
    return HarnessSource(commit, None if status is None else status.strip() == "")
