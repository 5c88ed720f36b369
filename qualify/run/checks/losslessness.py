"""Level "losslessness": greedy output with the speculator equals the target's own greedy output."""

from __future__ import annotations

from typing import Any

from qualify import errors
from qualify.core import Evidence
from qualify.profile import AcceptanceSpec, LosslessnessSpec
from qualify.serving import client as serving
from qualify.serving import prompt_sets as ps
from qualify.serving.specdecode import OutputPair, losslessness_evidence


def greedy_identical(openai_client: Any, endpoint: str, reference_endpoint: str, served_model: str,
                     prompt_set: ps.PromptSet, losslessness_spec: LosslessnessSpec,
                     acceptance_spec: AcceptanceSpec, server_info: dict[str, Any]) -> Evidence:
    """Every prompt at temperature 0 on the speculative server and on the reference; the outputs paired by prompt."""
    timeout = acceptance_spec.request_timeout_s
    reference = serving.make_client(reference_endpoint)
    spec_out, spec_fail = serving.greedy_outputs(openai_client, served_model, prompt_set.prompts,
                                                 max_tokens=losslessness_spec.max_tokens, timeout_s=timeout)
    ref_out, ref_fail = serving.greedy_outputs(reference, served_model, prompt_set.prompts,
                                               max_tokens=losslessness_spec.max_tokens, timeout_s=timeout)
    pairs = [
        OutputPair(p.id, p.category, spec_out[p.id].token_ids if p.id in spec_out else None,
                      ref_out[p.id].token_ids if p.id in ref_out else None)
        for p in prompt_set.prompts
    ]
    extra = {"prompt_set": prompt_set.identity(), "server": server_info,
             "reference": {"endpoint": reference_endpoint, "version": _version(reference_endpoint)}}
    return losslessness_evidence(pairs, min_identical_fraction=losslessness_spec.min_identical_fraction,
                                    max_tokens=losslessness_spec.max_tokens,
                                    failures=[f"speculative: {f}" for f in spec_fail] +
                                             [f"reference: {f}" for f in ref_fail],
                                    extra_measured=extra)


def _version(url: str) -> dict[str, Any]:
    try:
        return serving.fetch_version(url)
    except errors.ServingError as exc:
        return {"error": str(exc)}
