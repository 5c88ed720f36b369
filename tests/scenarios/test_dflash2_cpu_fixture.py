"""The CPU DFlash 2 fixture (fixtures/dflash2_cpu.py): the graft, the model code it trains with, the shipped draft.

The graft keeps every DFlash weight and makes the head neutral (identity convolutions; zero codebooks: the
walk drafts the DFlash head's greedy tokens), so its model code must compute exactly what the DFlash
draft's does. The shipped draft is the graft with its head trained: its files are those training.json
names, its head is no longer neutral, and its damaged variants differ from it only where they say.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from fixtures import dflash2_cpu, dflash_cpu

SHIPPED = dflash2_cpu.DEFAULT_OUT


@pytest.fixture(scope="module")
def zero(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return dflash2_cpu.graft(tmp_path_factory.mktemp("graft") / "zero")


def test_the_graft_is_a_dflash2_draft_of_the_targets_vocabulary(zero: Path) -> None:
    config = json.loads((zero / "mxfp8" / "config.json").read_text(encoding="utf-8"))
    base = json.loads((dflash2_cpu.BASE / "config.json").read_text(encoding="utf-8"))
    assert config["architectures"] == ["DFlash2DraftModel"] and config["vocab_size"] == base["vocab_size"] == 512
    assert config["dflash_config"] == {**base["dflash_config"], **dflash2_cpu.HEAD}
    assert config["quantization_config"]["ignore"] == ["candidate_selector.hidden_projection", "lm_head"]
    quant = json.loads((zero / "mxfp8" / "hf_quant_config.json").read_text(encoding="utf-8"))
    assert quant["quantization"]["exclude_modules"] == ["candidate_selector.hidden_projection", "lm_head"]


def test_the_dflash_weights_are_kept_and_the_head_is_neutral(zero: Path) -> None:
    tensors = load_file(str(zero / "mxfp8" / "model.safetensors"))
    base = load_file(str(dflash_cpu.DEFAULT_OUT / "mxfp8" / "model.safetensors"))
    # The same BF16 values through the same converter: the DFlash draft's MXFP8 bytes, every one.
    assert all(torch.equal(tensors[k].view(torch.uint8), v.view(torch.uint8)) for k, v in base.items())
    kernel = tensors["layers.1.mlp_conv.base_kernel"]
    assert kernel.shape == (2, 2, 256) and bool((kernel[:, 0] == 1).all()) and bool((kernel[:, 1] == 0).all())
    projection = tensors["layers.0.attention_conv.kernel_projection.weight"]
    assert projection.shape == (64, 256) and projection.dtype == torch.float8_e4m3fn
    assert not projection.to(torch.float32).any()
    assert tensors["layers.0.attention_conv.kernel_projection.weight_scale"].shape == (64, 8)
    assert not tensors["candidate_selector.successor_codebook"].any()
    assert tensors["candidate_selector.hidden_projection.weight"].dtype == torch.bfloat16


def test_the_model_code_of_a_neutral_head_is_the_dflash_drafts() -> None:
    target, base = dflash_cpu.load_target(), dflash_cpu.read_source(dflash2_cpu.BASE)
    zero, _ = dflash2_cpu.graft_source(*base, selector="zero")
    seq = torch.randint(3, 512, (40,), generator=torch.Generator().manual_seed(0))
    feats = target.features(seq, dflash_cpu.RECIPE.target_layer_ids)[None]
    anchors = torch.tensor([[5, 17, 30]])
    embed = target.w["model.embed_tokens.weight"]
    dflash = dflash_cpu.draft_logits(base[0], embed, feats, seq[None], anchors)
    hidden = dflash2_cpu.draft_hidden(zero, embed, feats, seq[None], anchors)
    assert torch.equal(hidden @ zero["lm_head.weight"].T, dflash)
    tokens, overruled = dflash2_cpu.walk(zero, hidden[0, 1], int(seq[17]))
    assert tokens == dflash[0, 1, 1:].argmax(-1).tolist() and not any(overruled)


def test_the_grouped_convolution_mixes_only_earlier_rows_of_the_same_block() -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(1, 2 * dflash2_cpu.BLOCK, 32, generator=gen)
    delta, base = torch.randn(1, 2 * dflash2_cpu.BLOCK, 2, 2, generator=gen), torch.randn(2, 32, generator=gen)
    out = dflash2_cpu.grouped_conv(x, delta, base)
    # The kernel's formula, row by row: (base[t] + delta[row, t, group]) * x[row - t] while row - t is in the block.
    want = torch.zeros_like(x)
    for row in range(x.shape[1]):
        for tap in range(2):
            if row % dflash2_cpu.BLOCK >= tap:
                coef = base[tap] + delta[0, row, tap].repeat_interleave(16)
                want[0, row] += coef * x[0, row - tap]
    assert torch.allclose(out, want, atol=1e-6)


def test_unknown_selectors_and_variants_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="selector 'learned': expected one of zero, random"):
        dflash2_cpu.graft(tmp_path / "x", selector="learned")
    with pytest.raises(ValueError, match="unknown variant 'wrong-mask-token'; variants: wrong-target-layers-2-3, "
                                         "scrambled-selector"):
        dflash2_cpu.variant("wrong-mask-token", {}, {})


def test_the_shipped_draft_is_what_its_training_wrote() -> None:
    report = json.loads((SHIPPED / "training.json").read_text(encoding="utf-8"))
    files = {str(p.relative_to(SHIPPED)): dflash_cpu._sha256(p) for p in sorted(SHIPPED.rglob("*"))
             if p.is_file() and p.name != "training.json"}
    assert files == report["files"]
    assert report["spec"]["recipe"] == dataclasses.asdict(dflash2_cpu.RECIPE)
    estimates = report["offline_estimates"]
    # The head earns its keep: the trained selector drafts better than the same draft without it.
    assert estimates["trained"]["mean_acceptance_length"] > estimates["trained_convolutions_zero_selector"][
        "mean_acceptance_length"] and estimates["trained"]["overruled_fraction"] > 0.1


def test_the_shipped_head_is_trained_and_its_dflash_weights_are_the_base_drafts() -> None:
    tensors = load_file(str(SHIPPED / "source" / "model.safetensors"))
    base = load_file(str(dflash2_cpu.BASE / "model.safetensors"))
    assert all(torch.equal(tensors[k], v) for k, v in base.items())
    assert tensors["layers.0.mlp_conv.kernel_projection.weight"].abs().sum() > 0
    assert not torch.equal(tensors["layers.0.mlp_conv.base_kernel"][:, 1], torch.zeros(2, 256, dtype=torch.bfloat16))
    assert set(tensors) - set(base) == {k for k in tensors if dflash2_cpu.is_head(k)}


def test_the_damaged_variants_differ_only_where_they_say() -> None:
    paths = dflash2_cpu.build_variants()
    good = load_file(str(SHIPPED / "mxfp8" / "model.safetensors"))
    good_config = json.loads((SHIPPED / "mxfp8" / "config.json").read_text(encoding="utf-8"))
    layers = json.loads((paths["wrong-target-layers-2-3"] / "mxfp8" / "config.json").read_text(encoding="utf-8"))
    assert layers["dflash_config"]["target_layer_ids"] == [2, 3] != good_config["dflash_config"]["target_layer_ids"]
    scrambled = load_file(str(paths["scrambled-selector"] / "mxfp8" / "model.safetensors"))
    changed = {k for k in good if not torch.equal(good[k].view(torch.uint8), scrambled[k].view(torch.uint8))}
    assert changed == {"candidate_selector.predecessor_codebook", "candidate_selector.successor_codebook"}
    for key in changed:  # the same rows, in another order
        assert torch.equal(good[key].float().sort(0).values, scrambled[key].float().sort(0).values)
    scaled = load_file(str(paths["scale-damage"] / "mxfp8" / "model.safetensors"))
    changed = {k for k in good if not torch.equal(good[k].view(torch.uint8), scaled[k].view(torch.uint8))}
    assert changed and all(k.endswith(".weight_scale") for k in changed)
