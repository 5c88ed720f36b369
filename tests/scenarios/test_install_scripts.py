"""The set-up scripts as a user who is not root runs them: a clear word on what is missing, never a half-done job."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.helpers import REPO


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None,
                    reason="needs root and runuser to run the script as an unprivileged user")
def test_install_docker_as_a_user_who_is_not_root_says_what_to_ask_for() -> None:
    # The script comes on standard input: nobody may not read this checkout's folders.
    proc = subprocess.run(["runuser", "-u", "nobody", "--", "bash", "-s"], input=(REPO / "scripts" /
                          "install-docker.sh").read_text(), capture_output=True, text=True, timeout=120, cwd="/",
                          env={"PATH": os.environ["PATH"], "HOME": "/nonexistent"})
    assert proc.returncode == 1
    assert "is not root" in proc.stderr or "needs root" in proc.stderr
    assert "ask an administrator" in proc.stderr.lower()
