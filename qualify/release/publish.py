"""What a release uploads, and where: the checkpoint, and beside it the evidence that qualified it.

One commit to the release repository holds both, so that no revision of the repository has
weights without the proof, and a user who downloads it has everything to check it:

- every file of the checkpoint folder (:func:`~qualify.checkpoint.files.list_checkpoint_files`:
  all but ``.git/`` and the hub client's ``.cache/huggingface/``), at its path;
- the run's evidence under :data:`~qualify.checkpoint.files.EVIDENCE_FOLDER` (``qualification/``):
  ``attestation.intoto.jsonl`` (the signed in-toto statement), ``model.sig`` (the OpenSSF
  model-signing bundle), ``report.json`` and ``report.md``. All four are required: a release
  without one is refused before anything is uploaded.

The evidence paths are never loaded by a runtime and never signed subjects, nor is the model
card (``README.md``, written after qualification): ``qualify gate`` and the model signature
leave them out, so the published repository verifies as it is (README, "Verify a release").

The upload is one ``HfApi.create_commit`` to an existing repository (a mistyped name must not
create a new public one). The token is the client's (``HF_TOKEN``, else its login); it is
never put into a message (:mod:`qualify.util.redact`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from qualify.checkpoint.files import EVIDENCE_FOLDER, EVIDENCE_PATHS, list_checkpoint_files
from qualify.errors import HubError, PublishRefused, UsageError
from qualify.release.attestation import ATTESTATION_NAME, MODEL_SIGNATURE_NAME, REPORT
from qualify.util.identifiers import is_repo_id
from qualify.util.redact import redact

#: The run folder's evidence, each by its name there, and the path it is published at.
EVIDENCE: tuple[tuple[str, str], ...] = tuple(
    (name, f"{EVIDENCE_FOLDER}/{name}") for name in (ATTESTATION_NAME, MODEL_SIGNATURE_NAME, REPORT, "report.md"))

# A branch: segments of letters, digits, '-', '_' and '.', joined by '/'.
_BRANCH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*(?:/[A-Za-z0-9_][A-Za-z0-9._-]*)*")


@dataclass(frozen=True)
class Upload:
    """One file of the release: where it is published, and the local file whose bytes go there."""

    path_in_repo: str
    local: Path


@dataclass(frozen=True)
class Published:
    """The commit a release created."""

    repo: str
    revision: str
    commit: str
    url: str
    files: tuple[str, ...]


def check_repo_id(repo: str) -> str:
    """``repo`` if it is a hub repository id (``owner/name``, safe characters), else a UsageError naming it."""
    if not is_repo_id(repo):
        raise UsageError(f"--repo {repo!r}: not a hub repository id (owner/name: letters, digits, '-', '_' and '.', "
                         "each part starting and ending with a letter or digit, at most 96 characters, no '--' or "
                         "'..')")
    return repo


def check_branch(revision: str) -> str:
    """``revision`` if it is a branch name of safe characters, else a UsageError naming it."""
    if not _BRANCH.fullmatch(revision) or ".." in revision or revision.endswith((".lock", ".")):
        raise UsageError(f"--revision {revision!r}: not a branch name (letters, digits, '-', '_', '.' and '/' "
                         "between parts)")
    return revision


def release_files(checkpoint: Path, run_dir: Path) -> tuple[Upload, ...]:
    """Every file the release uploads: the checkpoint's at their paths, the run's evidence under qualification/.

    Raises:
        PublishRefused: an evidence file is missing from ``run_dir`` (all are named), the checkpoint
            already holds a file at an evidence path, or a checkpoint entry is not a regular file
            (a broken link, a FIFO): nothing may be uploaded then.
    """
    checkpoint, run_dir = Path(checkpoint), Path(run_dir)
    problems = []
    missing = [name for name, _ in EVIDENCE if not (run_dir / name).is_file()]
    if missing:
        problems.append(f"the run folder {run_dir} lacks {', '.join(missing)}: a release publishes all of "
                        f"{', '.join(name for name, _ in EVIDENCE)} (qualify run/check --sign-key ... --sign-model "
                        "writes them)")
    rels = list_checkpoint_files(checkpoint)
    clash = sorted(set(rels) & set(EVIDENCE_PATHS))
    if clash:
        problems.append(f"the checkpoint already holds {', '.join(clash)}, where the run's evidence is published")
    irregular = [rel for rel in rels if not (checkpoint / rel).is_file()]
    if irregular:
        problems.append(f"not regular files, which cannot be uploaded: {', '.join(irregular)}")
    if problems:
        raise PublishRefused("; ".join(problems))
    return tuple(Upload(rel, checkpoint / rel) for rel in rels) + tuple(
        Upload(path, run_dir / name) for name, path in EVIDENCE)


def publish(checkpoint: Path, run_dir: Path, repo: str, *, revision: str = "main",
            commit_message: str | None = None) -> Published:
    """Upload the checkpoint and the run's evidence to ``repo`` at branch ``revision``, in one commit.

    The hub and the token are the client's: ``HF_ENDPOINT`` and ``HF_TOKEN`` (else its saved login).

    Raises:
        UsageError: ``repo`` or ``revision`` is not a safe repository id or branch name.
        PublishRefused: the release is incomplete (see :func:`release_files`); nothing was uploaded.
        HubError: offline, or the hub refused or could not be reached (the repository or branch does not
            exist, no write access); the message never holds the token.
    """
    from qualify.checkpoint.hub import ONLINE, hub_access

    check_repo_id(repo)
    check_branch(revision)
    uploads = release_files(checkpoint, run_dir)
    access = hub_access()
    if access.mode != ONLINE:
        raise HubError(f"{repo}: cannot publish: {access.reason}")
    from huggingface_hub import CommitOperationAdd, HfApi

    message = commit_message or f"Release: the checkpoint and its qualification evidence (run {Path(run_dir).name})"
    api = HfApi(endpoint=access.endpoint, token=os.environ.get("HF_TOKEN") or None)
    try:
        info = api.create_commit(repo, [CommitOperationAdd(u.path_in_repo, str(u.local)) for u in uploads],
                                 commit_message=message, revision=revision)
    except Exception as exc:  # huggingface_hub raises its HTTP errors, httpx its transport ones
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise HubError(f"{repo}@{revision}: the hub at {access.endpoint} did not take the release "
                       f"({type(exc).__name__}: {redact(first)}); the repository and the branch must exist and the "
                       "token (HF_TOKEN) must have write access") from None
    return Published(repo, revision, info.oid, info.commit_url, tuple(u.path_in_repo for u in uploads))
