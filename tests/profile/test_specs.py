"""Tests for qualify.profile.specs: the typed specs a profile is parsed into, the seed's values and the
defaults of unstated keys."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from qualify.profile import FormatSpec, Profile, load_profile
from tests.profile.support import (
    GPU_NAME,
    PAIRED,
    SEED_DOCKER_FLAGS,
    SEED_ENV,
    SEED_IMAGE,
    SOURCE_REV,
    TARGET_REV,
    no_paired,
    profile_error,
    write_variant,
)


def test_scale_recipe_when_stated(tmp_path: Path, fixture_text: str) -> None:
    stated = write_variant(
        tmp_path, fixture_text, "block_size = 32", 'block_size = 32\nscale_recipe = "modelopt"'
    )
    assert load_profile(stated).format.scale_recipe == "modelopt"
    wrong = write_variant(tmp_path, fixture_text, "block_size = 32", 'block_size = 32\nscale_recipe = "ceil"')
    assert "$.format.scale_recipe: 'ceil' is not one of" in profile_error(wrong)


def test_throughput_request_timeout(tmp_path: Path, fixture_text: str) -> None:
    spec = load_profile("fixture").throughput
    assert spec is not None and spec.request_timeout_s == 120.0  # unstated: the library's default
    stated = write_variant(tmp_path, fixture_text, "rounds = 1\n", "rounds = 1\nrequest_timeout_s = 15\n")
    spec = load_profile(stated).throughput
    assert spec is not None and spec.request_timeout_s == 15.0
    zero = write_variant(tmp_path, fixture_text, "rounds = 1\n", "rounds = 1\nrequest_timeout_s = 0\n", "zero.toml")
    assert "$.throughput.request_timeout_s" in profile_error(zero)


def test_format_spec_is_the_seed_format(seed_profile: Profile) -> None:
    expected = FormatSpec(
        element_dtype="F8_E4M3",
        scale_dtype="U8",
        block_size=32,
        scale_layout="row-major-unswizzled",
        scale_recipe=None,
        excluded_modules=("lm_head",),
        kv_cache_quant_algo=None,
    )
    assert seed_profile.format == expected
    # The DFlash 2 fixture adds the module vLLM's DFlash 2 class builds unquantized; the card names lm_head only.
    assert load_profile("fixture").format == dataclasses.replace(
        expected, excluded_modules=("lm_head", "candidate_selector.hidden_projection"))
    fmt = seed_profile.data["format"]
    assert fmt["element_torch_dtype"] == "float8_e4m3fn"
    assert fmt["scale_torch_dtype"] == "uint8"
    assert fmt["scale_encoding"] == "biased-e8m0"
    assert fmt["block_axis"] == "input"
    with pytest.raises(dataclasses.FrozenInstanceError):
        seed_profile.format.block_size = 16  # type: ignore[misc]


def test_seed_profile_hard_values(seed_profile: Profile) -> None:
    d = seed_profile.data
    assert d["checkpoint"] == {"repo": "local-inference-lab/GLM-5.3-Flash-DFlash2-MXFP8", "revision": ""}
    assert d["source"] == {"repo": "incoai/GLM-5.3-Flash-DFlash2", "revision": SOURCE_REV}
    assert d["target"] == {"repo": "local-inference-lab/GLM-5.3-Flash-NVFP4", "revision": TARGET_REV}
    runtime = d["runtime"]
    assert runtime["image"] == SEED_IMAGE
    assert runtime["image_digest"] == ""
    assert {k: runtime[k] for k in SEED_DOCKER_FLAGS} == SEED_DOCKER_FLAGS
    assert runtime["endpoint"] == "http://127.0.0.1:8000/v1"
    assert runtime["served_model_name"] == "GLM-5.3-Flash-NVFP4"
    assert list(runtime["env"].items()) == list(SEED_ENV.items())  # same pairs, same order
    assert runtime["qualification_overrides"] == {"CUDAGRAPH_MODE": "NONE"}
    assert d["hardware"] == {"gpu_count": 4, "gpu_name": GPU_NAME}
    assert seed_profile.tensor_parallel_size == 4
    assert d["parallelism"] == {"tensor_parallel_size": 4, "decode_context_parallel_size": 1}
    assert d["dflash"] == {"proposal_length": 7, "kv_cache": "auto", "kv_cache_dtype": "BF16"}
    assert d["smoke"] == {"max_tokens": 32, "temperature": 0}
    assert seed_profile.required_levels == ("structure", "format", "reproduction", "load", "smoke", "acceptance",
                                            "paired", "losslessness")
    assert seed_profile.measured_levels == ("throughput", "speedup")
    assert not seed_profile.arms_side_by_side  # one GLM instance at a time on the four GPUs
    assert seed_profile.speedup is not None and seed_profile.speedup.as_published
    paired = seed_profile.paired
    assert paired is not None and (paired.margin, paired.concurrency, paired.full_block) == (0.02, (1, 16), True)
    assert d["levels"]["not_qualified"] == ["runtime throughput", "CUDA graph performance"]

    assert seed_profile.conditions() == {
        "source": {"repo": "incoai/GLM-5.3-Flash-DFlash2", "revision": "dc77ff1c99eeb2df044ee3d4f0094eb033fee410"},
        "format": {
            "element_dtype": "float8_e4m3fn",
            "scale_dtype": "uint8",
            "block_size": 32,
            "scale_layout": "row-major-unswizzled",
            "scale_recipe": None,
            "excluded_modules": ["lm_head"],
            "kv_cache_quant_algo": None,
        },
        "target": {"repo": "local-inference-lab/GLM-5.3-Flash-NVFP4", "revision": TARGET_REV},
        "runtime": {"image": SEED_IMAGE, "digest": None},
        "hardware": {"count": 4, "name": GPU_NAME},
        "parallelism": {"tensor_parallel_size": 4, "decode_context_parallel_size": 1},
        "backends": {
            "target_attention": "B12X",
            "target_moe": "B12X",
            "target_linear": "B12X",
            "target_all_reduce": "B12X",
            "dflash_attention": "FlashAttention 2",
            "dflash_linear": "B12X MXFP8",
        },
        "proposal_length": 7,
        "draft_kv_cache": "auto (BF16)",
        "cuda_graph_mode": "NONE",
        "serving_cuda_graph_mode": "FULL",
        "not_qualified": ["runtime throughput", "CUDA graph performance"],
        "stand_in_levels": [],
    }


def test_seed_profile_evidence(seed_profile: Profile) -> None:
    evidence = {e["name"]: e for e in seed_profile.data["evidence"]}
    assert set(evidence) == {
        "dflash_speculative_config",
        "dflash2_draft_architecture",
        "b12x_mxfp8_linear_kernel_draft_gemms",
        "b12x_mxfp8_linear_kernel_context_kv_proj",
        "draft_weights_loaded",
        "speculative_request_completed",
    }
    weights = evidence["draft_weights_loaded"]
    # Judged against the pinned draft's own bytes in vLLM's unit; the card's figure is only reported.
    assert weights["checkpoint_size"] is True and "expected_gb" not in weights
    assert weights["card_size"] == "1.20 GB"
    assert evidence["speculative_request_completed"]["level"] == "smoke"

    # Plausible log lines each pattern must find, and one line none may find. The exact
    # wording is not in the seed; these guard against patterns that match nothing or everything.
    samples = {
        "dflash_speculative_config": (
            "INFO [vllm.py:2706] Initializing a V1 LLM engine (v0.32.0) with config: speculative_config="
            "SpeculativeConfig(method='dflash', model='/models/draft', num_spec_tokens=7)"
        ),
        "dflash2_draft_architecture": "INFO [model.py:733] Resolved architecture: DFlash2DraftModel",
        "b12x_mxfp8_linear_kernel_draft_gemms": (
            "INFO [__init__.py:982] Using B12xMxfp8LinearKernel for MXFP8 GEMM"
        ),
        "b12x_mxfp8_linear_kernel_context_kv_proj": (
            "INFO [dflash.py:51] Using B12xMxfp8LinearKernel for fused DFlash context_kv_proj"
        ),
        "draft_weights_loaded": (
            "INFO [weight_utils.py:1108] Filesystem type for checkpoints: EXT4. Checkpoint size: 1.20 GiB. "
            "Available RAM: 500.00 GiB."
        ),
        "speculative_request_completed": (
            "INFO [metrics.py:90] SpecDecoding metrics: Mean acceptance length: 3.10, "
            "Accepted: 22 tokens, Drafted: 49 tokens"
        ),
    }
    unrelated = "INFO [api_server.py:1] Starting vLLM API server on http://127.0.0.1:8000"
    for name, line in samples.items():
        pattern = re.compile(evidence[name]["pattern"])
        assert pattern.search(line), name
        assert not pattern.search(unrelated), name
    match = re.search(weights["pattern"], samples["draft_weights_loaded"])
    assert match is not None and match.group("gb") == "1.20"



def test_paired_table(tmp_path: Path, fixture_text: str) -> None:
    path = write_variant(tmp_path, no_paired(fixture_text), "[losslessness]", PAIRED + "\n[losslessness]")
    spec = load_profile(path).paired
    assert spec is not None
    assert spec.prompt_sets[0].path == (tmp_path / "sets" / "question.jsonl").resolve()
    assert [(s.format, s.limit) for s in spec.prompt_sets] == [("mt-bench", None), ("qualify", 5)]
    # Unstated: batch 1 and the runtime's MAX_NUM_SEQS; the interval's defaults; no full-block rule.
    assert spec.concurrency == (1, 4)
    assert (spec.confidence, spec.bootstrap_resamples, spec.bootstrap_seed, spec.full_block) == (0.95, 2000, 0, False)
    assert spec.margin == 0.02 and spec.source_endpoint is None
