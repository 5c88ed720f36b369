"""Which files of a checkpoint folder ship, which of them a runtime may load, and which may run code.

A release uploads the whole folder, so every file in it must be accounted for: verified
through the manifest, or on the short list of files no runtime ever loads
(:data:`NEVER_LOADED_NAMES`, :data:`NEVER_LOADED_SUFFIXES`). That list is exact names and a
few suffixes no loader reads, never a stem or a prefix: vLLM loads every ``*.safetensors``
of a folder without an index whatever it is called, so ``LICENSE.safetensors`` is weights.
Files that carry code --
Python modules, a config's ``auto_map`` that makes ``trust_remote_code`` import them, and
pickles (``torch.load`` runs whatever a pickle says) -- are refused unless the profile
allows them. This module is the one home of those lists; the structure checks and the
release gate both read them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

#: Folders an upload leaves out and a loader never reads: git's own, and the hub client's download metadata.
SKIPPED_DIRS: tuple[tuple[str, ...], ...] = ((".git",), (".cache", "huggingface"))

#: Files a runtime never reads when it loads a checkpoint (the model card, legal texts, git's
#: attributes), by exact name, in any folder; they may ship without a manifest entry. Everything
#: else must be listed and verified. Matching is exact (case included): ``notice.safetensors``,
#: ``LICENSE.json`` or ``License.txt`` is not on it.
NEVER_LOADED_NAMES = (
    "README", "README.md",
    "LICENSE", "LICENSE.md", "LICENSE.txt", "LICENCE", "LICENCE.md", "LICENCE.txt",
    "NOTICE", "NOTICE.md", "NOTICE.txt", "COPYING", "COPYING.md", "COPYING.txt",
    ".gitattributes", ".gitignore",
)
#: What a release publishes beside the weights (:mod:`qualify.release.publish`): the run's evidence, by
#: exact path in one folder of the repository. vLLM loads only the top level's ``*.safetensors`` and
#: config and tokenizer files by fixed names, so these are never read; the list is exact paths, never
#: the folder: ``qualification/model.safetensors`` is not on it. With the model card (``README.md``,
#: written after qualification) they are never signed subjects.
EVIDENCE_FOLDER = "qualification"
EVIDENCE_PATHS = tuple(f"{EVIDENCE_FOLDER}/{name}" for name in
                       ("attestation.intoto.jsonl", "model.sig", "report.json", "report.md"))
MODEL_CARD = "README.md"
#: Suffixes (lower case) of files no runtime reads: documents and pictures. vLLM and transformers
#: read weights (``*.safetensors``, ``*.bin``, ``*.pt``, their ``*.index.json``), JSON configs and
#: tokenizer files by name, ``*.py`` with trust_remote_code; none of them ends so.
NEVER_LOADED_SUFFIXES = (".md", ".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp")
#: Suffixes (lower case) of files a runtime may read: weights and their indexes (vLLM's default
#: loader globs ``*.safetensors``, ``*.bin``, ``*.pt``), configs and tokenizer files, templates,
#: code. A never-loaded file never ends with one of these, whatever the rest of its name says.
RUNTIME_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".json", ".model", ".tiktoken", ".jinja", ".py",
                    ".gguf", ".msgpack", ".h5", ".npz", ".onnx", ".ckpt", ".pkl")

#: Suffixes of files that are code, or pickles a loader would unpickle (and so run).
EXECUTABLE_SUFFIXES = (".py", ".pyc", ".pyo", ".so", ".dylib", ".dll", ".sh",
                       ".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib", ".npy", ".npz")
#: A config key that makes transformers import the checkpoint's own Python modules.
CODE_KEYS = ("auto_map",)
# Pickle protocol 2-5 starts with PROTO (0x80) and the protocol number; torch.save's zip
# archive (which holds a data.pkl) starts like any zip file.
_PICKLE_MAGIC = tuple(bytes([0x80, n]) for n in range(2, 6))
_ZIP_MAGIC = b"PK\x03\x04"


def skipped(rel: str) -> bool:
    """Whether ``rel`` lies in a folder an upload leaves out (``.git/``, ``.cache/huggingface/``)."""
    parts = PurePosixPath(rel).parts[:-1]
    return any(parts[i : i + len(d)] == d for d in SKIPPED_DIRS for i in range(len(parts)))


def is_never_loaded(rel: str) -> bool:
    """Whether no runtime reads this file when it loads a checkpoint (a README, an image, a licence).

    Only in a folder an upload leaves out, at an exact path of :data:`EVIDENCE_PATHS`, by an exact
    name of :data:`NEVER_LOADED_NAMES`, or by a suffix of :data:`NEVER_LOADED_SUFFIXES`; never
    otherwise when the name ends with a suffix a runtime reads (:data:`RUNTIME_SUFFIXES`).
    """
    if skipped(rel) or rel in EVIDENCE_PATHS:
        return True
    name = PurePosixPath(rel).name
    if name.lower().endswith(RUNTIME_SUFFIXES):
        return False
    return name in NEVER_LOADED_NAMES or name.lower().endswith(NEVER_LOADED_SUFFIXES)


def executable_reason(rel: str, head: bytes) -> str | None:
    """Why the file at ``rel`` (whose first bytes are ``head``) is code or a pickle, or None.

    Args:
        rel: the path relative to the checkpoint.
        head: at least the file's first 4 bytes (fewer if it is shorter).
    """
    name = PurePosixPath(rel).name.lower()
    suffix = next((s for s in EXECUTABLE_SUFFIXES if name.endswith(s)), None)
    if suffix is not None:
        return f"a {suffix} file is code or a pickle, which runs when it is loaded"
    if head[:2] in _PICKLE_MAGIC:
        return "holds a pickle (it starts with pickle's PROTO opcode), which runs code when it is loaded"
    if head.startswith(_ZIP_MAGIC):
        return "is a zip archive (torch.save's format holds a pickle), which runs code when it is loaded"
    return None


def code_keys(value: Any, path: str = "$") -> Iterator[str]:
    """JSON paths of every :data:`CODE_KEYS` key anywhere inside a parsed JSON value."""
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}"
            if key in CODE_KEYS:
                yield here
            yield from code_keys(item, here)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from code_keys(item, f"{path}[{i}]")


def read_head(path: Path, n: int = 8) -> bytes:
    """The first ``n`` bytes of a file (fewer if it is shorter)."""
    with open(path, "rb") as fh:
        return fh.read(n)


def hub_repo_of(root: Path) -> Path | None:
    """The ``models--ORG--NAME`` folder when ``root`` is a hub cache snapshot (``.../snapshots/COMMIT``)."""
    snapshots = Path(root).absolute().parent
    repo_dir = snapshots.parent
    if snapshots.name == "snapshots" and repo_dir.name.startswith(("models--", "datasets--", "spaces--")):
        return repo_dir
    return None


def storage_roots(root: Path) -> tuple[Path, ...]:
    """Where a checkpoint's files may really live: its folder, and for a hub cache snapshot its repo's blobs.

    The hub's cache keeps a snapshot (``models--ORG--NAME/snapshots/COMMIT/``) as symlinks into
    the repository's content-addressed ``blobs/`` folder; those links do not leave the
    release, while a link anywhere else does. A ``blobs`` that is itself a link, or that
    resolves outside its repository's folder, is no storage root: through it, "inside the
    blobs" could mean anywhere on the machine.
    """
    real_root = Path(root).resolve()
    repo_dir = hub_repo_of(root)
    if repo_dir is None:
        return (real_root,)
    blobs = repo_dir / "blobs"
    if blobs.is_symlink() or not blobs.resolve().is_relative_to(repo_dir.resolve()):
        return (real_root,)
    return real_root, blobs.resolve()


def blob_name_problem(blob: Path, sha256: str) -> str | None:
    """Why a hub cache blob's name is not its content's digest, or None.

    The cache names an LFS file's blob by its sha256, and any other file's by its git blob id
    (sha1 of ``blob <size>\\0`` and the content).

    Args:
        blob: the resolved path of the blob.
        sha256: the hex sha256 of its content.
    """
    name = blob.name
    if len(name) == 64:
        return None if name == sha256 else f"its blob is named {name} but its content's sha256 is {sha256}"
    if len(name) == 40:
        data = blob.read_bytes()
        git = hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()
        return None if name == git else f"its blob is named {name} but its content's git blob id is {git}"
    return f"its blob name {name!r} is neither a sha256 nor a git blob id"


@dataclass(frozen=True)
class FileEntry:
    """One checkpoint file's identity: its path relative to the checkpoint, sha256 and size."""

    path: str
    sha256: str
    size: int


def list_checkpoint_files(root: Path) -> list[str]:
    """Everything under ``root`` but folders, as '/'-separated relative paths: everything an upload ships.

    Only ``.git/`` and ``.cache/huggingface/`` are left out (:data:`~qualify.checkpoint.files.SKIPPED_DIRS`).
    A link to a folder is listed as one entry, never followed; a FIFO, socket or device is listed
    too (the structure checks refuse it), so that nothing in the folder goes unseen.
    """
    root = Path(root)
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if skipped(rel):
            continue
        if p.is_symlink() or not p.is_dir():
            out.append(rel)
    return out
