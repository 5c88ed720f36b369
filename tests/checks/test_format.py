"""Format checks at the library level, on small hand-built checkpoints: each rule has a case that breaks it."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from qualify.checkpoint.quant_config import _MISSING, DeclaredScheme, QuantConfig, read_quant_config
from qualify.checkpoint.safetensors_io import Checkpoint
from qualify.checks import format as f
from qualify.mxfp8 import codec as mxfp8
from qualify.profile import FormatSpec
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


def config_block(quant: dict) -> dict:
    """config.json's flat quantization_config saying what ``quant`` (an hf_quant_config.json) says, in the keys vLLM
    reads from it: ``ignore`` and ``kv_cache_scheme``."""
    q = quant["quantization"]
    block = {"quant_method": "modelopt", "quant_algo": q.get("quant_algo")}
    if "group_size" in q:
        block["group_size"] = q["group_size"]
    if q.get("exclude_modules") is not None:
        block["ignore"] = q["exclude_modules"]
    if q.get("kv_cache_quant_algo") == "FP8":
        block["kv_cache_scheme"] = {"type": "float", "num_bits": 8, "dynamic": False}
    return block


def open_ckpt(tmp_path, tensors=None, config=CONFIG, quant=None):
    """A small checkpoint whose two quantization declarations agree (config.json's is the one vLLM reads)."""
    quant = quant if quant is not None else hf_quant()
    if config is not None and "quantization_config" not in config:
        config = dict(config, quantization_config=config_block(quant))
    root = write_checkpoint(tmp_path / "ckpt", tensors if tensors is not None else good_tensors(), config=config,
                            hf_quant=quant)
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
        (hf_quant(group_size=32.0), "group_size is 32.0 (float, not an integer), expected 32"),
        (hf_quant(group_size="32"), "group_size is '32' (str, not an integer), expected 32"),
        (hf_quant(group_size=True), "group_size is True (bool, not an integer), expected 32"),
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


# --------------------------------------------------------------------------- exact evidence
# The findings are the report: each case below pins every finding's message, file and tensor,
# and the measured and expected figures, so a check that names the wrong tensor, drops a
# finding after the first one or miscounts is caught (these cases come from mutation testing).

FILE = "model.safetensors"


def findings(ev) -> list[tuple[str | None, str | None, str]]:
    return [(x.file, x.tensor, x.message) for x in ev.findings]


def nan_bytes(t: torch.Tensor, *positions: tuple[int, int], byte: int = 0x7F) -> torch.Tensor:
    b = t.view(torch.uint8).clone()
    for i, j in positions:
        b[i, j] = byte
    return b.view(t.dtype)


def broken_tensors() -> dict[str, torch.Tensor]:
    """One checkpoint that breaks most weight and scale rules, each in another tensor."""
    t = good_tensors()  # q_proj [128, 64] and o_proj [64, 128] quantized; input_layernorm, lm_head BF16
    t["layers.0.self_attn.q_proj.weight"] = nan_bytes(t["layers.0.self_attn.q_proj.weight"], (0, 0), byte=0xFF)
    t["layers.0.self_attn.q_proj.weight_scale"] = nan_bytes(t["layers.0.self_attn.q_proj.weight_scale"], (0, 0),
                                                            byte=0xFF)
    t.update(quantized("layers.0.mlp.down_proj", 64, 64))  # K = 64: loadable at TP 1 and 2, not at TP 4
    t["layers.0.mlp.down_proj.weight"] = nan_bytes(t["layers.0.mlp.down_proj.weight"], (1, 2), (5, 6))
    t["layers.0.mlp.down_proj.weight_scale"] = nan_bytes(t["layers.0.mlp.down_proj.weight_scale"], (3, 1), (4, 0),
                                                         byte=0xFF)
    t["layers.0.mlp.up_proj.weight"] = torch.zeros(64, 48, dtype=torch.float8_e4m3fn)
    t["layers.0.mlp.up_proj.weight_scale"] = torch.full((64, 2), 127, dtype=torch.uint8)
    t["layers.0.mlp.gate_proj.weight"] = weight(64, 64)  # a BF16 linear that is not excluded
    t["layers.0.self_attn.k_proj.weight"] = quantized("x", 64, 64)["x.weight"].view(torch.float8_e5m2)
    t["layers.0.self_attn.k_proj.weight_scale"] = torch.full((64, 2), 127, dtype=torch.uint8)
    t["layers.0.self_attn.v_proj.weight"] = quantized("x", 64, 64)["x.weight"]  # no scale
    t["layers.0.extra.weight"] = torch.zeros(2, 32, 32, dtype=torch.float8_e4m3fn)  # 3-D
    t["layers.0.odd.bias"] = torch.zeros(4, 32, dtype=torch.float8_e4m3fn)  # F8, but not a '.weight'
    t["layers.1.ghost.weight_scale"] = torch.full((4, 1), 127, dtype=torch.uint8)  # no weight
    t["layers.0.self_attn.q_proj.input_scale"] = torch.ones(1, dtype=torch.float32)  # another scheme's
    t["layers.0.self_attn.o_proj.weight_scale"] = t["layers.0.self_attn.o_proj.weight_scale"].view(
        torch.float8_e8m0fnu)
    return t


def test_check_weights_names_every_broken_tensor(tmp_path):
    ckpt, _ = open_ckpt(tmp_path, broken_tensors())
    with ckpt:
        ev = f.check_weights(ckpt, tensor_parallel_size=4)
        at_tp1 = f.check_weights(ckpt)
    nan = "element(s) hold an E4M3 NaN encoding (0x7F/0xFF); a quantizer never produces one"
    assert findings(ev) == [
        (FILE, "layers.0.self_attn.k_proj.weight", "weight is stored as F8_E5M2; MXFP8 elements are F8_E4M3 "
                                                   "(float8_e4m3fn)"),
        (FILE, "layers.0.self_attn.q_proj.weight", f"1 {nan}"),
        (FILE, "layers.0.mlp.down_proj.weight", "K = 64 split over 4 tensor-parallel ranks gives shards of 16, "
                                                "not a multiple of 32: unloadable at TP=4"),
        (FILE, "layers.0.mlp.down_proj.weight", f"2 {nan}"),
        (FILE, "layers.0.mlp.up_proj.weight", "K = 48 is not a multiple of the block size 32: runtimes refuse to "
                                              "load it"),
        (FILE, "layers.0.extra.weight", "has shape [2, 32, 32]; an MXFP8 linear weight is 2-D [N, K]"),
        (FILE, "layers.0.odd.bias", "F8_E4M3 tensor is not a '<module>.weight'"),
    ]
    assert ev.measured == {"quantized_weights": 7, "nan_elements": 3}
    assert ev.expected == {"dtype": "F8_E4M3", "block_size": 32, "tensor_parallel_size": 4}
    assert ev.summary == ("quantized linear weights are F8_E4M3 [N, K] with K a multiple of 32 (per shard at "
                          "tensor-parallel size 4) and hold no fp8 NaN")
    # The default is one rank: K = 64 is loadable there.
    assert at_tp1.expected["tensor_parallel_size"] == 1
    assert not any("tensor-parallel" in msg for *_, msg in findings(at_tp1))


def test_a_row_parallel_weight_that_splits_at_tp1_but_not_tp2(tmp_path):
    t = good_tensors()
    t.update(quantized("layers.0.mlp.down_proj", 64, 32))
    ckpt, _ = open_ckpt(tmp_path, t)
    with ckpt:
        assert f.check_weights(ckpt).ok
        assert [msg for *_, msg in findings(f.check_weights(ckpt, tensor_parallel_size=2))] == [
            "K = 32 split over 2 tensor-parallel ranks gives shards of 16, not a multiple of 32: unloadable at TP=2"]


@pytest.mark.parametrize(("byte", "where"), [(0xFF, (0, 0)), (0x7F, (0, 0)), (0xFF, (127, 63)), (0x7F, (64, 1))])
def test_a_single_nan_byte_of_either_encoding_anywhere(tmp_path, byte, where):
    t = good_tensors()
    t["layers.0.self_attn.q_proj.weight"] = nan_bytes(t["layers.0.self_attn.q_proj.weight"], where, byte=byte)
    ckpt, _ = open_ckpt(tmp_path, t)
    with ckpt:
        ev = f.check_weights(ckpt)
    assert findings(ev) == [(FILE, "layers.0.self_attn.q_proj.weight", "1 element(s) hold an E4M3 NaN encoding "
                                                                        "(0x7F/0xFF); a quantizer never produces one")]
    assert ev.measured["nan_elements"] == 1


def test_no_fp8_tensor_at_all(tmp_path):
    t = {"layers.0.self_attn.q_proj.weight": weight(64, 64), "lm_head.weight": weight(256, 64)}
    ckpt, qc = open_ckpt(tmp_path, t)
    with ckpt:
        assert findings(f.check_weights(ckpt)) == [
            (None, None, "no F8_E4M3 tensor found: the checkpoint is not MXFP8-quantized")]
        assert findings(f.check_scales(ckpt)) == [(None, None, "no F8_E4M3 weight found, so no scale can be verified")]
        assert findings(f.check_block_normalization(ckpt)) == [(None, None, "no quantized block could be examined")]
        coverage = f.check_linear_coverage(ckpt, ["lm_head"], qc)
    assert findings(coverage) == [
        (FILE, "layers.0.self_attn.q_proj.weight", "linear weight is left in BF16 but is not excluded: the runtime "
                                                   "would expect MXFP8 weights and scales here"),
        (None, None, "no quantized linear weight found"),
    ]
    assert coverage.measured == {"quantized": 0, "unquantized_linear": 2}
    assert coverage.summary == "every linear weight that is not excluded is quantized"


def test_check_scales_names_every_broken_scale(tmp_path):
    ckpt, _ = open_ckpt(tmp_path, broken_tensors())
    with ckpt:
        ev = f.check_scales(ckpt)
    assert findings(ev) == [
        (FILE, "layers.0.self_attn.q_proj.weight_scale", "1 scale byte(s) are 0xFF, the E8M0 NaN encoding"),
        (FILE, "layers.0.self_attn.o_proj.weight_scale", "scale dtype is F8_E8M0, expected U8 (this format stores "
                                                         "E8M0 exponents as U8)"),
        (FILE, "layers.0.mlp.down_proj.weight_scale", "2 scale byte(s) are 0xFF, the E8M0 NaN encoding"),
        (FILE, "layers.0.self_attn.v_proj.weight", "quantized weight has no 'layers.0.self_attn.v_proj.weight_scale'"),
        (FILE, "layers.0.extra.weight", "quantized weight has no 'layers.0.extra.weight_scale'"),
        (FILE, "layers.0.odd.bias", "quantized weight has no 'layers.0.odd.bias_scale'"),
        (FILE, "layers.0.self_attn.k_proj.weight_scale", "scale without an F8_E4M3 weight "
                                                         "'layers.0.self_attn.k_proj.weight'"),
        (FILE, "layers.1.ghost.weight_scale", "scale without an F8_E4M3 weight 'layers.1.ghost.weight'"),
        (FILE, "layers.0.self_attn.q_proj.input_scale", "tensor belongs to another quantization scheme (NVFP4/FP8 "
                                                        "per-tensor); MXFP8 has none"),
    ]
    assert ev.measured == {"scales": 6, "nan_scale_bytes": 3}
    assert ev.expected == {"dtype": "U8", "layout": "row-major-unswizzled"}
    assert ev.summary == ("each quantized weight has a U8 [N, K/32] weight_scale of biased E8M0 exponents "
                          "(row-major, unswizzled) with no NaN (0xFF) byte")


def test_a_scale_in_another_dtype_gets_no_e8m0_hint(tmp_path):
    t = good_tensors()
    t["layers.0.self_attn.q_proj.weight_scale"] = t["layers.0.self_attn.q_proj.weight_scale"].view(torch.int8)
    ckpt, _ = open_ckpt(tmp_path, t)
    with ckpt:
        assert findings(f.check_scales(ckpt)) == [
            (FILE, "layers.0.self_attn.q_proj.weight_scale", "scale dtype is I8, expected U8")]


def test_a_wrongly_shaped_scale_is_reported_before_the_next_weight(tmp_path):
    t = good_tensors()
    t["layers.0.self_attn.q_proj.weight_scale"] = torch.full((2, 128), 120, dtype=torch.uint8)
    t["layers.0.self_attn.o_proj.weight_scale"] = nan_bytes(t["layers.0.self_attn.o_proj.weight_scale"], (0, 0),
                                                            byte=0xFF)
    ckpt, _ = open_ckpt(tmp_path, t)
    with ckpt:
        assert findings(f.check_scales(ckpt)) == [
            (FILE, "layers.0.self_attn.q_proj.weight_scale",
             "scale shape [2, 128] does not match weight [128, 64]: expected [128, 2] (transposed: scales must be "
             "[N, K/32], blocks along the input dimension)"),
            (FILE, "layers.0.self_attn.o_proj.weight_scale", "1 scale byte(s) are 0xFF, the E8M0 NaN encoding"),
        ]


def test_an_empty_weight_is_read_without_error(tmp_path):
    """A zero-row weight has no bytes to scan: every check still answers (it used to crash the normalisation check)."""
    t = good_tensors()
    t["layers.0.mlp.empty_proj.weight"] = torch.zeros(0, 32, dtype=torch.float8_e4m3fn)
    t["layers.0.mlp.empty_proj.weight_scale"] = torch.zeros(0, 1, dtype=torch.uint8)
    ckpt, _ = open_ckpt(tmp_path, t)
    with ckpt:
        weights, scales, blocks = f.check_weights(ckpt), f.check_scales(ckpt), f.check_block_normalization(ckpt)
    assert weights.ok and weights.measured == {"quantized_weights": 3, "nan_elements": 0}
    assert scales.ok and scales.measured == {"scales": 3, "nan_scale_bytes": 0}
    assert blocks.ok and blocks.measured == {"blocks": 512, "unnormalised_blocks": 0}


WEIGHT_HINTS = [
    # weight [N, K], scale shape, hint (K/32 expected along the second dimension)
    ([128, 64], [2, 128], " (transposed: scales must be [N, K/32], blocks along the input dimension)"),
    ([128, 64], [64, 4], " (transposed: scales must be [N, K/32], blocks along the input dimension)"),
    ([128, 48], [1, 128], " (transposed: scales must be [N, K/32], blocks along the input dimension)"),
    ([48, 64], [64, 1], " (transposed: scales must be [N, K/32], blocks along the input dimension)"),
    ([128, 64], [128, 4], " (blocks of 16, not 32)"),
    ([128, 64], [127, 4], " (padded to 128x4 tiles: a swizzled layout; this format stores scales unswizzled)"),
    ([100, 64], [128, 2], " (padded to 128x4 tiles: a swizzled layout; this format stores scales unswizzled)"),
    ([100, 256], [128, 8], " (padded to 128x4 tiles: a swizzled layout; this format stores scales unswizzled)"),
    ([128, 96], [128, 4], " (padded to 128x4 tiles: a swizzled layout; this format stores scales unswizzled)"),
    ([128, 64], [256, 4], " (padded to 128x4 tiles: a swizzled layout; this format stores scales unswizzled)"),
    ([128, 64], [128, 3], ""),  # the rows are one whole tile: not padding
    ([100, 64], [101, 2], ""),  # more rows, but not a whole number of tiles
    ([128, 96], [128, 5], ""),  # more columns, but not a whole number of tiles
    ([100, 128], [101, 4], ""),  # a whole tile of columns, but no more columns than K/32
    ([128, 100], [127, 4], ""),  # K/32 rounds up to 4: four columns are not padding
    ([128, 64], [256], ""),
    ([128, 64], [128, 2, 1], ""),
]


@pytest.mark.parametrize(("w", "s", "hint"), WEIGHT_HINTS)
def test_scale_shape_hints(w, s, hint):
    assert f._scale_shape_hint(w, s, 32) == hint


def normalisation_tensors() -> dict[str, torch.Tensor]:
    t: dict[str, torch.Tensor] = {}
    # Not examinable, each for its own reason, listed before the examinable ones.
    t["layers.0.a_proj.weight"] = torch.zeros(64, 48, dtype=torch.float8_e4m3fn)  # K not a multiple of 32
    t["layers.0.a_proj.weight_scale"] = torch.full((64, 1), 127, dtype=torch.uint8)
    t["layers.0.b_proj.weight"] = torch.zeros(2, 32, 32, dtype=torch.float8_e4m3fn)  # not 2-D
    t["layers.0.b_proj.weight_scale"] = torch.full((2, 1), 127, dtype=torch.uint8)
    c = quantized("layers.0.c_proj", 64, 64)  # scale in the wrong dtype
    t["layers.0.c_proj.weight"] = c["layers.0.c_proj.weight"]
    t["layers.0.c_proj.weight_scale"] = c["layers.0.c_proj.weight_scale"].view(torch.float8_e8m0fnu)
    t["layers.0.d_proj.weight"] = quantized("x", 64, 64)["x.weight"]  # no scale
    # Per-tensor scaled: most blocks far below the top of E4M3.
    w = weight(128, 64).float()
    t["layers.0.q_proj.weight"] = (w / w.abs().max() * 16).to(torch.float8_e4m3fn)
    t["layers.0.q_proj.weight_scale"] = torch.full((128, 2), 127, dtype=torch.uint8)
    # Hand-made [4, 64]: two blocks per row.
    e = torch.full((4, 64), 448.0)
    e[0, :32] = 0.0  # an all-zero block: fine
    e[1, 32:] = 0.5  # a tiny block whose scale byte is 0 (exponent clamped): fine
    e[2, :32] = 1.0  # a block whose largest |element| is exactly 1: not normalised
    e[3, 32:] = 0.5  # the same tiny values with scale byte 1: not normalised
    scale = torch.full((4, 2), 127, dtype=torch.uint8)
    scale[1, 1], scale[3, 1] = 0, 1
    t["layers.0.r_proj.weight"] = e.to(torch.float8_e4m3fn)
    t["layers.0.r_proj.weight_scale"] = scale
    return t


def test_check_block_normalization_names_the_first_bad_block(tmp_path):
    ckpt, _ = open_ckpt(tmp_path, normalisation_tensors())
    with ckpt:
        ev = f.check_block_normalization(ckpt)
    tail = ("the elements were not scaled per 1x32 block along K (transposed, per-tensor or wrongly blocked)")
    assert [f.tensor for f in ev.findings] == ["layers.0.q_proj.weight", "layers.0.r_proj.weight"]
    assert {f.file for f in ev.findings} == {FILE}
    q_msg, r_msg = (x.message for x in ev.findings)
    assert r_msg == f"2 of 8 blocks are not normalised by their scale (first: row 2, block 0, max |element| 1); {tail}"
    bad_q = ev.measured["unnormalised_blocks"] - 2
    assert q_msg.startswith(f"{bad_q} of 256 blocks are not normalised by their scale (first: row ") and bad_q > 0
    assert ev.measured == {"blocks": 264, "unnormalised_blocks": bad_q + 2}
    assert ev.expected == {"block_max_range": [224.0, 448.0]}
    assert ev.summary == ("each non-zero 1x32 block's largest |element| lies in [224, 448], as an E8M0 scale "
                          "derived from the block's amax makes it")


def test_block_normalization_first_position_in_a_non_square_weight(tmp_path):
    e = torch.full((32, 128), 448.0)
    e[20, 96:] = 2.0  # row 20, block 3: the only bad block
    t = {"layers.0.q_proj.weight": e.to(torch.float8_e4m3fn),
         "layers.0.q_proj.weight_scale": torch.full((32, 4), 127, dtype=torch.uint8)}
    ckpt, _ = open_ckpt(tmp_path, t)
    with ckpt:
        ev = f.check_block_normalization(ckpt)
    assert [x.message.split(";")[0] for x in ev.findings] == [
        "1 of 128 blocks are not normalised by their scale (first: row 20, block 3, max |element| 2)"]


def test_no_examinable_block_is_a_finding_only_when_nothing_else_explains_it(tmp_path):
    t = normalisation_tensors()
    for name in ("layers.0.q_proj.weight", "layers.0.q_proj.weight_scale", "layers.0.r_proj.weight",
                 "layers.0.r_proj.weight_scale"):
        del t[name]
    ckpt, _ = open_ckpt(tmp_path, t)
    with ckpt:
        ev = f.check_block_normalization(ckpt)
    assert findings(ev) == [(None, None, "no quantized block could be examined")]
    assert ev.measured == {"blocks": 0, "unnormalised_blocks": 0}


def test_check_exclusions_names_every_offender(tmp_path):
    t = good_tensors()
    del t["lm_head.weight"]
    t.update(quantized("lm_head", 256, 64))
    t["lm_head.input_scale"] = torch.ones(1)
    t["model.embed_tokens.weight"] = torch.zeros(256, 64, dtype=torch.int8)
    t["model.norm.weight"] = torch.ones(64, dtype=torch.bfloat16)
    ckpt, qc = open_ckpt(tmp_path, t, quant=hf_quant(exclude=("lm_head", "embed_tokens", "model.norm")))
    with ckpt:
        ev = f.check_exclusions(ckpt, ["lm_head", "*.vision_tower"], qc)
    assert findings(ev) == [
        (None, None, "the profile requires module '*.vision_tower' to be present and excluded from quantization, "
                     "but the checkpoint has no such weight"),
        (FILE, "lm_head.weight", "excluded module is quantized (F8_E4M3); it must stay in its source dtype"),
        (FILE, "lm_head.weight_scale", "excluded module carries a quantization scale"),
        (FILE, "lm_head.input_scale", "excluded module carries a quantization scale"),
        (FILE, "model.embed_tokens.weight", "excluded module is stored as I8, not a float dtype"),
    ]
    assert ev.expected == {"excluded_modules": ["lm_head", "*.vision_tower"]}
    assert ev.measured == {"config_exclusions": ["lm_head", "embed_tokens", "model.norm"]}
    assert ev.summary == "excluded modules (lm_head, *.vision_tower) stay unquantized with no scale"


def test_check_exclusions_with_none(tmp_path):
    ckpt, _ = open_ckpt(tmp_path)
    with ckpt:
        ev = f.check_exclusions(ckpt, [], QuantConfig())
    assert ev.ok and ev.summary == "excluded modules (none) stay unquantized with no scale"
    assert ev.expected == {"excluded_modules": []} and ev.measured == {"config_exclusions": []}


def test_check_quant_config_names_every_disagreement(tmp_path):
    hf = DeclaredScheme("hf_quant_config.json", "modelopt", "NVFP4", 16, _MISSING, None, nested=True)
    cfg = DeclaredScheme("config.json quantization_config", "compressed-tensors", "MXFP8", _MISSING, "FP8",
                         ("lm_head", "*q_proj"))
    ckpt, _ = open_ckpt(tmp_path)
    with ckpt:
        ev = f.check_quant_config(ckpt, QuantConfig((hf, cfg)), excluded_modules=["lm_head"], kv_cache_quant_algo=None)
    hf_file, cfg_file = "hf_quant_config.json", "config.json quantization_config"
    assert findings(ev) == [
        (hf_file, None, "quant_algo is 'NVFP4', expected 'MXFP8'"),
        (hf_file, None, "group_size is 16, expected 32"),
        (hf_file, None, "declares no exclusion list (exclude_modules / ignore); vLLM requires one"),
        (hf_file, None, "has no 'kv_cache_quant_algo' key; vLLM's ModelOpt loader requires it (null for none)"),
        (hf_file, "lm_head.weight", "unquantized linear weight is not in the config's exclusions: the runtime would "
                                    "look for MXFP8 scales"),
        (hf_file, None, "the profile excludes 'lm_head' but the config does not declare it excluded"),
        (cfg_file, None, "quant_method is 'compressed-tensors'; this layout is ModelOpt's ('modelopt')"),
        (cfg_file, None, "kv_cache_quant_algo is 'FP8', the profile expects None"),
        (cfg_file, "layers.0.self_attn.q_proj.weight", "quantized, but the config excludes it (pattern list "
                                                       "['lm_head', '*q_proj']): the runtime would read fp8 bytes as "
                                                       "an unquantized weight"),
        (None, None, "hf_quant_config.json excludes [] but config.json quantization_config excludes ['*q_proj', "
                     "'lm_head']: runtimes reading different files would disagree"),
        (None, None, "hf_quant_config.json says 'NVFP4' but config.json quantization_config says 'MXFP8'"),
    ]
    # group_size is stated by one file: no note.
    assert ev.measured == {"declared_in": [hf_file, cfg_file], "exclude_modules": ["lm_head", "*q_proj"]}
    assert ev.expected == {"quant_algo": "MXFP8", "group_size": 32, "kv_cache_quant_algo": None}
    assert ev.summary == ("the quantization config (hf_quant_config.json / config.json) declares MXFP8, group size "
                          "32, kv_cache_quant_algo, and exactly the exclusions the tensors show")


def test_check_quant_config_good_and_absent(tmp_path):
    one = DeclaredScheme("hf_quant_config.json", "modelopt", "MXFP8", _MISSING, None, ("lm_head",), nested=True)
    cfg = DeclaredScheme("config.json quantization_config", "modelopt", "MXFP8", _MISSING, None, ("lm_head",))
    ckpt, _ = open_ckpt(tmp_path)
    with ckpt:
        good = f.check_quant_config(ckpt, QuantConfig((one, cfg)), excluded_modules=["lm_head"],
                                    kv_cache_quant_algo=None)
        absent = f.check_quant_config(ckpt, QuantConfig(()), excluded_modules=["lm_head"], kv_cache_quant_algo="FP8")
    assert good.ok, good.failure_text()
    assert good.measured == {"group_size_note": "no file states group_size; MXFP8 fixes it at 32 (OCP MX v1.0)",
                             "declared_in": ["hf_quant_config.json", "config.json quantization_config"],
                             "exclude_modules": ["lm_head"]}
    assert findings(absent) == [(None, None, "no quantization config: neither hf_quant_config.json nor config.json "
                                             "quantization_config exists; a runtime would load the FP8 bytes as if "
                                             "unquantized")]
    assert absent.measured == {}
    assert absent.expected == {"quant_algo": "MXFP8", "group_size": 32, "kv_cache_quant_algo": "FP8"}


MODEL_CONFIG = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
                "vocab_size": 256, "num_hidden_layers": 1, "dflash_config": {"target_layer_ids": [0, 1, 2]}}


def bf16(*shape: int) -> torch.Tensor:
    return torch.zeros(*shape, dtype=torch.bfloat16)


def model_tensors() -> dict[str, torch.Tensor]:
    """Every tensor the model-config check knows, as MODEL_CONFIG implies (head_dim 64 / 4 = 16)."""
    return {
        "layers.0.self_attn.q_proj.bias": bf16(64),  # not a weight: not compared
        "layers.0.self_attn.q_proj.weight": bf16(64, 64),
        "layers.0.self_attn.k_proj.weight": bf16(32, 64),
        "layers.0.self_attn.v_proj.weight": bf16(32, 64),
        "layers.0.self_attn.o_proj.weight": bf16(64, 64),
        "layers.0.self_attn.q_norm.weight": bf16(16),
        "layers.0.self_attn.k_norm.weight": bf16(16),
        "layers.0.mlp.gate_proj.weight": bf16(128, 64),
        "layers.0.mlp.up_proj.weight": bf16(128, 64),
        "layers.0.mlp.down_proj.weight": bf16(64, 128),
        "layers.0.input_layernorm.weight": bf16(64),
        "layers.0.post_attention_layernorm.weight": bf16(64),
        "model.embed_tokens.weight": bf16(256, 64),
        "model.norm.weight": bf16(64),
        "hidden_norm.weight": bf16(64),
        "fc.weight": bf16(64, 192),
        "lm_head.weight": bf16(256, 64),
        "mystery.weight": bf16(3),  # unknown: not compared
    }


def test_check_model_config_compares_every_known_tensor(tmp_path):
    ckpt, _ = open_ckpt(tmp_path, model_tensors(), config=MODEL_CONFIG)
    with ckpt:
        ev = f.check_model_config(ckpt, MODEL_CONFIG)
    assert ev.ok, ev.failure_text()
    assert ev.measured == {"tensors_compared": 16, "layers": [0]}
    assert ev.summary == ("config.json (hidden size, layers, heads, head_dim, intermediate size, vocabulary) agrees "
                          "with the tensor shapes")


@pytest.mark.parametrize(
    ("tensor", "shape", "implies"),
    [
        ("layers.0.self_attn.q_proj.weight", (60, 64), [64, 64]),
        ("layers.0.self_attn.k_proj.weight", (64, 64), [32, 64]),
        ("layers.0.self_attn.v_proj.weight", (16, 64), [32, 64]),
        ("layers.0.self_attn.o_proj.weight", (64, 32), [64, 64]),
        ("layers.0.self_attn.q_norm.weight", (64,), [16]),
        ("layers.0.mlp.gate_proj.weight", (96, 64), [128, 64]),
        ("layers.0.mlp.down_proj.weight", (64, 96), [64, 128]),
        ("model.embed_tokens.weight", (255, 64), [256, 64]),
        ("fc.weight", (64, 128), [64, 192]),
        ("lm_head.weight", (256, 32), [256, 64]),
    ],
)
def test_check_model_config_names_the_contradicting_tensor(tmp_path, tensor, shape, implies):
    t = model_tensors()
    t[tensor] = bf16(*shape)
    ckpt, _ = open_ckpt(tmp_path, t, config=MODEL_CONFIG)
    with ckpt:
        ev = f.check_model_config(ckpt, MODEL_CONFIG)
    assert findings(ev) == [(FILE, tensor, f"shape {list(shape)} contradicts config.json, which implies {implies}")]


def test_check_model_config_bad_and_missing_values(tmp_path):
    config = {"hidden_size": 64, "head_dim": 16, "num_key_value_heads": True, "intermediate_size": "128",
              "vocab_size": 0, "num_hidden_layers": 2}  # no num_attention_heads
    t = model_tensors()
    t["layers.2.mlp.up_proj.weight"] = bf16(3, 3)
    ckpt, _ = open_ckpt(tmp_path, t, config=config)
    with ckpt:
        ev = f.check_model_config(ckpt, config)
    assert findings(ev) == [
        ("config.json", None, "'num_key_value_heads' is True, not a positive integer"),
        ("config.json", None, "'intermediate_size' is '128', not a positive integer"),
        ("config.json", None, "'vocab_size' is 0, not a positive integer"),
        ("config.json", None, "'num_attention_heads' is missing"),
        ("config.json", None, "num_hidden_layers is 2 but the tensors have layers [0, 2]"),
    ]
    # Only what the valid numbers imply is compared: the four hidden-size norms and q/k_norm.
    assert ev.measured == {"tensors_compared": 6, "layers": [0, 2]}


def test_check_model_config_head_dim_from_an_uneven_split(tmp_path):
    config = {"hidden_size": 64, "num_attention_heads": 3, "num_hidden_layers": 1}  # 64 // 3 = 21
    t = {"layers.0.self_attn.q_proj.weight": bf16(64, 64)}
    ckpt, _ = open_ckpt(tmp_path, t, config=config)
    with ckpt:
        ev = f.check_model_config(ckpt, config)
    assert findings(ev) == [(FILE, "layers.0.self_attn.q_proj.weight",
                             "shape [64, 64] contradicts config.json, which implies [63, 64]")]


def test_check_model_config_with_nothing_to_compare(tmp_path):
    config = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 0}
    ckpt, _ = open_ckpt(tmp_path, {"mystery.weight": bf16(3)}, config=config)
    with ckpt:
        ev = f.check_model_config(ckpt, config)
    assert findings(ev) == [
        ("config.json", None, "'num_hidden_layers' is 0, not a positive integer"),
        ("config.json", None, "no tensor could be compared with the config (unknown tensor names?)"),
    ]
    assert ev.measured == {"tensors_compared": 0, "layers": []}


SPEC = FormatSpec(element_dtype="F8_E4M3", scale_dtype="U8", block_size=32, scale_layout="row-major-unswizzled",
                  scale_recipe="modelopt", excluded_modules=("lm_head", "embed_tokens"), kv_cache_quant_algo=None)


def test_check_declared_format_names_every_disagreement():
    declared = {"block_size": 16, "scale_layout": "swizzled", "excluded_modules": ["lm_head"],
                "scale_recipe": "ocp-floor"}
    ev = f.check_declared_format(declared, SPEC, file="m.json")
    assert findings(ev) == [
        ("m.json", None, "block size 16, the profile says 32"),
        ("m.json", None, "scale layout 'swizzled', the profile says 'row-major-unswizzled'"),
        ("m.json", None, "does not exclude ['embed_tokens'], which the profile requires excluded"),
        ("m.json", None, "scale recipe 'ocp-floor', the profile pins 'modelopt'"),
    ]
    assert ev.measured == declared
    assert ev.expected == {"block_size": 32, "scale_layout": "row-major-unswizzled",
                           "excluded_modules": ["lm_head", "embed_tokens"], "scale_recipe": "modelopt"}
    assert ev.summary == "the manifest declares the profile's format (block size, layout, exclusions, recipe)"


def test_check_declared_format_agreement_and_defaults():
    declared = {"block_size": 32, "scale_layout": "row-major-unswizzled",
                "excluded_modules": ["embed_tokens", "lm_head", "extra"], "scale_recipe": None}
    assert f.check_declared_format(declared, SPEC).ok
    assert f.check_declared_format(dict(declared, scale_recipe="modelopt"), SPEC).ok
    # A profile that pins no recipe accepts any.
    assert f.check_declared_format(dict(declared, scale_recipe="ocp-floor"), replace(SPEC, scale_recipe=None)).ok
    ev = f.check_declared_format({}, SPEC)
    assert findings(ev) == [
        ("conversion_manifest.json", None, "block size None, the profile says 32"),
        ("conversion_manifest.json", None, "scale layout None, the profile says 'row-major-unswizzled'"),
        ("conversion_manifest.json", None, "does not exclude ['lm_head', 'embed_tokens'], which the profile "
                                           "requires excluded"),
    ]


def test_a_bias_next_to_a_linear_weight_is_not_a_linear_weight(tmp_path):
    t = good_tensors()
    t["layers.0.self_attn.q_proj.bias"] = torch.zeros(128, dtype=torch.bfloat16)  # 1-D, under a linear module
    t["layers.0.self_attn.o_proj.bias"] = torch.zeros(4, 4, dtype=torch.bfloat16)  # 2-D, but not a '.weight'
    t["layers.0.self_attn.k_proj.weight"] = torch.zeros(4, 64, dtype=torch.int8)  # a '.weight', not a float
    ckpt, qc = open_ckpt(tmp_path, t)
    with ckpt:
        ev = f.check_linear_coverage(ckpt, ["lm_head"], qc)
    assert ev.ok, ev.failure_text()
    assert ev.measured == {"quantized": 2, "unquantized_linear": 1}  # lm_head only


def test_check_model_config_without_heads_or_head_dim(tmp_path):
    config = {"hidden_size": 64, "num_hidden_layers": 1}
    ckpt, _ = open_ckpt(tmp_path, model_tensors(), config=config)
    with ckpt:
        ev = f.check_model_config(ckpt, config)
    assert findings(ev) == [("config.json", None, "'num_attention_heads' is missing")]
    assert ev.measured == {"tensors_compared": 4, "layers": [0]}  # the four hidden-size norms


# -- the quantization config as vLLM 0.32 reads it (config.json's block wins; ignore / kv_cache_scheme in it) ----

CFG_FILE = "config.json quantization_config"


def quant_findings(tmp_path, block=None, quant=None, kv="none") -> list[tuple[str | None, str | None, str]]:
    """The findings of check_quant_config on the good tensors with config.json's block ``block`` (None: no block)."""
    config = dict(CONFIG) if block is None else dict(CONFIG, quantization_config=block)
    root = write_checkpoint(tmp_path / "q", good_tensors(), config=config,
                            hf_quant=quant if quant is not None else hf_quant())
    with Checkpoint.open(root) as ckpt:
        ev = f.check_quant_config(ckpt, read_quant_config(root), excluded_modules=["lm_head"],
                                  kv_cache_quant_algo=None if kv == "none" else kv)
    return findings(ev)


FLAT = {"quant_method": "modelopt", "quant_algo": "MXFP8", "group_size": 32}


def test_config_json_ignore_is_what_is_excluded_even_beside_exclude_modules(tmp_path):
    got = quant_findings(tmp_path, {**FLAT, "ignore": ["lm_head", "*layers.0.*"], "exclude_modules": ["lm_head"]})
    assert (CFG_FILE, None, "exclude_modules is ['lm_head'] but ignore, which vLLM reads here, is ['lm_head', "
                            "'*layers.0.*']: vLLM excludes ['lm_head', '*layers.0.*']; a reader of the other key "
                            "would load another model") in got
    assert (CFG_FILE, "layers.0.self_attn.q_proj.weight",
            "quantized, but the config excludes it (pattern list ['lm_head', '*layers.0.*']): the runtime would read "
            "fp8 bytes as an unquantized weight") in got


def test_config_json_exclude_modules_alone_excludes_nothing(tmp_path):
    got = quant_findings(tmp_path, {**FLAT, "exclude_modules": ["lm_head"]})
    assert (CFG_FILE, "lm_head.weight", "unquantized linear weight is not in the config's exclusions: the runtime "
                                        "would look for MXFP8 scales") in got
    assert any(file == CFG_FILE and "vLLM excludes nothing" in msg for file, _, msg in got), got


def test_config_json_kv_cache_quant_algo_without_kv_cache_scheme_is_no_fp8_kv_cache(tmp_path):
    block = {**FLAT, "ignore": ["lm_head"], "kv_cache_quant_algo": "FP8"}
    quant = hf_quant(kv_cache_quant_algo="FP8")
    got = quant_findings(tmp_path, block, quant, kv="FP8")
    assert (CFG_FILE, None, "kv_cache_quant_algo is 'FP8' but kv_cache_scheme, which vLLM reads here, is absent: vLLM "
                            "runs a KV cache of None; a reader of the other key would load another model") in got
    assert (CFG_FILE, None, "kv_cache_quant_algo is None, the profile expects 'FP8'") in got
    assert (None, None, "hf_quant_config.json declares a KV cache of 'FP8' but config.json quantization_config one of "
                        "None: runtimes reading different files would disagree") in got
    scheme = {**FLAT, "ignore": ["lm_head"], "kv_cache_scheme": {"type": "float", "num_bits": 8, "dynamic": False}}
    assert quant_findings(tmp_path / "fp8", scheme, quant, kv="FP8") == []


def test_only_hf_quant_config_json_is_refused_as_vllm_does_not_detect_mxfp8_from_it(tmp_path):
    got = quant_findings(tmp_path, None)
    assert [m for file, _, m in got if file == "hf_quant_config.json"] == [
        "config.json has no quantization_config: vLLM 0.32 then reads hf_quant_config.json, from which it does not "
        "detect MXFP8 (it loads the FP8 bytes unquantized, or with producer 'modelopt' refuses 'Unknown ModelOpt "
        "quant algo: MXFP8'); declare the scheme in config.json's quantization_config"]


def test_the_block_vllm_reads_needs_quant_method_modelopt_and_no_modelopt_producer(tmp_path):
    block = {k: v for k, v in FLAT.items() if k != "quant_method"}
    got = quant_findings(tmp_path / "no_method", {**block, "ignore": ["lm_head"]})
    assert (CFG_FILE, None, "has no quant_method: vLLM detects ModelOpt MXFP8 only from quant_method 'modelopt' and "
                            "would load the FP8 bytes unquantized") in got
    nested = {"quant_method": "modelopt", "producer": {"name": "modelopt"},
              "quantization": {"quant_algo": "MXFP8", "kv_cache_quant_algo": None, "group_size": 32,
                               "exclude_modules": ["lm_head"]}}
    got = quant_findings(tmp_path / "producer", nested)
    assert got == [(CFG_FILE, None, "producer.name is 'modelopt': vLLM 0.32 then maps only FP8 and NVFP4 and refuses "
                                    "the checkpoint ('Unknown ModelOpt quant algo: MXFP8')")]


def test_an_exclusion_pattern_vllm_matches_as_a_substring_is_refused(tmp_path):
    quant = hf_quant(exclude=("lm_head", "self_attn.q_proj"))
    got = quant_findings(tmp_path, {**FLAT, "ignore": ["lm_head", "self_attn.q_proj"]}, quant)
    message = ("exclusion pattern 'self_attn.q_proj' also excludes 'layers.0.self_attn.q_proj' in vLLM, which matches "
               "a pattern anywhere in a module's name: name modules exactly")
    assert (CFG_FILE, None, message) in got and ("hf_quant_config.json", None, message) in got
