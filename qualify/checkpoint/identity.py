"""Source identity: proof that a local source folder *is* the repository and revision the profile pins.

A manifest names its source (repository, commit, every file's sha256), but the manifest is
written by the conversion under test: a different model, converted, with a manifest naming
the pinned revision, agrees with itself everywhere. So before any check that reads the
source may pass, the folder is tied to the profile's pin by something the conversion did
not write. Accepted proofs, tried in this order:

1. **The profile's pinned digests** (``[source] content_revision``: the folder's
   :func:`~qualify.checkpoint.checksums.folder_revision`; ``[source.sha256]``: every file's
   sha256). When a profile pins digests they decide: a folder that differs is not the source.
2. **The hub** (online): every local file's sha256 (LFS) or git blob id equals the hub's at
   the pinned revision, and every load-relevant file the hub lists is present. A Hugging Face
   cache snapshot (``models--ORG--NAME/snapshots/COMMIT/``) is compared the same way (method
   "hub cache snapshot and hub").

A cache snapshot proves nothing by itself: its folder names and its blobs' names are chosen by
whoever wrote the cache, so a hand-built ``snapshots/<pinned commit>/`` of other bytes, each
blob named by its own digest, is as consistent as a real one. Its layout can only *refute*
(another repository folder, another commit folder, a blob whose content is not the digest its
name says, a plain file or a link out of ``blobs/``). Without either proof the identity is
*not verified*, and the source checks cannot pass; ``--trust-local-source`` lets a run go on
(status "trusted"), and the report, the card and ``qualify gate`` say so
(:mod:`qualify.checks.source_identity` makes the check's evidence). Every outcome records
whether the hub was consulted, and why not (``hub_consulted``, ``hub``), and what was and
was not compared (:attr:`Proof.reason`). The decision functions here are pure (digests in,
findings out); the I/O is in :func:`prove_source` and the per-proof functions it calls.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from qualify.checkpoint.checksums import content_revision, sha256_files
from qualify.errors import CheckpointError, UsageError

PROFILE_DIGESTS = "profile digests"
HUB_CACHE = "hub cache snapshot"  # a method only with HUB, or as what refuted a folder
HUB = "hub"
TRUSTED = "trusted (--trust-local-source)"

_SHA256 = re.compile(r"[0-9a-f]{64}")
_SHA1 = re.compile(r"[0-9a-f]{40}")
#: Files the hub lists whose absence locally means the folder is not the whole revision.
_LOAD_RELEVANT = (".safetensors", ".json", ".bin", ".pt", ".pth", ".py", ".model", ".tiktoken", ".txt")


@dataclass(frozen=True)
class SourcePins:
    """The digests a profile pins for its source (``[source] content_revision`` and ``[source.sha256]``)."""

    content_revision: str | None = None
    sha256: Mapping[str, str] = field(default_factory=dict)

    @property
    def any(self) -> bool:
        return bool(self.content_revision or self.sha256)


@dataclass(frozen=True)
class SnapshotPath:
    """Where a hub cache snapshot folder says it comes from."""

    repo_folder: str  # "models--ORG--NAME"
    commit: str  # the snapshot folder's name
    repo_dir: Path  # .../models--ORG--NAME


def repo_folder_name(repo: str) -> str:
    """The cache folder huggingface_hub keeps model ``repo`` in (``org/name`` -> ``models--org--name``)."""
    return "models--" + repo.replace("/", "--")


def snapshot_path(root: Path) -> SnapshotPath | None:
    """The snapshot ``root`` is, if it sits at ``models--ORG--NAME/snapshots/COMMIT``; None otherwise."""
    root = Path(root).absolute()
    snapshots, repo_dir = root.parent, root.parent.parent
    if snapshots.name != "snapshots" or not repo_dir.name.startswith("models--"):
        return None
    return SnapshotPath(repo_dir.name, root.name, repo_dir)


# ----------------------------------------------------------------------------- pure decisions


def pin_findings(digests: Mapping[str, str], pins: SourcePins) -> list[tuple[str, str | None]]:
    """What in ``digests`` ({relative path: sha256}) contradicts ``pins``, as (message, file) pairs.

    ``content_revision`` is compared with :func:`content_revision` of ``digests``; with
    ``sha256`` pins, ``digests`` must hold exactly the pinned files with those digests.
    """
    out: list[tuple[str, str | None]] = []
    if pins.content_revision:
        got = content_revision(digests)
        if got != pins.content_revision:
            out.append((f"the folder's content revision is {got}, the profile pins {pins.content_revision} "
                        f"(over {len(digests)} files): this is not the pinned source", None))
    for path, want in sorted(pins.sha256.items()):
        found = digests.get(path)
        if found is None:
            out.append(("pinned by the profile but missing from the source folder", path))
        elif found != want:
            out.append((f"sha256 is {found}, the profile pins {want}", path))
    if pins.sha256:
        for path in sorted(set(digests) - set(pins.sha256)):
            out.append(("in the source folder but not pinned by the profile: its content is unverified", path))
    return out


def snapshot_findings(snap: SnapshotPath, repo: str | None, revision: str | None) -> list[str]:
    """The snapshot's repository folder and commit folder against the pinned repository and revision."""
    out = []
    want = repo_folder_name(repo) if repo else None
    if want is None:
        out.append("the profile names no source repository to compare the snapshot's with")
    elif snap.repo_folder != want:
        out.append(f"the snapshot is of repository folder {snap.repo_folder!r}, the profile's source {repo} is "
                   f"kept in {want!r}")
    if revision is None:
        out.append("the profile pins no source revision to compare the snapshot's commit with")
    elif snap.commit != revision:
        out.append(f"the snapshot is of commit {snap.commit!r}, not the pinned revision {revision}")
    return out


def blob_findings(rel: str, blob_name: str, sha256: str, git_sha1: str) -> str | None:
    """Why the blob a snapshot file links to does not prove its content, or None when it does.

    huggingface_hub names a blob by its ETag: the LFS object's sha256, or the git blob sha1
    for files kept in git. Either digest must be the content's.
    """
    if _SHA256.fullmatch(blob_name):
        return None if blob_name == sha256 else (f"its blob is named {blob_name}, but its content's sha256 is "
                                                 f"{sha256}: the cache entry is not the file it names")
    if _SHA1.fullmatch(blob_name):
        return None if blob_name == git_sha1 else (f"its blob is named {blob_name}, but its content's git blob "
                                                   f"sha1 is {git_sha1}: the cache entry is not the file it names")
    return f"its blob name {blob_name!r} is not a content digest (64-hex sha256 or 40-hex git blob sha1)"


def hub_findings(
    local: Mapping[str, tuple[str, str, int]], hub_files: Mapping[str, Any], commit: str, *,
    folder: str = "the source folder",
) -> list[tuple[str, str | None]]:
    """Local files {path: (sha256, git blob sha1, size)} against the hub's {path: HubFile} at ``commit``;
    ``folder`` names the local folder in the findings."""
    out: list[tuple[str, str | None]] = []
    if not hub_files:
        out.append((f"the hub lists no files at {commit}", None))
    for path, (sha, blob, size) in sorted(local.items()):
        h = hub_files.get(path)
        if h is None:
            out.append((f"not in the hub's repository at {commit}", path))
            continue
        if h.size is not None and h.size != size:
            out.append((f"size is {size}, the hub's at {commit} is {h.size}", path))
        elif h.sha256 is not None:
            if h.sha256 != sha:
                out.append((f"sha256 is {sha}, the hub's LFS sha256 at {commit} is {h.sha256}", path))
        elif h.blob_id is not None:
            if h.blob_id != blob:
                out.append((f"git blob sha1 is {blob}, the hub's at {commit} is {h.blob_id}", path))
        else:
            out.append((f"the hub gives no digest for it at {commit}", path))
    for path in sorted(set(hub_files) - set(local)):
        if PurePosixPath(path).name.lower().endswith(_LOAD_RELEVANT):
            out.append((f"in the hub's repository at {commit} but missing from {folder}", path))
    return out


# ----------------------------------------------------------------------------- I/O


def _files(root: Path) -> list[str]:
    # What a release of the folder would hold (links included: a snapshot is made of them; .git/ and
    # .cache/huggingface/ left out, as download metadata), the same listing every structure check reads.
    from qualify.checkpoint.files import list_checkpoint_files

    return list_checkpoint_files(root)


def _digests(root: Path, rels: list[str]) -> dict[str, str]:
    paths = [root / r for r in rels]
    digests = sha256_files(paths, labels=rels)
    return {r: digests[p] for r, p in zip(rels, paths, strict=True)}


def _ref(path: Path) -> str:
    try:
        with path.open("rb") as f:
            return f.read(64).decode("ascii", errors="replace").strip()
    except OSError as exc:
        return f"(unreadable: {exc.strerror or exc})"


def _check_pins(ev: Proof, root: Path, rels: list[str], pins: SourcePins) -> None:
    # Over the folder's listing, so a `hf download --local-dir` copy (its .cache/huggingface/ metadata) of
    # the same files has the same content revision; for a folder without those, it is folder_revision's.
    digests = _digests(root, rels)
    for message, file in pin_findings(digests, pins):
        ev.add(message, file=file)
    ev.measured["content_revision"] = content_revision(digests)
    ev.measured["files_compared"] = len(digests)
    ev.expected.update({k: v for k, v in (("content_revision", pins.content_revision),
                                          ("sha256", dict(pins.sha256) or None)) if v})


def _check_snapshot(ev: Proof, root: Path, rels: list[str], snap: SnapshotPath, repo: str | None,
                    revision: str | None) -> None:
    for message in snapshot_findings(snap, repo, revision):
        ev.add(message)
    blobs = (snap.repo_dir / "blobs").resolve()
    linked: list[tuple[str, Path]] = []
    for rel in rels:
        path = root / rel
        if not path.is_symlink():
            ev.add("a plain file, not a link into the repository's blobs: the cache does not vouch for it", file=rel)
            continue
        try:
            target = path.resolve(strict=True)
        except (OSError, RuntimeError) as exc:
            ev.add(f"its link cannot be followed: {exc}", file=rel)
            continue
        if target.parent != blobs:
            ev.add(f"links to {target}, outside the repository's blobs folder {blobs}", file=rel)
            continue
        linked.append((rel, target))
    try:
        digests = sha256_files([t for _, t in linked], labels=[r for r, _ in linked])
    except CheckpointError as exc:
        ev.add(exc.detail, file=exc.file)
        return
    from qualify.checkpoint.hub import git_blob_sha1

    for rel, target in linked:
        problem = blob_findings(rel, target.name, digests[target],
                                git_blob_sha1(target) if _SHA1.fullmatch(target.name) else "")
        if problem:
            ev.add(problem, file=rel)
    refs = snap.repo_dir / "refs"
    if refs.is_dir():
        ev.measured["refs"] = {p.relative_to(refs).as_posix(): _ref(p) for p in sorted(refs.rglob("*")) if p.is_file()}
    ev.measured.update(snapshot_repo_folder=snap.repo_folder, snapshot_commit=snap.commit, files_linked=len(linked))


def _not_consulted(ev: Proof, reason: str, access: Any = None) -> None:
    """Record that the hub was not consulted, and why (offline, unreachable, or not needed)."""
    ev.measured["hub_consulted"] = False
    ev.measured["hub"] = {"consulted": False, "reason": reason,
                          **({"access": access.to_dict()} if access is not None else {})}


def _check_hub(ev: Proof, root: Path, rels: list[str], repo: str, revision: str, access: Any,
               token: str | bool | None) -> bool:
    """Compare with the hub; False when the hub could not be reached (nothing compared)."""
    from qualify.checkpoint import hub

    try:
        rev = hub.resolve(repo, revision, access=access, token=token)
    except (hub.HubError, UsageError) as exc:
        if getattr(exc, "unreachable", False):
            _not_consulted(ev, str(exc), access)
            return False
        ev.add(str(exc))
        ev.measured["hub_consulted"] = True
        ev.measured["hub"] = {"consulted": True, "access": access.to_dict()}
        return True
    sha = _digests(root, rels)
    local = {}
    for rel in rels:
        path, known = root / rel, rev.files.get(rel)
        # The git blob id is read only where the hub has no LFS sha256 for the file (configs, not weights).
        blob = hub.git_blob_sha1(path) if known is not None and known.sha256 is None else ""
        local[rel] = (sha[rel], blob, path.stat().st_size)
    for message, file in hub_findings(local, rev.files, rev.commit):
        ev.add(message, file=file)
    ev.measured["hub_consulted"] = True
    ev.measured["hub"] = {"consulted": True, "commit": rev.commit, "files": len(rev.files),
                          "access": access.to_dict()}
    return True


def _ask_hub(ev: Proof, root: Path, rels: list[str], repo: str | None, revision: str | None,
             endpoint: str | None, token: str | bool | None) -> bool:
    """Compare the folder with the hub's metadata when the hub can be asked; False (and why) when it was not."""
    from qualify.checkpoint import hub

    if not (repo and revision):
        _not_consulted(ev, "not asked: the profile names no source repository and revision to ask the hub for")
        return False
    access = hub.hub_access(endpoint=endpoint)
    if access.mode != hub.ONLINE:
        _not_consulted(ev, access.reason, access)
        return False
    return _check_hub(ev, root, rels, repo, revision, access, token)


@dataclass
class Proof:
    """What the proofs tried on a source folder found: the one that applied, its findings and its figures."""

    method: str | None = None  # PROFILE_DIGESTS, HUB_CACHE (refuted only), "HUB_CACHE and HUB", HUB; None: no proof
    findings: list[tuple[str, str | None]] = field(default_factory=list)  # (message, file)
    measured: dict[str, Any] = field(default_factory=dict)
    expected: dict[str, Any] = field(default_factory=dict)
    #: What was compared with what, and what was not: the reason for the outcome, in words.
    reason: str = ""

    def add(self, message: str, *, file: str | None = None) -> None:
        self.findings.append((message, file))

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def verified(self) -> bool:
        return self.method is not None and self.ok

    @property
    def hub_reason(self) -> str | None:
        """Why the hub was not consulted, when it was not."""
        hub = self.measured.get("hub")
        return hub.get("reason") if isinstance(hub, dict) and not hub.get("consulted") else None


#: What a comparison with the hub compares (the words of :attr:`Proof.reason`).
_HUB_COMPARED = ("every file's sha256 (LFS) or git blob id was compared with the hub's metadata of {repo} at "
                 "{revision}, and every load-relevant file it lists was looked for in the folder")
#: Why a consistent cache snapshot is no proof (the words of :attr:`Proof.reason`).
SNAPSHOT_PROVES_NOTHING = ("its folder names and its blobs' names are chosen by whoever wrote the cache and prove "
                           "nothing about which commit the files are")


def prove_source(
    root: Path,
    *,
    repo: str | None,
    revision: str | None,
    pins: SourcePins,
    hub_endpoint: str | None = None,
    token: str | bool | None = None,
) -> Proof:
    """Try the proofs, in order, that the folder ``root`` is ``repo`` at ``revision`` (see the module docstring).

    Args:
        root: the local source folder.
        repo, revision: the profile's pinned source repository and commit.
        pins: the digests the profile pins; when it pins any, they decide.
        hub_endpoint: the hub to ask (default: ``HF_ENDPOINT``, else the public hub).
        token: passed to the hub client; never recorded.

    Raises:
        CheckpointError: a file of the folder cannot be read (or is a FIFO, socket or device).
    """
    root = Path(root)
    proof = Proof(expected={"repo": repo, "revision": revision})
    rels = _files(root)
    hub_compared = _HUB_COMPARED.format(repo=repo, revision=revision)
    if not rels:
        proof.add("the source folder holds no files")
        _not_consulted(proof, "not asked: the source folder holds no files")
        proof.reason = "nothing was compared: the source folder holds no files"
    elif pins.any:
        proof.method = PROFILE_DIGESTS
        _check_pins(proof, root, rels, pins)
        _not_consulted(proof, "not asked: the profile pins digests for the source, and they decide")
        pinned = " and ".join(w for w, on in (("content revision", pins.content_revision),
                                              ("per-file sha256", pins.sha256)) if on)
        proof.reason = (f"every file's sha256 was compared with the profile's pinned {pinned}"
                        + ("" if proof.ok else ": they differ"))
    elif (snap := snapshot_path(root)) is not None:
        _check_snapshot(proof, root, rels, snap, repo, revision)
        if not proof.ok:
            proof.method = HUB_CACHE
            _not_consulted(proof, "not asked: the snapshot's own layout refutes it")
            proof.reason = ("the hub cache snapshot's repository and commit folder names were compared with the pin, "
                            "and each file's blob name with its content's digest: they disagree")
        else:
            layout = (f"the hub cache snapshot's folder names say {snap.repo_folder} at commit {snap.commit}, and "
                      "every file links into its repository's blobs/ under its own content's digest, but "
                      f"{SNAPSHOT_PROVES_NOTHING}")
            if _ask_hub(proof, root, rels, repo, revision, hub_endpoint, token):
                proof.method = f"{HUB_CACHE} and {HUB}"
                proof.reason = f"{layout}; {hub_compared}" + (": they agree" if proof.ok else ": they differ")
            else:
                proof.reason = (f"{layout}; the profile pins no digests for the source, and no file was compared "
                                f"with the hub's metadata, which was not consulted ({proof.hub_reason})")
    elif _ask_hub(proof, root, rels, repo, revision, hub_endpoint, token):
        proof.method = HUB
        proof.reason = hub_compared + (": they agree" if proof.ok else ": they differ")
    else:
        proof.reason = ("the profile pins no digests for it, it is not a hub cache snapshot, and no file was "
                        f"compared with the hub's metadata, which was not consulted ({proof.hub_reason})")
    return proof


#: The keys of :func:`identity_record`, as the source_identity check puts them in its evidence's ``measured``.
IDENTITY_KEYS = ("status", "verified", "trusted", "method", "repo", "revision", "claimed_repo", "claimed_revision")


def identity_record(*, verified: bool, trusted: bool, method: str | None, repo: str | None,
                    revision: str | None) -> dict[str, Any]:
    """The report's ``source.identity``: whether the source was proven, how, and what it was proven to be."""
    status = "verified" if verified else ("trusted" if trusted else "not verified")
    return {"status": status, "verified": verified, "trusted": trusted,
            "method": method if verified else (TRUSTED if trusted else None),
            "repo": repo if verified else None, "revision": revision if verified else None,
            "claimed_repo": repo, "claimed_revision": revision}


__all__ = ["HUB", "HUB_CACHE", "IDENTITY_KEYS", "PROFILE_DIGESTS", "SNAPSHOT_PROVES_NOTHING", "TRUSTED", "Proof",
           "SnapshotPath", "SourcePins", "blob_findings", "hub_findings", "identity_record", "pin_findings",
           "prove_source", "repo_folder_name", "snapshot_findings", "snapshot_path"]
