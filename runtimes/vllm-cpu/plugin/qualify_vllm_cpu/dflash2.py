"""DFlash 2's candidate head on vLLM 0.32's CPU (V1) runner, with vLLM's own model code.

vLLM 0.32 serves a DFlash 2 draft only in the V2 runner (``DFlash2Speculator``), which needs
Triton on a GPU; the V1 runner, the only one the CPU build has, refuses it ("Model Runner V1
does not support: DFlash candidate-head drafts") because its ``DFlashProposer`` would draft
with the plain DFlash head and silently ignore the candidate head. Two changes serve it:

1. ``dflash2-v1-allowed``: the refusal is dropped for a ``DFlash2DraftModel`` draft alone
   (a LiLiCorr draft, the other candidate-head architecture, is still refused).
2. ``dflash2-candidate-head``: ``DFlashProposer`` drafts a DFlash 2 model as
   ``DFlash2Speculator._generate_draft`` does: the draft model's forward is DFlash's (the
   grouped convolutions run inside it, by ``_grouped_conv``'s PyTorch path on CPU), then on
   the hidden states of the sampled positions vLLM's own ``compute_candidates`` (top-k
   candidates and unary logits) and ``candidate_selector`` (pairwise scores, the anchor being
   each request's first query token, as the V2 speculator reads it), then the walk of
   :mod:`qualify_vllm_cpu.candidate_walk`, held bit for bit to vLLM's ``_selector_walk_kernel``
   at temperature 0 (tests/runtime/test_dflash2_kernels.py). A DFlash (1) draft keeps vLLM's path.

Temperature > 0: the V2 runner samples the walk with Gumbel noise and caches the draft logits
for probabilistic rejection; here every request drafts the temperature-0 walk and hands the
rejection sampler no draft probabilities, which vLLM's V1 rejection sampler treats as a
one-hot proposal (still lossless; the acceptance at temperature > 0 may differ from the GPU's).

Every internal relied on is checked first, by name, signature and the source lines the change
depends on; one that moved raises ``PluginError`` naming it.
"""

from __future__ import annotations

import inspect
from typing import Any

from qualify_vllm_cpu.candidate_walk import candidate_walk

#: The refusal lifted, word for word as vLLM 0.32 appends it.
REFUSAL = "DFlash candidate-head drafts"
#: The draft architecture served; the refusal stays for the others it covers.
ARCHITECTURE = "DFlash2DraftModel"
_MARK = "__qualify_vllm_cpu__"


def _source(obj: Any, qualname: str, moved: Any) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError) as exc:
        raise moved(qualname, f"has changed (its source cannot be read: {exc})") from exc


def _check_params(obj: Any, qualname: str, expected: tuple[str, ...], moved: Any) -> None:
    params = tuple(inspect.signature(obj).parameters)
    if params != expected:
        raise moved(qualname, f"takes ({', '.join(params)}), not ({', '.join(expected)})")


def _check_lines(obj: Any, qualname: str, lines: tuple[str, ...], moved: Any) -> None:
    text = _source(obj, qualname, moved)
    for line in lines:
        if line not in text:
            raise moved(qualname, f"has changed (no longer contains {line!r})")


def allow_dflash2_on_v1(require: Any, require_attr: Any, moved: Any) -> str:
    """Drop the V1 runner's "DFlash candidate-head drafts" refusal for a DFlash 2 draft alone."""
    done = f"dflash2-v1-allowed: the V1 runner's {REFUSAL!r} refusal lifted for {ARCHITECTURE} alone"
    config = require("vllm.config.vllm", "VllmConfig")
    qualname = "vllm.config.vllm.VllmConfig._get_v1_model_runner_unsupported_features"
    original = require_attr(config, "_get_v1_model_runner_unsupported_features", qualname)
    if getattr(original, _MARK, False):
        return done
    _check_params(original, qualname, ("self",), moved)
    _check_lines(original, qualname, ("if self._is_dflash_candidate_draft():", f'unsupported.append("{REFUSAL}")'),
                 moved)
    require_attr(config, "_is_dflash_candidate_draft", "vllm.config.vllm.VllmConfig._is_dflash_candidate_draft")

    def _get_v1_model_runner_unsupported_features(self: Any) -> list[str]:
        unsupported: list[str] = original(self)
        spec = self.speculative_config
        draft = getattr(spec, "draft_model_config", None) if spec is not None else None
        if REFUSAL in unsupported and list(getattr(draft, "architectures", None) or []) == [ARCHITECTURE]:
            unsupported.remove(REFUSAL)
        return unsupported

    setattr(_get_v1_model_runner_unsupported_features, _MARK, True)
    config._get_v1_model_runner_unsupported_features = _get_v1_model_runner_unsupported_features
    return done


def serve_dflash2_candidate_head(require: Any, require_attr: Any, moved: Any) -> str:
    """Make ``DFlashProposer`` draft a DFlash 2 model through its candidate head (see the module's docstring)."""
    done = ("dflash2-candidate-head: DFlash 2 drafts through vLLM's compute_candidates and candidate_selector "
            "and the temperature-0 candidate walk")
    base_name = "vllm.v1.spec_decode.llm_base_proposer.SpecDecodeBaseProposer"
    base = require("vllm.v1.spec_decode.llm_base_proposer", "SpecDecodeBaseProposer")
    proposer = require("vllm.v1.spec_decode.dflash", "DFlashProposer")
    models = "vllm.model_executor.models.qwen3_dflash2"
    model_cls = require(models, "DFlash2Qwen3ForCausalLM")
    selector = require(models, "CandidateSelector")
    current = vars(proposer).get("_sample_draft_tokens")
    if current is not None and getattr(current, _MARK, False):
        return done
    if current is not None:
        raise moved("vllm.v1.spec_decode.dflash.DFlashProposer._sample_draft_tokens",
                    "exists (DFlashProposer now drafts its own way)")
    original = require_attr(base, "_sample_draft_tokens", f"{base_name}._sample_draft_tokens")
    _check_params(original, f"{base_name}._sample_draft_tokens", ("self", "hidden_states", "sampling_metadata"), moved)
    _check_lines(require_attr(base, "propose", f"{base_name}.propose"), f"{base_name}.propose",
                 ("sample_hidden_states = last_hidden_states[token_indices_to_sample]",
                  "self._sample_draft_tokens(\n                sample_hidden_states, sampling_metadata"), moved)
    # The anchors are read where DFlash's input kernel writes each request's [next token, mask, ...] queries.
    inputs_name = "vllm.v1.spec_decode.dflash.DFlashProposer.set_inputs_first_pass"
    _check_lines(require_attr(proposer, "set_inputs_first_pass", inputs_name), inputs_name,
                 ("out_input_ids_ptr=self.input_ids,", "num_query_per_req = 1 + self.num_speculative_tokens"), moved)
    _check_params(require_attr(model_cls, "compute_candidates", f"{models}.DFlash2Qwen3ForCausalLM.compute_candidates"),
                  f"{models}.DFlash2Qwen3ForCausalLM.compute_candidates", ("self", "hidden_states"), moved)
    _check_params(require_attr(selector, "forward", f"{models}.CandidateSelector.forward"),
                  f"{models}.CandidateSelector.forward",
                  ("self", "candidate_ids", "unary_logits", "hidden_states", "anchor_token_ids"), moved)
    logger = require("vllm.logger", "init_logger")("vllm.qualify_vllm_cpu")

    def _sample_draft_tokens(self: Any, hidden_states: Any, sampling_metadata: Any) -> tuple[Any, None]:
        model = self.model.unwrap() if hasattr(self.model, "unwrap") else self.model
        if not isinstance(model, model_cls):
            return original(self, hidden_states, sampling_metadata)  # type: ignore[no-any-return]
        steps = self.num_speculative_tokens
        num_reqs = hidden_states.shape[0] // steps
        per_req = 1 + steps
        # The V2 speculator's anchors: each request's first query token (the token the target just sampled).
        anchors = self.input_ids[: num_reqs * per_req : per_req]
        candidate_ids, unary_logits = model.compute_candidates(hidden_states)
        top_k = candidate_ids.shape[-1]
        candidate_ids = candidate_ids.view(num_reqs, steps, top_k)
        scores = model.model.candidate_selector(candidate_ids, unary_logits.view_as(candidate_ids),
                                                hidden_states.view(num_reqs, steps, -1), anchors)
        tokens, _ = candidate_walk(scores, candidate_ids)
        if not getattr(self, "_qualify_dflash2_logged", False):
            self._qualify_dflash2_logged = True
            logger.warning("qualify-vllm-cpu: DFlash 2 candidate head drafting (vLLM's compute_candidates and "
                           "candidate_selector, temperature-0 candidate walk; top_k=%d, steps=%d)", top_k, steps)
        return tokens.view(-1), None

    setattr(_sample_draft_tokens, _MARK, True)
    proposer._sample_draft_tokens = _sample_draft_tokens
    return done


__all__ = ["ARCHITECTURE", "REFUSAL", "allow_dflash2_on_v1", "serve_dflash2_candidate_head"]
