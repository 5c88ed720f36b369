"""Quantization-error statistics of an MXFP8 weight against its high-precision source.

Pure functions. A conversion manifest *claims* these numbers for every tensor; the
harness recomputes them from the source and the stored bytes and :func:`compare`
says which claims do not hold. Everything is summed in float64, over row chunks so
that the float64 working copies stay bounded (a few 16 MiB tensors at a time)
whatever the weight's size.

Definitions (x = source, y = dequantized, both float64): ``sse = sum((y - x)**2)``,
``sum_sq = sum(x**2)``, ``mse = sse / elements``, ``max_abs_error = max|y - x|``,
``relative_rms_error = sqrt(sse / sum_sq)`` (0.0 when ``sum_sq`` is 0),
``sqnr_db = 10 * log10(sum_sq / sse)`` (None when it is undefined, see below),
``amax = max|x|``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from .errors import QuantizationError
from .mxfp8 import (
    BLOCK_SIZE,
    E4M3_MAX,
    MXFP8Weight,
    ScaleRecipe,
    dequantize,
    e8m0_decode,
    fp8_nan_mask,
    parse_recipe,
)

#: float64 elements per chunk: 2 Mi elements is 16 MiB per float64 copy, and a chunk
#: holds at most three of them at once (the source, the error, a decoding temporary).
_CHUNK_ELEMENTS = 1 << 21


@dataclass(frozen=True)
class WeightStatistics:
    """Error statistics of one quantized tensor (see the module docstring).

    Block counts: ``zero_blocks`` have amax 0; ``saturated_blocks`` hold at least one
    element with ``|x| * 2**-exponent > 448`` before the clamp, i.e. an element the
    format had to saturate (common for ``ocp-floor``, whenever the amax significand
    exceeds 1.75; for ``modelopt`` only where its float32 division rounds a descale
    just above 2**-127 down, see :mod:`qualify.mxfp8`); ``min_scale_blocks`` have
    scale byte 0 (exponent clamped at -127).
    """

    elements: int
    blocks: int
    zero_blocks: int
    saturated_blocks: int
    min_scale_blocks: int
    sse: float
    sum_sq: float
    mse: float
    max_abs_error: float
    relative_rms_error: float
    sqnr_db: float | None
    amax: float

    def to_dict(self) -> dict[str, Any]:
        """Plain ints, finite floats and None: safe for strict JSON."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class AggregateStatistics:
    """Statistics pooled over tensors: sums of sse and sum_sq, not means of ratios,
    so that a large tensor weighs by its size and the pooled SQNR is the SQNR of the
    concatenation."""

    tensors: int
    elements: int
    sse: float
    sum_sq: float
    mse: float
    max_abs_error: float
    relative_rms_error: float
    sqnr_db: float | None

    def to_dict(self) -> dict[str, Any]:
        """Plain ints, finite floats and None: safe for strict JSON."""
        return dataclasses.asdict(self)


def weight_statistics(
    source: torch.Tensor,
    q: MXFP8Weight,
    recipe: str | ScaleRecipe,
    block_size: int = BLOCK_SIZE,
    *,
    name: str | None = None,
) -> WeightStatistics:
    """Statistics of ``q`` as a quantization of ``source``.

    ``recipe`` is the recipe ``q`` is meant to follow; it is validated, but the
    saturation and minimum-scale counts are taken against ``q``'s *stored* scales,
    because those are what the checkpoint ships (for ``q = quantize(source, recipe)``
    they are the recipe's). Raises :class:`QuantizationError` naming ``name`` if
    ``source`` is not finite or ``q`` holds a NaN encoding (E4M3 0x7F/0xFF or scale
    0xFF): no error figure means anything then, and likewise if the shapes or the block
    size do not match. An unknown ``recipe`` is a ValueError.
    """
    parse_recipe(recipe)
    # A mismatch here means the checkpoint's tensor is not a quantization of this
    # source, so it is the checkpoint's error (a QuantizationError), not a usage one.
    if tuple(source.shape) != tuple(q.data.shape):
        raise QuantizationError(
            f"quantized shape {list(q.data.shape)} differs from the source's {list(source.shape)}", tensor=name
        )
    if q.block_size != block_size:
        raise QuantizationError(f"quantized weight has block size {q.block_size}, expected {block_size}", tensor=name)
    if not source.dtype.is_floating_point:
        raise QuantizationError(f"source must be a floating-point tensor, got {source.dtype}", tensor=name)
    if bool((q.scale == 0xFF).any()):
        raise QuantizationError("scale byte 0xFF (E8M0 NaN) in quantized weight", tensor=name)

    k = source.shape[-1]
    blocks_per_row = k // block_size
    x_rows = source.reshape(-1, k)
    data_rows = q.data.reshape(-1, k)
    scale_rows = q.scale.reshape(-1, blocks_per_row)
    rows = x_rows.shape[0]

    sse = sum_sq = max_abs_error = amax = 0.0
    zero_blocks = saturated_blocks = min_scale_blocks = 0
    step = max(1, _CHUNK_ELEMENTS // max(k, 1))
    for start in range(0, rows, step):
        stop = min(start + step, rows)
        n = stop - start
        # A private copy (copy=True: a float64 source would otherwise be aliased), so
        # that it can be squared in place at the end.
        x = x_rows[start:stop].to(torch.float64, copy=True).reshape(n, blocks_per_row, block_size)
        scale = scale_rows[start:stop]
        block_amax = torch.maximum(x.amax(dim=-1), x.amin(dim=-1).neg_())  # max|x| without an |x| copy
        if not bool(torch.isfinite(block_amax).all()):
            raise QuantizationError("source holds non-finite values", tensor=name)
        if bool(fp8_nan_mask(data_rows[start:stop]).any()):  # per chunk: a full-size mask is 2 bytes/element
            raise QuantizationError("E4M3 NaN encoding (0x7F/0xFF) in quantized weight", tensor=name)
        error = dequantize(data_rows[start:stop], scale, block_size, torch.float64)
        error = error.reshape(n, blocks_per_row, block_size).sub_(x).abs_()
        max_abs_error = max(max_abs_error, float(error.max()))
        sse += float(error.square_().sum())
        del error
        sum_sq += float(x.square_().sum())
        amax = max(amax, float(block_amax.max()))
        zero_blocks += int((block_amax == 0).sum())
        # 448 * 2**exponent is exact in float64, so this is the pre-clamp test
        # |x| * 2**-exponent > 448 without forming the scaled block.
        saturated_blocks += int((block_amax > E4M3_MAX * e8m0_decode(scale).to(torch.float64)).sum())
        min_scale_blocks += int((scale == 0).sum())

    elements = source.numel()
    mse, relative_rms_error, sqnr_db = _derived(sse, sum_sq, elements)
    return WeightStatistics(
        elements=elements,
        blocks=q.scale.numel(),
        zero_blocks=zero_blocks,
        saturated_blocks=saturated_blocks,
        min_scale_blocks=min_scale_blocks,
        sse=sse,
        sum_sq=sum_sq,
        mse=mse,
        max_abs_error=max_abs_error,
        relative_rms_error=relative_rms_error,
        sqnr_db=sqnr_db,
        amax=amax,
    )


def aggregate(stats: Iterable[WeightStatistics]) -> AggregateStatistics:
    """Pool per-tensor statistics (an empty iterable gives all-zero totals)."""
    tensors = elements = 0
    sse = sum_sq = max_abs_error = 0.0
    for item in stats:
        tensors += 1
        elements += item.elements
        sse += item.sse
        sum_sq += item.sum_sq
        max_abs_error = max(max_abs_error, item.max_abs_error)
    mse, relative_rms_error, sqnr_db = _derived(sse, sum_sq, elements)
    return AggregateStatistics(
        tensors=tensors,
        elements=elements,
        sse=sse,
        sum_sq=sum_sq,
        mse=mse,
        max_abs_error=max_abs_error,
        relative_rms_error=relative_rms_error,
        sqnr_db=sqnr_db,
    )


def compare(claimed: Mapping[str, Any], recomputed: Mapping[str, Any], rtol: float, atol: float) -> list[str]:
    """One line per field of ``recomputed`` that ``claimed`` does not match.

    Lines read ``"mse: claimed 1.2e-05, recomputed 1.3e-05"``. Rules: None matches
    only None; booleans and integer fields (an int in ``recomputed``) must be equal
    exactly; other numbers must satisfy ``|claimed - recomputed| <= atol + rtol *
    |recomputed|`` (the recomputed value is the trusted one, so it sets the scale),
    NaN matching nothing; anything else must be equal. A field missing from
    ``claimed`` is a difference; extra claimed fields (names, notes) are not
    compared.
    """
    if rtol < 0 or atol < 0:
        raise ValueError(f"tolerances must be non-negative, got rtol={rtol}, atol={atol}")
    lines = []
    for key, expected in recomputed.items():
        if key not in claimed:
            lines.append(f"{key}: claimed missing, recomputed {_show(expected)}")
        elif not _matches(claimed[key], expected, rtol, atol):
            lines.append(f"{key}: claimed {_show(claimed[key])}, recomputed {_show(expected)}")
    return lines


def _derived(sse: float, sum_sq: float, elements: int) -> tuple[float, float, float | None]:
    """mse, relative RMS error and SQNR from the sums.

    SQNR is None when the error is exactly zero (infinite SQNR), and also when the
    signal is exactly zero but the error is not (a zero ratio): neither has a finite
    decibel figure, and strict JSON has no infinities.
    """
    mse = sse / elements if elements else 0.0
    relative_rms_error = math.sqrt(sse / sum_sq) if sum_sq > 0 else 0.0
    sqnr_db = 10.0 * math.log10(sum_sq / sse) if sse > 0 and sum_sq > 0 else None
    return mse, relative_rms_error, sqnr_db


def _matches(claimed: object, expected: object, rtol: float, atol: float) -> bool:
    if expected is None or claimed is None:
        return claimed is expected
    if isinstance(expected, bool) or isinstance(claimed, bool):
        return type(claimed) is type(expected) and claimed == expected
    if isinstance(expected, int | float) and isinstance(claimed, int | float):
        if isinstance(expected, int):
            return claimed == expected
        if math.isnan(claimed) or math.isnan(expected):
            return False
        if math.isinf(claimed) or math.isinf(expected):
            return claimed == expected
        return abs(claimed - expected) <= atol + rtol * abs(expected)
    return claimed == expected


def _show(value: object) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
