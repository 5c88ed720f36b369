"""Which code of the harness is running: the git commit of its checkout, and whether its code is as committed.

A version number names a release of the harness, not the code that ran: every commit between
two releases says the same version. An attestation names the harness by its commit instead,
and says whether the code that judged the checkpoint was exactly that commit's (a release may
be signed only by committed code, which anyone can read at that commit).

"As committed" is judged on what the process really loaded (:func:`loaded_files`: every module in
``sys.modules`` whose file lies in the checkout, the root ``conftest.py`` and the suites pytest
imported among them), not on a list of folders: a changed root conftest, an untracked package that
shadows a tracked module of the same name, or stale bytecode that Python ran in place of its source
would each change what the checks decide while the folders looked clean. Each is named
(:attr:`HarnessSource.problems`).

A gate installed without ``.git`` knows its commit only from the record its build wrote
(:data:`BUILD_RECORD`, by ``setup.py``): the commit, and the sha256 of the files that say what a
release must show (the shipped profiles and the release policy).
"""

from __future__ import annotations

import _imp
import hashlib
import importlib.util
import json
import marshal
import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

#: The checkout the package runs from (a wheel install has none).
CHECKOUT = Path(__file__).resolve().parents[2]
#: Tracked paths whose uncommitted change marks the tree unclean even when not imported (data the run
#: reads: profiles, prompt sets, schemas), besides every file the run loaded.
CODE_PATHS = ("qualify", "suites", "conftest.py")
#: Written into the built package by setup.py: {"commit": ..., "files": {path in the checkout: sha256}}.
BUILD_RECORD = "build_record.json"


@dataclass(frozen=True)
class HarnessSource:
    """The harness's code: its commit (None outside a git checkout), whether the code is as committed, and,
    when it is not, each file that is not (``path: why``)."""

    commit: str | None
    clean: bool | None
    problems: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"commit": self.commit, "clean": self.clean}
        if self.problems:
            out["problems"] = list(self.problems)
        return out


def _git(root: Path, *args: str, stdin: str | None = None) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20,
                              input=stdin)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _git_bytes(root: Path, *args: str) -> bytes | None:
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def head_commit(root: Path = CHECKOUT) -> str | None:
    """The commit ``root`` is checked out at; None outside a git checkout (never guessed)."""
    # Only a checkout of its own: a package installed into an environment that lies inside some other
    # checkout (a .venv in a repository) is not that repository's code.
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None or Path(os.path.realpath(top.strip())) != Path(os.path.realpath(root)):
        return None
    head = _git(root, "rev-parse", "--verify", "HEAD")
    return head.strip() if head and len(head.strip()) == 40 else None


def _environment_roots() -> list[Path]:
    # A virtual environment kept inside the checkout (.venv) holds the dependencies, not the harness:
    # its files are ignored by git and are no part of what the commit names.
    paths = {sys.prefix, sys.exec_prefix, *(sysconfig.get_paths().get(k, "") for k in ("purelib", "platlib"))}
    return [Path(p).resolve() for p in paths if p]


def module_file(module: ModuleType) -> Path | None:
    """The file a module was loaded from, or None (built in, frozen, a namespace package)."""
    spec = getattr(module, "__spec__", None)
    origin = getattr(spec, "origin", None) if spec is not None else None
    where = origin if isinstance(origin, str) and getattr(spec, "has_location", False) else \
        getattr(module, "__file__", None)
    return Path(where) if isinstance(where, str) and where else None


def loaded_files(root: Path = CHECKOUT, modules: Iterable[ModuleType] | None = None) -> dict[str, ModuleType]:
    """path relative to ``root`` -> module, for every loaded module whose file lies in ``root`` (outside the
    environment's own folders): the code the process really ran, whatever folder it came from."""
    root = Path(root).resolve()
    environment = [p for p in _environment_roots() if p != root]
    skip = [p for p in environment if p.is_relative_to(root)]
    # The environment's thousands of modules (torch alone has over a thousand) are passed over by their path's
    # spelling before any file system call: the environment is the dependencies, never the commit's code.
    environment_prefixes = tuple(f"{p}{os.sep}" for p in environment) + tuple(
        f"{p}{os.sep}" for p in {sys.prefix, sys.exec_prefix} if Path(p).resolve() != root)
    out: dict[str, ModuleType] = {}
    for module in list(sys.modules.values() if modules is None else modules):
        where = module_file(module)
        if where is None or not where.is_absolute() or str(where).startswith(environment_prefixes):
            continue
        if not where.is_file():
            continue  # a namespace object that names a file of no import (torch.ops says "_ops.py")
        try:
            path = where.resolve()
        except OSError:
            continue
        if path.is_relative_to(root) and not any(path.is_relative_to(s) for s in skip):
            out[path.relative_to(root).as_posix()] = module
    return out


_COMPILED: dict[tuple[str, int, int], bytes] = {}


def _compiled(source: Path) -> bytes | None:
    """marshal of ``source`` compiled as the import system compiles it (cached by mtime and size)."""
    try:
        st = source.stat()
        key = (str(source), st.st_mtime_ns, st.st_size)
        if key not in _COMPILED:
            code = compile(source.read_bytes(), str(source), "exec", dont_inherit=True)
            _COMPILED[key] = marshal.dumps(code)
        return _COMPILED[key]
    except (OSError, SyntaxError, ValueError):
        return None


def stale_bytecode(source: Path, cached: Path) -> bool:
    """Whether ``cached`` is bytecode Python would run in place of ``source`` (its header says it is current)
    although its code is not ``source``'s: a stale or planted .pyc."""
    try:
        data = cached.read_bytes()
        st = source.stat()
    except OSError:
        return False
    if len(data) < 16 or data[:4] != importlib.util.MAGIC_NUMBER:
        return False  # another interpreter's, or torn: the import system recompiles
    flags = int.from_bytes(data[4:8], "little")
    if flags & 0b1:
        checked = bool(flags & 0b10)
        policy = getattr(_imp, "check_hash_based_pycs", "default")
        if policy == "always" or (checked and policy != "never"):
            used = data[8:16] == importlib.util.source_hash(source.read_bytes())
        else:
            used = True  # an unchecked hash-based pyc is run whatever the source says
    else:
        used = (int.from_bytes(data[8:12], "little") == int(st.st_mtime) & 0xFFFFFFFF
                and int.from_bytes(data[12:16], "little") == st.st_size & 0xFFFFFFFF)
    return used and _compiled(source) != data[16:]


def _bytecode_problem(root: Path, rel: str, module: ModuleType) -> str | None:
    path = root / rel
    if path.suffix in (".pyc", ".pyo"):
        return f"{rel}: bytecode without its source was imported (a sourceless or legacy .pyc)"
    if path.suffix != ".py":
        return None
    spec = getattr(module, "__spec__", None)
    cached = getattr(spec, "cached", None) if spec is not None else None
    if not isinstance(cached, str):
        try:
            cached = importlib.util.cache_from_source(str(path))
        except (NotImplementedError, ValueError):
            return None
    if stale_bytecode(path, Path(cached)):
        shown = Path(cached).relative_to(root).as_posix() if Path(cached).is_relative_to(root) else cached
        return f"{rel}: its bytecode {shown} does not hold its source's code, and Python runs it in place of the source"
    return None


def tree_problems(root: Path, commit: str, loaded: dict[str, ModuleType]) -> list[str]:
    """Each file that makes the code that ran differ from ``commit``'s: a loaded file that is not in the commit
    (untracked or ignored) or changed since it, stale bytecode run in its place, and any changed tracked file
    under :data:`CODE_PATHS`."""
    tree = _git_bytes(root, "ls-tree", "-r", "-z", "--name-only", commit)
    changed = _git_bytes(root, "diff", "--no-renames", "--name-only", "-z", commit, "--")
    if tree is None or changed is None:
        return [f"git cannot list commit {commit} in {root}: whether the code is as committed is unknown"]
    committed = {p.decode("utf-8", "surrogateescape") for p in tree.split(b"\0") if p}
    modified = {p.decode("utf-8", "surrogateescape") for p in changed.split(b"\0") if p}
    out: list[str] = []
    missing = sorted(rel for rel in loaded if rel not in committed)
    ignored: set[str] = set()
    if missing:
        listed = _git(root, "check-ignore", "--stdin", stdin="\n".join(missing) + "\n")
        ignored = set((listed or "").splitlines())
    for rel in sorted(loaded):
        if rel in missing:
            kind = "ignored by git" if rel in ignored else "untracked"
            out.append(f"{rel}: imported by the run but not in commit {commit[:12]} ({kind})")
        elif rel in modified:
            out.append(f"{rel}: imported by the run and changed since commit {commit[:12]}")
        problem = _bytecode_problem(root, rel, loaded[rel])
        if problem is not None:
            out.append(problem)
    for rel in sorted(modified - set(loaded)):
        if any(rel == p or rel.startswith(p + "/") for p in CODE_PATHS):
            out.append(f"{rel}: changed since commit {commit[:12]}")
    return out


def harness_source(root: Path = CHECKOUT, loaded: dict[str, ModuleType] | None = None) -> HarnessSource:
    """The commit ``root`` is checked out at, and whether the code the process loaded is that commit's.

    ``loaded`` defaults to :func:`loaded_files` now: call it once the run has imported everything it
    will (after the suites). Untracked output (reports, caches) does not count; an untracked or ignored
    *module that was imported* does. Outside a git checkout commit and clean are None: unknown, never
    assumed.
    """
    root = Path(root)
    commit = head_commit(root)
    if commit is None:
        return HarnessSource(None, None)
    problems = tree_problems(root, commit, loaded_files(root) if loaded is None else loaded)
    return HarnessSource(commit, not problems, tuple(problems))


# ---------------------------------------------------------------- the committed bytes of a file


def build_record() -> dict[str, Any] | None:
    """The record the package's build wrote (:data:`BUILD_RECORD`); None when it has none (a checkout)."""
    from importlib import resources

    try:
        data = json.loads(resources.files("qualify").joinpath(BUILD_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def committed_sha256(rel: str, commit: str, root: Path = CHECKOUT) -> str | None:
    """The sha256 of ``rel`` (a path in the checkout) as commit ``commit`` holds it; None when the commit
    does not hold it. Without a checkout, the build record's digest where it was built from ``commit``."""
    if head_commit(root) is not None:
        blob = _git_bytes(root, "show", f"{commit}:{rel}")
        return hashlib.sha256(blob).hexdigest() if blob is not None else None
    record = build_record()
    if record is None or record.get("commit") != commit:
        return None
    digest = (record.get("files") or {}).get(rel)
    return digest if isinstance(digest, str) else None


def checkout_path(path: Path, root: Path = CHECKOUT) -> str | None:
    """``path`` relative to the checkout (or to the installed package's parent), POSIX; None outside it."""
    resolved = Path(os.path.realpath(path))
    base = Path(os.path.realpath(root))
    return resolved.relative_to(base).as_posix() if resolved.is_relative_to(base) else None
