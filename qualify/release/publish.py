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
create a new public one), on the branch's head as it was listed (``parent_commit``: a push in
between fails the commit rather than mixing two releases). It **replaces** the previous release:
every file of the branch that the new release does not hold is deleted in the same commit
(:func:`stale_files`), since vLLM loads every top-level ``*.safetensors`` and a stale shard beside
the new ones would be loaded with them. Only the hub's own ``.gitattributes`` stays.

This module uploads and downloads; it does not judge. ``qualify publish``
(:mod:`qualify.commands.publish`) runs the release gate before :func:`upload` (a refusal uploads
nothing) and again on :func:`download` of the commit created. The token is the client's
(``HF_TOKEN``, else its login); it is never put into a message (:mod:`qualify.util.redact`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
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

#: The files of a release repository a release never deletes: the hub's own (which files are LFS).
KEPT = (".gitattributes",)

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
    removed: tuple[str, ...] = ()  # the previous release's files the commit deleted


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


def rendering_refusal(evidence: Path) -> str | None:
    """Why ``report.md`` in ``evidence`` is not the rendering of the ``report.json`` beside it, or None.

    The attestation signs report.json but does not name report.md, which the run renders from it
    (:func:`qualify.report.markdown.render_markdown`, deterministic); an edited or swapped report.md
    would show the release's readers another verdict than the one signed. Read after the gate has
    verified report.json as the signed one.
    """
    from qualify.errors import QualifyError
    from qualify.report.markdown import render_markdown
    from qualify.report.model import read_json

    markdown = Path(evidence) / "report.md"
    try:
        expected = render_markdown(read_json(Path(evidence) / REPORT))
        text = markdown.read_text(encoding="utf-8")
    except (QualifyError, OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        return f"{markdown} cannot be compared with the signed {REPORT}: {exc}"
    if text != expected:
        return (f"{markdown} is not the rendering of the signed {REPORT} (edited, or another run's): the release "
                "would show its readers other words than the ones signed; use the run folder's own report.md")
    return None


def stale_files(existing: Sequence[str], uploads: Sequence[Upload]) -> tuple[str, ...]:
    """The files of the branch a release deletes: every one it does not upload, but the hub's ``.gitattributes``."""
    new = {u.path_in_repo for u in uploads}
    return tuple(sorted(path for path in set(existing) if path not in new and path not in KEPT))


def _hub_failure(repo: str, revision: str, endpoint: str, doing: str, exc: Exception, hint: str) -> HubError:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return HubError(f"{repo}@{revision}: the hub at {endpoint} {doing} ({type(exc).__name__}: {redact(first)}){hint}")


def online_endpoint(repo: str) -> str:
    """The hub endpoint to publish to; a HubError when the client is offline (said before any gating, since
    nothing could be published)."""
    from qualify.checkpoint.hub import ONLINE, hub_access

    access = hub_access()
    if access.mode != ONLINE:
        raise HubError(f"{repo}: cannot publish: {access.reason}")
    return access.endpoint


def upload(uploads: Sequence[Upload], repo: str, *, revision: str = "main",
           commit_message: str | None = None, run_name: str = "") -> Published:
    """Replace the release on ``repo``'s branch ``revision`` with ``uploads``, in one commit.

    Only for a release the gate accepted (:mod:`qualify.commands.publish` gates first). The hub and the
    token are the client's: ``HF_ENDPOINT`` and ``HF_TOKEN`` (else its saved login).

    Raises:
        HubError: offline, or the hub refused or could not be reached (the repository or branch does not
            exist, no write access, the branch moved while publishing); the message never holds the token.
    """
    endpoint = online_endpoint(repo)
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi

    message = commit_message or f"Release: the checkpoint and its qualification evidence (run {run_name})"
    api = HfApi(endpoint=endpoint, token=os.environ.get("HF_TOKEN") or None)
    write_hint = "; the repository and the branch must exist and the token (HF_TOKEN) must have write access"
    try:
        head = api.model_info(repo, revision=revision)
    except Exception as exc:  # huggingface_hub raises its HTTP errors, httpx its transport ones
        raise _hub_failure(repo, revision, endpoint, "did not take the release", exc, write_hint) from None
    removed = stale_files([s.rfilename for s in head.siblings or ()], uploads)
    operations: list[CommitOperationAdd | CommitOperationDelete] = [
        CommitOperationAdd(u.path_in_repo, str(u.local)) for u in uploads]
    operations += [CommitOperationDelete(path) for path in removed]
    try:
        info = api.create_commit(repo, operations, commit_message=message, revision=revision,
                                 parent_commit=head.sha)
    except Exception as exc:  # as above
        raise _hub_failure(repo, revision, endpoint, "did not take the release", exc, write_hint) from None
    return Published(repo, revision, info.oid, info.commit_url, tuple(u.path_in_repo for u in uploads), removed)


def download(published: Published, cache_dir: Path) -> Path:
    """The published commit as a user downloads it: a hub cache snapshot at the commit (links into blobs),
    under ``cache_dir``, which should be fresh so that nothing already there stands in for the hub's bytes.

    Raises:
        HubError: the hub could not be reached or did not serve the commit (the token is never in the message).
    """
    endpoint = online_endpoint(published.repo)
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(published.repo, revision=published.commit, cache_dir=str(cache_dir),
                                      endpoint=endpoint, token=os.environ.get("HF_TOKEN") or None))
    except Exception as exc:  # huggingface_hub raises its HTTP errors, httpx its transport ones
        raise _hub_failure(published.repo, published.commit, endpoint, "did not serve the published commit", exc,
                           ": it could not be verified as downloaded") from None
