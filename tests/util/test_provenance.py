"""qualify.util.provenance: the harness is named by its commit, and a change to its code is seen."""

from __future__ import annotations

import subprocess
from pathlib import Path

from qualify.util.provenance import harness_source


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                   capture_output=True)


def test_a_checkout_is_named_by_its_commit_and_a_code_change_is_seen(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "qualify").mkdir()
    (tmp_path / "qualify" / "gate.py").write_text("x = 1\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "one")
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert harness_source(tmp_path).to_dict() == {"commit": head, "clean": True}
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "r.json").write_text("{}")  # untracked output does not count
    assert harness_source(tmp_path).clean is True
    (tmp_path / "qualify" / "gate.py").write_text("x = 2\n")  # the gate's code changed, not committed
    assert harness_source(tmp_path).clean is False


def test_outside_a_checkout_nothing_is_assumed(tmp_path: Path) -> None:
    assert harness_source(tmp_path).to_dict() == {"commit": None, "clean": None}
