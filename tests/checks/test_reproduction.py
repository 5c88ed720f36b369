"""Bit-exact reproduction against independent producers: our converter, torchao's to_mx, hand-made damage."""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file

from fixtures.corpus import swizzle_scales
from qualify.checkpoint.checksums import folder_revision
from qualify.checkpoint.manifest import load_manifest
from qualify.checkpoint.safetensors_io import Checkpoint
from qualify.checks import reproduction as r
from qualify.errors import CheckpointError
from qualify.mxfp8 import codec as mxfp8
from qualify.profile import load_profile
from qualify.release.convert import describe_conversion
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
        assert good.measured["quantized_identical"] == good.measured["quantized_tensors"] == 19
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
    assert ev.measured["quantized_identical"] == 18


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
    # The source is another folder than the fixture's, so a profile must pin its repository and
    # its content for the run to prove where it came from.
    revision = folder_revision(src)
    text = load_profile("fixture").path.read_text()
    shipped = load_profile("fixture").source
    profile = tmp_path / "foreign.toml"
    profile.write_text(text.replace('name = "fixture"', 'name = "foreign"', 1)
                       .replace(f'repo = "{shipped.repo}"', 'repo = "t/src"', 1)
                       .replace(f'"{shipped.revision}"', f'"{revision}"'))
    proc = run_qualify("manifest", str(src), str(out), "--source-repo", "t/src", "--source-revision", revision)
    assert proc.returncode == 0, proc.stderr
    assert "scale recipe ocp-floor" in proc.stdout
    check = run_qualify("check", str(out), "--source", str(src), "--profile", str(profile),
                        "--report-dir", str(tmp_path / "r"))
    assert check.returncode == 0, check.stdout + check.stderr
    assert "reproduction  passed" in check.stdout


def u8(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8).reshape(-1)


def test_a_swizzled_scale_layout_is_named():
    src = torch.randn(128, 128, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    q = mxfp8.quantize(src, "modelopt")
    res = r.compare_quantized("w", src, u8(q.data), u8(swizzle_scales(q.scale)), "modelopt")
    assert res.scale_bytes_differ and not res.weight_bytes_differ
    assert res.cause == ("the scale bytes are right but in the wrong order: a swizzled (tiled) scale layout, not "
                         "row-major unswizzled")


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


# --------------------------------------------------------------------------- exact results
# Each case pins the whole result (counts, positions, cause, message), so a comparison that
# miscounts, stops early or gives the wrong reason is caught (from mutation testing; see the
# README's reliability section).

MODELOPT, FLOOR = mxfp8.ScaleRecipe.MODELOPT, mxfp8.ScaleRecipe.OCP_FLOOR


def source_weight(n=64, k=64, seed=5):
    return torch.randn(n, k, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


def test_byte_diff_and_result_text():
    d = r.ByteDiff("w", (1, 2), 0x7, 0xAB, 0.123456789)
    assert str(d) == "w[1, 2]: expected 0x07, found 0xab (source value 0.123457)"
    assert str(r.ByteDiff("s", (3,), 0x10, 0x11)) == "s[3]: expected 0x10, found 0x11"
    res = r.TensorResult("w", "quantized", weight_bytes=10, weight_bytes_differ=2, scale_bytes=4, scale_bytes_differ=1,
                         diffs=[r.ByteDiff("w", (i,), 0, 1) for i in range(7)], cause="a reason")
    first = ", ".join(f"w[{i}]: expected 0x00, found 0x01" for i in range(5))
    assert res.describe() == (f"2 of 10 weight bytes differ; 1 of 4 scale bytes differ; first: {first}. "
                              "Most likely cause: a reason")
    assert not res.identical
    assert r.TensorResult("w", "kept").describe() == "identical" and r.TensorResult("w", "kept").identical
    assert r.TensorResult("w", "kept", scale_bytes_differ=1).describe() == "1 of 0 scale bytes differ"
    assert not r.TensorResult("w", "kept", scale_bytes_differ=1).identical
    broken = r.TensorResult("w", "kept", problem="no such tensor", weight_bytes_differ=3)
    assert broken.describe() == "no such tensor" and not broken.identical


def test_same_bytes_compares_every_byte():
    a = torch.arange(20, dtype=torch.uint8)
    assert r.same_bytes(a, a.clone())
    assert not r.same_bytes(a, a[:19].clone())
    for i in (0, 7, 8, 15, 16, 19):  # in the 8-byte words and in the tail
        b = a.clone()
        b[i] ^= 1
        assert not r.same_bytes(a, b), i
    odd = torch.arange(21, dtype=torch.uint8)[1:]  # an offset torch cannot view as int64
    assert r.same_bytes(odd, odd.clone()) and not r.same_bytes(odd, a)
    assert r.same_bytes(torch.empty(0, dtype=torch.uint8), torch.empty(0, dtype=torch.uint8))


def test_counting_differences_across_chunks(monkeypatch):
    monkeypatch.setattr(r, "_COUNT_CHUNK", 4)
    a = torch.zeros(20, dtype=torch.uint8)
    b = a.clone()
    for i in (1, 2, 9, 12, 13, 14, 19):
        b[i] = 1
    assert r._count_differing(a, b) == (7, [1, 2, 9, 12, 13])
    assert r._count_differing(a, a) == (0, [])


def test_differences_are_located_in_the_tensor_shape():
    src = source_weight(4, 32)
    exp = torch.zeros(128, dtype=torch.uint8)
    found = exp.clone()
    found[33], found[127] = 5, 6
    n, diffs = r._positions("w", exp, found, (4, 32), src)
    assert n == 2 and [(d.index, d.expected, d.found) for d in diffs] == [((1, 1), 0, 5), ((3, 31), 0, 6)]
    assert [d.source_value for d in diffs] == [float(src[1, 1]), float(src[3, 31])]
    n, diffs = r._positions("w_scale", exp, found, (4, 32), None)
    assert n == 2 and [d.source_value for d in diffs] == [None, None]
    assert r._positions("w", exp, exp, (4, 32), src) == (0, [])


def test_compare_quantized_identical_and_wrong_size():
    src = source_weight()
    q = mxfp8.quantize(src, MODELOPT)
    same = r.compare_quantized("w", src, u8(q.data), u8(q.scale), MODELOPT)
    assert same.identical and (same.weight_bytes, same.scale_bytes) == (4096, 128)
    assert (same.diffs, same.cause, same.explained_by) == ([], None, None)
    short = r.compare_quantized("w", src, u8(q.data)[:10], u8(q.scale), MODELOPT)
    assert short.problem == "sizes differ: found 10 weight and 128 scale bytes, the source quantizes to 4096 and 128"
    short = r.compare_quantized("w", src, u8(q.data), u8(q.scale)[:3], MODELOPT)
    assert short.problem == "sizes differ: found 4096 weight and 3 scale bytes, the source quantizes to 4096 and 128"


def test_another_recipe_is_named_as_the_producer():
    src = source_weight()
    o = mxfp8.quantize(src, FLOOR)
    res = r.compare_quantized("w", src, u8(o.data), u8(o.scale), MODELOPT)
    assert (res.weight_bytes_differ, res.scale_bytes_differ) == (704, 22)
    assert res.cause == "produced with the 'ocp-floor' scale recipe, not 'modelopt'"
    assert res.explained_by == "ocp-floor"
    # Scale differences come first in the positions listed, then the weight's.
    assert [d.tensor for d in res.diffs] == ["w_scale"] * 5
    q = mxfp8.quantize(src, MODELOPT)
    back = r.compare_quantized("w", src, u8(q.data), u8(q.scale), FLOOR)
    assert back.explained_by == "modelopt"


def test_scale_only_differences_are_diagnosed():
    src = source_weight()
    q = mxfp8.quantize(src, MODELOPT)
    s = u8(q.scale).clone()
    s[3] += 1
    s[7] += 1
    res = r.compare_quantized("w", src, u8(q.data), s, MODELOPT)
    assert res.describe() == (
        "2 of 128 scale bytes differ; first: w_scale[1, 1]: expected 0x78, found 0x79, w_scale[3, 1]: expected "
        "0x78, found 0x79. Most likely cause: 2 block scale(s) off by +1 exponent(s) while the elements match: a "
        "scale rule that rounds differently at block boundaries, or edited scales")
    assert res.explained_by is None
    s[7] -= 3
    res = r.compare_quantized("w", src, u8(q.data), s, MODELOPT)
    assert res.cause == "scale bytes differ while the elements match: scales were computed or stored differently"
    s = u8(q.scale).clone()
    s[3] -= 2
    assert r.compare_quantized("w", src, u8(q.data), s, MODELOPT).cause.startswith(
        "1 block scale(s) off by -2 exponent(s)")


def test_weight_only_differences_are_diagnosed():
    src = source_weight()
    q = mxfp8.quantize(src, MODELOPT)
    few = u8(q.data).clone()
    few[:16] ^= 1
    res = r.compare_quantized("w", src, few, u8(q.scale), MODELOPT)
    assert res.cause == "a few isolated weight bytes changed after quantization (corruption or an edited file)"
    assert [d.index for d in res.diffs] == [(0, i) for i in range(5)]
    more = u8(q.data).clone()
    more[:17] ^= 1
    assert r.compare_quantized("w", src, more, u8(q.scale), MODELOPT).cause == (
        "the quantizer that made these bytes rounds differently from every known recipe")
    most = u8(q.data).clone()
    most[:2049] ^= 1
    assert r.compare_quantized("w", src, most, u8(q.scale), MODELOPT).cause == (
        "most bytes differ: the source is not the one this checkpoint was made from (another revision?), or the "
        "weight was not quantized from it")
    half = u8(q.data).clone()
    half[:2048] ^= 1
    assert r.compare_quantized("w", src, half, u8(q.scale), MODELOPT).cause.startswith("the quantizer that made")


def test_weight_and_scale_differences_without_a_known_cause():
    src = source_weight()
    q = mxfp8.quantize(src, MODELOPT)
    d, s = u8(q.data).clone(), u8(q.scale).clone()
    d[5] ^= 1
    s[0] += 1
    res = r.compare_quantized("w", src, d, s, MODELOPT)
    assert (res.weight_bytes_differ, res.scale_bytes_differ) == (1, 1)
    assert res.cause == "the quantizer that made these bytes rounds differently from every known recipe"
    assert [x.tensor for x in res.diffs] == ["w_scale", "w"]


def test_a_clamped_block_scaled_by_another_factor_is_named():
    src = source_weight(32, 64)
    w = src.clone()
    w[0, :32] = 1e-39  # subnormal block: its scale byte is 0 (exponent clamped at -127)
    q = mxfp8.quantize(w, MODELOPT)
    assert int(u8(q.scale)[0]) == 0
    d = u8(q.data).clone()
    d[3] ^= 1
    res = r.compare_quantized("w", w, d, u8(q.scale), MODELOPT)
    assert res.cause == (
        "the differing elements all sit in 1 block(s) whose scale byte is 0 (exponent clamped at -127): the producer "
        "scales such blocks' elements by another factor (1.0 in TransformerEngine and torchao RCEIL, 2**126 in "
        "torchao FLOOR) than OCP's 2**127")
    d[40] ^= 1  # and one in a normal block: not that explanation
    assert not r.compare_quantized("w", w, d, u8(q.scale), MODELOPT).cause.startswith("the differing elements")


def test_a_transposed_square_weight_is_named_only_when_rows_block():
    src = source_weight(64, 64)
    t = mxfp8.quantize(src.t().contiguous(), MODELOPT)
    q = mxfp8.quantize(src, MODELOPT)
    res = r.compare_quantized("w", src, u8(t.data), u8(q.scale), MODELOPT)
    assert res.cause == "the weight was quantized transposed: blocks must run along the input dimension K of [N, K]"
    # The transposed weight is re-quantized with the recipe compared with, not a default one.
    tf, qf = mxfp8.quantize(src.t().contiguous(), FLOOR), mxfp8.quantize(src, FLOOR)
    assert r.compare_quantized("w", src, u8(tf.data), u8(qf.scale), FLOOR).cause.startswith(
        "the weight was quantized transposed")
    # 48 rows do not block along N: the transposed explanation is not tried (it could not be quantized).
    odd = source_weight(48, 64)
    q = mxfp8.quantize(odd, MODELOPT)
    flipped = u8(mxfp8.quantize(odd.flip(0), MODELOPT).data)
    assert r.compare_quantized("w", odd, flipped, u8(q.scale), MODELOPT).cause.startswith("most bytes differ")


def two_checkpoints(tmp_path, out_tensors, src_tensors):
    return (Checkpoint.open(write_checkpoint(tmp_path / "out", out_tensors)),
            Checkpoint.open(write_checkpoint(tmp_path / "src", src_tensors)))


def test_compare_unquantized_exactly(tmp_path):
    norm = torch.ones(40, dtype=torch.bfloat16)
    changed = norm.clone()
    changed[3] = 2.0
    changed[30] = 3.0
    out, src = two_checkpoints(tmp_path, {"a": norm, "b": changed, "c": norm.float(), "d": norm[:20].clone()},
                               {"a": norm, "b": norm, "c": norm, "d": norm})
    with out, src:
        same = r.compare_unquantized("a", "kept", src, out)
        assert same.identical and same.weight_bytes == 80 and same.diffs == []
        diff = r.compare_unquantized("b", "excluded", src, out)
        assert (diff.weight_bytes, diff.weight_bytes_differ) == (80, 4)
        assert [str(x) for x in diff.diffs] == ["b[6]: expected 0x80, found 0x00"]
        assert diff.cause == "a excluded tensor must be byte-identical to the source"
        assert r.compare_unquantized("c", "kept", src, out).problem == (
            "kept tensor is F32 [40] but the source has BF16 [40]; it must be copied unchanged")
        assert r.compare_unquantized("d", "kept", src, out).problem == (
            "kept tensor is BF16 [20] but the source has BF16 [40]; it must be copied unchanged")


def quantized_pair(name, w, recipe=MODELOPT):
    q = mxfp8.quantize(w, recipe)
    return {name: q.data, name + "_scale": q.scale}


def test_plan_and_recipe_detection(tmp_path):
    a, b, c, d = (source_weight(seed=s) for s in (1, 2, 3, 4))
    out_t = {**quantized_pair("a.weight", a, FLOOR), **quantized_pair("b.weight", b, FLOOR),
             **quantized_pair("c.weight", c, FLOOR), **quantized_pair("d.weight", d),
             "norm.weight": torch.ones(4, dtype=torch.bfloat16), "extra.weight": torch.ones(4, dtype=torch.bfloat16)}
    out, src = two_checkpoints(tmp_path, out_t, {"a.weight": a, "b.weight": b, "c.weight": c, "d.weight": d,
                                                 "norm.weight": torch.ones(4, dtype=torch.bfloat16)})
    with out, src:
        plan = r.plan_from_checkpoint(out, src)
        assert plan == [r.PlanItem("a.weight", "quantized"), r.PlanItem("b.weight", "quantized"),
                        r.PlanItem("c.weight", "quantized"), r.PlanItem("d.weight", "quantized"),
                        r.PlanItem("norm.weight", "kept")]
        # Only the first three quantized tensors are probed: d (modelopt) does not count.
        assert r.resolve_recipe(plan, out, src, None) == (FLOOR, "detected", {"modelopt": 0, "ocp-floor": 3})
        assert r.resolve_recipe(plan, out, src, "modelopt") == (MODELOPT, "declared", {})
        only_d = [r.PlanItem("d.weight", "quantized")]
        assert r.resolve_recipe(only_d, out, src, None) == (MODELOPT, "detected", {"modelopt": 1, "ocp-floor": 0})
        assert r.resolve_recipe([], out, src, None) == (None, "detected", {"modelopt": 0, "ocp-floor": 0})


def test_recipe_detection_skips_unreadable_probes(tmp_path, monkeypatch):
    a, b = source_weight(seed=1), source_weight(seed=2)
    out, src = two_checkpoints(tmp_path, {**quantized_pair("a.weight", a), **quantized_pair("b.weight", b)},
                               {"a.weight": a, "b.weight": b})
    real = r.compare_quantized

    def flaky(name, *args):
        if name == "a.weight":
            raise CheckpointError("unreadable", file="model.safetensors")
        return real(name, *args)

    monkeypatch.setattr(r, "compare_quantized", flaky)
    plan = [r.PlanItem("a.weight", "quantized"), r.PlanItem("b.weight", "quantized")]
    with out, src:
        assert r.resolve_recipe(plan, out, src, None) == (MODELOPT, "detected", {"modelopt": 1, "ocp-floor": 0})


def test_reproduce_one_names_what_is_missing(tmp_path):
    a = source_weight()
    q = mxfp8.quantize(a, MODELOPT)
    out, src = two_checkpoints(tmp_path, {"a.weight": q.data, "b.weight": q.data, "n": torch.ones(2)},
                               {"a.weight": a, "n": torch.ones(2), "gone": torch.ones(2)})
    with out, src:
        one = lambda name, action="quantized": r._reproduce_one(r.PlanItem(name, action), out, src, MODELOPT)  # noqa: E731
        for name, action, problem in [("b.weight", "quantized", "the source has no such tensor"),
                                      ("gone", "kept", "the checkpoint has no such tensor"),
                                      ("a.weight", "quantized", "the checkpoint has no 'a.weight_scale'")]:
            got = one(name, action)
            assert (got.name, got.action, got.problem) == (name, action, problem)
        assert one("n", "kept").identical and one("n", "kept").action == "kept"


def test_reproduce_one_reports_an_unreadable_tensor(tmp_path, monkeypatch):
    a = source_weight()
    out, src = two_checkpoints(tmp_path, quantized_pair("a.weight", a), {"a.weight": a})

    def unreadable(*args):
        raise CheckpointError("bytes past the end of the file", file="model.safetensors", tensor="a.weight")

    monkeypatch.setattr(r, "compare_quantized", unreadable)
    with out, src:
        got = r._reproduce_one(r.PlanItem("a.weight", "quantized"), out, src, MODELOPT)
    assert (got.name, got.action, got.problem) == ("a.weight", "quantized", "bytes past the end of the file")


def test_an_empty_tensor_is_compared_without_error(tmp_path):
    empty = torch.zeros(0, dtype=torch.bfloat16)
    out, src = two_checkpoints(tmp_path, {"e": empty}, {"e": empty})
    with out, src:
        got = r.compare_unquantized("e", "kept", src, out)
    assert got.identical and got.weight_bytes == 0


def test_the_tensor_that_cannot_be_quantized_is_named():
    from qualify.errors import QuantizationError

    with pytest.raises(QuantizationError) as err:
        r.compare_quantized("bad.weight", torch.ones(4, 48, dtype=torch.bfloat16), torch.zeros(1, dtype=torch.uint8),
                            torch.zeros(1, dtype=torch.uint8), MODELOPT)
    assert err.value.tensor == "bad.weight"


def test_summarize_counts_by_kind():
    results = [
        r.TensorResult("a", "quantized", weight_bytes=10, weight_bytes_differ=2, scale_bytes=3, scale_bytes_differ=1),
        r.TensorResult("b", "quantized", weight_bytes=5, scale_bytes=2),
        r.TensorResult("c", "kept", weight_bytes=7),
        r.TensorResult("d", "excluded", weight_bytes=4, weight_bytes_differ=4),
    ]
    assert r.summarize(results) == {
        "quantized_tensors": 2, "quantized_identical": 1, "weight_bytes_compared": 15, "weight_bytes_differing": 2,
        "scale_bytes_compared": 5, "scale_bytes_differing": 1, "unquantized_tensors": 2,
        "unquantized_identical": 1, "unquantized_bytes_compared": 11,
    }


def test_check_quantized_exactly(tmp_path):
    a, b = source_weight(seed=1), source_weight(seed=2)
    out, src = two_checkpoints(tmp_path, {**quantized_pair("a.weight", a, FLOOR), **quantized_pair("b.weight", b)},
                               {"a.weight": a, "b.weight": b})
    plan = [r.PlanItem("a.weight", "quantized"), r.PlanItem("b.weight", "quantized")]
    with out, src:
        ev = r.check_quantized(plan, out, src, declared_recipe="modelopt", source_revision="abc")
        assert [(f.file, f.tensor) for f in ev.findings] == [(None, None), ("model.safetensors", "a.weight")]
        assert ev.findings[1].message.endswith("Most likely cause: produced with the 'ocp-floor' scale recipe, not "
                                               "'modelopt'")
        assert ev.measured["explained_by_other_recipe"] == {"ocp-floor": 1}
        assert {k: ev.measured[k] for k in ("source_revision", "recipe", "recipe_chosen")} == {
            "source_revision": "abc", "recipe": "modelopt", "recipe_chosen": "declared"}
        assert "recipe_probe" not in ev.measured
        assert ev.measured["quantized_tensors"] == 2 and ev.measured["quantized_identical"] == 1
        assert ev.summary == ("re-quantizing the source with the reference MXFP8 quantizer reproduces every weight "
                              "and scale byte")
        both = r.check_quantized(plan[:1], out, src, declared_recipe="modelopt", source_revision=None)
        assert [f.tensor for f in both.findings] == [None, "a.weight"]
        assert both.findings[0].message == ("every differing tensor (1) is reproduced exactly by the 'ocp-floor' "
                                            "recipe: the checkpoint was made with 'ocp-floor', not the 'modelopt' "
                                            "it was compared with")
        detected = r.check_quantized(plan, out, src, declared_recipe=None, source_revision=None)
        assert detected.measured["recipe_probe"] == {"modelopt": 1, "ocp-floor": 1}
        assert detected.measured["recipe_chosen"] == "detected" and detected.measured["recipe"] == "modelopt"
        # One tensor explained by another recipe, another not: no conclusion about the whole checkpoint.
        c = source_weight(seed=3)
        qc = mxfp8.quantize(c, MODELOPT)
        damaged = u8(qc.data).clone()
        damaged[:3] ^= 1
        out2, src2 = two_checkpoints(tmp_path / "mixed", {**quantized_pair("a.weight", a, FLOOR),
                                                          "c.weight": damaged.view(torch.float8_e4m3fn).reshape(64, 64),
                                                          "c.weight_scale": qc.scale}, {"a.weight": a, "c.weight": c})
        with out2, src2:
            mixed = r.check_quantized([plan[0], r.PlanItem("c.weight", "quantized")], out2, src2,
                                      declared_recipe="modelopt", source_revision=None)
        assert [f.tensor for f in mixed.findings] == ["a.weight", "c.weight"]
        assert mixed.measured["explained_by_other_recipe"] == {"ocp-floor": 1}
        nothing = r.check_quantized([r.PlanItem("n", "kept")], out, src, declared_recipe=None, source_revision="x")
        assert [f.message for f in nothing.findings] == ["no tensor is marked quantized: there is nothing to reproduce"]
        assert nothing.measured == {"source_revision": "x"}


def test_check_quantized_when_nothing_reproduces(tmp_path):
    a, b = source_weight(seed=1), source_weight(seed=2)
    q = mxfp8.quantize(a, MODELOPT)
    d = u8(q.data).clone()
    d[:40] ^= 1
    out, src = two_checkpoints(tmp_path, {"a.weight": d.view(torch.float8_e4m3fn).reshape(64, 64),
                                          "a.weight_scale": q.scale}, {"a.weight": a, "b.weight": b})
    plan = [r.PlanItem("a.weight", "quantized"), r.PlanItem("b.weight", "quantized")]
    with out, src:
        ev = r.check_quantized(plan, out, src, declared_recipe=None, source_revision=None)
    assert [f.tensor for f in ev.findings] == [None, None, "a.weight", "b.weight"]
    assert ev.findings[0].message == (
        "no quantized tensor reproduces: the source is probably not the revision this checkpoint was converted from "
        "(see structure.source_checksums), or it was made by an unknown quantizer")
    assert ev.findings[1].message == (
        "no known recipe (modelopt, ocp-floor) reproduces the first quantized tensors; the checkpoint was made by a "
        "quantizer whose rounding is not one of them, or from another source")
    assert ev.findings[3].message == "the checkpoint has no such tensor" and ev.findings[3].file is None
    assert ev.measured["recipe"] is None and ev.measured["recipe_probe"] == {"modelopt": 0, "ocp-floor": 0}
    assert "explained_by_other_recipe" not in ev.measured


def test_check_unquantized_exactly(tmp_path):
    norm = torch.ones(8, dtype=torch.bfloat16)
    out, src = two_checkpoints(tmp_path, {"n": norm, "m": norm * 2}, {"n": norm, "m": norm, "x": norm})
    plan = [r.PlanItem("n", "kept"), r.PlanItem("m", "excluded"), r.PlanItem("x", "kept"),
            r.PlanItem("q", "quantized")]
    with out, src:
        ev = r.check_unquantized(plan, out, src)
        none = r.check_unquantized(plan[3:], out, src)
    assert [(f.file, f.tensor, f.message) for f in ev.findings] == [
        ("model.safetensors", "m", "16 of 16 weight bytes differ; first: m[0]: expected 0x80, found 0x00. Most "
                                   "likely cause: a excluded tensor must be byte-identical to the source"),
        (None, "x", "the checkpoint has no such tensor"),
    ]
    assert ev.measured == {"unquantized_tensors": 3, "unquantized_identical": 1, "unquantized_bytes_compared": 32}
    assert ev.summary == "kept and excluded tensors are byte-identical to the source"
    assert [f.message for f in none.findings] == [
        "no kept or excluded tensor: an MXFP8 draft keeps at least its norms and lm_head unquantized"]
