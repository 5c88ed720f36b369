"""Pinned Hugging Face Hub revisions: resolve, download, cross-check checksums -- and say how.

The draft, its target and its source are qualified at immutable commits. This module
fetches them through the real ``huggingface_hub`` client and refuses the client's two
quiet behaviours that would make a verdict lie about what it checked:

- ``snapshot_download`` falls back to the local cache on a network error or an HTTP
  error without saying so. Online, the harness first asks the hub itself
  (``model_info(files_metadata=True)``); if that fails the download fails, and every
  downloaded file is re-hashed against the hub's LFS sha256 (or git blob id), so a stale
  or corrupt cache entry cannot pass as "downloaded".
- ``HF_HUB_OFFLINE`` is read once, when ``huggingface_hub`` is imported. The harness reads
  it now as well; if either says offline, it works from the cache only, and the evidence
  says ``cache-only`` (the hub was not consulted) rather than leaving it implied.

Revisions must be 40-hex commits; a branch name is a moving target. Tokens are never
put into messages (:mod:`qualify.util.redact`).

Which hub answered is part of what a proof proves: ``HF_ENDPOINT`` may name a mirror or a
local server, whose metadata says whatever its operator wrote. :func:`normalize_endpoint` is
the one spelling of an endpoint that runs record and the release policy names (scheme and host
in lower case, no user-info, query or fragment: a token never reaches a record), and
:func:`run_endpoint` the endpoint this process's client asks.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from qualify.checkpoint.checksums import sha256_files
from qualify.core import Evidence
from qualify.errors import HubError, UsageError
from qualify.util.identifiers import is_commit
from qualify.util.records import record_dict
from qualify.util.redact import redact

_TRUE = {"1", "on", "yes", "true"}
ONLINE = "online"
CACHE_ONLY = "cache-only"
#: The public Hugging Face Hub, as :func:`normalize_endpoint` spells it (huggingface_hub's default endpoint).
DEFAULT_ENDPOINT = "https://huggingface.co"


def normalize_endpoint(url: str, what: str = "HF_ENDPOINT") -> str:
    """``url`` as runs record a hub endpoint: ``scheme://host[:port][/path]``, lower-case scheme and host, the
    default port, trailing slashes, user-info, query and fragment dropped (a credential there never reaches a
    report, a statement or a message).

    Raises:
        UsageError: not an http(s) URL with a host, naming ``what``.
    """
    try:
        parts = urlsplit(str(url).strip())
        port = parts.port
    except ValueError as exc:
        raise UsageError(f"{what} {redact(str(url))!r} is not a URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{what} {redact(str(url))!r} is not an http(s) URL naming a host")
    host = parts.hostname.lower()
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    if port is not None and port != (443 if scheme == "https" else 80):
        host = f"{host}:{port}"
    return f"{scheme}://{host}{parts.path.rstrip('/')}"


def run_endpoint(endpoint: str | None = None) -> str:
    """The hub endpoint this process's client asks, normalized: ``endpoint``, else ``HF_ENDPOINT`` as the
    environment says now, else huggingface_hub's (the public hub unless it was imported with another)."""
    from huggingface_hub import constants

    return normalize_endpoint(endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT or DEFAULT_ENDPOINT,
                              "the hub endpoint" if endpoint else "HF_ENDPOINT")


@dataclass(frozen=True)
class HubFile:
    """One file of a repository at a commit, as the hub describes it."""

    path: str
    size: int | None
    sha256: str | None  # the LFS object's sha256; None for files stored in git
    blob_id: str | None  # git blob sha1

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self)


@dataclass(frozen=True)
class HubAccess:
    """How this process reaches the hub, stated explicitly for the evidence."""

    mode: str  # ONLINE or CACHE_ONLY
    endpoint: str  # as the client is given it (it may carry credentials): never recorded or shown as such
    offline_env: bool  # HF_HUB_OFFLINE as the environment says now
    offline_at_import: bool  # as huggingface_hub read it when it was imported (what the client obeys)
    token_present: bool  # a token is configured; its value is never recorded
    cache_dir: str | None
    reason: str

    @property
    def name(self) -> str:
        """The endpoint as records and messages name it (:func:`normalize_endpoint`)."""
        return normalize_endpoint(self.endpoint)

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "endpoint": self.name, "offline_env": self.offline_env,
                "offline_at_import": self.offline_at_import, "token_present": self.token_present,
                "cache_dir": self.cache_dir, "reason": self.reason}


@dataclass
class RepoRevision:
    """A repository at a commit, with the hub's per-file metadata (online) or none (cache-only)."""

    repo: str
    revision: str
    commit: str
    access: HubAccess
    files: dict[str, HubFile] = field(default_factory=dict)
    local_path: Path | None = None


def _is_true(value: str | None) -> bool:
    return (value or "").strip().lower() in _TRUE


def hub_access(*, endpoint: str | None = None, cache_dir: Path | None = None) -> HubAccess:
    """Decide online or cache-only from HF_HUB_OFFLINE now *and* at import, and say why."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_token

    env_offline = _is_true(os.environ.get("HF_HUB_OFFLINE")) or _is_true(os.environ.get("TRANSFORMERS_OFFLINE"))
    import_offline = bool(constants.HF_HUB_OFFLINE)
    url = (endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
    # A malformed endpoint is refused here, before the client is given it.
    named = normalize_endpoint(url, "the hub endpoint" if endpoint else "HF_ENDPOINT")
    if env_offline and import_offline:
        mode, reason = CACHE_ONLY, "HF_HUB_OFFLINE is set: the hub is not consulted"
    elif import_offline:
        mode, reason = CACHE_ONLY, ("huggingface_hub was imported with HF_HUB_OFFLINE set (it reads it once, at "
                                    "import) and refuses every request in this process: the hub is not consulted")
    elif env_offline:
        mode, reason = CACHE_ONLY, ("HF_HUB_OFFLINE was set after huggingface_hub was imported; the harness honours "
                                    "it: the hub is not consulted")
    else:
        mode, reason = ONLINE, f"online: metadata and files come from {named}"
    return HubAccess(mode=mode, endpoint=url, offline_env=env_offline, offline_at_import=import_offline,
                     token_present=bool(get_token()), cache_dir=str(cache_dir) if cache_dir else None,
                     reason=reason)


def require_commit(revision: str | None, what: str) -> str:
    if not revision or not is_commit(revision):
        raise UsageError(f"{what} revision {revision!r} is not an immutable commit (40 lowercase hex); a branch or "
                         "tag can move")
    return revision


def _hub_error(exc: Exception, repo: str, revision: str, access: HubAccess) -> HubError:
    from huggingface_hub.errors import (
        GatedRepoError,
        OfflineModeIsEnabled,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    first = redact(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
    if isinstance(exc, RevisionNotFoundError):
        return HubError(f"{repo}: revision {revision} does not exist on {access.name} (deleted or force-pushed "
                        "away?)")
    if isinstance(exc, GatedRepoError):
        return HubError(f"{repo}: gated; the configured token has no access ({first})")
    if isinstance(exc, RepositoryNotFoundError):
        return HubError(f"{repo}: repository not found on {access.name}, or private and no valid token ({first})")
    if isinstance(exc, RemoteEntryNotFoundError):
        return HubError(f"{repo}@{revision}: a file is missing on the hub ({first})")
    if isinstance(exc, OfflineModeIsEnabled):
        err = HubError(f"{repo}@{revision}: huggingface_hub is in offline mode in this process ({first})")
        err.unreachable = True
        return err
    err = HubError(f"{repo}@{revision}: the hub at {access.name} could not be reached or answered an error "
                    f"({type(exc).__name__}: {first}); not falling back to the cache silently (set "
                    "HF_HUB_OFFLINE=1 to work from the cache, and the evidence will say cache-only)")
    # An HTTP error other than the ones above (a 5xx, a proxy's 403) is no answer about the repository either.
    err.unreachable = True
    return err


def resolve(repo: str, revision: str, *, access: HubAccess, token: str | bool | None = None,
            timeout: float | None = None) -> RepoRevision:
    """The hub's metadata of ``repo`` at commit ``revision`` (every file's size, LFS sha256, blob id). Online only.

    ``timeout`` (seconds) bounds the request where the answer is optional (a revision check that
    records "not verified" when the hub does not answer); None is huggingface_hub's default.
    """
    from huggingface_hub import HfApi

    require_commit(revision, repo)
    if access.mode != ONLINE:
        raise HubError(f"{repo}@{revision}: cannot ask the hub for checksums: {access.reason}")
    api = HfApi(endpoint=access.endpoint, token=token)
    try:
        info = api.model_info(repo, revision=revision, files_metadata=True, timeout=timeout)
    except Exception as exc:
        raise _hub_error(exc, repo, revision, access) from None
    if info.sha != revision:
        raise HubError(f"{repo}: asked for commit {revision}, the hub answered for {info.sha}")
    files = {
        s.rfilename: HubFile(s.rfilename, s.size, s.lfs.sha256 if s.lfs else None, s.blob_id)
        for s in info.siblings or []
    }
    return RepoRevision(repo, revision, info.sha, access, files)


def branch_head(repo: str, branch: str, *, access: HubAccess, token: str | bool | None = None) -> str:
    """The commit a branch points to now (to report that a branch moved past a pin); online only."""
    from huggingface_hub import HfApi

    try:
        info = HfApi(endpoint=access.endpoint, token=token).model_info(repo, revision=branch)
    except Exception as exc:
        raise _hub_error(exc, repo, branch, access) from None
    if not info.sha:
        raise HubError(f"{repo}: the hub did not say which commit {branch} is at")
    return info.sha


def download(
    repo: str,
    revision: str,
    *,
    access: HubAccess,
    allow_patterns: Sequence[str] | None = None,
    cache_dir: Path | None = None,
    token: str | bool | None = None,
) -> Path:
    """The local snapshot folder of ``repo`` at commit ``revision``: downloaded (online) or from the cache."""
    from huggingface_hub import snapshot_download

    require_commit(revision, repo)
    try:
        path = snapshot_download(
            repo, revision=revision, cache_dir=str(cache_dir) if cache_dir else None,
            allow_patterns=list(allow_patterns) if allow_patterns else None, endpoint=access.endpoint,
            token=token, local_files_only=access.mode != ONLINE,
        )
    except Exception as exc:
        if access.mode != ONLINE:
            raise HubError(f"{repo}@{revision} is not (completely) in the local cache, and the hub is not consulted "
                           f"({access.reason}): {redact(str(exc).strip().splitlines()[0])}") from None
        raise _hub_error(exc, repo, revision, access) from None
    return Path(path)


def git_blob_sha1(path: Path) -> str:
    """The git blob id of a file (what the hub reports for files not stored in LFS)."""
    h = hashlib.sha1(usedforsecurity=False)
    h.update(b"blob %d\0" % path.stat().st_size)
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_revision(
    rev: RepoRevision,
    expected: Mapping[str, tuple[str, int]],
    *,
    local_root: Path | None,
    what: str,
) -> Evidence:
    """The files at ``rev`` are exactly the manifest's ``expected`` {path: (sha256, size)}.

    Online: the hub's sizes and LFS sha256 must equal the manifest's, files stored in git
    must have the blob id of the local copy, and no load-relevant file may be on the hub
    but missing from the manifest. Always: every local file's streamed sha256 and size
    must equal the manifest's.
    """
    access = rev.access
    ev = Evidence(f"{what} {rev.repo}@{rev.commit} ({access.mode}) has the manifest's files and checksums")
    ev.measured.update(repo=rev.repo, revision=rev.revision, commit=rev.commit, access=access.to_dict(),
                       hub_files=[f.to_dict() for f in rev.files.values()],
                       local_path=str(local_root) if local_root else None)
    ev.expected["files"] = [{"path": p, "sha256": s, "size": n} for p, (s, n) in sorted(expected.items())]
    if access.mode != ONLINE:
        ev.measured["hub_consulted"] = False
        ev.summary += ": cache-only, the hub's checksums were not consulted"
    if not expected:
        ev.add("the manifest lists no files to compare")
        return ev
    if access.mode == ONLINE:
        if not rev.files:
            ev.add("the hub lists no files at this revision")
        for path, (sha, size) in sorted(expected.items()):
            hub = rev.files.get(path)
            if hub is None:
                ev.add(f"missing on the hub at {rev.commit}", file=path)
                continue
            if hub.size is not None and hub.size != size:
                ev.add(f"the hub's size {hub.size} differs from the manifest's {size}", file=path)
            if hub.sha256 is not None and hub.sha256 != sha:
                ev.add(f"the hub's LFS sha256 {hub.sha256} differs from the manifest's {sha}", file=path)
            elif hub.sha256 is None and local_root is not None and (local_root / path).is_file():
                blob = git_blob_sha1(local_root / path)
                if hub.blob_id and blob != hub.blob_id:
                    ev.add(f"the hub's git blob id {hub.blob_id} differs from the local copy's {blob}", file=path)
        for path in sorted(set(rev.files) - set(expected)):
            if path.endswith((".safetensors", ".json")):
                ev.add("on the hub but not in the manifest (it would be loaded unchecked)", file=path)
    if local_root is not None:
        present = [p for p in sorted(expected) if (local_root / p).is_file()]
        for path in sorted(set(expected) - set(present)):
            ev.add(f"missing from the local snapshot {local_root}", file=path)
        digests = sha256_files([local_root / p for p in present], labels=present)
        for path in present:
            sha, size = expected[path]
            actual_size = (local_root / path).stat().st_size
            if actual_size != size:
                ev.add(f"local size {actual_size} differs from the manifest's {size}", file=path)
            elif digests[local_root / path] != sha:
                ev.add(f"local sha256 {digests[local_root / path]} differs from the manifest's {sha}", file=path)
        ev.measured["local_sha256"] = {p: digests[local_root / p] for p in present}
    elif access.mode != ONLINE:
        ev.add("cache-only and no local snapshot: nothing was compared")
    return ev


def fetch_and_check(
    repo: str,
    revision: str,
    expected: Mapping[str, tuple[str, int]],
    *,
    what: str,
    endpoint: str | None = None,
    cache_dir: Path | None = None,
    allow_patterns: Sequence[str] | None = None,
    token: str | bool | None = None,
) -> tuple[Evidence, RepoRevision | None]:
    """Resolve (online), download, and check ``repo`` at ``revision`` against ``expected``; never raises HubError."""
    access = hub_access(endpoint=endpoint, cache_dir=cache_dir)
    try:
        require_commit(revision, what)
        if access.mode == ONLINE:
            rev = resolve(repo, revision, access=access, token=token)
        else:
            rev = RepoRevision(repo, revision, revision, access)
        rev.local_path = download(repo, revision, access=access, allow_patterns=allow_patterns, cache_dir=cache_dir,
                                  token=token)
    except (HubError, UsageError) as exc:
        ev = Evidence(f"{what} {repo}@{revision} ({access.mode}) has the manifest's files and checksums")
        ev.measured["access"] = access.to_dict()
        ev.add(str(exc))
        return ev, None
    return check_revision(rev, expected, local_root=rev.local_path, what=what), rev
