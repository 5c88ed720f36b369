"""Bit-exact reproduction against independent producers: our converter, torchao's to_mx, hand-made damage."""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file

from fixtures.corpus import swizzle_scales
from qualify import mxfp8
from qualify import reproduce as r
from qualify.convert import describe_conversion
from qualify.manifest import load_manifest
from qualify.profile import load_profile
from qualify.safetensors_io import Checkpoint
from tests.helpers import FIXTURE, run_qualify, write_checkpoint

REVISION = load_profile("fixture").source_revision  # the shipped fixture source's stand-in commit
PLANTED = "layers.0.self_attn.q_proj.weight"  # carries BF16-subnormal blocks (scale byte 0)


def torchao_to_mx():
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.mx_tensor import to_mx

    return to_mx, ScaleCalculationMode


def write_dir(root, tensors, like=FIXTURE / "mxfp8"):
    """A checkpoint directory with ``tensors`` and the fixture's configs (no manifest)."""
    write_checkpoint(root, tensors)
    for name in ("config.json", "hf_quant_config.json"):
        shutil.copyfile(like / name, root / name)
    return root


def without_subnormal_blocks(src_dir, dest):
    """The fixture source with the planted scale-byte-0 blocks zeroed (they are where torchao differs by design)."""
    tensors = load_file(str(src_dir / "model.safetensors"))
    w = tensors[PLANTED].clone()
    w[1, 0:32] = 0
    tensors[PLANTED] = w
    write_checkpoint(dest, tensors)
    shutil.copyfile(src_dir / "config.json", dest / "config.json")
    return dest


def torchao_checkpoint(source_dir, dest, mode):
    to_mx, modes = torchao_to_mx()
    quantized = {t.source_name for t in load_manifest(FIXTURE / "mxfp8").quantized}
    out = {}
    for name, t in load_file(str(source_dir / "model.safetensors")).items():
        if name in quantized:
            scale, data = to_mx(t.contiguous(), torch.float8_e4m3fn, 32, getattr(modes, mode))
            out[name] = data.contiguous()
            out[name + "_scale"] = scale.view(torch.uint8).reshape(t.shape[0], -1).contiguous()
        else:
            out[name] = t
    return write_dir(dest, out)


@pytest.mark.parametrize(
    ("mode", "recipe", "other"), [("RCEIL", "modelopt", "ocp-floor"), ("FLOOR", "ocp-floor", "modelopt")]
)
def test_torchao_outputs_reproduce_with_the_matching_recipe_only(tmp_path, mode, recipe, other):
    src = without_subnormal_blocks(FIXTURE / "source", tmp_path / "source")
    out = torchao_checkpoint(src, tmp_path / "torchao", mode)
    manifest = describe_conversion(src, out, source_repo="t/src", source_revision=REVISION)
    assert manifest["quantization"]["scale_recipe"] == recipe  # detected, not declared
    plan = [r.PlanItem(t["source_name"], t["action"]) for t in manifest["tensors"]]
    with Checkpoint.open(out) as c, Checkpoint.open(src) as s:
        good = r.check_quantized(plan, c, s, declared_recipe=recipe, source_revision=REVISION)
        assert good.ok, good.failure_text()
        assert good.measured["quantized_identical"] == good.measured["quantized_tensors"] == 20
        bad = r.check_quantized(plan, c, s, declared_recipe=other, source_revision=REVISION)
        assert not bad.ok
        assert f"reproduced exactly by the '{recipe}' recipe" in bad.findings[0].message
        assert r.check_unquantized(plan, c, s).ok


def test_torchao_rceil_differs_on_scale_byte_zero_blocks_and_says_why(tmp_path):
    out = torchao_checkpoint(FIXTURE / "source", tmp_path / "torchao", "RCEIL")
    plan = [r.PlanItem(t.source_name, t.action) for t in load_manifest(FIXTURE / "mxfp8").tensors]
    with Checkpoint.open(out) as c, Checkpoint.open(FIXTURE / "source") as s:
        ev = r.check_quantized(plan, c, s, declared_recipe="modelopt", source_revision=REVISION)
    assert [f.tensor for f in ev.findings] == [PLANTED]
    assert "block(s) whose scale byte is 0" in ev.findings[0].message
    assert ev.measured["quantized_identical"] == 19


@pytest.mark.slow
def test_convert_cli_reproduces_the_shipped_fixture_bytes(tmp_path):
    out = tmp_path / "converted"
    proc = run_qualify("convert", str(FIXTURE / "source"), str(out), "--source-repo", "qualify-fixtures/dflash2-tiny",
                       "--source-revision", REVISION)
    assert proc.returncode == 0, proc.stderr
    for p in (FIXTURE / "mxfp8").iterdir():
        assert (out / p.name).read_bytes() == p.read_bytes(), p.name
    again = run_qualify("convert", str(FIXTURE / "source"), str(out), "--source-repo", "a/b", "--source-revision",
                        REVISION)
    assert again.returncode == 2 and "refusing to overwrite" in again.stderr
    bad = run_qualify("convert", str(FIXTURE / "source"), str(tmp_path / "x"), "--source-repo", "a/b",
                      "--source-revision", "main")
    assert bad.returncode == 2 and "not a 40-hex commit" in bad.stderr


@pytest.mark.slow
def test_manifest_cli_then_check_qualifies_a_foreign_conversion(tmp_path):
    src = without_subnormal_blocks(FIXTURE / "source", tmp_path / "source")
    out = torchao_checkpoint(src, tmp_path / "torchao", "FLOOR")
    proc = run_qualify("manifest", str(src), str(out), "--source-repo", "t/src", "--source-revision", REVISION)
    assert proc.returncode == 0, proc.stderr
    assert "scale recipe ocp-floor" in proc.stdout
    check = run_qualify("check", str(out), "--source", str(src), "--report-dir", str(tmp_path / "r"))
    assert check.returncode == 0, check.stdout + check.stderr
    assert "reproduction  passed" in check.stdout


def test_k_not_multiple_of_32_is_refused_by_the_converter(tmp_path):
    from qualify.convert import convert
    from qualify.errors import QuantizationError

    src = write_dir(tmp_path / "src", {"layers.0.mlp.up_proj.weight": torch.ones(8, 48, dtype=torch.bfloat16)})
    with pytest.raises(QuantizationError, match="K = 48 is not a multiple of 32"):
        convert(src, tmp_path / "out", source_repo="a/b", source_revision=REVISION)
    assert not (tmp_path / "out").exists()


def u8(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8).reshape(-1)


def test_a_swizzled_scale_layout_is_named():
    src = torch.randn(128, 128, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    q = mxfp8.quantize(src, "modelopt")
    res = r.compare_quantized("w", src, u8(q.data), u8(swizzle_scales(q.scale)), "modelopt")
    assert res.scale_bytes_differ and not res.weight_bytes_differ
    assert "swizzled" in res.cause


def test_a_transposed_weight_is_named():
    src = torch.randn(64, 96, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    t = mxfp8.quantize(src.t().contiguous(), "modelopt")
    res = r.compare_quantized("w", src, u8(t.data), u8(t.scale), "modelopt")
    assert "quantized transposed" in res.cause


def test_differences_list_positions_with_source_values():
    src = torch.randn(32, 64, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    q = mxfp8.quantize(src, "modelopt")
    data = u8(q.data).clone()
    data[70] ^= 0x02
    res = r.compare_quantized("w", src, data, u8(q.scale), "modelopt")
    assert res.weight_bytes_differ == 1 and res.diffs[0].index == (1, 6)
    assert res.diffs[0].source_value == pytest.approx(float(src[1, 6]))
    assert "w[1, 6]: expected 0x" in res.describe() and "isolated weight bytes" in res.describe()
