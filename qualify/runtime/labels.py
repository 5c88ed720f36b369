"""Who owns a runtime container: the labels every container of the harness carries, and whether
the process that launched it is still alive (a pid alone is reused; host, pid and start time are not).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

LABEL_HARNESS = "qualify.harness"
HARNESS = "qualify"
LABEL_RUN = "qualify.run-id"
LABEL_OWNER = "qualify.owner"
LABEL_PROFILE = "qualify.profile"


def owner_id(pid: int | None = None) -> str:
    """``host:pid:start-time`` of a process: a pid alone is reused, the pair is not."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_start_time(pid)}"


def _start_time(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "?"
    # Field 22 (starttime); the command name (field 2) may contain spaces and parentheses.
    return stat.rsplit(")", 1)[1].split()[19]


def owner_alive(owner: str) -> bool | None:
    """Whether the owning process still runs; None when it ran on another host (cannot tell)."""
    host, _, rest = owner.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return None
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, owned by someone else
    return _start_time(pid) == start
