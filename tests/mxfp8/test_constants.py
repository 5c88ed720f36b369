"""Tests for qualify.mxfp8.constants: every number of the format agrees with torch's own dtypes
(float8_e4m3fn, float8_e8m0fnu), with the OCP MX v1.0 layout, and with how the codec uses it."""

from __future__ import annotations

import math

import pytest
import torch

from qualify.checkpoint.safetensors_header import DTYPES
from qualify.mxfp8 import codec
from qualify.mxfp8.constants import (
    BLOCK_MAX_RANGE,
    BLOCK_SIZE,
    E4M3_EMAX,
    E4M3_MAGNITUDE_MASK,
    E4M3_MAX,
    E4M3_NAN_MAGNITUDE,
    E4M3_NEGATIVE_NAN,
    E4M3_POSITIVE_NAN,
    E8M0_BIAS,
    E8M0_MAX_EXPONENT,
    E8M0_MIN_EXPONENT,
    E8M0_NAN,
    ELEMENT_DTYPE,
    SCALE_DTYPE,
)

#: Every byte, and what it means as an E4M3 element (float64 is exact for all of them).
ALL_BYTES = torch.arange(256, dtype=torch.int32).to(torch.uint8)
E4M3_VALUES = ALL_BYTES.view(torch.float8_e4m3fn).to(torch.float64)


def test_e4m3_max_is_float8_e4m3fn_largest_finite_value() -> None:
    assert E4M3_MAX == torch.finfo(torch.float8_e4m3fn).max == 448.0
    assert float(E4M3_VALUES[torch.isfinite(E4M3_VALUES)].abs().max()) == E4M3_MAX


def test_e4m3_emax_is_the_exponent_of_its_largest_value() -> None:
    assert E4M3_EMAX == math.floor(math.log2(E4M3_MAX)) == 8
    assert 2.0 ** E4M3_EMAX <= E4M3_MAX < 2.0 ** (E4M3_EMAX + 1)


def test_the_two_nan_bytes_are_e4m3fn_only_non_finite_values() -> None:
    non_finite = {int(b) for b in ALL_BYTES[~torch.isfinite(E4M3_VALUES)]}
    assert non_finite == {E4M3_POSITIVE_NAN, E4M3_NEGATIVE_NAN} == {0x7F, 0xFF}
    assert bool(torch.isnan(E4M3_VALUES[~torch.isfinite(E4M3_VALUES)]).all())  # no infinities
    # "Positive" and "negative": the sign bit, and the largest byte read as int8 and as uint8.
    assert int(ALL_BYTES.view(torch.int8).max()) == E4M3_POSITIVE_NAN
    assert int(ALL_BYTES.max()) == E4M3_NEGATIVE_NAN


def test_the_magnitude_mask_drops_the_sign_and_only_nans_have_the_nan_magnitude() -> None:
    magnitudes = torch.bitwise_and(ALL_BYTES, E4M3_MAGNITUDE_MASK).view(torch.float8_e4m3fn).to(torch.float64)
    finite = torch.isfinite(E4M3_VALUES)
    assert torch.equal(magnitudes[finite], E4M3_VALUES[finite].abs())
    is_nan_magnitude = torch.bitwise_and(ALL_BYTES, E4M3_MAGNITUDE_MASK) == E4M3_NAN_MAGNITUDE
    assert torch.equal(is_nan_magnitude, torch.isnan(E4M3_VALUES))
    assert torch.equal(codec.fp8_nan_mask(ALL_BYTES), is_nan_magnitude)


def test_e8m0_bytes_agree_with_float8_e8m0fnu_and_the_codec() -> None:
    decoded = codec.e8m0_decode(ALL_BYTES).to(torch.float64)
    assert torch.isnan(decoded[E8M0_NAN]) and int(torch.isnan(decoded).sum()) == 1
    assert float(decoded[E8M0_BIAS]) == 1.0
    for byte in range(256):
        if byte != E8M0_NAN:
            assert float(decoded[byte]) == 2.0 ** (byte - E8M0_BIAS), byte
    torch_e8m0 = ALL_BYTES.view(torch.float8_e8m0fnu).to(torch.float64)
    assert torch.equal(torch.isnan(torch_e8m0), torch.isnan(decoded))
    both = ~torch.isnan(decoded)
    assert torch.equal(torch_e8m0[both], decoded[both])


def test_the_exponent_range_is_every_byte_but_the_nan() -> None:
    lowest, highest = codec.e8m0_encode(torch.tensor([E8M0_MIN_EXPONENT, E8M0_MAX_EXPONENT]))
    assert (int(lowest), int(highest)) == (0, E8M0_NAN - 1)
    assert E8M0_MIN_EXPONENT == -E8M0_BIAS and E8M0_MAX_EXPONENT == E8M0_NAN - 1 - E8M0_BIAS
    for outside in (E8M0_MIN_EXPONENT - 1, E8M0_MAX_EXPONENT + 1):
        with pytest.raises(ValueError, match=r"\[-127, 127\]"):
            codec.e8m0_encode(torch.tensor([outside]))


def test_a_block_is_ocp_32_elements_and_the_codec_blocks_by_it() -> None:
    assert BLOCK_SIZE == 32
    weight = codec.quantize(torch.ones(2, 4 * BLOCK_SIZE))
    assert tuple(weight.scale.shape) == (2, 4)
    assert weight.block_size == BLOCK_SIZE


@pytest.mark.parametrize("recipe, lowest", [(codec.ScaleRecipe.MODELOPT, E4M3_MAX / 2),
                                            (codec.ScaleRecipe.OCP_FLOOR, 256.0)])
def test_block_max_range_holds_every_block_max_the_recipes_make(recipe: codec.ScaleRecipe, lowest: float) -> None:
    lo, hi = BLOCK_MAX_RANGE
    assert (lo, hi) == (E4M3_MAX / 2, E4M3_MAX)
    # Block amaxes across many octaves: on a power of two, between, at 448 * 2**k and just above it
    # (which the round-up rule scales to 224.01..., rounded to E4M3's 224), just below the next power.
    mantissas = (1.0, 1.5, 1.75, 1.7501, 1.999)
    amax = torch.tensor([m * 2.0 ** k for k in range(-60, 60, 7) for m in mantissas], dtype=torch.float32)
    weight = torch.linspace(-1, 1, BLOCK_SIZE).repeat(len(amax), 1) * amax[:, None]
    q = codec.quantize(weight, recipe)
    block_max = q.data.to(torch.float64).abs().amax(dim=-1)
    assert bool(((block_max >= lo) & (block_max <= hi)).all())
    # Both ends are reached, not merely allowed: the range is as tight as the recipes.
    assert (float(block_max.min()), float(block_max.max())) == (lowest, hi)


def test_the_stored_dtypes_are_the_safetensors_names_of_the_codec_output() -> None:
    weight = codec.quantize(torch.ones(1, BLOCK_SIZE))
    assert DTYPES[ELEMENT_DTYPE].torch_dtype == weight.data.dtype == torch.float8_e4m3fn
    assert DTYPES[SCALE_DTYPE].torch_dtype == weight.scale.dtype == torch.uint8
