"""Which hub proved a revision, and whether the release policy lets that hub prove anything.

A run proves revisions by a hub's per-file metadata: the draft's (``revision_verified_by``), the
source's (``source.identity``), a mounted target snapshot's (``environment.target_identity``).
The hub client follows ``HF_ENDPOINT``, so "the hub" is whatever answered there: a mirror, or a
local server answering with a folder's own digests. The run records the endpoint it asked (the
report's ``environment.hub_endpoint``, the statement's ``hubEndpoint`` annotations); the gate
accepts a hub's proof only from an endpoint the release policy names (``hub_endpoints``). From any
other, what it "verified" is only claimed, and the refusal names the endpoint that answered.

Pure: records in, (what was proven, by which endpoint) and reasons out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from qualify.checkpoint.identity import HUB
from qualify.release.attestation import (
    DRAFT,
    HUB_ENDPOINT,
    HUB_ENDPOINT_KEY,
    SOURCE,
    TARGET,
    VERIFIED_BY_A_HUB,
    Attested,
)
from qualify.report.model import Run
from qualify.report.target import target_revision_record

#: A proof by a hub: what it proved, in words, and the endpoint that answered (None or junk: not recorded).
HubProof = tuple[str, object]


def by_a_hub(method: object) -> bool:
    """Whether a proof method rests on a hub's answer: the draft's :data:`VERIFIED_BY_A_HUB`, or an identity
    method that compared files with the hub ("hub", "hub cache snapshot and hub")."""
    return isinstance(method, str) and (method in VERIFIED_BY_A_HUB or method == HUB or method.endswith(f" {HUB}"))


def hub_refusals(proofs: Sequence[HubProof], allowed: Sequence[str]) -> list[str]:
    """Each proof whose endpoint is not one of ``allowed`` (the release policy's ``hub_endpoints``): a mirror
    or a local server proves nothing, so what it "verified" is only claimed."""
    out = []
    for what, endpoint in proofs:
        if endpoint in allowed:
            continue
        said = f"the hub at {endpoint}" if isinstance(endpoint, str) and endpoint else "a hub the run did not name"
        out.append(f"{what} was verified by {said}, which the release policy does not name "
                   f"({', '.join(allowed)}): a mirror or a local server answers with whatever its operator wrote, so "
                   "it is only claimed; run again with HF_ENDPOINT unset or set to a hub the policy names, or pin the "
                   "digests in the profile")
    return out


def report_hub_proofs(run: Run, revision: str | None) -> list[HubProof]:
    """The report's proofs that rest on a hub's answer, with the endpoint that gave each. The draft's counts
    only where it is the ``revision`` being released (the gate ignores a draft revision it is not asked about)."""
    endpoint = run.environment.get(HUB_ENDPOINT_KEY)
    proofs: list[HubProof] = []
    if (revision is not None and run.checkpoint.get("revision") == revision
            and by_a_hub(run.checkpoint.get("revision_verified_by"))):
        proofs.append((f"draft revision {revision}", endpoint))
    identity = run.source.get("identity")
    if isinstance(identity, Mapping) and identity.get("status") == "verified" and by_a_hub(identity.get("method")):
        proofs.append((f"the source {identity.get('repo')}@{identity.get('revision')}", endpoint))
    record = target_revision_record(run.environment)
    target = record.get("identity")
    if record["enforced"] and isinstance(target, Mapping) and by_a_hub(target.get("method")):
        proofs.append((f"the mounted target snapshot at revision {record['revision']}", target.get("hub_endpoint")))
    return proofs


def attested_hub_proofs(att: Attested, revision: str | None) -> list[HubProof]:
    """The verified statement's proofs that rest on a hub's answer, with the endpoint it names for each."""
    proofs: list[HubProof] = []
    if (revision is not None and att.annotation(DRAFT, "revision") == revision
            and by_a_hub(att.annotation(DRAFT, "revisionVerifiedBy"))):
        proofs.append((f"draft revision {revision}", att.annotation(DRAFT, HUB_ENDPOINT)))
    if att.annotation(SOURCE, "identity") == "verified" and by_a_hub(att.annotation(SOURCE, "method")):
        proofs.append((f"the source (commit {att.digest(SOURCE, 'gitCommit')})", att.annotation(SOURCE, HUB_ENDPOINT)))
    if att.target_enforced and by_a_hub(att.annotation(TARGET, "identity")):
        proofs.append((f"the mounted target snapshot at revision {att.digest(TARGET, 'gitCommit')}",
                       att.annotation(TARGET, "identityHubEndpoint")))
    return proofs


__all__ = ["HubProof", "attested_hub_proofs", "by_a_hub", "hub_refusals", "report_hub_proofs"]
