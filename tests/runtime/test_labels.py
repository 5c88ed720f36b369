"""Tests for qualify.runtime.labels: the owner label names a live process on this host, so that a
leftover container of a dead run can be told from one a live run still uses."""

from __future__ import annotations

import os
import socket
import subprocess

from qualify.runtime import labels


def test_owner_liveness() -> None:
    assert labels.owner_alive(labels.owner_id()) is True
    done = subprocess.run(["true"], check=True)
    assert done.returncode == 0
    dead = subprocess.Popen(["true"])
    dead.wait()
    assert labels.owner_alive(f"{socket.gethostname()}:{dead.pid}:1") is False
    assert labels.owner_alive(f"{socket.gethostname()}:{os.getpid()}:not-my-start-time") is False  # a reused pid
    assert labels.owner_alive(f"another-host:{os.getpid()}:1") is None

