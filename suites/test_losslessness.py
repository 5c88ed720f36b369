"""Level "losslessness": greedy output with the speculator equals the target's own greedy output."""

from __future__ import annotations

import pytest

from qualify import errors
from qualify.serving import client as serving
from qualify.serving import specdecode as sd

pytestmark = pytest.mark.losslessness


def test_greedy_identical(openai_client, endpoint, reference_endpoint, served_model, prompt_set, losslessness_spec,
                          acceptance_spec, server_info, record):
    """Temperature-0 outputs of every prompt are token-identical with and without the speculator."""
    timeout = acceptance_spec.request_timeout_s
    reference = serving.make_client(reference_endpoint)
    spec_out, spec_fail = serving.greedy_outputs(openai_client, served_model, prompt_set.prompts,
                                                 max_tokens=losslessness_spec.max_tokens, timeout_s=timeout)
    ref_out, ref_fail = serving.greedy_outputs(reference, served_model, prompt_set.prompts,
                                               max_tokens=losslessness_spec.max_tokens, timeout_s=timeout)
    pairs = [
        sd.OutputPair(p.id, p.category, spec_out[p.id].token_ids if p.id in spec_out else None,
                      ref_out[p.id].token_ids if p.id in ref_out else None)
        for p in prompt_set.prompts
    ]
    extra = {"prompt_set": prompt_set.identity(), "server": server_info,
             "reference": {"endpoint": reference_endpoint, "version": _version(reference_endpoint)}}
    record(sd.losslessness_evidence(pairs, min_identical_fraction=losslessness_spec.min_identical_fraction,
                                    max_tokens=losslessness_spec.max_tokens,
                                    failures=[f"speculative: {f}" for f in spec_fail] +
                                             [f"reference: {f}" for f in ref_fail],
                                    extra_measured=extra))


def _version(url):
    try:
        return serving.fetch_version(url)
    except errors.ServingError as exc:
        return {"error": str(exc)}
