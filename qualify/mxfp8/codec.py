"""Reference MXFP8 numerics: E4M3 elements, E8M0 power-of-two scales, 1x32 blocks.

Everything here is a pure function of its tensor arguments (no I/O, no global state),
because the reproduction level re-quantizes a checkpoint's BF16 source and demands the
stored bytes back *bit for bit*. Bit-exactness is the whole point, so two rules hold
throughout:

- Scale exponents come from the float32 bit pattern, never from ``torch.log2``: a
  float32 ``log2`` of ``2**k * (1 + 2**-23)`` rounds to exactly ``k`` and a ``ceil``
  on top of it then picks the wrong binade. Integer arithmetic on the bits is exact.
- The element scale ``2**-exponent`` is built from its bits as well, and applied as a
  single float32 multiply, which is exact for every finite product that is not deep
  below E4M3's own range (see :func:`_pow2_neg`). One round-to-nearest-even cast to
  E4M3 follows, after an explicit clamp to +-448: older torch releases did not
  saturate that cast, and the clamp makes the result independent of the release.

Two scale recipes are supported (:class:`ScaleRecipe`); they differ only in how a
block's amax picks the exponent:

``modelopt``
    NVIDIA ModelOpt's ``MXFP8QTensor``: ``descale = float32(amax) / 448`` (a float32
    division, as ModelOpt does it), exponent ``ceil(log2(descale))``. The block max
    lands in (224, 448], so nothing saturates; the one exception is a float32 amax
    just above ``448 * 2**-127``, whose quotient rounds down onto 2**-127. Same as
    TransformerEngine's and torchao's ``ScaleCalculationMode.RCEIL`` except where
    those deviate (torchao's eager ``RCEIL`` uses an inexact ``torch.log2``, and it
    and TransformerEngine scale elements by 1.0 instead of ``2**127`` when the scale
    byte is 0).
``ocp-floor``
    OCP Microscaling v1.0 and torchao's default ``FLOOR``: exponent
    ``floor(log2(amax)) - 8`` (8 = emax of E4M3). The block max lands in [256, 512),
    so blocks whose amax significand exceeds 1.75 saturate to 448. torchao's
    ``FLOOR`` differs only when the scale byte is 0: it scales by 2**126 there.

Both clamp the exponent to [-127, 127]; an all-zero block gets -127 (scale byte 0).
Scale bytes are ``exponent + 127``, so 0xFF (E8M0's NaN) is never produced.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

import torch

from qualify.errors import QuantizationError
from qualify.mxfp8.constants import (
    BLOCK_SIZE,
    E4M3_EMAX,
    E4M3_MAGNITUDE_MASK,
    E4M3_MAX,
    E4M3_NAN_MAGNITUDE,
    E8M0_BIAS,
    E8M0_MAX_EXPONENT,
    E8M0_MIN_EXPONENT,
    E8M0_NAN,
)

#: The dtypes a source weight may have. Each converts to float32 exactly, which is
#: what makes ``amax.float()`` and ``x.float()`` lossless.
SOURCE_DTYPES: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float16, torch.float32)

# float32 bit layout.
_F32_MANTISSA_BITS = 23
_F32_MANTISSA_MASK = (1 << _F32_MANTISSA_BITS) - 1
_F32_EXPONENT_MASK = 0xFF
_F32_BIAS = 127
_F32_QUIET_NAN_BITS = 0x7FC00000
#: 2**-127 is below float32's normal range: a subnormal with only bit 22 set.
_F32_TWO_POW_MINUS_127_BITS = 1 << (_F32_MANTISSA_BITS - 1)
#: Source elements per chunk: 512 Ki, 1 MiB of BF16 (2 MiB as float32), so a chunk's
#: passes (magnitude bits, block amax, scaling, the cast to E4M3) find it in cache
#: instead of streaming it from memory once per pass. Measured on one thread of the
#: benchmark machine, BF16 weights of 10240x2048, 2048x10240, 4096x4096, 65536x32 and
#: 1024x2880: 2.6 to 2.8 ns per element, against 3.7 to 4.5 at 4 Mi and 2.8 to 3.1 at
#: 128 Ki, where the per-chunk overhead starts to show. The chunk holds whole rows, so
#: it changes no byte of the result; it also bounds the peak whatever the weight's size.
_CHUNK_ELEMENTS = 1 << 19


class ScaleRecipe(StrEnum):
    """How a block's amax becomes its shared power-of-two scale."""

    MODELOPT = "modelopt"
    OCP_FLOOR = "ocp-floor"


RECIPES: tuple[ScaleRecipe, ...] = tuple(ScaleRecipe)


@dataclass(frozen=True, eq=False)
class MXFP8Weight:
    """A quantized weight: E4M3 elements and their biased E8M0 block scales.

    ``data`` is float8_e4m3fn ``[..., K]``; ``scale`` is uint8 ``[..., K / block]``,
    row-major and unswizzled (the layout a checkpoint stores). ``eq=False`` because
    tensor ``==`` is elementwise; compare ``data.view(torch.uint8)`` and ``scale``
    with :func:`torch.equal` for bit-exactness.
    """

    data: torch.Tensor
    scale: torch.Tensor

    def __post_init__(self) -> None:
        if self.data.dtype != torch.float8_e4m3fn:
            raise TypeError(f"MXFP8 data must be float8_e4m3fn, got {self.data.dtype}")
        if self.scale.dtype != torch.uint8:
            raise TypeError(f"MXFP8 scale must be uint8 (biased E8M0), got {self.scale.dtype}")
        _block_size_of(self.data, self.scale)

    @property
    def block_size(self) -> int:
        """Elements per scale, inferred from the two shapes."""
        return _block_size_of(self.data, self.scale)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Decode to ``dtype``; see :func:`dequantize`."""
        return dequantize(self.data, self.scale, self.block_size, dtype)


def parse_recipe(name: str | ScaleRecipe) -> ScaleRecipe:
    """The recipe called ``name`` (case and surrounding blanks ignored).

    Raises ValueError listing the known names, so a typo in a profile says what
    would have been accepted.
    """
    if isinstance(name, ScaleRecipe):
        return name
    try:
        return ScaleRecipe(str(name).strip().lower())
    except ValueError:
        known = ", ".join(recipe.value for recipe in RECIPES)
        raise ValueError(f"unknown MXFP8 scale recipe {name!r}; known recipes: {known}") from None


def block_exponents(
    weight: torch.Tensor,
    recipe: str | ScaleRecipe,
    block_size: int = BLOCK_SIZE,
    *,
    name: str | None = None,
) -> torch.Tensor:
    """The unbiased scale exponent of every block: int32 ``[..., K / block_size]``.

    Clamped to [-127, 127]. Raises :class:`QuantizationError` (naming ``name``) for
    a shape that cannot be blocked or a non-finite value.
    """
    recipe = parse_recipe(recipe)
    flat = _check_source(weight, block_size, name)
    rows, k = flat.shape
    out = torch.empty((rows, k // block_size), dtype=torch.int32)
    if flat.dtype == torch.bfloat16:
        scratch = torch.empty((min(_chunk_rows(k), rows), k // block_size, block_size), dtype=torch.int16)
        chunks = _blocked_chunks_bf16(flat, block_size, name, weight.shape, scratch)
    else:
        chunks = _blocked_chunks(flat, block_size, name, weight.shape)
    for start, stop, _, amax in chunks:
        out[start:stop] = _exponents_from_amax(amax, recipe)
    return out.reshape(*weight.shape[:-1], k // block_size)


def quantize(
    weight: torch.Tensor,
    recipe: str | ScaleRecipe = ScaleRecipe.MODELOPT,
    block_size: int = BLOCK_SIZE,
    *,
    name: str | None = None,
) -> MXFP8Weight:
    """Quantize a BF16/F16/F32 weight to MXFP8 with 1 x ``block_size`` blocks along the last dim.

    Bit-exact to the recipe (see the module docstring). Rows are processed in chunks
    so that the float32 working copy stays around 16 MiB whatever the weight's size.
    Raises :class:`QuantizationError` naming ``name`` if the last dimension is not a
    multiple of ``block_size`` or a value is NaN or infinite (MXFP8 has no encoding
    for an infinity, and a NaN would poison its whole block's scale).
    """
    recipe = parse_recipe(recipe)
    flat = _check_source(weight, block_size, name)
    rows, k = flat.shape
    blocks = k // block_size
    data = torch.empty((rows, k), dtype=torch.float8_e4m3fn)
    scale = torch.empty((rows, blocks), dtype=torch.uint8)
    if flat.dtype == torch.bfloat16:
        _quantize_bf16(flat, recipe, block_size, name, weight.shape, data, scale)
    else:
        _quantize_float32(flat, recipe, block_size, name, weight.shape, data, scale)
    return MXFP8Weight(
        data=data.reshape(weight.shape),
        scale=scale.reshape(*weight.shape[:-1], blocks),
    )


def _quantize_float32(
    flat: torch.Tensor, recipe: ScaleRecipe, block_size: int, name: str | None, shape: torch.Size,
    data: torch.Tensor, scale: torch.Tensor,
) -> None:
    """Any source dtype: each chunk widened to float32 (exact), scaled, clamped, cast."""
    rows, k = flat.shape
    blocks = k // block_size
    # One float32 buffer reused by every chunk: allocating a fresh tens-of-MiB tensor
    # per chunk costs more in page faults than the arithmetic itself.
    work = torch.empty((min(_chunk_rows(k), rows), blocks, block_size), dtype=torch.float32)
    for start, stop, chunk, amax in _blocked_chunks(flat, block_size, name, shape):
        exponent = _exponents_from_amax(amax, recipe)
        scale[start:stop] = (exponent + E8M0_BIAS).to(torch.uint8)
        scaled = work[: stop - start]
        scaled.copy_(chunk)  # exact widening, and never a write into the caller's tensor
        scaled.mul_(_pow2_neg(exponent).unsqueeze(-1))
        scaled.clamp_(-E4M3_MAX, E4M3_MAX)
        data[start:stop].view(stop - start, blocks, block_size).copy_(scaled)


def _quantize_bf16(
    flat: torch.Tensor, recipe: ScaleRecipe, block_size: int, name: str | None, shape: torch.Size,
    data: torch.Tensor, scale: torch.Tensor,
) -> None:
    """BF16 sources (what checkpoints hold), bit-identical to :func:`_quantize_float32` and
    about twice as fast, because every full-size pass stays 2 bytes wide.

    - The block amax comes from the bits (:func:`_blocked_chunks_bf16`), not ``abs`` and
      a BF16 ``amax``.
    - The element scaling ``x * 2**-exponent`` is done in BF16. BF16 has float32's
      exponent range, so a power-of-two multiple of a BF16 value is exact in BF16
      exactly when it is in float32: whenever the product is normal (>= 2**-126). A
      smaller product may round differently in the two formats, but it is far below
      half of E4M3's smallest subnormal (2**-10), so both round to a zero of the same
      sign. The cast to E4M3 then widens BF16 to float32 exactly and rounds once.
    - The clamp to +-448 runs only on chunks where some block's scaled amax exceeds 448
      (the amax is the block's largest magnitude, so otherwise the clamp changes nothing):
      ``modelopt`` scales almost never saturate, ``ocp-floor`` ones often do.
    """
    rows, k = flat.shape
    blocks = k // block_size
    n = min(_chunk_rows(k), rows)
    work = torch.empty((n, blocks, block_size), dtype=torch.bfloat16)
    magnitude = torch.empty((n, blocks, block_size), dtype=torch.int16)
    for start, stop, chunk, amax in _blocked_chunks_bf16(flat, block_size, name, shape, magnitude):
        exponent = _exponents_from_amax(amax, recipe)
        scale[start:stop] = (exponent + E8M0_BIAS).to(torch.uint8)
        factor = _pow2_neg(exponent)
        scaled = torch.mul(chunk, factor.to(torch.bfloat16).unsqueeze(-1), out=work[: stop - start])
        if bool((amax * factor > E4M3_MAX).any()):  # exact: amax is a BF16 value, factor a power of two
            scaled.clamp_(-E4M3_MAX, E4M3_MAX)
        data[start:stop].view(stop - start, blocks, block_size).copy_(scaled)


def dequantize(
    data: torch.Tensor,
    scale: torch.Tensor,
    block_size: int = BLOCK_SIZE,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Decode MXFP8 to ``dtype``: each element times ``2**(scale_byte - 127)``.

    The product is formed in float64 when ``dtype`` is float64 and in float32
    otherwise; either way it is exact unless it leaves float32's range (448 * 2**127
    overflows to inf, which is then the honest float32 answer). A 0xFF scale byte and
    the E4M3 NaN encodings decode to NaN. ``data`` may also be given as its raw uint8
    bytes.
    """
    if data.dtype == torch.uint8:
        data = data.view(torch.float8_e4m3fn)
    if data.dtype != torch.float8_e4m3fn:
        raise TypeError(f"MXFP8 data must be float8_e4m3fn or uint8, got {data.dtype}")
    if scale.dtype != torch.uint8:
        raise TypeError(f"MXFP8 scale must be uint8 (biased E8M0), got {scale.dtype}")
    _check_block_size(block_size)
    if _block_size_of(data, scale) != block_size:
        raise ValueError(
            f"data {tuple(data.shape)} and scale {tuple(scale.shape)} do not match block size {block_size}"
        )
    work = torch.float64 if dtype == torch.float64 else torch.float32
    blocks = scale.shape[-1]
    factor = e8m0_decode(scale).to(work).unsqueeze(-1)
    values = data.to(work).reshape(*data.shape[:-1], blocks, block_size)
    values.mul_(factor)  # in place: ``data.to(work)`` is always a fresh copy
    return values.reshape(data.shape).to(dtype)


def e8m0_encode(exponent: torch.Tensor) -> torch.Tensor:
    """Biased E8M0 bytes (``exponent + 127``) for integer exponents in [-127, 127].

    Raises ValueError outside that range rather than wrapping or clamping: a caller
    with such an exponent has a bug, and 0xFF would silently mean NaN.
    """
    if exponent.dtype.is_floating_point or exponent.dtype.is_complex or exponent.dtype == torch.bool:
        raise TypeError(f"E8M0 exponents must be an integer tensor, got {exponent.dtype}")
    if exponent.numel():
        low, high = int(exponent.min()), int(exponent.max())
        if low < E8M0_MIN_EXPONENT or high > E8M0_MAX_EXPONENT:
            raise ValueError(
                f"E8M0 exponents must lie in [{E8M0_MIN_EXPONENT}, {E8M0_MAX_EXPONENT}], got [{low}, {high}]"
            )
    return (exponent.to(torch.int32) + E8M0_BIAS).to(torch.uint8)


def e8m0_decode(scale: torch.Tensor) -> torch.Tensor:
    """float32 ``2**(byte - 127)`` per byte; byte 0 is 2**-127 (subnormal), 0xFF is NaN.

    Built from float32 bit patterns so that every power is exact (``torch.exp2`` and
    ``torch.pow`` make no such promise, and 2**-127 is a subnormal).
    """
    if scale.dtype != torch.uint8:
        raise TypeError(f"E8M0 scales must be uint8, got {scale.dtype}")
    biased = scale.to(torch.int32)
    bits = torch.bitwise_left_shift(biased, _F32_MANTISSA_BITS)
    bits = torch.where(biased == 0, _F32_TWO_POW_MINUS_127_BITS, bits)
    bits = torch.where(biased == E8M0_NAN, _F32_QUIET_NAN_BITS, bits)
    return bits.view(torch.float32)


def fp8_nan_mask(data: torch.Tensor) -> torch.Tensor:
    """Where ``data`` (float8_e4m3fn, or its uint8 bytes) holds a NaN: 0x7F or 0xFF.

    E4M3FN has no infinities; those two bytes are its only non-finite encodings.
    """
    if data.dtype == torch.float8_e4m3fn:
        data = data.view(torch.uint8)
    if data.dtype != torch.uint8:
        raise TypeError(f"E4M3 data must be float8_e4m3fn or uint8, got {data.dtype}")
    return torch.bitwise_and(data, E4M3_MAGNITUDE_MASK) == E4M3_NAN_MAGNITUDE


# -- internals -----------------------------------------------------------------------


def _check_block_size(block_size: int) -> None:
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size <= 0:
        raise ValueError(f"block size must be a positive integer, got {block_size!r}")


def _block_size_of(data: torch.Tensor, scale: torch.Tensor) -> int:
    """The block size that ``data`` and ``scale`` imply; ValueError if they do not fit."""
    fits = (
        data.dim() >= 1
        and scale.dim() == data.dim()
        and tuple(scale.shape[:-1]) == tuple(data.shape[:-1])
        and scale.shape[-1] > 0
        and data.shape[-1] % scale.shape[-1] == 0
        and data.shape[-1] > 0
    )
    if not fits:
        raise ValueError(f"MXFP8 scale shape {tuple(scale.shape)} does not fit data shape {tuple(data.shape)}")
    return data.shape[-1] // scale.shape[-1]


def _check_source(weight: torch.Tensor, block_size: int, name: str | None) -> torch.Tensor:
    """Validate a source weight and view it as ``[rows, K]``."""
    _check_block_size(block_size)
    if weight.dtype not in SOURCE_DTYPES:
        known = ", ".join(str(dtype).removeprefix("torch.") for dtype in SOURCE_DTYPES)
        raise QuantizationError(f"cannot quantize dtype {weight.dtype} (expected one of {known})", tensor=name)
    if weight.dim() < 1:
        raise QuantizationError("cannot quantize a 0-d tensor: blocks run along the last dimension", tensor=name)
    if weight.device.type != "cpu":
        # The reference must not depend on a device's cast and reduction kernels.
        weight = weight.cpu()
    k = weight.shape[-1]
    if k == 0 or k % block_size:
        raise QuantizationError(
            f"last dimension {k} (shape {tuple(weight.shape)}) is not a positive multiple "
            f"of the MXFP8 block size {block_size}",
            tensor=name,
        )
    return weight.reshape(-1, k)


def _chunk_rows(k: int) -> int:
    return max(1, _CHUNK_ELEMENTS // max(k, 1))


def _blocked_chunks(
    flat: torch.Tensor, block_size: int, name: str | None, shape: torch.Size
) -> Iterator[tuple[int, int, torch.Tensor, torch.Tensor]]:
    """Row chunks of ``flat`` as ``(start, stop, [rows, blocks, block_size] view, amax)``.

    ``amax`` is the per-block max |x| as float32, exact: taken in the source dtype,
    then widened. NaN propagates through ``amax`` and an infinity is its own max, so
    checking the (block_size times smaller) amax for finiteness catches every bad
    element without a full-size mask.
    """
    rows, k = flat.shape
    blocks = k // block_size
    step = _chunk_rows(k)
    magnitude = torch.empty((min(step, rows), blocks, block_size), dtype=flat.dtype)
    for start in range(0, rows, step):
        stop = min(start + step, rows)
        chunk = flat[start:stop].reshape(stop - start, blocks, block_size)
        amax = torch.abs(chunk, out=magnitude[: stop - start]).amax(dim=-1).float()
        finite = torch.isfinite(amax)
        if not bool(finite.all()):
            _raise_non_finite(flat[start:stop], finite, block_size, name, start, shape)
        yield start, stop, chunk, amax


#: The magnitude bits (sign cleared) of the BF16 infinity; every larger pattern is a NaN.
_BF16_INF_BITS = 0x7F80
_BF16_MAGNITUDE_MASK = 0x7FFF


def _blocked_chunks_bf16(
    flat: torch.Tensor, block_size: int, name: str | None, shape: torch.Size, magnitude: torch.Tensor
) -> Iterator[tuple[int, int, torch.Tensor, torch.Tensor]]:
    """:func:`_blocked_chunks` for a BF16 ``flat``, with the amax taken from the bit patterns.

    With the sign bit cleared, BF16 bit patterns read as int16 are ordered as the
    magnitudes they encode, infinity (0x7F80) above every finite value and the NaNs
    above it. So the block amax is the int16 max of ``bits & 0x7FFF`` (one narrow
    integer pass and reduction instead of ``abs`` and a BF16 ``amax``), a block is
    finite iff that max is below 0x7F80, and ``max << 16`` is the amax's float32 bit
    pattern, exactly. ``magnitude`` is an int16 scratch buffer of at least one chunk.
    """
    rows, k = flat.shape
    blocks = k // block_size
    step = _chunk_rows(k)
    for start in range(0, rows, step):
        stop = min(start + step, rows)
        chunk = flat[start:stop].reshape(stop - start, blocks, block_size)  # a copy only if not contiguous
        mag = torch.bitwise_and(chunk.view(torch.int16), _BF16_MAGNITUDE_MASK, out=magnitude[: stop - start])
        top = mag.amax(dim=-1)
        finite = top < _BF16_INF_BITS
        if not bool(finite.all()):
            _raise_non_finite(flat[start:stop], finite, block_size, name, start, shape)
        amax = torch.bitwise_left_shift(top.to(torch.int32), 16).view(torch.float32)
        yield start, stop, chunk, amax


def _raise_non_finite(
    chunk: torch.Tensor,
    finite_blocks: torch.Tensor,
    block_size: int,
    name: str | None,
    row0: int,
    shape: torch.Size,
) -> None:
    row, block = (int(i) for i in (~finite_blocks).nonzero()[0])
    segment = chunk[row, block * block_size : (block + 1) * block_size]
    offset = int((~torch.isfinite(segment)).nonzero()[0, 0])
    value = float(segment[offset])
    flat_index = (row0 + row) * shape[-1] + block * block_size + offset
    index = [int(i) for i in torch.unravel_index(torch.tensor(flat_index), tuple(shape))]
    raise QuantizationError(
        f"non-finite value {value} at index {index}: MXFP8 has no encoding for it",
        tensor=name,
    )


def _exponents_from_amax(amax: torch.Tensor, recipe: ScaleRecipe) -> torch.Tensor:
    """Unbiased int32 scale exponents from finite, non-negative float32 block maxima."""
    if recipe is ScaleRecipe.MODELOPT:
        # ModelOpt divides in float32, and that rounding is part of the recipe: it can
        # only matter where the quotient is a float32 subnormal (see below).
        descale = amax / E4M3_MAX
        bits = descale.view(torch.int32)
        biased = torch.bitwise_and(torch.bitwise_right_shift(bits, _F32_MANTISSA_BITS), _F32_EXPONENT_MASK)
        # ceil(log2(d)) for a normal d = 1.m * 2**(E-127): E-127, plus one unless m == 0.
        above_pow2 = torch.bitwise_and(bits, _F32_MANTISSA_MASK) != 0
        exponent = biased - _F32_BIAS + above_pow2.to(torch.int32)
        # A subnormal d (E == 0) is below 2**-126, so its ceil(log2) is -126 when
        # d > 2**-127 and at most -127 otherwise (clamped there; d == 0 included, as
        # ModelOpt maps a zero block to -127).
        subnormal = torch.where(bits > _F32_TWO_POW_MINUS_127_BITS, -126, E8M0_MIN_EXPONENT).to(torch.int32)
        exponent = torch.where(biased == 0, subnormal, exponent)
    else:
        bits = amax.view(torch.int32)
        biased = torch.bitwise_and(torch.bitwise_right_shift(bits, _F32_MANTISSA_BITS), _F32_EXPONENT_MASK)
        # floor(log2(amax)) for a normal amax is E-127; a subnormal or zero amax
        # (E == 0) is below 2**-126, so any exponent it gives clamps to -127 anyway.
        exponent = biased - _F32_BIAS - E4M3_EMAX
    return exponent.clamp_(E8M0_MIN_EXPONENT, E8M0_MAX_EXPONENT).to(torch.int32)


def _pow2_neg(exponent: torch.Tensor) -> torch.Tensor:
    """float32 ``2**-exponent`` for exponents in [-127, 127], exactly.

    For -127..126 that is a normal float32 (biased field 254..1). For 127 it is the
    subnormal 2**-127; no finite float32 amax reaches that exponent (the largest is
    120), but the clamp range allows it, so it is handled rather than assumed away.
    Multiplying a float32 by one of these is exact except when the product falls into
    float32's subnormal range, i.e. below 2**-126, far below half of E4M3's smallest
    subnormal (2**-10): such a product rounds to a (signed) zero either way.
    """
    field = _F32_BIAS - exponent
    bits = torch.bitwise_left_shift(field.clamp(min=1), _F32_MANTISSA_BITS)
    bits = torch.where(field <= 0, _F32_TWO_POW_MINUS_127_BITS, bits)
    return bits.view(torch.float32)
