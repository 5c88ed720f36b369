"""qualify.util.provenance: the harness is named by its commit, and code that ran but is not that commit's is named.

Each case is a small git checkout of its own whose modules a separate Python process really imports
(from source, or from bytecode planted where the import system looks), then asks which of the files
it loaded are not the commit's: what a release run records as ``treeClean`` and ``treeProblems``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import marshal
import os
import subprocess
import sys
from pathlib import Path

import pytest

from qualify.util.provenance import (
    checkout_path,
    committed_sha256,
    harness_source,
    head_commit,
    loaded_files,
    stale_bytecode,
)

REPO = Path(__file__).resolve().parents[2]


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                          capture_output=True, text=True).stdout


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A committed checkout: a root conftest, a package with two modules, and an ignored cache folder."""
    root = tmp_path / "harness"
    (root / "qualify" / "checks").mkdir(parents=True)
    (root / "conftest.py").write_text("HOOKS = 1\n")
    (root / "qualify" / "__init__.py").write_text("")
    (root / "qualify" / "checks" / "__init__.py").write_text("")
    (root / "qualify" / "checks" / "structure.py").write_text("THRESHOLD = 1\n")
    (root / "qualify" / "checks" / "format.py").write_text("STRICT = True\n")
    (root / ".gitignore").write_text("__pycache__/\n*.pyc\nreports/\n")
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "one")
    return root


def judged(root: Path, *modules: str) -> dict:
    """harness_source(root) in a process that imported ``modules`` from ``root`` (and ``conftest``)."""
    script = (f"import sys, json; sys.path.insert(0, {str(root)!r})\n"
              + "".join(f"import {m}\n" for m in ("conftest", *modules))
              + "from pathlib import Path\nfrom qualify_provenance import harness_source\n"
              + f"print(json.dumps(harness_source(Path({str(root)!r})).to_dict()))\n")
    # The module under test, under a name of its own: the checkout's "qualify" package is what is judged.
    shim = root.parent / "shim"
    shim.mkdir(exist_ok=True)
    (shim / "qualify_provenance.py").write_text((REPO / "qualify" / "util" / "provenance.py").read_text())
    env = {**os.environ, "PYTHONPATH": str(shim)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def plant(source: Path, code: str) -> Path:
    """Bytecode of ``code`` where the import system looks for ``source``'s, stamped with ``source``'s own mtime and
    size: Python takes it as current and runs it in place of the source."""
    st = source.stat()
    cached = Path(importlib.util.cache_from_source(str(source)))
    cached.parent.mkdir(exist_ok=True)
    header = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little") + \
        (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    cached.write_bytes(header + marshal.dumps(compile(code, str(source), "exec", dont_inherit=True)))
    return cached


def test_code_as_committed_is_clean_and_untracked_output_does_not_count(checkout: Path) -> None:
    head = _git(checkout, "rev-parse", "HEAD").strip()
    (checkout / "reports").mkdir()
    (checkout / "reports" / "r.json").write_text("{}")
    (checkout / "notes.txt").write_text("not code, never imported")
    assert judged(checkout, "qualify.checks.structure") == {"commit": head, "clean": True}


def test_a_changed_root_conftest_is_named(checkout: Path) -> None:
    (checkout / "conftest.py").write_text("HOOKS = 2\n")
    head = _git(checkout, "rev-parse", "HEAD").strip()
    assert judged(checkout, "qualify.checks.structure") == {
        "commit": head, "clean": False,
        "problems": [f"conftest.py: imported by the run and changed since commit {head[:12]}"]}


def test_an_untracked_package_that_shadows_a_tracked_module_is_named(checkout: Path) -> None:
    # Python takes the package qualify/checks/format/ over the module qualify/checks/format.py.
    (checkout / "qualify" / "checks" / "format").mkdir()
    (checkout / "qualify" / "checks" / "format" / "__init__.py").write_text("STRICT = False\n")
    head = _git(checkout, "rev-parse", "HEAD").strip()
    assert judged(checkout, "qualify.checks.format")["problems"] == [
        f"qualify/checks/format/__init__.py: imported by the run but not in commit {head[:12]} (untracked)"]


def test_stale_bytecode_python_runs_in_place_of_its_source_is_named(checkout: Path) -> None:
    source = checkout / "qualify" / "checks" / "structure.py"
    cached = plant(source, "THRESHOLD = 0\n")  # the same size as the source, other code
    found = judged(checkout, "qualify.checks.structure")
    assert found["clean"] is False
    assert found["problems"] == ["qualify/checks/structure.py: its bytecode "
                                 f"{cached.relative_to(checkout).as_posix()} does not hold its source's code, and "
                                 "Python runs it in place of the source"]
    # The bytecode the import system itself writes holds the source's code: no finding.
    cached.unlink()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-c", "import qualify.checks.structure"], cwd=checkout, env=env, check=True)
    assert cached.is_file()
    assert judged(checkout, "qualify.checks.structure")["clean"] is True


def test_bytecode_the_import_system_would_not_use_is_not_a_finding(checkout: Path) -> None:
    source = checkout / "qualify" / "checks" / "structure.py"
    cached = plant(source, "THRESHOLD = 0\n")
    assert stale_bytecode(source, cached) is True
    os.utime(source, (source.stat().st_atime, source.stat().st_mtime + 10))  # the header no longer matches
    assert stale_bytecode(source, cached) is False
    cached.write_bytes(b"\0\0\0\0" + cached.read_bytes()[4:])  # another interpreter's magic
    assert stale_bytecode(source, cached) is False


def test_sourceless_bytecode_in_the_legacy_location_is_named(checkout: Path) -> None:
    helper = checkout / "qualify" / "checks" / "helper.py"
    helper.write_text("X = 1\n")
    import py_compile

    py_compile.compile(str(helper), cfile=str(checkout / "qualify" / "checks" / "helper.pyc"))
    helper.unlink()  # only the .pyc beside the package's modules: an import of "helper" runs it
    head = _git(checkout, "rev-parse", "HEAD").strip()
    assert judged(checkout, "qualify.checks.helper")["problems"] == [
        f"qualify/checks/helper.pyc: imported by the run but not in commit {head[:12]} (ignored by git)",
        "qualify/checks/helper.pyc: bytecode without its source was imported (a sourceless or legacy .pyc)"]


def test_a_changed_tracked_file_the_run_did_not_import_still_counts(checkout: Path) -> None:
    (checkout / "qualify" / "checks" / "format.py").write_text("STRICT = False\n")
    head = _git(checkout, "rev-parse", "HEAD").strip()
    assert harness_source(checkout, loaded={}).to_dict() == {
        "commit": head, "clean": False, "problems": [f"qualify/checks/format.py: changed since commit {head[:12]}"]}


def test_outside_a_checkout_nothing_is_assumed(tmp_path: Path) -> None:
    assert harness_source(tmp_path).to_dict() == {"commit": None, "clean": None}
    # A folder inside another checkout (an environment in a repository) is not that repository's code.
    inner = tmp_path / "repo" / "site-packages"
    inner.mkdir(parents=True)
    _git(tmp_path / "repo", "init", "-q")
    assert head_commit(inner) is None


def test_the_committed_bytes_of_a_file_are_the_commits_not_the_folders(checkout: Path) -> None:
    head = _git(checkout, "rev-parse", "HEAD").strip()
    rel = "qualify/checks/format.py"
    committed = hashlib.sha256(b"STRICT = True\n").hexdigest()
    (checkout / rel).write_text("STRICT = False\n")
    assert committed_sha256(rel, head, checkout) == committed
    (checkout / "qualify" / "checks" / "new.toml").write_text("x = 1\n")
    assert committed_sha256("qualify/checks/new.toml", head, checkout) is None
    assert checkout_path(checkout / rel, checkout) == rel
    assert checkout_path(checkout.parent, checkout) is None


def test_the_files_of_this_process_are_found_where_they_were_loaded_from() -> None:
    found = loaded_files(REPO)
    assert "qualify/util/provenance.py" in found and "tests/util/test_provenance.py" in found
    # The environment's packages are not the harness's, even where the environment lies in the checkout.
    assert not any(rel.startswith((".venv/", "venv/")) for rel in found)
