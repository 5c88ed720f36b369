"""Build hook: the built package records which commit of the harness it is.

A gate installed from a wheel has no ``.git`` to ask, so the build writes
``qualify/build_record.json`` into the package (never into the checkout): the commit it was built
from and the sha256 of the files that say what a release must show (the shipped profiles and the
release policy) as that commit holds them. The gate confirms ``--harness-commit`` against it and
holds the installed profiles and policy to those digests (qualify.util.provenance). A build from a
tree whose package code is not as committed records no commit: such a gate refuses every release.
Everything else about the build is pyproject.toml's.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# The files a release is judged by, as the commit holds them: the shipped profiles and the release policy.
RECORDED = ("qualify/profiles", "qualify/release/policy.toml")
RECORD_NAME = "build_record.json"  # qualify.util.provenance.BUILD_RECORD


def _git(*args: str) -> bytes | None:
    try:
        proc = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def build_record() -> dict[str, object]:
    top = _git("rev-parse", "--show-toplevel")
    head = _git("rev-parse", "--verify", "HEAD")
    if top is None or head is None or Path(top.decode().strip()).resolve() != ROOT:
        return {"commit": None, "why": "not built from a git checkout of the harness"}
    commit = head.decode().strip()
    changed = _git("status", "--porcelain", "--untracked-files=all", "--", "qualify")
    if changed is None or changed.strip():
        return {"commit": None, "why": f"built from a tree whose package code differs from commit {commit}"}
    listed = _git("ls-tree", "-r", "-z", "--name-only", commit, "--", *RECORDED) or b""
    files = {}
    for raw in filter(None, listed.split(b"\0")):
        rel = raw.decode()
        if not rel.endswith(".toml"):
            continue
        blob = _git("show", f"{commit}:{rel}")
        if blob is not None:
            files[rel] = hashlib.sha256(blob).hexdigest()
    return {"commit": commit, "files": files}


class BuildWithRecord(build_py):
    """build_py, then the record written into the built package."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install runs from the checkout itself, which git answers for
        out = Path(self.build_lib) / "qualify" / RECORD_NAME
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(build_record(), indent=1, sort_keys=True) + "\n", encoding="utf-8")


setup(cmdclass={"build_py": BuildWithRecord})
