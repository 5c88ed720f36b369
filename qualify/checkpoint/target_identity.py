"""Target identity: proof that a mounted target snapshot *is* ``[target].revision``, as the source is proven.

``qualify run --target-snapshot`` mounts a hub-cache snapshot of the target with the hub
offline, so the runtime loads exactly that folder. Its layout (``models--ORG--NAME/snapshots/
<commit>``) is chosen by whoever wrote the cache: a folder holding one made-up ``config.json``
under the pinned commit's name is as well laid out as the real one. So the folder's files are
hashed (once, on threads, with the run's progress display: a target is tens of GB) and compared
with one of two things the snapshot did not write:

1. **The profile's pinned digests** (``[target.sha256]``: every file's sha256). When a profile
   pins them they decide.
2. **The hub's per-file metadata** at ``[target].revision`` (online): every file's LFS sha256,
   or git blob id for files kept in git, and every load-relevant file of the commit present. The
   endpoint that answered is recorded: only the hub a release policy names proves anything for
   the gate (a mirror or a local server answers with whatever its operator wrote).

Without either (offline, the hub unreachable, no pins) the revision is *only claimed*: the
report reads the launch as not holding the runtime to the target's revision
(:func:`qualify.report.target.target_revision_record`), and the gate refuses it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qualify.checkpoint.checksums import sha256_files
from qualify.checkpoint.identity import HUB, PROFILE_DIGESTS, hub_findings
from qualify.errors import HubError, UsageError
from qualify.util.records import record_dict

#: The largest number of findings a proof keeps: a wrong snapshot of a big target differs everywhere.
MAX_FINDINGS = 20


@dataclass(frozen=True)
class TargetProof:
    """What comparing a target snapshot's files with a pin found.

    Attributes:
        repo, revision: what the snapshot was to be proven to be (``[target]``).
        verified: every file matched the pin that applied, and one applied.
        method: :data:`~qualify.checkpoint.identity.PROFILE_DIGESTS` or :data:`~qualify.checkpoint.identity.HUB`;
            None when nothing was compared.
        hub_endpoint: the endpoint whose metadata was compared (normalized, no credentials); None otherwise.
        files, bytes: what was hashed.
        hash_seconds: how long hashing the snapshot took.
        findings: what differed ("path: why"), at most :data:`MAX_FINDINGS`.
        reason: what was compared with what, or why nothing was, in words.
    """

    repo: str
    revision: str
    verified: bool
    method: str | None
    hub_endpoint: str | None
    files: int
    bytes: int
    hash_seconds: float
    findings: tuple[str, ...]
    reason: str

    def to_dict(self) -> dict[str, Any]:
        out = record_dict(self)
        out["findings"] = list(self.findings)
        return out


def pinned_findings(digests: Mapping[str, str], pins: Mapping[str, str]) -> list[str]:
    """The snapshot's ``digests`` ({path: sha256}) against the profile's ``[target.sha256]``: exactly those files."""
    out = []
    for path, want in sorted(pins.items()):
        got = digests.get(path)
        if got is None:
            out.append(f"{path}: pinned by the profile ([target.sha256]) but missing from the target snapshot")
        elif got != want:
            out.append(f"{path}: sha256 is {got}, the profile pins {want}")
    for path in sorted(set(digests) - set(pins)):
        out.append(f"{path}: in the target snapshot but not pinned by the profile ([target.sha256]): it would be "
                   "loaded unverified")
    return out


def _compare_with_hub(root: Path, rels: list[str], digests: Mapping[str, str], repo: str, revision: str,
                      access: Any, token: str | bool | None, timeout: float | None) -> tuple[list[str], str] | str:
    """(findings, what was compared) against the hub's metadata; a string: why the hub gave no answer."""
    from qualify.checkpoint import hub

    try:
        rev = hub.resolve(repo, revision, access=access, token=token, timeout=timeout)
    except (HubError, UsageError) as exc:
        if getattr(exc, "unreachable", False):
            return f"the hub at {access.name} gave no answer ({exc})"
        # The hub answered, and what it said refutes the pin (no such revision or repository).
        return [str(exc)], f"the hub at {access.name} was asked for {repo} at {revision}"
    local = {}
    for rel in rels:
        known = rev.files.get(rel)
        # The git blob id is read only where the hub has no LFS sha256 for the file (configs, not weights).
        blob = hub.git_blob_sha1(root / rel) if known is not None and known.sha256 is None else ""
        local[rel] = (digests[rel], blob, (root / rel).stat().st_size)
    found = [f"{file}: {message}" if file else message
             for message, file in hub_findings(local, rev.files, rev.commit, folder="the target snapshot")]
    return found, (f"every file's sha256 (LFS) or git blob id was compared with the metadata of {repo} at "
                   f"{revision} on {access.name}, and every load-relevant file it lists was looked for")


def prove_target(
    root: Path,
    *,
    repo: str,
    revision: str,
    pins: Mapping[str, str],
    endpoint: str | None = None,
    token: str | bool | None = None,
    timeout: float | None = None,
    progress: bool | None = None,
) -> TargetProof:
    """Hash every file of the snapshot folder ``root`` once and compare it with ``pins`` or the hub's metadata.

    Args:
        root: the snapshot folder (``.../models--ORG--NAME/snapshots/<revision>``); its files are links that
            are followed.
        repo, revision: ``[target]``.
        pins: ``[target.sha256]``; when not empty they decide and the hub is not asked.
        endpoint: the hub to ask (default: ``HF_ENDPOINT``, else the public hub).
        token: passed to the hub client; never recorded.
        timeout: seconds the hub's answer is waited for (None: huggingface_hub's default).
        progress: the progress display (None: a bar on a terminal, a heartbeat line in a log).

    Raises:
        CheckpointError: a file of the snapshot cannot be read.
        UsageError: ``HF_ENDPOINT`` (or ``endpoint``) is not an http(s) URL.
    """
    from qualify.checkpoint import hub
    from qualify.checkpoint.files import list_checkpoint_files

    root = Path(root)
    rels = list_checkpoint_files(root)
    started = time.monotonic()
    hashed = sha256_files([root / r for r in rels], labels=rels, progress=progress)
    seconds = round(time.monotonic() - started, 3)
    digests = {r: hashed[root / r] for r in rels}
    size = sum((root / r).stat().st_size for r in rels)

    def proof(verified: bool, method: str | None, findings: list[str], reason: str,
              hub_endpoint: str | None = None) -> TargetProof:
        kept = findings[:MAX_FINDINGS] + ([f"and {len(findings) - MAX_FINDINGS} more"]
                                          if len(findings) > MAX_FINDINGS else [])
        return TargetProof(repo, revision, verified and not findings, method, hub_endpoint, len(rels), size, seconds,
                           tuple(kept), reason + ("" if method is None else (": they agree" if not findings
                                                                             else ": they differ")))

    if not rels:
        return proof(False, None, ["the target snapshot holds no file"], "nothing was compared: the snapshot is empty")
    if pins:
        return proof(True, PROFILE_DIGESTS, pinned_findings(digests, pins),
                     "every file's sha256 was compared with the profile's [target.sha256]")
    access = hub.hub_access(endpoint=endpoint)
    if access.mode != hub.ONLINE:
        return proof(False, None, [], f"only claimed: the profile pins no digests for the target ([target.sha256]) "
                     f"and the hub was not consulted ({access.reason}); a snapshot's folder names prove nothing")
    answer = _compare_with_hub(root, rels, digests, repo, revision, access, token, timeout)
    if isinstance(answer, str):
        return proof(False, None, [], f"only claimed: the profile pins no digests for the target ([target.sha256]) "
                     f"and {answer}; a snapshot's folder names prove nothing")
    findings, compared = answer
    return proof(True, HUB, findings, compared, hub_endpoint=access.name)


__all__ = ["MAX_FINDINGS", "TargetProof", "pinned_findings", "prove_target"]
