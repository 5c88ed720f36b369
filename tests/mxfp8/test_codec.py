"""Tests of qualify.mxfp8.codec against a slow scalar reference written from the spec, and
against torchao's ``to_mx``.

The reference below uses no torch arithmetic: exponents come from exact rational
arithmetic (``fractions.Fraction``) and ``math.frexp``, and E4M3 bytes from an encoder
built on the bit layout (1 sign, 4 exponent bits with bias 7, 3 mantissa bits, no
infinities, 0x7F/0xFF NaN, max 448, subnormal quantum 2**-9) with Python's
round-half-even ``round``. It is deliberately a different route from the
implementation's bit tricks, so that agreement means something.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qualify.errors import CheckpointError, QuantizationError
from qualify.mxfp8 import codec as mxfp8
from qualify.mxfp8.codec import (
    E4M3_MAX,
    E8M0_NAN,
    RECIPES,
    MXFP8Weight,
    ScaleRecipe,
    block_exponents,
    dequantize,
    e8m0_decode,
    e8m0_encode,
    fp8_nan_mask,
    parse_recipe,
    quantize,
)

TORCHAO_VERSION = "0.18.0"

# -- the scalar reference ----------------------------------------------------------


def ref_round_float32(value: Fraction) -> float:
    """``value`` (non-negative) rounded to float32, nearest-even, subnormals kept."""
    if value == 0:
        return 0.0
    p = value.numerator.bit_length() - value.denominator.bit_length()
    if value < Fraction(2) ** p:
        p -= 1  # now 2**p <= value < 2**(p + 1)
    quantum = max(p - 23, -149)
    return math.ldexp(round(value / Fraction(2) ** quantum), quantum)


def ref_exponent(amax: float, recipe: str) -> int:
    """The block's unbiased scale exponent, straight from the recipe's definition."""
    if recipe == "modelopt":
        descale = ref_round_float32(Fraction(amax) / 448)  # ModelOpt divides in float32
        if descale == 0:
            exponent = -127
        else:
            mantissa, p = math.frexp(descale)  # descale = mantissa * 2**p, 0.5 <= mantissa < 1
            exponent = p - 1 if mantissa == 0.5 else p  # ceil(log2(descale))
    else:
        exponent = -127 if amax == 0 else math.frexp(amax)[1] - 1 - 8  # floor(log2(amax)) - emax
    return min(max(exponent, -127), 127)


def ref_e4m3_byte(value: float) -> int:
    """E4M3FN byte of ``value``: saturate to 448, then round to nearest, ties to even."""
    sign = 0x80 if math.copysign(1.0, value) < 0 else 0
    magnitude = min(abs(value), 448.0)
    if magnitude == 0:
        return sign
    binade = math.frexp(magnitude)[1] - 1
    quantum = max(binade - 3, -9)  # 3 mantissa bits; subnormals share the 2**-9 quantum
    steps = round(math.ldexp(magnitude, -quantum))  # exact scaling, then half-even
    if steps == 16:  # rounded up into the next binade
        steps, quantum = 8, quantum + 1
    if steps >= 8:
        field, mantissa = quantum + 3 + 7, steps - 8
    else:
        field, mantissa = 0, steps
    assert 0 <= field <= 15 and (field, mantissa) != (15, 7), value
    return sign | field << 3 | mantissa


def ref_e4m3_value(byte: int) -> float:
    field, mantissa = (byte >> 3) & 0xF, byte & 0x7
    if field == 15 and mantissa == 7:
        return math.nan
    magnitude = math.ldexp(mantissa, -9) if field == 0 else math.ldexp(8 + mantissa, field - 7 - 3)
    return -magnitude if byte & 0x80 else magnitude


def ref_quantize_block(values: Sequence[float], recipe: str) -> tuple[list[int], int]:
    exponent = ref_exponent(max(abs(v) for v in values), recipe)
    # ldexp of a float32 value by at most 2**127 is exact in float64.
    return [ref_e4m3_byte(math.ldexp(v, -exponent)) for v in values], exponent + 127


def ref_quantize(weight: torch.Tensor, recipe: str, block_size: int = 32) -> tuple[list[int], list[int]]:
    rows = weight.reshape(-1, weight.shape[-1]).tolist()
    data: list[int] = []
    scale: list[int] = []
    for row in rows:
        for start in range(0, len(row), block_size):
            block_bytes, scale_byte = ref_quantize_block(row[start : start + block_size], recipe)
            data.extend(block_bytes)
            scale.append(scale_byte)
    return data, scale


def data_bytes(q: MXFP8Weight) -> list[int]:
    return q.data.view(torch.uint8).flatten().tolist()


def assert_matches_reference(weight: torch.Tensor, recipe: str, block_size: int = 32) -> None:
    q = quantize(weight, recipe, block_size)
    want_data, want_scale = ref_quantize(weight, recipe, block_size)
    assert q.scale.flatten().tolist() == want_scale
    got = data_bytes(q)
    if got != want_data:
        bad = next(i for i, (a, b) in enumerate(zip(got, want_data, strict=True)) if a != b)
        value = weight.flatten()[bad].item()
        pytest.fail(f"{recipe}: element {bad} ({value!r}) got byte {got[bad]:#04x}, want {want_data[bad]:#04x}")


def scaled_random(dtype: torch.dtype, rows: int, k: int, seed: int, low: int, high: int) -> torch.Tensor:
    """Gaussian values with a random power-of-two magnitude per block, so that blocks
    cover the whole exponent range (subnormals included)."""
    generator = torch.Generator().manual_seed(seed)
    base = torch.randn(rows, k // 32, 32, generator=generator, dtype=torch.float64)
    shift = torch.randint(low, high + 1, (rows, k // 32, 1), generator=generator, dtype=torch.float64)
    return (base * torch.exp2(shift)).to(dtype).reshape(rows, k)


def from_bits(bits: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    integer = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}[dtype]
    width = torch.iinfo(integer).bits
    signed = bits - (1 << width) if bits >= 1 << (width - 1) else bits
    return torch.tensor([signed], dtype=integer).view(dtype)


def block_with(values: Sequence[float], dtype: torch.dtype = torch.float32, fill: float = 0.0) -> torch.Tensor:
    return torch.tensor([*values, *[fill] * (32 - len(values))], dtype=torch.float64).to(dtype).reshape(1, 32)


# -- the reference itself ----------------------------------------------------------


def test_reference_encoder_known_bytes() -> None:
    # Values from the OCP E4M3 table, not from any implementation.
    known = [
        (1.0, 0x38),
        (-1.0, 0xB8),
        (448.0, 0x7E),
        (480.0, 0x7E),  # saturates instead of reaching the NaN code
        (2.0**-9, 0x01),
        (2.0**-6, 0x08),
        (0.0, 0x00),
        (-0.0, 0x80),
        (1.0625, 0x38),  # tie between 1.0 and 1.125: even is 1.0
        (1.3125, 0x3A),  # tie between 1.25 and 1.375: even is 1.25
        (2.0**-10, 0x00),  # tie between 0 and 2**-9
        (3 * 2.0**-10, 0x02),  # tie between 1 and 2 quanta
        (-(2.0**-12), 0x80),
    ]
    assert [(v, ref_e4m3_byte(v)) for v, _ in known] == known
    for byte in range(256):
        if byte & 0x7F != 0x7F:
            assert ref_e4m3_byte(ref_e4m3_value(byte)) == byte


def test_reference_exponents_known_values() -> None:
    assert ref_exponent(448.0, "modelopt") == 0
    assert ref_exponent(449.0, "modelopt") == 1
    assert ref_exponent(0.0, "modelopt") == -127
    assert ref_exponent(256.0, "ocp-floor") == 0
    assert ref_exponent(511.0, "ocp-floor") == 0
    assert ref_exponent(0.0, "ocp-floor") == -127
    assert ref_round_float32(Fraction(1, 3)) == float(torch.tensor(1 / 3, dtype=torch.float32))


# -- agreement with the reference --------------------------------------------------


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize(
    ("dtype", "low", "high", "seed"),
    [
        (torch.bfloat16, -140, 120, 101),
        (torch.float32, -145, 120, 102),
        (torch.float16, -20, 10, 103),
    ],
)
def test_random_tensors_match_reference(
    dtype: torch.dtype, low: int, high: int, seed: int, recipe: ScaleRecipe
) -> None:
    weight = scaled_random(dtype, rows=6, k=256, seed=seed, low=low, high=high)
    assert_matches_reference(weight, recipe)


@pytest.mark.parametrize("recipe", RECIPES)
def test_other_block_size_matches_reference(recipe: ScaleRecipe) -> None:
    weight = scaled_random(torch.bfloat16, rows=3, k=64, seed=7, low=-10, high=10)
    assert_matches_reference(weight, recipe, block_size=16)
    assert quantize(weight, recipe, 16).scale.shape == (3, 4)


@pytest.fixture(scope="module")
def bf16_pattern_blocks() -> torch.Tensor:
    """One block per finite BF16 bit pattern, the pattern as its max magnitude (at a
    varying position) and 31 random smaller BF16 values of either sign."""
    patterns = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    patterns = patterns[torch.isfinite(patterns)]
    generator = torch.Generator().manual_seed(65536)
    factors = torch.rand(patterns.numel(), 32, generator=generator) * 2 - 1
    blocks = (patterns.float().unsqueeze(1) * factors).to(torch.bfloat16)  # |.| <= |pattern|
    column = torch.arange(patterns.numel()) % 32
    blocks[torch.arange(patterns.numel()), column] = patterns
    return blocks


def test_bf16_pattern_fixture_covers_every_finite_pattern(bf16_pattern_blocks: torch.Tensor) -> None:
    assert bf16_pattern_blocks.shape == (65536 - 256, 32)
    maxima = bf16_pattern_blocks.abs().amax(dim=1)
    expected = bf16_pattern_blocks[torch.arange(maxima.numel()), torch.arange(maxima.numel()) % 32]
    assert torch.equal(maxima, expected.abs())


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_bf16_pattern_as_block_max(bf16_pattern_blocks: torch.Tensor, recipe: ScaleRecipe) -> None:
    q = quantize(bf16_pattern_blocks, recipe)
    maxima = bf16_pattern_blocks.abs().amax(dim=1).float().tolist()
    by_value = {value: ref_exponent(value, recipe) + 127 for value in set(maxima)}
    assert q.scale.flatten().tolist() == [by_value[value] for value in maxima]
    # Elements: the scalar reference on a sample, always including the extremes.
    sample = random.Random(recipe.value).sample(range(len(maxima)), 2000)
    sample += [maxima.index(min(maxima, key=lambda v: (v == 0, v))), maxima.index(max(maxima))]
    got = q.data.view(torch.uint8)
    for row in sample:
        want, _ = ref_quantize_block(bf16_pattern_blocks[row].tolist(), recipe)
        assert got[row].tolist() == want, f"block {row}: {bf16_pattern_blocks[row].tolist()}"


def test_every_non_finite_bf16_pattern_rejected() -> None:
    patterns = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    bad = patterns[~torch.isfinite(patterns)]
    assert bad.numel() == 256
    weight = torch.ones(1, 64, dtype=torch.bfloat16)
    for value in bad:
        weight[0, 37] = value
        for recipe in RECIPES:
            with pytest.raises(QuantizationError, match=r"non-finite value .* at index \[0, 37\]"):
                quantize(weight, recipe, name="w")


_SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def float32_blocks(draw: st.DrawFn) -> list[float]:
    values = draw(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=32, max_size=32))
    # Tiny (all-subnormal) and huge blocks must come up, not just the middle.
    shift = draw(st.sampled_from([0, 0, -100, -140, 60, 100]))
    scaled = torch.tensor(values, dtype=torch.float64) * 2.0**shift
    return torch.nan_to_num(scaled.to(torch.float32), posinf=0.0, neginf=0.0).tolist()


def sixteen_bit_blocks(exponent_mask: int, lowest_exponent_bit: int) -> st.SearchStrategy[list[int]]:
    """Blocks of raw 16-bit patterns with every exponent value, the all-ones (non-finite)
    one folded onto its neighbour: drawing and filtering is far slower."""

    def finite(bits: int) -> int:
        return bits & ~lowest_exponent_bit if bits & exponent_mask == exponent_mask else bits

    return st.lists(st.integers(0, 0xFFFF).map(finite), min_size=32, max_size=32)


def from_bit_list(bits: list[int], dtype: torch.dtype) -> torch.Tensor:
    signed = [b - 0x10000 if b >= 0x8000 else b for b in bits]
    return torch.tensor([signed], dtype=torch.int16).view(dtype)


@_SETTINGS
@given(values=float32_blocks(), recipe=st.sampled_from(RECIPES))
def test_hypothesis_float32_blocks(values: list[float], recipe: ScaleRecipe) -> None:
    assert_matches_reference(torch.tensor([values], dtype=torch.float32), recipe)


@_SETTINGS
@given(bits=sixteen_bit_blocks(0x7C00, 0x0400), recipe=st.sampled_from(RECIPES))
def test_hypothesis_float16_blocks(bits: list[int], recipe: ScaleRecipe) -> None:
    assert_matches_reference(from_bit_list(bits, torch.float16), recipe)


@_SETTINGS
@given(bits=sixteen_bit_blocks(0x7F80, 0x0080), recipe=st.sampled_from(RECIPES))
def test_hypothesis_bf16_blocks(bits: list[int], recipe: ScaleRecipe) -> None:
    assert_matches_reference(from_bit_list(bits, torch.bfloat16), recipe)


# -- pitfalls ------------------------------------------------------------------------


def test_scale_rounds_up_where_an_e8m0_cast_rounds_to_nearest() -> None:
    # descale = amax / 448 = 1.29: the nearest power of two is 1, but the block then
    # overflows (576 > 448); modelopt must pick 2.
    amax = torch.tensor([576.0])
    assert (amax / 448).to(torch.float8_e8m0fnu).view(torch.uint8).item() == 127  # the trap
    q = quantize(block_with([576.0, -3.0]), "modelopt")
    assert q.scale.item() == 128
    assert q.data.float()[0, :2].tolist() == [288.0, -1.5]  # no saturation
    assert block_exponents(block_with([576.0]), "modelopt").item() == 1


def test_modelopt_never_saturates_ocp_floor_does() -> None:
    weight = block_with([1.9 * 256, -1.9 * 256, 1.75 * 256])
    q_floor = quantize(weight, "ocp-floor")
    assert q_floor.scale.item() == 127
    assert q_floor.data.view(torch.uint8)[0, :3].tolist() == [0x7E, 0xFE, 0x7E]  # +-448, never NaN
    q_modelopt = quantize(weight, "modelopt")
    assert q_modelopt.scale.item() == 128
    assert q_modelopt.data.float()[0, :3].tolist() == [240.0, -240.0, 224.0]


def test_explicit_clamp_even_if_the_cast_would_not_saturate(monkeypatch: pytest.MonkeyPatch) -> None:
    # Emulate a torch whose float32 -> E4M3 cast turns an overflow into NaN (releases
    # before 2.12 did): quantize must still saturate, because it clamps first.
    real_copy = torch.Tensor.copy_

    def nan_on_overflow(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
        if self.dtype == torch.float8_e4m3fn and src.is_floating_point():
            src = torch.where(src.abs() > E4M3_MAX, torch.nan, src)
        return real_copy(self, src, non_blocking)

    monkeypatch.setattr(torch.Tensor, "copy_", nan_on_overflow)
    q = quantize(block_with([500.0, -500.0, 300.0]), "ocp-floor")
    assert q.data.view(torch.uint8)[0, :3].tolist() == [0x7E, 0xFE, ref_e4m3_byte(300.0)]


def test_round_to_nearest_even_not_ties_away() -> None:
    q = quantize(block_with([448.0, 1.0625, -1.0625, 1.3125, 2.0**-10, 5 * 2.0**-10, 17.0]), "modelopt")
    assert q.scale.item() == 127
    # Ties away from zero would give 1.125, -1.125, 1.375, 2**-9, 3 * 2**-9 and 18.
    assert q.data.float()[0, :7].tolist() == [448.0, 1.0, -1.0, 1.25, 0.0, 2.0**-8, 16.0]


def test_sign_of_zero_is_kept() -> None:
    q = quantize(block_with([-0.0, 0.0, -(2.0**-20), 1.0], fill=-0.0), "modelopt")
    assert data_bytes(q)[:4] == [0x80, 0x00, 0x80, ref_e4m3_byte(1.0 * 2**8)]
    zero = quantize(torch.full((1, 32), -0.0), "ocp-floor")
    assert zero.scale.item() == 0 and set(data_bytes(zero)) == {0x80}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_largest_finite_values(dtype: torch.dtype) -> None:
    big = torch.finfo(dtype).max
    weight = block_with([big, -big, big / 2], dtype)
    # Significand 1.99... > 1.75: modelopt exponent 127 - 8 + 1 = 120.
    q = quantize(weight, "modelopt")
    assert q.scale.item() == 127 + 120
    assert q.data.float()[0, :3].tolist() == [256.0, -256.0, 128.0]
    q = quantize(weight, "ocp-floor")
    assert q.scale.item() == 127 + 119
    assert q.data.float()[0, :3].tolist() == [448.0, -448.0, 256.0]
    # The max itself rounds *up* to 256 * 2**120 = 2**128, just past float32's range:
    # exact in float64, infinite in float32 (the recipe's answer, not a decoding bug).
    top = quantize(weight, "modelopt")
    assert top.dequantize(torch.float64)[0, 0].item() == 2.0**128
    assert top.dequantize(torch.float32)[0, 0].item() == math.inf


@pytest.mark.parametrize("recipe", RECIPES)
def test_smallest_subnormals_need_the_full_two_pow_127(recipe: ScaleRecipe) -> None:
    # bf16's smallest subnormal is 2**-133: the scale clamps at 2**-127 and the
    # element is multiplied by 2**127 (not overflowing, not clamped to 2**126).
    tiny = torch.finfo(torch.bfloat16).smallest_normal * 2.0**-7
    q = quantize(block_with([tiny, -tiny * 4], torch.bfloat16), recipe)
    assert q.scale.item() == 0
    assert q.data.float()[0, :2].tolist() == [2.0**-6, -(2.0**-4)]
    # float32's smallest subnormal, 2**-149, is below what any MXFP8 value can hold.
    q = quantize(block_with([2.0**-149, -(2.0**-149)]), recipe)
    assert q.scale.item() == 0 and data_bytes(q)[:2] == [0x00, 0x80]


def test_modelopt_exponent_is_exact_where_float32_log2_is_not() -> None:
    # amax = 448 * 2**k * (1 + 2**-23): descale is 2**k * (1 + 2**-23), and float32
    # log2 of that rounds to exactly k. The exact ceil is k + 1.
    for k in (-100, -10, 5, 60, 110):
        amax = 448.0 * 2.0**k * (1 + 2.0**-23)
        descale = torch.tensor([amax], dtype=torch.float32) / 448
        assert torch.ceil(torch.log2(descale)).item() == k  # the trap, on this torch
        assert block_exponents(block_with([amax]), "modelopt").item() == k + 1
        assert_matches_reference(block_with([amax, -amax / 3]), "modelopt")


def test_modelopt_keeps_float32_division_at_subnormal_boundary() -> None:
    # amax = 1.75 * 2**-119 + 2**-142 (bits 0x04600001): amax / 448 is just above
    # 2**-127, but its float32 quotient rounds to 2**-127 exactly, so ModelOpt's
    # recipe (descale = amax.float() / 448) gives -127 where real arithmetic gives -126.
    amax = from_bits(0x04600001)
    assert amax.item() == 1.75 * 2.0**-119 + 2.0**-142
    assert (amax / 448).item() == 2.0**-127
    weight = torch.cat([amax, torch.zeros(31)]).reshape(1, 32)
    assert block_exponents(weight, "modelopt").item() == -127
    assert_matches_reference(weight, "modelopt")
    assert data_bytes(quantize(weight, "modelopt"))[0] == 0x7E  # 448 * (1 + tiny) saturates


def test_ocp_floor_is_one_below_modelopt_exactly_when_significand_exceeds_1_75() -> None:
    significands = [1.0, 1.5, 1.75, 1.75 + 2**-23, 1.8, 1.999]
    for power in (-60, 0, 7, 90):
        for significand in significands:
            weight = block_with([significand * 2.0**power])
            gap = int(block_exponents(weight, "modelopt")) - int(block_exponents(weight, "ocp-floor"))
            assert gap == (1 if significand > 1.75 else 0), (significand, power)


# -- the quantize API ----------------------------------------------------------------


def test_quantize_shapes_and_types() -> None:
    weight = scaled_random(torch.bfloat16, rows=5, k=96, seed=1, low=-3, high=3)
    q = quantize(weight)
    assert q.data.dtype == torch.float8_e4m3fn and q.data.shape == (5, 96)
    assert q.scale.dtype == torch.uint8 and q.scale.shape == (5, 3)
    assert q.block_size == 32
    assert int(q.scale.max()) < E8M0_NAN


@pytest.mark.parametrize("recipe", RECIPES)
def test_nd_and_non_contiguous_inputs(recipe: ScaleRecipe) -> None:
    weight = scaled_random(torch.bfloat16, rows=12, k=64, seed=2, low=-5, high=5)
    stacked = weight.reshape(3, 4, 64)
    q = quantize(stacked, recipe)
    assert q.data.shape == (3, 4, 64) and q.scale.shape == (3, 4, 2)
    flat = quantize(weight, recipe)
    assert torch.equal(q.data.view(torch.uint8).reshape(12, 64), flat.data.view(torch.uint8))
    assert torch.equal(q.scale.reshape(12, 2), flat.scale)
    transposed = weight.reshape(64, 12).t()
    assert not transposed.is_contiguous()
    q_t = quantize(transposed, recipe)
    q_c = quantize(transposed.contiguous(), recipe)
    assert torch.equal(q_t.data.view(torch.uint8), q_c.data.view(torch.uint8))
    assert torch.equal(q_t.scale, q_c.scale)
    assert torch.equal(block_exponents(stacked, recipe), q.scale.to(torch.int32) - 127)


@pytest.mark.parametrize("recipe", RECIPES)
def test_chunk_boundaries_do_not_matter(recipe: ScaleRecipe, monkeypatch: pytest.MonkeyPatch) -> None:
    weight = scaled_random(torch.float32, rows=37, k=128, seed=3, low=-130, high=100)
    whole = quantize(weight, recipe)
    monkeypatch.setattr(mxfp8, "_CHUNK_ELEMENTS", 5 * 128)  # 5 rows per chunk, ragged end
    chunked = quantize(weight, recipe)
    assert torch.equal(whole.data.view(torch.uint8), chunked.data.view(torch.uint8))
    assert torch.equal(whole.scale, chunked.scale)
    weight[33, 70] = math.inf  # in the seventh of eight chunks
    with pytest.raises(QuantizationError, match=r"at index \[33, 70\]"):
        quantize(weight, recipe, name="late")


def test_quantize_does_not_touch_its_input() -> None:
    weight = scaled_random(torch.float32, rows=4, k=64, seed=4, low=-2, high=12)
    before = weight.clone()
    quantize(weight, "ocp-floor")
    assert torch.equal(weight, before)


def test_errors_name_the_tensor() -> None:
    with pytest.raises(QuantizationError) as info:
        quantize(torch.zeros(4, 48), name="model.layers.0.mlp.up_proj.weight")
    assert "tensor 'model.layers.0.mlp.up_proj.weight'" in str(info.value)
    assert "48" in str(info.value) and "32" in str(info.value)
    assert info.value.tensor == "model.layers.0.mlp.up_proj.weight"
    assert isinstance(info.value, CheckpointError)

    weight = torch.ones(2, 3, 64, dtype=torch.bfloat16)
    weight[1, 2, 40] = math.nan
    with pytest.raises(QuantizationError, match=r"tensor 'w\.q'.*non-finite value nan at index \[1, 2, 40\]"):
        quantize(weight, name="w.q")
    weight[1, 2, 40] = -math.inf
    with pytest.raises(QuantizationError, match=r"-inf"):
        block_exponents(weight, "modelopt", name="w.q")
    with pytest.raises(QuantizationError, match=r"tensor 'i'.*int32"):
        quantize(torch.zeros(2, 32, dtype=torch.int32), name="i")
    with pytest.raises(QuantizationError, match="multiple"):
        quantize(torch.zeros(2, 0))
    with pytest.raises(ValueError, match="block size"):
        quantize(torch.zeros(2, 32), block_size=0)


def test_parse_recipe() -> None:
    assert parse_recipe("modelopt") is ScaleRecipe.MODELOPT
    assert parse_recipe(" OCP-Floor ") is ScaleRecipe.OCP_FLOOR
    assert parse_recipe(ScaleRecipe.OCP_FLOOR) is ScaleRecipe.OCP_FLOOR
    assert RECIPES == (ScaleRecipe.MODELOPT, ScaleRecipe.OCP_FLOOR)
    with pytest.raises(ValueError, match=r"'rceil'.*modelopt, ocp-floor"):
        parse_recipe("rceil")
    with pytest.raises(ValueError):
        quantize(torch.zeros(1, 32), "even")


def test_mxfp8_weight_validates() -> None:
    data = torch.zeros(2, 64, dtype=torch.float8_e4m3fn)
    with pytest.raises(TypeError):
        MXFP8Weight(data=data, scale=torch.zeros(2, 2, dtype=torch.int32))
    with pytest.raises(TypeError):
        MXFP8Weight(data=data.view(torch.uint8), scale=torch.zeros(2, 2, dtype=torch.uint8))
    with pytest.raises(ValueError, match="does not fit"):
        MXFP8Weight(data=data, scale=torch.zeros(2, 3, dtype=torch.uint8))
    assert MXFP8Weight(data=data, scale=torch.zeros(2, 4, dtype=torch.uint8)).block_size == 16


# -- dequantize ------------------------------------------------------------------------


@pytest.mark.parametrize("recipe", RECIPES)
def test_dequantize_matches_reference_decode(recipe: ScaleRecipe) -> None:
    weight = scaled_random(torch.bfloat16, rows=4, k=64, seed=5, low=-135, high=110)
    q = quantize(weight, recipe)
    got = q.dequantize(torch.float64).flatten().tolist()
    scales = q.scale.flatten().tolist()
    want = [math.ldexp(ref_e4m3_value(byte), scales[i // 32] - 127) for i, byte in enumerate(data_bytes(q))]
    assert got == want
    assert torch.equal(dequantize(q.data.view(torch.uint8), q.scale), q.dequantize())
    as_bf16 = dequantize(q.data, q.scale, dtype=torch.bfloat16)
    assert as_bf16.dtype == torch.bfloat16
    assert torch.equal(as_bf16, torch.tensor(want, dtype=torch.float64).reshape(4, 64).to(torch.bfloat16))


@pytest.mark.parametrize("recipe", RECIPES)
def test_round_trip_is_idempotent_and_within_half_a_step(recipe: ScaleRecipe) -> None:
    weight = scaled_random(torch.float32, rows=8, k=128, seed=6, low=-100, high=100)
    q = quantize(weight, recipe)
    once = q.dequantize()
    twice = quantize(once, recipe).dequantize()
    assert torch.equal(once, twice)  # values already on the grid requantize to themselves
    if recipe is ScaleRecipe.MODELOPT:
        x = weight.double().reshape(8, 4, 32)
        step = torch.exp2(q.scale.double() - 127).unsqueeze(-1)
        # Half a quantum: 2**-4 relative for normal E4M3, 2**-10 * scale below.
        bound = torch.maximum(x.abs() * 2.0**-4, step * 2.0**-10)
        assert bool(((once.double().reshape(8, 4, 32) - x).abs() <= bound).all())


def test_dequantize_nan_encodings_and_shape_checks() -> None:
    data = torch.tensor([[0x7F, 0xFF, 0x38] + [0] * 29 + [0x38] * 32], dtype=torch.uint8)
    scale = torch.tensor([[127, E8M0_NAN]], dtype=torch.uint8)
    values = dequantize(data, scale)
    assert values[0, :2].isnan().all() and values[0, 2].item() == 1.0
    assert values[0, 32:].isnan().all()
    with pytest.raises(ValueError, match="block size"):
        dequantize(data, scale, block_size=16)
    with pytest.raises(TypeError):
        dequantize(data.to(torch.int16), scale)
    with pytest.raises(TypeError):
        dequantize(data, scale.to(torch.int32))
    overflow = dequantize(torch.tensor([[0x7E] * 32], dtype=torch.uint8), torch.tensor([[254]], dtype=torch.uint8))
    assert overflow.isinf().all()  # 448 * 2**127 is beyond float32...
    exact = dequantize(
        torch.tensor([[0x7E] * 32], dtype=torch.uint8),
        torch.tensor([[254]], dtype=torch.uint8),
        dtype=torch.float64,
    )
    assert exact[0, 0].item() == 448.0 * 2.0**127  # ...but not beyond float64


# -- E8M0 and E4M3 helpers ---------------------------------------------------------------


def test_e8m0_decode_every_byte() -> None:
    values = e8m0_decode(torch.arange(256, dtype=torch.int32).to(torch.uint8))
    assert values.dtype == torch.float32
    assert values[0].item() == math.ldexp(1.0, -127) != 0.0
    assert values[1:255].double().tolist() == [math.ldexp(1.0, b - 127) for b in range(1, 255)]
    assert math.isnan(values[255].item())


def test_e8m0_encode_range() -> None:
    exponents = torch.arange(-127, 128)
    encoded = e8m0_encode(exponents)
    assert encoded.dtype == torch.uint8 and encoded.tolist() == list(range(255))
    assert e8m0_decode(encoded).double().tolist() == [math.ldexp(1.0, e) for e in range(-127, 128)]
    for bad in (-128, 128, 200):
        with pytest.raises(ValueError, match=str(bad)):
            e8m0_encode(torch.tensor([0, bad]))
    with pytest.raises(TypeError):
        e8m0_encode(torch.tensor([1.0]))
    assert e8m0_encode(torch.tensor([], dtype=torch.int64)).numel() == 0


def test_fp8_nan_mask_every_byte() -> None:
    raw = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    mask = fp8_nan_mask(raw)
    assert raw[mask].tolist() == [0x7F, 0xFF]
    assert torch.equal(fp8_nan_mask(raw.view(torch.float8_e4m3fn)), mask)
    assert torch.equal(mask, raw.view(torch.float8_e4m3fn).float().isnan())
    with pytest.raises(TypeError):
        fp8_nan_mask(raw.to(torch.int16))


# -- torchao cross-check -----------------------------------------------------------------
# torchao ``to_mx`` (0.18.0, eager CPU path) vs these recipes:
#   FLOOR == ocp-floor and RCEIL == modelopt, byte for byte, with these exceptions by design:
#   - scale byte 0 (exponent clamped at -127): torchao RCEIL scales elements by 1.0
#     (TransformerEngine's convention) and FLOOR by 2**126 (it clamps the scale to
#     float32's smallest normal); ModelOpt and OCP use 2**127, and so do we. Scales agree.
#   - float32 input whose descale is just above a power of two: torchao's eager RCEIL
#     takes ceil(torch.log2(descale)) in float32 and lands one exponent low, saturating
#     the block max; we compute ceil(log2) exactly. BF16 input never gets that close.
#   - CEIL and EVEN are neither recipe; NaN/inf get scale 0xFF/0xFE in torchao and are
#     rejected here; torchao takes no float16 input.


@pytest.fixture(scope="module")
def torchao_to_mx() -> tuple[Callable[..., Any], Any]:
    try:
        import torchao  # noqa: F401
        from torchao.prototype.mx_formats.config import ScaleCalculationMode
        from torchao.prototype.mx_formats.mx_tensor import to_mx
    except ImportError as exc:
        pytest.fail(
            f"torchao is a declared test dependency of the MXFP8 cross-check and cannot be imported "
            f"({exc}); install it: pip install torchao=={TORCHAO_VERSION} numpy",
            pytrace=False,
        )
    return to_mx, ScaleCalculationMode


def _torchao_bytes(
    torchao_to_mx: tuple[Callable[..., Any], Any], weight: torch.Tensor, mode: str
) -> tuple[torch.Tensor, torch.Tensor]:
    to_mx, modes = torchao_to_mx
    scale, data = to_mx(weight.contiguous(), torch.float8_e4m3fn, 32, getattr(modes, mode))
    return data.view(torch.uint8), scale.view(torch.uint8)


_TORCHAO_MODE = {ScaleRecipe.MODELOPT: "RCEIL", ScaleRecipe.OCP_FLOOR: "FLOOR"}


def test_torchao_is_the_pinned_version(torchao_to_mx: tuple[Callable[..., Any], Any]) -> None:
    import torchao

    assert torchao.__version__.split("+")[0] == TORCHAO_VERSION


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_torchao_agrees_on_random_weights(
    torchao_to_mx: tuple[Callable[..., Any], Any], recipe: ScaleRecipe, dtype: torch.dtype
) -> None:
    weight = scaled_random(dtype, rows=64, k=512, seed=11, low=-100, high=100)
    q = quantize(weight, recipe)
    data, scale = _torchao_bytes(torchao_to_mx, weight, _TORCHAO_MODE[recipe])
    assert torch.equal(scale, q.scale)
    assert torch.equal(data, q.data.view(torch.uint8))


@pytest.mark.parametrize("recipe", RECIPES)
def test_torchao_agrees_on_every_bf16_pattern(
    torchao_to_mx: tuple[Callable[..., Any], Any], bf16_pattern_blocks: torch.Tensor, recipe: ScaleRecipe
) -> None:
    q = quantize(bf16_pattern_blocks, recipe)
    data, scale = _torchao_bytes(torchao_to_mx, bf16_pattern_blocks, _TORCHAO_MODE[recipe])
    assert torch.equal(scale, q.scale)
    ours = q.data.view(torch.uint8)
    normal = q.scale[:, 0] != 0
    assert torch.equal(data[normal], ours[normal])
    # Byte-0 blocks: the documented deviation, reproduced exactly.
    minimal = bf16_pattern_blocks[~normal].float()
    assert minimal.numel() > 0
    multiplier = 1.0 if recipe is ScaleRecipe.MODELOPT else 2.0**126
    expected = (minimal * multiplier).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)
    assert torch.equal(data[~normal], expected)
    assert not torch.equal(data[~normal], ours[~normal])


def test_torchao_rceil_float32_log2_deviation(torchao_to_mx: tuple[Callable[..., Any], Any]) -> None:
    amax = 448.0 * 2.0**-10 * (1 + 2.0**-23)
    weight = block_with([amax, -amax / 2])
    data, scale = _torchao_bytes(torchao_to_mx, weight, "RCEIL")
    q = quantize(weight, "modelopt")
    assert scale.item() == q.scale.item() - 1 == 127 - 10
    assert data[0, 0].item() == 0x7E  # torchao saturates the block max
    assert data_bytes(q)[0] == ref_e4m3_byte(224.0)
    _, floor_scale = _torchao_bytes(torchao_to_mx, weight, "FLOOR")
    assert floor_scale.item() == quantize(weight, "ocp-floor").scale.item()


def test_torchao_even_and_ceil_are_neither_recipe(torchao_to_mx: tuple[Callable[..., Any], Any]) -> None:
    def scales(significand: float) -> dict[str, int]:
        weight = block_with([significand * 2.0**3])
        found = {mode: _torchao_bytes(torchao_to_mx, weight, mode)[1].item() for mode in ("EVEN", "CEIL")}
        found |= {recipe.value: quantize(weight, recipe).scale.item() for recipe in RECIPES}
        return found

    # EVEN rounds amax to E4M3 precision first: 1.8 stays (floor's scale), 1.97 becomes 2.
    assert scales(1.8) == {"EVEN": 122, "CEIL": 123, "modelopt": 123, "ocp-floor": 122}
    assert scales(1.97) == {"EVEN": 123, "CEIL": 123, "modelopt": 123, "ocp-floor": 122}
    # CEIL bumps any significand above 1.0, where modelopt waits for 1.75.
    assert scales(1.5) == {"EVEN": 122, "CEIL": 123, "modelopt": 122, "ocp-floor": 122}


def test_torchao_zero_blocks_agree_and_non_finite_differs(
    torchao_to_mx: tuple[Callable[..., Any], Any],
) -> None:
    zeros = torch.tensor([[0.0, -0.0] * 16], dtype=torch.bfloat16)
    for recipe in RECIPES:
        data, scale = _torchao_bytes(torchao_to_mx, zeros, _TORCHAO_MODE[recipe])
        q = quantize(zeros, recipe)
        assert scale.item() == q.scale.item() == 0
        assert torch.equal(data, q.data.view(torch.uint8))
    bad = block_with([1.0, math.nan], torch.bfloat16)
    assert _torchao_bytes(torchao_to_mx, bad, "FLOOR")[1].item() == E8M0_NAN
    with pytest.raises(QuantizationError):
        quantize(bad)
