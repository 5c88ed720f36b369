"""The DFlash 2 draft grafted onto the CPU DFlash draft (fixtures/dflash2_cpu.py) for the serving fixture's target.

Its DFlash weights are the trained draft's, its convolutions the identity, its selector's codebooks zero
(or random), its config a DFlash 2 draft of the target's vocabulary with the selector's projection left
unquantized. Served (the plugin's DFlash 2 proposer) the zero-selector graft drafted exactly what the
DFlash draft drafts (287 drafts, 219 accepted, the same completions, measured 2026-12-04).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from fixtures import dflash2_cpu


@pytest.fixture(scope="module")
def zero(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return dflash2_cpu.graft(tmp_path_factory.mktemp("graft") / "zero")


def test_the_graft_is_a_dflash2_draft_of_the_targets_vocabulary(zero: Path) -> None:
    config = json.loads((zero / "config.json").read_text(encoding="utf-8"))
    base = json.loads((dflash2_cpu.DFLASH_DRAFT / "config.json").read_text(encoding="utf-8"))
    assert config["architectures"] == ["DFlash2DraftModel"] and config["vocab_size"] == base["vocab_size"] == 512
    assert config["dflash_config"] == {**base["dflash_config"], **dflash2_cpu.HEAD}
    assert config["quantization_config"]["ignore"] == ["lm_head", "candidate_selector.hidden_projection"]
    quant = json.loads((zero / "hf_quant_config.json").read_text(encoding="utf-8"))
    assert quant["quantization"]["exclude_modules"] == ["lm_head", "candidate_selector.hidden_projection"]


def test_the_dflash_weights_are_kept_and_the_head_is_neutral(zero: Path) -> None:
    tensors = load_file(str(zero / "model.safetensors"))
    base = load_file(str(dflash2_cpu.DFLASH_DRAFT / "model.safetensors"))
    assert all(torch.equal(tensors[k].view(torch.uint8), v.view(torch.uint8)) for k, v in base.items())
    kernel = tensors["layers.1.mlp_conv.base_kernel"]
    assert kernel.shape == (2, 2, 256) and bool((kernel[:, 0] == 1).all()) and bool((kernel[:, 1] == 0).all())
    projection = tensors["layers.0.attention_conv.kernel_projection.weight"]
    assert projection.shape == (64, 256) and projection.dtype == torch.float8_e4m3fn
    assert not projection.view(torch.uint8).any()
    assert tensors["layers.0.attention_conv.kernel_projection.weight_scale"].shape == (64, 8)
    assert not tensors["candidate_selector.successor_codebook"].any()
    assert tensors["candidate_selector.hidden_projection.weight"].dtype == torch.bfloat16


def test_a_random_selector_has_codebooks(tmp_path: Path) -> None:
    tensors = load_file(str(dflash2_cpu.graft(tmp_path / "random", selector="random") / "model.safetensors"))
    assert tensors["candidate_selector.predecessor_codebook"].shape == (512, 32)
    assert tensors["candidate_selector.predecessor_codebook"].abs().sum() > 0


def test_an_unknown_selector_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="selector 'learned': expected one of zero, random"):
        dflash2_cpu.graft(tmp_path / "x", selector="learned")
