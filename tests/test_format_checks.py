"""Format checks at the library level, on small hand-built checkpoints: each rule has a case that breaks it."""

from __future__ import annotations

import pytest
import torch

from qualify import format_checks as f
from qualify import mxfp8
from qualify.quant_config import read_quant_config
from qualify.safetensors_io import Checkpoint
from tests.helpers import hf_quant, write_checkpoint

GEN = torch.Generator().manual_seed(0)


def weight(n: int, k: int) -> torch.Tensor:
    return (torch.randn(n, k, generator=GEN) * 0.02).to(torch.bfloat16)


def quantized(prefix: str, n: int, k: int, recipe: str = "modelopt") -> dict[str, torch.Tensor]:
    q = mxfp8.quantize(weight(n, k), recipe)
    return {f"{prefix}.weight": q.data, f"{prefix}.weight_scale": q.scale}


def good_tensors() -> dict[str, torch.Tensor]:
    t: dict[str, torch.Tensor] = {}
    t.update(quantized("layers.0.self_attn.q_proj", 128, 64))
    t.update(quantized("layers.0.self_attn.o_proj", 64, 128))
    t["layers.0.input_layernorm.weight"] = torch.ones(64, dtype=torch.bfloat16)
    t["lm_head.weight"] = weight(256, 64)
    return t


CONFIG = {"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2, "head_dim": 64, "vocab_size": 256}


def open_ckpt(tmp_path, tensors=None, config=CONFIG, quant=None):
    root = write_checkpoint(tmp_path / "ckpt", tensors if tensors is not None else good_tensors(), config=config,
                            hf_quant=quant if quant is not None else hf_quant())
    return Checkpoint.open(root), read_quant_config(root)


def text(ev) -> str:
    return " | ".join(str(x) for x in ev.findings)


def test_a_good_small_checkpoint_passes_every_rule(tmp_path):
    ckpt, qc = open_ckpt(tmp_path)
    with ckpt:
        for ev in (
            f.check_weights(ckpt, tensor_parallel_size=4),
            f.check_scales(ckpt),
            f.check_block_normalization(ckpt),
            f.check_exclusions(ckpt, ["lm_head"], qc),
            f.check_linear_coverage(ckpt, ["lm_head"], qc),
            f.check_quant_config(ckpt, qc, excluded_modules=["lm_head"], kv_cache_quant_algo=None),
            f.check_model_config(ckpt, CONFIG),
        ):
            assert ev.ok, ev.failure_text()


def test_k_not_a_multiple_of_32(tmp_path):
    t = good_tensors()
    t["layers.0.mlp.up_proj.weight"] = torch.zeros(64, 48, dtype=torch.float8_e4m3fn)
    t["layers.0.mlp.up_proj.weight_scale"] = torch.full((64, 2), 127, dtype=torch.uint8)
    ckpt, _ = open_ckpt(tmp_path, t)
    with ckpt:
        ev = f.check_weights(ckpt)
    assert "layers.0.mlp.up_proj.weight" in text(ev) and "K = 48 is not a multiple of the block size 32" in text(ev)


def test_k_per_tensor_parallel_shard(tmp_path):
    ckpt, _ = open_ckpt(tmp_path)
    with ckpt:
        assert f.check_weights(ckpt, tensor_parallel_size=4).ok  # 128 / 4 = 32
        ev = f.check_weights(ckpt, tensor_parallel_size=8)  # 128 / 8 = 16
    assert "o_proj.weight" in text(ev) and "unloadable at TP=8" in text(ev)


def test_fp8_nan_bytes(tmp_path):
    t = good_tensors()
    w = t["layers.0.self_attn.q_proj.weight"].view(torch.uint8).clone()
    w[3, 5] = 0x7F
    w[4, 6] = 0xFF
    t["layers.0.self_attn.q_proj.weight"] = w.view(torch.float8_e4m3fn)
    ckpt, _ = open_ckpt(tmp_path, t)
    with ckpt:
        ev = f.check_weights(ckpt)
    assert "2 element(s) hold an E4M3 NaN" in text(ev) and ev.measured["nan_elements"] == 2


def test_weight_in_another_fp8_dtype(tmp_path):
    t = good_tensors()
    t["layers.0.self_attn.q_proj.weight"] = t["layers.0.self_attn.q_proj.weight"].view(torch.float8_e5m2)
    ckpt, _ = open_ckpt(tmp_path, t)
    with ckpt:
        assert "stored as F8_E5M2" in text(f.check_weights(ckpt))
        assert "scale without an F8_E4M3 weight" in text(f.check_scales(ckpt))


@pytest.mark.parametrize(
    ("shape", "words"),
    [
        ((128, 4), "blocks of 16"),
        ((2, 128), "transposed"),
        ((256, 4), "swizzled"),
        ((128, 3), "expected [128, 2]"),
    ],
)
def test_scale_shapes(tmp_path, shape, words):
    t = good_tensors()
    t["layers.0.self_attn.q_proj.weight_scale"] = torch.full(shape, 120, dtype=torch.uint8)
    ckpt, _ = open_ckpt(tmp_path, t)
    with ckpt:
        ev = f.check_scales(ckpt)
    assert "layers.0.self_attn.q_proj.weight_scale" in text(ev) and words in text(ev)


def test_missing_nan_orphan_and_foreign_scales(tmp_path):
    t = good_tensors()
    del t["layers.0.self_attn.o_proj.weight_scale"]
    s = t["layers.0.self_attn.q_proj.weight_scale"].clone()
    s[0, 0] = 0xFF
    t["layers.0.self_attn.q_proj.weight_scale"] = s
    t["layers.0.mlp.gate_proj.weight_scale"] = torch.zeros(4, 1, dtype=torch.uint8)
    t["layers.0.self_attn.q_proj.weight_scale_2"] = torch.ones(1, dtype=torch.float32)
    ckpt, _ = open_ckpt(tmp_path, t)
    with ckpt:
        ev = f.check_scales(ckpt)
    msg = text(ev)
    assert "o_proj.weight': quantized weight has no 'layers.0.self_attn.o_proj.weight_scale'" in msg
    assert "1 scale byte(s) are 0xFF" in msg
    assert "gate_proj.weight_scale': scale without" in msg
    assert "weight_scale_2': tensor belongs to another quantization scheme" in msg


def test_scale_stored_as_e8m0_dtype(tmp_path):
    t = good_tensors()
    t["layers.0.self_attn.q_proj.weight_scale"] = t["layers.0.self_attn.q_proj.weight_scale"].view(
        torch.float8_e8m0fnu)
    ckpt, _ = open_ckpt(tmp_path, t)
    with ckpt:
        assert "stores E8M0 exponents as U8" in text(f.check_scales(ckpt))


def test_blocks_not_normalised_by_their_scale(tmp_path):
    t = good_tensors()
    # A per-tensor scaled weight: elements far below the top of E4M3 in most blocks.
    w = weight(128, 64).float()
    t["layers.0.self_attn.q_proj.weight"] = (w / w.abs().max() * 16).to(torch.float8_e4m3fn)
    ckpt, _ = open_ckpt(tmp_path, t)
    with ckpt:
        ev = f.check_block_normalization(ckpt)
    assert "q_proj.weight" in text(ev) and "not normalised by their scale" in text(ev)


def test_both_recipes_are_normalised(tmp_path):
    t = good_tensors()
    t.update(quantized("layers.0.self_attn.q_proj", 128, 64, "ocp-floor"))
    ckpt, _ = open_ckpt(tmp_path, t)
    with ckpt:
        assert f.check_block_normalization(ckpt).ok


def test_excluded_module_quantized_or_absent(tmp_path):
    t = good_tensors()
    t.update(quantized("lm_head", 256, 64))
    ckpt, qc = open_ckpt(tmp_path, t)
    with ckpt:
        msg = text(f.check_exclusions(ckpt, ["lm_head"], qc))
    assert "lm_head.weight': excluded module is quantized" in msg
    assert "lm_head.weight_scale': excluded module carries a quantization scale" in msg
    t = good_tensors()
    del t["lm_head.weight"]
    ckpt, qc = open_ckpt(tmp_path / "b", t)
    with ckpt:
        assert "has no such weight" in text(f.check_exclusions(ckpt, ["lm_head"], qc))


def test_a_linear_layer_left_in_bf16(tmp_path):
    t = good_tensors()
    t["layers.0.mlp.down_proj.weight"] = weight(64, 128)
    ckpt, qc = open_ckpt(tmp_path, t)
    with ckpt:
        coverage = f.check_linear_coverage(ckpt, ["lm_head"], qc)
        assert "down_proj.weight': linear weight is left in BF16" in text(coverage)
        cfg = f.check_quant_config(ckpt, qc, excluded_modules=["lm_head"], kv_cache_quant_algo=None)
    assert "down_proj.weight': unquantized linear weight is not in the config's exclusions" in text(cfg)


@pytest.mark.parametrize(
    ("quant", "words"),
    [
        (hf_quant(quant_algo="NVFP4"), "quant_algo is 'NVFP4'"),
        (hf_quant(group_size=16), "group_size is 16"),
        (hf_quant(kv_cache_quant_algo="FP8"), "kv_cache_quant_algo is 'FP8'"),
        (hf_quant(exclude=()), "quantized"),  # lm_head is unquantized but not declared excluded
        (hf_quant(exclude=("lm_head", "*q_proj")), "the config excludes it"),
    ],
)
def test_quant_config_disagreements(tmp_path, quant, words):
    ckpt, qc = open_ckpt(tmp_path, quant=quant)
    with ckpt:
        ev = f.check_quant_config(ckpt, qc, excluded_modules=["lm_head"], kv_cache_quant_algo=None)
    assert not ev.ok and words in text(ev), text(ev)


def test_quant_config_missing_or_without_kv_key(tmp_path):
    root = write_checkpoint(tmp_path / "none", good_tensors(), config=CONFIG)
    with Checkpoint.open(root) as ckpt:
        ev = f.check_quant_config(ckpt, read_quant_config(root), excluded_modules=["lm_head"], kv_cache_quant_algo=None)
    assert "no quantization config" in text(ev)
    q = hf_quant()
    del q["quantization"]["kv_cache_quant_algo"]
    ckpt, qc = open_ckpt(tmp_path, quant=q)
    with ckpt:
        ev = f.check_quant_config(ckpt, qc, excluded_modules=["lm_head"], kv_cache_quant_algo=None)
    assert "has no 'kv_cache_quant_algo' key" in text(ev)


def test_two_config_files_that_disagree(tmp_path):
    cfg = dict(CONFIG, quantization_config={"quant_method": "modelopt", "quant_algo": "MXFP8",
                                            "ignore": ["lm_head", "model.embed_tokens"]})
    ckpt, qc = open_ckpt(tmp_path, config=cfg)
    with ckpt:
        ev = f.check_quant_config(ckpt, qc, excluded_modules=["lm_head"], kv_cache_quant_algo=None)
    assert "runtimes reading different files would disagree" in text(ev)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"hidden_size": 96}, "contradicts config.json"),
        ({"num_hidden_layers": 3}, "num_hidden_layers is 3 but the tensors have layers [0]"),
        ({"vocab_size": 0}, "not a positive integer"),
    ],
)
def test_model_config_contradicts_shapes(tmp_path, change, words):
    ckpt, _ = open_ckpt(tmp_path)
    with ckpt:
        ev = f.check_model_config(ckpt, dict(CONFIG, **change))
    assert words in text(ev), text(ev)
