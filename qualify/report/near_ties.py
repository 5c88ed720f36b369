"""The near-ties a losslessness check allowed, in words for the report and the card.

A divergence between the speculative and the reference greedy output passes only where the
target alone's own log-probabilities of the two tokens lie within the profile's tolerance; a
reader must see each one with both values to judge what "lossless" allowed. Everything is read
from a report, so each value is checked and every name escaped.
"""

from __future__ import annotations

from typing import Any

from qualify.report.model import Check
from qualify.util.escape import escape_markdown


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def near_tie_items(check: Check | None) -> list[str]:
    """Each near-tie the check listed, with both log-probabilities in the target alone (malformed entries left out)."""
    ties = check.evidence.measured.get("near_ties") if check is not None and check.evidence is not None else None
    out = []
    for t in ties if isinstance(ties, list) else []:
        if not isinstance(t, dict) or not all(_number(t.get(k)) for k in ("speculative_logprob", "reference_logprob")):
            continue
        prompt, at, spec, ref = (escape_markdown(str(t.get(k))) for k in ("prompt", "position", "speculative_token",
                                                                         "reference_token"))
        out.append(f"prompt {prompt} at output token {at}: token {spec} ({t['speculative_logprob']:.4f}) against the "
                   f"target's {ref} ({t['reference_logprob']:.4f})")
    return out


def tolerance_words(check: Check | None) -> str:
    """`` (within T nats)`` as the check states its tolerance, or nothing."""
    tolerance = check.evidence.expected.get("near_tie_tolerance") if check and check.evidence else None
    return f" (within {tolerance:g} nats)" if _number(tolerance) else ""


def near_tie_note(check: Check | None) -> str | None:
    """The card's sentence listing a passed losslessness check's near-ties; None when it allowed none."""
    items = near_tie_items(check)
    if not items:
        return None
    return (f"Greedy outputs with the speculator differ from the target alone's only at {len(items)} near-tie"
            f"{'s' if len(items) != 1 else ''} of the target's own distribution{tolerance_words(check)}, "
            f"log-probabilities in the target alone: {'; '.join(items)}.")


__all__ = ["near_tie_items", "near_tie_note", "tolerance_words"]
