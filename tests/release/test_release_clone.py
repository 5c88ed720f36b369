"""A release in a git clone of the harness, tried the way it fails: each kind of file that changes what the run
or the gate decides, edited in the clone, and the run's statement and the gate refusing it by name.

The clone holds only what is committed here; its release policy is committed in the clone itself (the
fixture profile's checkpoint levels: no runtime, so no image to pin). Every ``qualify`` here is a
process of its own importing the clone's code, as a release runner's would.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import marshal
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO, TRACEBACK, write_key

pytestmark = pytest.mark.slow

LEVELS = "structure,format,reproduction"
CHECKPOINT = Path("fixtures/dflash2-tiny/mxfp8")
SOURCE = Path("fixtures/dflash2-tiny/source")


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                          capture_output=True, text=True).stdout


def qualify(code: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI of the harness at ``code`` (a clone, or an installed package), in a process of its own."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    proc = subprocess.run([sys.executable, "-m", "qualify.cli", *args], cwd=cwd or code, env=env,
                          capture_output=True, text=True, timeout=600)
    assert TRACEBACK not in proc.stdout + proc.stderr, proc.stderr
    return proc


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_key(tmp_path_factory.mktemp("keys"), "release")


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("clone") / "qualify"
    subprocess.run(["git", "clone", "-q", str(REPO), str(root)], check=True, capture_output=True)
    policy = root / "qualify" / "release" / "policy.toml"
    policy.write_text(re.sub(r'(?m)^profile = ".*"$', 'profile = "fixture"', policy.read_text()))
    _git(root, "commit", "-q", "-m", "release policy: the fixture's checkpoint levels", "--", str(policy))
    yield root


def restore(root: Path) -> None:
    """The clone as committed: tracked files back, untracked and ignored ones (bytecode too) gone."""
    _git(root, "checkout", "-q", "--", ".")
    _git(root, "clean", "-q", "-f", "-d", "-x", "--", "qualify", "suites", "conftest.py")


def release_run(root: Path, keys: tuple[Path, Path], reports: Path, *extra: str) -> Path:
    proc = qualify(root, "check", str(CHECKPOINT), "--source", str(SOURCE), "--levels", LEVELS, "--report-dir",
                   str(reports), "--sign-key", str(keys[0]), *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = reports.glob("*/")
    return run_dir


def harness(run_dir: Path) -> dict:
    """The statement's ``qualify`` descriptor, as signed."""
    envelope = json.loads((run_dir / "attestation.intoto.jsonl").read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    return next(d for d in statement["predicate"]["configuration"] if d["name"] == "qualify")


def gate(code: Path, run_dir: Path, keys: tuple[Path, Path], checkpoint: Path, *extra: str,
         cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return qualify(code, "gate", "--attestation", str(run_dir / "attestation.intoto.jsonl"), "--verify-key",
                   str(keys[1]), "--checkpoint", str(checkpoint), *extra, cwd=cwd)


@pytest.fixture(scope="module")
def clean_run(clone: Path, keys: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    restore(clone)
    return release_run(clone, keys, tmp_path_factory.mktemp("clean"))


def test_a_clean_clone_runs_clean_and_its_release_passes_the_gate(clone, keys, clean_run):
    head = _git(clone, "rev-parse", "HEAD").strip()
    described = harness(clean_run)
    assert described["digest"] == {"gitCommit": head}
    assert described["annotations"]["treeClean"] is True and "treeProblems" not in described["annotations"]
    proc = gate(clone, clean_run, keys, clone / CHECKPOINT, "--release-policy")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("qualified: structure, format, reproduction passed") and head in proc.stdout


def _edit_root_conftest(root: Path) -> str:
    with (root / "conftest.py").open("a") as f:
        f.write("\n# a hook of one's own\n")
    return "conftest.py: imported by the run and changed since commit {}"


def _shadow_a_module(root: Path) -> str:
    # A package beside the tracked module of the same name: Python imports the package.
    pkg = root / "qualify" / "checks" / "format"
    pkg.mkdir()
    shutil.copy(root / "qualify" / "checks" / "format.py", pkg / "__init__.py")
    return "qualify/checks/format/__init__.py: imported by the run but not in commit {} (untracked)"


def _plant_stale_bytecode(root: Path) -> str:
    # Bytecode stamped with the source's own mtime and size, holding other code: Python runs it.
    source = root / "qualify" / "checks" / "structure.py"
    st = source.stat()
    cached = Path(importlib.util.cache_from_source(str(source)))
    cached.parent.mkdir(exist_ok=True)
    code = compile(source.read_text() + "\nPLANTED = True\n", str(source), "exec", dont_inherit=True)
    cached.write_bytes(importlib.util.MAGIC_NUMBER + bytes(4) + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
                       + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little") + marshal.dumps(code))
    return (f"qualify/checks/structure.py: its bytecode {cached.relative_to(root).as_posix()} does not hold its "
            "source's code, and Python runs it in place of the source")


@pytest.mark.parametrize("change", [_edit_root_conftest, _shadow_a_module, _plant_stale_bytecode],
                         ids=["root-conftest", "shadowing-package", "stale-bytecode"])
def test_code_the_commit_does_not_hold_makes_the_run_unclean_and_the_gate_refuse_naming_it(clone, keys, tmp_path,
                                                                                        change, clean_run):
    head = _git(clone, "rev-parse", "HEAD").strip()
    restore(clone)
    problem = change(clone).format(head[:12])
    try:
        run_dir = release_run(clone, keys, tmp_path / "reports")
    finally:
        restore(clone)
    notes = harness(run_dir)["annotations"]
    assert notes["treeClean"] is False and notes["treeProblems"] == [problem]
    proc = gate(clone, run_dir, keys, clone / CHECKPOINT, "--release-policy")
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        f"refused: the harness code that ran was not the code of commit {head} ({problem}): a release is qualified "
        "only by committed code; commit or remove those files (and stale bytecode) and run again"]


def test_an_untracked_profile_is_not_shipped(clone, keys, tmp_path, clean_run):
    head = _git(clone, "rev-parse", "HEAD").strip()
    restore(clone)
    lenient = clone / "qualify" / "profiles" / "fixture-lenient.toml"
    lenient.write_text(re.sub(r'(?m)^name = ".*"$', 'name = "fixture-lenient"',
                              (clone / "qualify" / "profiles" / "fixture.toml").read_text(), count=1))
    try:
        run_dir = release_run(clone, keys, tmp_path / "reports", "--profile", "fixture-lenient")
        proc = gate(clone, run_dir, keys, clone / CHECKPOINT)
    finally:
        restore(clone)
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        f"refused: the shipped profile qualify/profiles/fixture-lenient.toml is not in the harness's commit {head} "
        "(an untracked or added file): only a committed one counts; commit it through review, or remove it"]


def test_an_edited_profile_or_policy_is_refused_by_name(clone, keys, clean_run):
    head = _git(clone, "rev-parse", "HEAD").strip()
    restore(clone)
    profile = clone / "qualify" / "profiles" / "fixture.toml"
    policy = clone / "qualify" / "release" / "policy.toml"
    try:
        for path in (profile, policy):
            before = path.read_bytes()
            path.write_bytes(before + b"\n# edited after the commit\n")
            proc = gate(clone, clean_run, keys, clone / CHECKPOINT, "--release-policy")
            path.write_bytes(before)
            rel = path.relative_to(clone).as_posix()
            what = "shipped profile" if path == profile else "release policy"
            assert proc.returncode == 1
            assert any(line.startswith(f"refused: the {what} {rel} differs from its bytes at the harness's commit "
                                       f"{head} (sha256 ") and line.endswith(
                f"restore it (git checkout {head} -- {rel}) or commit the change through review")
                for line in proc.stdout.splitlines()), proc.stdout
    finally:
        restore(clone)


def test_a_gate_installed_without_git_needs_its_commit_confirmed_by_its_build_record(clone, keys, clean_run,
                                                                                     tmp_path):
    pytest.importorskip("setuptools", reason="the wheel is built by setup.py's hook, without build isolation")
    head = _git(clone, "rev-parse", "HEAD").strip()
    restore(clone)
    dist = tmp_path / "dist"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                            str(dist), str(clone)], capture_output=True, text=True, timeout=600)
    restore(clone)
    assert build.returncode == 0, build.stderr
    installed = tmp_path / "site"
    (wheel,) = dist.glob("qualify-*.whl")
    with zipfile.ZipFile(wheel) as whl:
        whl.extractall(installed)
    record = json.loads((installed / "qualify" / "build_record.json").read_text())
    assert record["commit"] == head and "qualify/release/policy.toml" in record["files"]
    checkpoint = clone / CHECKPOINT
    outside = tmp_path / "elsewhere"
    outside.mkdir()

    proc = gate(installed, clean_run, keys, checkpoint, "--release-policy", cwd=outside)
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        f"refused: the attestation was made by the harness at commit {head}, but this gate runs from no git checkout, "
        f"so it does not know the commit of its own code (its package records commit {head}; confirm it with "
        "--harness-commit): run the gate from a checkout of that commit, or pass --harness-commit COMMIT to a gate "
        "built from it"]
    proc = gate(installed, clean_run, keys, checkpoint, "--release-policy", "--harness-commit", head, cwd=outside)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    other = "0" * 40
    proc = gate(installed, clean_run, keys, checkpoint, "--release-policy", "--harness-commit", other, cwd=outside)
    assert proc.returncode == 1
    assert f"--harness-commit {other} is not the commit this gate's package was built from ({head})" in proc.stdout
    # The installed profile is held to the digest its build recorded.
    profile = installed / "qualify" / "profiles" / "fixture.toml"
    profile.write_bytes(profile.read_bytes() + b"\n# edited after the build\n")
    proc = gate(installed, clean_run, keys, checkpoint, "--release-policy", "--harness-commit", head, cwd=outside)
    assert proc.returncode == 1
    assert any(line.startswith("refused: the shipped profile qualify/profiles/fixture.toml differs from its bytes at "
                               f"the harness's commit {head}") for line in proc.stdout.splitlines()), proc.stdout
