"""Quantization-error statistics of an MXFP8 weight against its high-precision source.

Pure functions. A conversion manifest *claims* these numbers for every tensor; the
harness recomputes them from the source and the stored bytes and :func:`compare`
says which claims do not hold. Everything is computed in float64, over row chunks so
that the working copies stay bounded whatever the weight's size.

The sums are the same float on every IEEE-754 machine, whatever the thread count, the
vector width or the chunk sizes (see :func:`exact_order_sum`): a manifest written on
one machine is reproduced byte for byte on another, and the shipped fixture with it.

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

from qualify.errors import QuantizationError
from qualify.mxfp8.codec import (
    BLOCK_SIZE,
    E4M3_MAX,
    MXFP8Weight,
    ScaleRecipe,
    e8m0_decode,
    parse_recipe,
)
from qualify.mxfp8.constants import E4M3_MAGNITUDE_MASK, E4M3_NAN_MAGNITUDE, E8M0_NAN

#: Elements per chunk of the block-wise passes (block amax, byte checks, block counts),
#: which bound their temporaries. It does not change any result.
_CHUNK_ELEMENTS = 1 << 21
#: Elements per sub-chunk of the float64 passes: 256 Ki is 2 MiB per float64 copy, so
#: decoding, squaring and summing a sub-chunk runs in cache instead of streaming larger
#: buffers through memory. It does not change any result either: the sums are per row.
_SUB_CHUNK_ELEMENTS = 1 << 18


@dataclass(frozen=True)
class WeightStatistics:
    """Error statistics of one quantized tensor (see the module docstring).

    Block counts: ``zero_blocks`` have amax 0; ``saturated_blocks`` hold at least one
    element with ``|x| * 2**-exponent > 448`` before the clamp, i.e. an element the
    format had to saturate (common for ``ocp-floor``, whenever the amax significand
    exceeds 1.75; for ``modelopt`` only where its float32 division rounds a descale
    just above 2**-127 down, see :mod:`qualify.mxfp8.codec`); ``min_scale_blocks`` have
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
    if bool((q.scale == E8M0_NAN).any()):
        raise QuantizationError("scale byte 0xFF (E8M0 NaN) in quantized weight", tensor=name)

    k = source.shape[-1]
    blocks_per_row = k // block_size
    x_rows = source.reshape(-1, k)
    data_rows = q.data.reshape(-1, k).view(torch.uint8)
    scale_rows = q.scale.reshape(-1, blocks_per_row)
    rows = x_rows.shape[0]

    max_abs_error = amax = 0.0
    zero_blocks = saturated_blocks = min_scale_blocks = 0
    step = max(1, _CHUNK_ELEMENTS // max(k, 1))
    sub_step = max(1, min(step, _SUB_CHUNK_ELEMENTS // max(k, 1)))
    # Row sums of x**2 (index 0) and of the squared error (index 1): rows are the unit the
    # sums are fixed on, and sub-chunks hold whole rows, so a sub-chunk is summed while it
    # is still in cache and the chunk sizes cannot change the order of any addition.
    row_sums = torch.empty((2, rows), dtype=torch.float64)
    # Reused by every sub-chunk: a fresh tensor each time costs more in page faults than
    # the arithmetic on it. x and the error share one buffer so that one in-place add per
    # tree level folds both.
    pair_buf = torch.empty((2, min(sub_step, rows), k), dtype=torch.float64)
    bits_buf = torch.empty((min(sub_step, rows), blocks_per_row, block_size), dtype=torch.int16)
    magnitude_buf = torch.empty((min(step, rows), blocks_per_row, block_size), dtype=torch.uint8)
    for start in range(0, rows, step):
        stop = min(start + step, rows)
        n = stop - start
        source_chunk = x_rows[start:stop].reshape(n, blocks_per_row, block_size)
        scale = scale_rows[start:stop]
        data = data_rows[start:stop].reshape(n, blocks_per_row, block_size)
        block_amax = _block_amax(source_chunk)
        if not bool(torch.isfinite(block_amax).all()):
            raise QuantizationError("source holds non-finite values", tensor=name)
        # fp8_nan_mask's test, fused with the magnitudes the error figures need below.
        magnitude = torch.bitwise_and(data, E4M3_MAGNITUDE_MASK, out=magnitude_buf[:n])
        if int(magnitude.max()) == E4M3_NAN_MAGNITUDE:  # the largest 7-bit magnitude, and E4M3's only NaN one
            raise QuantizationError("E4M3 NaN encoding (0x7F/0xFF) in quantized weight", tensor=name)
        factor = e8m0_decode(scale).to(torch.float64).mul_(256.0)  # see _decode_e4m3
        for a in range(0, n, sub_step):
            b = min(a + sub_step, n)
            pair = pair_buf[:, : b - a]
            # Private copies (never an alias of a float64 source), squared and folded in place.
            xs = pair[0].view(b - a, blocks_per_row, block_size)
            es = pair[1].view(b - a, blocks_per_row, block_size)
            xs.copy_(source_chunk[a:b])
            _decode_e4m3(data[a:b], factor[a:b], bits_buf[: b - a], es)
            es.sub_(xs)
            # max|e| as max(max e, -min e): one read instead of an in-place abs and a read.
            low, high = torch.aminmax(es)
            max_abs_error = max(max_abs_error, float(high), -float(low))
            pair.square_()
            row_sums[:, start + a : start + b] = _fold_rows_(pair)
        amax = max(amax, float(block_amax.max()))
        zero_blocks += int((block_amax == 0).sum())
        # 448 * 2**exponent is exact in float64, so this is the pre-clamp test
        # |x| * 2**-exponent > 448 without forming the scaled block.
        saturated_blocks += int((block_amax > E4M3_MAX * e8m0_decode(scale).to(torch.float64)).sum())
        min_scale_blocks += int((scale == 0).sum())

    sum_sq, sse = _fold_rows_(row_sums).tolist()
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


def exact_order_sum(x: torch.Tensor) -> float:
    """Sum of ``x``'s elements in float64, the same float on every IEEE-754 machine.

    torch's own reductions split their work by thread count and vector width, so the
    last bits of a float64 ``sum`` change with ``OMP_NUM_THREADS`` and the CPU. Here
    the order of the additions is fixed by the shape alone: each row (the last
    dimension) is summed by :func:`_fold_rows_`'s pairwise tree, and the row sums, in
    row-major order, by the same tree. :func:`weight_statistics` sums ``(y - x)**2``
    and ``x**2`` of the ``[rows, K]`` weight this way, a sub-chunk of rows at a time.
    (Combining the row sums with :func:`math.fsum` instead would be exact, but it costs
    about 60 ns a row in Python: 2 ns an element at K = 32.) A 0-d tensor is one row
    of one element.
    """
    if x.numel() == 0:
        return 0.0
    width = x.shape[-1] if x.dim() else 1
    rows = torch.empty(x.shape, dtype=torch.float64)
    rows.copy_(x)  # a private copy: the tree is built in place
    return float(_fold_rows_(_fold_rows_(rows.reshape(-1, width))))


def _fold_rows_(x: torch.Tensor) -> torch.Tensor:
    """Sum each row (the last dimension) of float64 ``x`` in place; returns the ``x[..., 0]`` view of the row sums.

    A fixed pairwise tree: a row of width ``w`` becomes one of width ``ceil(w / 2)``,
    element ``i < w // 2`` gaining element ``i + ceil(w / 2)`` (an odd middle element
    waits a level), until one is left. Each level is one elementwise add of two
    disjoint views, and an elementwise IEEE add gives the same float whichever thread
    or vector lane computes it, so the result depends on the values and the width
    only. The halves are contiguous runs, so the adds vectorize, unlike pairing
    neighbours through stride-2 views. The error grows with ``log2(w)``, not ``w``.
    """
    width = x.shape[-1]
    if width == 0:
        return torch.zeros(x.shape[:-1], dtype=x.dtype)
    while width > 1:
        keep = (width + 1) // 2
        x[..., : width - keep].add_(x[..., keep:width])
        width = keep
    return x[..., 0]


def _block_amax(source_chunk: torch.Tensor) -> torch.Tensor:
    """Per-block max |x| of ``[n, blocks, block]`` as float64 ``[n, blocks]``; not finite for a NaN or infinity.

    Taken in the source's own dtype, then widened, so it is exact. For BF16 (what
    checkpoints hold) it is read off the bit patterns, as in
    :func:`qualify.mxfp8.codec._blocked_chunks_bf16`: with the sign cleared, the int16 patterns
    order as the magnitudes they encode (infinity and the NaNs above every finite one),
    so one narrow integer max replaces two float reductions.
    """
    if source_chunk.dtype != torch.bfloat16:
        # max|x| without an |x| copy; a NaN propagates through both reductions.
        return torch.maximum(source_chunk.amax(dim=-1), source_chunk.amin(dim=-1).neg()).to(torch.float64)
    top = torch.bitwise_and(source_chunk.view(torch.int16), 0x7FFF).amax(dim=-1)
    return torch.bitwise_left_shift(top.to(torch.int32), 16).view(torch.float32).to(torch.float64)


def _decode_e4m3(data: torch.Tensor, factor: torch.Tensor, bits: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out`` (float64) = E4M3 bytes ``data`` ``[n, blocks, block]`` times ``factor * 2**-8`` per block, exactly.

    torch converts float8 to wider types one element at a time (about 5 ns each on a
    CPU); this does it with whole-tensor integer operations instead. The seven magnitude
    bits of an E4M3 byte, shifted left by 7 under its sign bit, are the float16 pattern
    of the same value times 2**-8, subnormals included (both formats put a 3-bit
    mantissa under the exponent field, and float16's bias is 8 more), so the caller
    folds 2**8 into ``factor`` (float64 ``[n, blocks]``). float16 widens to float64 in
    hardware. The caller must have rejected NaN bytes (0x7F/0xFF): their float16 pattern
    reads as 480.
    """
    # int8 -> int16 sign-extends a set sign bit into bits 8-15; after the shift, bit 15
    # is the sign and bit 14 (float16's top exponent bit, always 0 here) is cleared.
    bits.copy_(data.view(torch.int8))
    bits.bitwise_left_shift_(7).bitwise_and_(_F16_FROM_E4M3_MASK)
    out.copy_(bits.view(torch.float16))
    return out.mul_(factor.unsqueeze(-1))


#: Sign bit and bits 7-13 (E4M3's magnitude, shifted) of a float16 pattern; see :func:`_decode_e4m3`.
_F16_FROM_E4M3_MASK = -0x4080  # 0xBF80 as an int16


def aggregate(stats: Iterable[WeightStatistics]) -> AggregateStatistics:
    """Pool per-tensor statistics (an empty iterable gives all-zero totals)."""
    tensors = elements = 0
    max_abs_error = 0.0
    sses: list[float] = []
    sums_sq: list[float] = []
    for item in stats:
        tensors += 1
        elements += item.elements
        sses.append(item.sse)
        sums_sq.append(item.sum_sq)
        max_abs_error = max(max_abs_error, item.max_abs_error)
    # Correctly rounded, so the totals do not depend on the order the tensors come in.
    sse, sum_sq = math.fsum(sses), math.fsum(sums_sq)
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
