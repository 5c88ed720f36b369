"""Level "losslessness": greedy output with the speculator equals the target's own, up to the target's near-ties."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from qualify import errors
from qualify.core import Evidence
from qualify.profile import LosslessnessSpec
from qualify.run.arms import ArmResult, required
from qualify.runtime.companions import CHECKPOINT, REFERENCE
from qualify.serving import client as serving
from qualify.serving import prompt_sets as ps
from qualify.serving.divergence import GreedyRun
from qualify.serving.specdecode import OutputPair, losslessness_evidence


def greedy_identical(losslessness_outputs: Mapping[str, ArmResult], prompt_set: ps.PromptSet,
                     losslessness_spec: LosslessnessSpec, server_info: dict[str, Any]) -> Evidence:
    """Every prompt at temperature 0 on the speculative arm and on the target alone; the outputs paired by prompt.

    Raises:
        RuntimeNotStarted: an arm did not serve (its reason).
    """
    sides = required(losslessness_outputs, (CHECKPOINT, REFERENCE))
    spec, ref = sides[CHECKPOINT], sides[REFERENCE]
    assert isinstance(spec, GreedyRun) and isinstance(ref, GreedyRun)
    pairs = [
        OutputPair(p.id, p.category, spec.outputs[p.id].token_ids if p.id in spec.outputs else None,
                   ref.outputs[p.id].token_ids if p.id in ref.outputs else None)
        for p in prompt_set.prompts
    ]
    reference_endpoint = str(losslessness_outputs[REFERENCE].endpoint)
    extra = {"prompt_set": prompt_set.identity(), "server": server_info,
             "reference": {"endpoint": reference_endpoint,
                           "version": dict(ref.version) if ref.version is not None else _version(reference_endpoint)}}
    return losslessness_evidence(pairs, near_tie_tolerance=losslessness_spec.near_tie_tolerance,
                                 near_tie_reason=losslessness_spec.near_tie_reason,
                                 max_tokens=losslessness_spec.max_tokens, lookups=ref.lookups,
                                 failures=[f"speculative: {f}" for f in spec.failures] +
                                          [f"reference: {f}" for f in ref.failures],
                                 extra_measured=extra)


def _version(url: str) -> dict[str, Any]:
    try:
        return serving.fetch_version(url)
    except errors.ServingError as exc:
        return {"error": str(exc)}
