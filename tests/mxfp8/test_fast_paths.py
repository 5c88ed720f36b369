"""The fast paths the benchmarks rely on give exactly what the plain ones give.

BF16 quantization, the integer E4M3 decoding behind the statistics, the byte scans of
the format checks and the wide byte comparison of the reproduction level each replace a
slower formulation; these tests pin them to it, byte for byte and float for float.
"""

from __future__ import annotations

import threading

import pytest
import torch

from qualify.checkpoint import checksums
from qualify.checks import format as format_checks
from qualify.checks import reproduction as r
from qualify.errors import QuantizationError
from qualify.mxfp8 import codec as mxfp8
from qualify.mxfp8 import statistics
from qualify.mxfp8.codec import RECIPES, MXFP8Weight, ScaleRecipe, quantize


def wide_bf16(rows: int, k: int, seed: int, low: int = -140, high: int = 120) -> torch.Tensor:
    """BF16 blocks with exponents over most of the range, subnormals included."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(rows, k // 32, 32, generator=g, dtype=torch.float64)
    shift = torch.randint(low, high, (rows, k // 32, 1), generator=g, dtype=torch.float64)
    return (base * torch.exp2(shift)).reshape(rows, k).to(torch.bfloat16)


def every_bf16_pattern_as_block_max() -> torch.Tensor:
    patterns = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    patterns = patterns[torch.isfinite(patterns)]
    g = torch.Generator().manual_seed(7)
    blocks = (patterns.float().unsqueeze(1) * (torch.rand(patterns.numel(), 32, generator=g) * 2 - 1)).to(
        torch.bfloat16)
    blocks[torch.arange(patterns.numel()), torch.arange(patterns.numel()) % 32] = patterns
    return blocks


def same_quantization(a: MXFP8Weight, b: MXFP8Weight) -> bool:
    return torch.equal(a.data.view(torch.uint8), b.data.view(torch.uint8)) and torch.equal(a.scale, b.scale)


# -- BF16 quantization ---------------------------------------------------------------


@pytest.mark.parametrize("recipe", RECIPES)
def test_bf16_path_equals_float32_path_on_every_pattern(recipe: ScaleRecipe) -> None:
    weight = every_bf16_pattern_as_block_max()
    assert same_quantization(quantize(weight, recipe), quantize(weight.float(), recipe))
    assert torch.equal(mxfp8.block_exponents(weight, recipe), mxfp8.block_exponents(weight.float(), recipe))


@pytest.mark.parametrize("recipe", RECIPES)
def test_bf16_path_chunks_contiguity_and_shapes(recipe: ScaleRecipe, monkeypatch: pytest.MonkeyPatch) -> None:
    weight = wide_bf16(37, 128, seed=1)
    whole = quantize(weight, recipe)
    assert same_quantization(whole, quantize(weight.float(), recipe))
    monkeypatch.setattr(mxfp8, "_CHUNK_ELEMENTS", 5 * 128)  # 5 rows per chunk, ragged end
    assert same_quantization(quantize(weight, recipe), whole)
    transposed = wide_bf16(128, 32, seed=2).t()
    assert not transposed.is_contiguous()
    assert same_quantization(quantize(transposed, recipe), quantize(transposed.contiguous().float(), recipe))
    stacked = quantize(weight.reshape(37, 2, 64), recipe, block_size=16)
    assert same_quantization(stacked, quantize(weight.reshape(37, 2, 64).float(), recipe, block_size=16))


def test_bf16_path_clamps_only_what_saturates() -> None:
    # ocp-floor saturates every block whose amax significand exceeds 1.75; modelopt none.
    weight = torch.tensor([[1.9 * 256, -1.9 * 256, 1.75 * 256] + [1.0] * 29], dtype=torch.bfloat16)
    assert quantize(weight, "ocp-floor").data.view(torch.uint8)[0, :3].tolist() == [0x7E, 0xFE, 0x7E]
    assert same_quantization(quantize(weight, "modelopt"), quantize(weight.float(), "modelopt"))


def test_bf16_path_names_the_first_non_finite_element(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mxfp8, "_CHUNK_ELEMENTS", 4 * 64)
    for bad in (float("inf"), float("-inf"), float("nan")):
        weight = wide_bf16(9, 64, seed=3)
        weight[6, 40] = bad
        weight[7, 3] = bad
        with pytest.raises(QuantizationError, match=r"at index \[6, 40\]") as info:
            quantize(weight, "modelopt", name="w")
        assert info.value.tensor == "w"


# -- statistics ----------------------------------------------------------------------


def reference_statistics(source: torch.Tensor, q: MXFP8Weight) -> dict[str, object]:
    """The float64 formulation the statistics module started from, chunk for chunk."""
    k = source.shape[-1]
    x_rows, d_rows, s_rows = source.reshape(-1, k), q.data.reshape(-1, k), q.scale.reshape(-1, k // 32)
    step = max(1, statistics._CHUNK_ELEMENTS // k)
    max_abs = 0.0
    sq_errors, squares = [], []
    for start in range(0, x_rows.shape[0], step):
        x = x_rows[start:start + step].double().reshape(-1, k // 32, 32)
        y = mxfp8.dequantize(d_rows[start:start + step], s_rows[start:start + step], 32, torch.float64)
        err = (y.reshape(x.shape) - x).abs()
        max_abs = max(max_abs, float(err.max()))
        sq_errors.append(err.square().reshape(-1, k))
        squares.append(x.square().reshape(-1, k))
    # The sums are defined row by row (statistics.exact_order_sum), not by chunk.
    sse = statistics.exact_order_sum(torch.cat(sq_errors))
    sum_sq = statistics.exact_order_sum(torch.cat(squares))
    return {"sse": sse, "sum_sq": sum_sq, "max_abs_error": max_abs, "amax": float(source.double().abs().max())}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16])
def test_statistics_equal_the_float64_formulation_exactly(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(statistics, "_CHUNK_ELEMENTS", 13 * 256)  # several chunks, ragged end
    source = wide_bf16(40, 256, seed=4, low=-20, high=10).to(dtype)
    quantized = quantize(source, "modelopt")
    # Bytes no quantizer would write: every E4M3 byte but the NaNs, every scale but 0xFF.
    g = torch.Generator().manual_seed(5)
    data = torch.randint(0, 256, source.shape, generator=g, dtype=torch.uint8)
    data[(data & 0x7F) == 0x7F] = 0x01
    scale = torch.randint(0, 255, quantized.scale.shape, generator=g, dtype=torch.uint8)
    for q in (quantized, MXFP8Weight(data.view(torch.float8_e4m3fn), scale)):
        stats = statistics.weight_statistics(source, q, "modelopt").to_dict()
        assert {k: stats[k] for k in ("sse", "sum_sq", "max_abs_error", "amax")} == reference_statistics(source, q)
        monkeypatch.setattr(statistics, "_SUB_CHUNK_ELEMENTS", 3 * 256)  # sub-chunks change nothing
        assert statistics.weight_statistics(source, q, "modelopt").to_dict() == stats
        monkeypatch.setattr(statistics, "_SUB_CHUNK_ELEMENTS", 1 << 18)


def test_integer_e4m3_decoding_equals_torch_for_every_byte_and_scale() -> None:
    data = torch.arange(256, dtype=torch.uint8).repeat(255).reshape(255, 8, 32)  # every byte under every scale
    data[(data & 0x7F) == 0x7F] = 0  # NaN codes are rejected before decoding
    scale = torch.arange(255, dtype=torch.uint8).reshape(255, 1).expand(255, 8).contiguous()
    out = torch.empty(data.shape, dtype=torch.float64)
    factor = mxfp8.e8m0_decode(scale).to(torch.float64).mul_(256.0)
    got = statistics._decode_e4m3(data, factor, torch.empty(data.shape, dtype=torch.int16), out)
    want = mxfp8.dequantize(data.reshape(255, 256), scale, 32, torch.float64).reshape(data.shape)
    assert torch.equal(got, want)
    assert torch.equal(torch.signbit(got), torch.signbit(want))  # negative zeros too


def test_statistics_still_refuse_nan_bytes_and_non_finite_sources() -> None:
    source = wide_bf16(4, 64, seed=6, low=-5, high=5)
    q = quantize(source, "modelopt")
    for nan in (0x7F, 0xFF):
        data = q.data.view(torch.uint8).clone()
        data[2, 9] = nan
        with pytest.raises(QuantizationError, match="NaN encoding"):
            statistics.weight_statistics(source, MXFP8Weight(data.view(torch.float8_e4m3fn), q.scale), "modelopt")
    bad = source.clone()
    bad[3, 3] = float("inf")
    with pytest.raises(QuantizationError, match="non-finite"):
        statistics.weight_statistics(bad, q, "modelopt")


# -- format scans --------------------------------------------------------------------


def test_block_max_magnitude_and_nan_count_equal_the_float_formulation(monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.Generator().manual_seed(8)
    blocks = torch.randint(0, 256, (37, 8, 32), generator=g, dtype=torch.uint8)
    blocks[0, 0] = torch.arange(32, dtype=torch.uint8) + 0x60  # no NaN in this block
    for chunk in (1 << 20, 100):  # one step, and ragged steps
        monkeypatch.setattr(format_checks, "_SCAN_CHUNK", chunk)
        want = blocks.view(torch.float8_e4m3fn).float().abs().amax(dim=-1)
        got = format_checks._block_max_magnitude(blocks)
        assert torch.equal(got.isnan(), want.isnan()) and bool(want.isnan().any())
        assert torch.equal(torch.nan_to_num(got), torch.nan_to_num(want))
        flat = blocks.reshape(-1)
        assert format_checks._count_e4m3_nans(flat) == int(mxfp8.fp8_nan_mask(flat).sum()) > 0
    clean = blocks.reshape(-1).clone()
    clean[(clean & 0x7F) == 0x7F] = 0x7E
    assert format_checks._count_e4m3_nans(clean) == 0
    assert format_checks._count_e4m3_nans(torch.empty(0, dtype=torch.uint8)) == 0


# -- byte comparison -----------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 64, 1001])
def test_same_bytes_finds_any_single_difference(n: int) -> None:
    a = torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(n), dtype=torch.uint8)
    assert r.same_bytes(a, a.clone())
    for i in {0, n // 2, n - 1} if n else set():
        b = a.clone()
        b[i] ^= 0x10
        assert not r.same_bytes(a, b)
    assert not r.same_bytes(a, torch.zeros(n + 1, dtype=torch.uint8))
    if n > 9:
        assert r.same_bytes(a[1:], a.clone()[1:])  # a view at an odd offset


def test_count_differing_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    a = torch.zeros(1000, dtype=torch.uint8)
    b = a.clone()
    b[[3, 250, 251, 640, 641, 642, 999]] = 1
    for chunk in (1 << 24, 100, 7):
        monkeypatch.setattr(r, "_COUNT_CHUNK", chunk)
        assert r._count_differing(a, b) == (7, [3, 250, 251, 640, 641])


# -- worker threads and progress -----------------------------------------------------


def test_thread_map_keeps_order_bounds_work_and_raises_in_place() -> None:
    threads_before = torch.get_num_threads()
    seen: list[int] = []
    lock = threading.Lock()

    def work(i: int) -> tuple[int, int]:
        with lock:
            seen.append(i)
        if i == 7:
            raise ValueError("seven")
        return i, torch.get_num_threads()

    results = checksums.thread_map(work, range(20), workers=2, window=3)
    got = [next(results) for _ in range(7)]
    assert [i for i, _ in got] == list(range(7))
    assert all(threads == 1 for _, threads in got)  # workers run torch on one thread each
    assert max(seen) <= 7 + 3  # never more than the window ahead of the consumer
    with pytest.raises(ValueError, match="seven"):
        next(results)
    results.close()
    assert torch.get_num_threads() == threads_before  # the caller's setting is untouched
    assert list(checksums.thread_map(lambda i: i * i, range(5), workers=1)) == [0, 1, 4, 9, 16]
    with pytest.raises(ValueError, match="workers"):
        list(checksums.thread_map(abs, [1], workers=0))


