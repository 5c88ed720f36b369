"""requirements/release.lock: what the release runner's signing and release jobs install, pinned by hash.

Those jobs hold the signing key and the hub's write token, so nothing they install may be
chosen at install time: every package is pinned to one version and to the sha256 of its
files (``pip install --require-hashes``), and the lock must cover every dependency the
package declares for them, at a version its specifier allows.
"""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.helpers import REPO

LOCK = REPO / "requirements" / "release.lock"


def _entries() -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of every requirement in the lock."""
    out: dict[str, tuple[str, list[str]]] = {}
    text = LOCK.read_text()
    for block in re.split(r"\n(?=\S)", text):
        first = block.splitlines()[0]
        if not first or first.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9._-]+)==([^\s\\]+)\s*\\?", first)
        assert m, f"not pinned to one version: {first!r}"
        out[canonicalize_name(m.group(1))] = (m.group(2), re.findall(r"--hash=sha256:([0-9a-f]{64})", block))
    return out


def test_every_locked_package_is_pinned_to_one_version_and_its_hashes() -> None:
    entries = _entries()
    assert len(entries) > 30
    unhashed = sorted(name for name, (_, hashes) in entries.items() if not hashes)
    assert unhashed == []


def test_the_lock_covers_every_dependency_the_release_jobs_need() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    needed = [Requirement(r) for r in (*project["dependencies"], *project["optional-dependencies"]["sign"])]
    entries = _entries()
    problems = []
    for req in needed:
        got = entries.get(canonicalize_name(req.name))
        if got is None:
            problems.append(f"{req.name} is not locked")
        elif not req.specifier.contains(got[0], prereleases=True):
            problems.append(f"{req.name} is locked at {got[0]}, outside {req.specifier}")
    assert problems == [], "run `make lock`: " + "; ".join(problems)
