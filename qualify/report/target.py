"""Whether a run held its runtime to the target's pinned revision, as its report records it.

The launch plan decides it (:class:`qualify.runtime.plan.TargetPin`) and the report keeps it at
``environment.runtime.plan.target_revision_enforcement``. This module is the one reader of that
record, for report.md, the model card, the attestation and the gate: a record that is missing or
malformed reads as *not enforced*, never as enforced.

A pinned snapshot holds the runtime to whatever files the folder holds, and its folder names are
anyone's to choose; so it enforces the revision only where the run proved those files are the
revision (``environment.target_identity``: :class:`qualify.checkpoint.target_identity.TargetProof`,
by the profile's ``[target.sha256]`` or the hub's metadata). Unproven, the revision is only claimed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from qualify.core import LEVELS
from qualify.util.escape import escape_markdown

#: The levels whose verdict rests on what a runtime loaded: for them, which target it loaded matters.
RUNTIME_LEVELS: tuple[str, ...] = LEVELS[LEVELS.index("load"):]
#: What the record is read as when the run launched no runtime of its own.
NO_RUNTIME = ("this run launched no runtime (its serving levels, if any, talked to servers it was given), so "
              "nothing held the target to its revision")
NO_RECORD = "the run recorded no target revision enforcement"
#: The report's ``environment`` key of the mounted target snapshot's proof (run/pipeline.py writes it).
TARGET_IDENTITY_KEY = "target_identity"
#: How the plan enforced it (the values of qualify.runtime.plan.BY_LAUNCHER_ENV and BY_SNAPSHOT).
METHOD_WORDS = {"launcher-env": "by the launcher's revision variable",
                "pinned-snapshot": "by a pinned hub-cache snapshot mounted with the hub offline"}


def target_revision_record(environment: Mapping[str, Any] | None) -> dict[str, Any]:
    """The run's target revision enforcement: ``{"enforced", "revision", "method", "variable", "snapshot",
    "reason"}``. Fails closed: a run without a runtime record, or a record of another shape, is not enforced.

    Args:
        environment: the report's ``environment``.
    """
    runtime = (environment or {}).get("runtime")
    if not isinstance(runtime, Mapping):
        return _not_enforced(NO_RUNTIME)
    plan = runtime.get("plan")
    record = plan.get("target_revision_enforcement") if isinstance(plan, Mapping) else None
    if not isinstance(record, Mapping) or not isinstance(record.get("enforced"), bool):
        return _not_enforced(NO_RECORD)
    out = {"enforced": record["enforced"], "revision": record.get("revision"), "method": record.get("method"),
           "variable": record.get("variable"), "snapshot": record.get("snapshot"), "reason": record.get("reason")}
    if out["enforced"] and (not isinstance(out["revision"], str) or out["method"] not in METHOD_WORDS):
        return _not_enforced(f"the run's record says enforced but names no revision or method ({dict(record)})")
    if out["enforced"] and out["method"] == "pinned-snapshot":
        proof = (environment or {}).get(TARGET_IDENTITY_KEY)
        problem = snapshot_proof_problem(proof, out["revision"])
        if problem is not None:
            return _not_enforced(problem)
        assert isinstance(proof, Mapping)  # snapshot_proof_problem said it is one
        out["identity"] = {"method": proof.get("method"), "hub_endpoint": proof.get("hub_endpoint")}
    if not out["enforced"] and not out["reason"]:
        out["reason"] = "no reason recorded"
    return out


def snapshot_proof_problem(proof: object, revision: object) -> str | None:
    """Why a mounted target snapshot is not proven to be ``revision`` by ``proof`` (the report's
    ``environment.target_identity``), or None when it is."""
    if not isinstance(proof, Mapping):
        return (f"the mounted target snapshot is named revision {revision}, but the run recorded no proof that its "
                "files are that revision (a folder's name proves nothing)")
    if proof.get("revision") != revision:
        return (f"the mounted target snapshot's files were proven to be revision {proof.get('revision')!r}, not "
                f"{revision}")
    if proof.get("verified") is not True or not isinstance(proof.get("method"), str):
        findings = [str(f) for f in proof.get("findings") or []][:3]
        said = f" ({'; '.join(findings)})" if findings else ""
        return (f"the mounted target snapshot's files were not proven to be revision {revision}: "
                f"{proof.get('reason') or 'no reason recorded'}{said}; pin them in the profile ([target.sha256]) or "
                "let the run compare them with the hub's metadata (online)")
    return None


def _not_enforced(reason: str) -> dict[str, Any]:
    return {"enforced": False, "revision": None, "method": None, "variable": None, "snapshot": None,
            "reason": reason}


def enforcement_words(record: Mapping[str, Any]) -> str:
    """How the record's revision was enforced, in words (``MODEL_REVISION`` named where it was the variable)."""
    words = METHOD_WORDS.get(str(record.get("method")), str(record.get("method")))
    if record.get("method") == "launcher-env" and record.get("variable"):
        words += f" {record['variable']}"
    return words


def target_revision_note(environment: Mapping[str, Any] | None, runtime_levels_ran: bool) -> str | None:
    """report.md's and the card's warning when the target revision was not enforced; None when it was, or when
    no level the run required rests on a runtime (then the target played no part in the verdict).

    Args:
        environment: the report's ``environment``.
        runtime_levels_ran: whether the run required a level of :data:`RUNTIME_LEVELS`.
    """
    if not runtime_levels_ran:
        return None
    record = target_revision_record(environment)
    if record["enforced"]:
        return None
    return (f"**Target revision not enforced**: {escape_markdown(str(record['reason']))}. The target's revision "
            "is the profile's claim, not what the runtime was held to; qualify gate refuses such a run unless "
            "--accept-unpinned-target.")
