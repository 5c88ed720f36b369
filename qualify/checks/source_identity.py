"""The ``structure.source_identity`` check: is the local source folder the pinned source, and how do we know?

The proofs are :mod:`qualify.checkpoint.identity`'s; this module turns what they found into the
check's evidence and the report's ``source.identity`` record. A folder that no proof could
establish (a hub cache snapshot whose files were compared with no pinned digest and not with the
hub's metadata among them: its folder names prove nothing) fails, unless ``--trust-local-source``
says to go on, and then the evidence says "source identity not verified: trusted"; a folder a
proof refuted fails whatever was asked. The evidence always says what was and was not compared
(``reason``) and whether the hub was consulted (``hub_consulted``, and ``hub.reason`` when not).
"""

from __future__ import annotations

from pathlib import Path

from qualify.checkpoint.identity import SourcePins, identity_record, prove_source
from qualify.core import SOURCE_NOT_VERIFIED, Evidence

#: What a failing check tells the user to do.
HOW_TO_PROVE = ("pin its digests in the profile ([source] content_revision or [source.sha256]), let the run "
                "compare it with the hub's metadata at the pinned commit (online; a hub cache snapshot is no proof by "
                "itself), or pass --trust-local-source to go on without proof (the report and card then say so, and "
                "qualify gate refuses it)")


def check_source_identity(
    root: Path,
    *,
    repo: str | None,
    revision: str | None,
    pins: SourcePins,
    trust: bool = False,
    hub_endpoint: str | None = None,
    token: str | bool | None = None,
) -> Evidence:
    """The folder ``root`` is proven to be ``repo`` at ``revision``; the evidence says how, or that it is not.

    ``measured`` carries the report's record (:func:`~qualify.checkpoint.identity.identity_record`:
    status, method, the repository and revision proven), ``reason`` (what was and was not compared),
    ``hub_consulted`` (with ``hub.reason`` when it was not) and each proof's figures.

    Args:
        root: the local source folder (``--source``, or the hub snapshot the run downloaded).
        repo, revision: the profile's pinned source.
        pins: the profile's pinned digests.
        trust: ``--trust-local-source``: an identity no proof could establish passes, saying so.
        hub_endpoint, token: how to reach the hub (default: ``HF_ENDPOINT``, else the public hub).

    Raises:
        CheckpointError: a file of the folder cannot be read.
    """
    pinned = f"{repo or '(no repository)'} at {revision or '(no revision)'}"
    proof = prove_source(root, repo=repo, revision=revision, pins=pins, hub_endpoint=hub_endpoint, token=token)
    ev = Evidence(f"the source folder is proven to be {pinned}", measured=dict(proof.measured),
                  expected=dict(proof.expected))
    for message, file in proof.findings:
        ev.add(message, file=file)
    trusted = False
    if proof.verified:
        ev.summary += f" (verified by {proof.method})"
    elif not proof.ok:  # a proof applied and refuted the folder (or there was nothing to prove): never trusted
        ev.summary = (f"{SOURCE_NOT_VERIFIED}: the {proof.method} refute that the source folder is {pinned}"
                      if proof.method else f"{SOURCE_NOT_VERIFIED}: the source folder cannot be {pinned}")
    elif trust:
        trusted = True
        ev.summary = f"{SOURCE_NOT_VERIFIED}: trusted on --trust-local-source ({proof.reason})"
    else:
        ev.add(f"{SOURCE_NOT_VERIFIED}: {proof.reason}; {HOW_TO_PROVE}")
    ev.measured.update(identity_record(verified=proof.verified, trusted=trusted, method=proof.method, repo=repo,
                                       revision=revision), reason=proof.reason)
    return ev


__all__ = ["HOW_TO_PROVE", "check_source_identity"]
