"""Tests of qualify.mxfp8.statistics on hand-checkable blocks, against a one-shot float64
computation, of its machine- and thread-independent sums, and of compare()'s tolerance
rules."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys

import pytest
import torch

from qualify.errors import QuantizationError
from qualify.mxfp8 import statistics
from qualify.mxfp8.codec import RECIPES, MXFP8Weight, ScaleRecipe, quantize
from qualify.mxfp8.statistics import (
    AggregateStatistics,
    WeightStatistics,
    aggregate,
    compare,
    exact_order_sum,
    weight_statistics,
)
from tests.helpers import REPO


def block(*values: float) -> list[float]:
    return [*values, *[0.0] * (32 - len(values))]


def stats_of(rows: list[list[float]], recipe: str, dtype: torch.dtype = torch.float32) -> WeightStatistics:
    source = torch.tensor(rows, dtype=torch.float64).to(dtype)
    return weight_statistics(source, quantize(source, recipe), recipe)


# -- hand-checked examples -------------------------------------------------------------


def test_modelopt_tie_and_zero_block() -> None:
    # Block 0: amax 448 -> scale 2**0; 1.0625 is a tie and rounds to 1.0 (error 1/16).
    # Block 1: all zero -> scale byte 0.
    stats = stats_of([block(448.0, 1.0625), block()], "modelopt")
    sum_sq = 448.0**2 + 1.0625**2
    sse = 0.0625**2
    assert stats == WeightStatistics(
        elements=64,
        blocks=2,
        zero_blocks=1,
        saturated_blocks=0,
        min_scale_blocks=1,
        sse=sse,
        sum_sq=sum_sq,
        mse=sse / 64,
        max_abs_error=0.0625,
        relative_rms_error=math.sqrt(sse / sum_sq),
        sqnr_db=10 * math.log10(sum_sq / sse),
        amax=448.0,
    )


def test_ocp_floor_saturation_against_modelopt() -> None:
    # amax 500, significand 1.95 > 1.75: ocp-floor keeps scale 2**0 and saturates 500
    # to 448 (error 52); modelopt takes 2**1, 250 rounds to 256 -> 512 (error 12).
    rows = [block(500.0, -1.0), block(3.0, 0.5)]
    floor = stats_of(rows, "ocp-floor")
    assert (floor.saturated_blocks, floor.zero_blocks, floor.min_scale_blocks) == (1, 0, 0)
    assert floor.sse == 52.0**2 and floor.max_abs_error == 52.0
    modelopt = stats_of(rows, "modelopt")
    assert modelopt.saturated_blocks == 0
    assert modelopt.sse == 12.0**2 and modelopt.max_abs_error == 12.0
    assert modelopt.sum_sq == floor.sum_sq == 500.0**2 + 1.0 + 9.0 + 0.25
    assert modelopt.amax == 500.0


def test_exact_quantization_has_no_sqnr_and_is_json_safe() -> None:
    stats = stats_of([block(1.0, -2.0, 0.5, 448.0)], "modelopt", torch.bfloat16)
    assert stats.sse == 0.0 and stats.mse == 0.0 and stats.max_abs_error == 0.0
    assert stats.relative_rms_error == 0.0
    assert stats.sqnr_db is None
    encoded = json.dumps(stats.to_dict(), allow_nan=False)
    assert json.loads(encoded) == stats.to_dict()
    assert json.loads(encoded)["sqnr_db"] is None


def test_all_zero_tensor() -> None:
    stats = stats_of([block(), block()], "ocp-floor")
    assert (stats.zero_blocks, stats.min_scale_blocks, stats.saturated_blocks) == (2, 2, 0)
    assert stats.sum_sq == 0.0 and stats.relative_rms_error == 0.0 and stats.sqnr_db is None
    assert stats.amax == 0.0


def test_min_scale_blocks_counts_clamped_tiny_blocks() -> None:
    tiny = 2.0**-130  # amax / 448 < 2**-127: the exponent clamps for both recipes
    for recipe in RECIPES:
        stats = stats_of([block(tiny, -tiny), block(1.0), block()], recipe)
        assert (stats.min_scale_blocks, stats.zero_blocks) == (2, 1)


# -- against an independent computation ------------------------------------------------


def _random_weight(seed: int, rows: int = 48, k: int = 256) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    base = torch.randn(rows, k // 32, 32, generator=generator, dtype=torch.float64)
    shift = torch.randint(-20, 20, (rows, k // 32, 1), generator=generator, dtype=torch.float64)
    return (base * torch.exp2(shift)).reshape(rows, k).to(torch.bfloat16)


@pytest.mark.parametrize("recipe", RECIPES)
def test_matches_one_shot_float64(recipe: ScaleRecipe, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _random_weight(21)
    q = quantize(source, recipe)
    monkeypatch.setattr(statistics, "_CHUNK_ELEMENTS", 7 * 256)  # ragged multi-chunk path
    monkeypatch.setattr(statistics, "_SUB_CHUNK_ELEMENTS", 3 * 256)  # ragged sub-chunks inside each chunk
    stats = weight_statistics(source, q, recipe)
    x = source.double()
    y = q.data.double() * torch.exp2(q.scale.double() - 127).repeat_interleave(32, dim=1)
    err = y - x
    assert stats.elements == x.numel() and stats.blocks == x.numel() // 32
    # The same float as the whole tensor summed at once: chunking changes no addition.
    assert stats.sse == exact_order_sum(err**2)
    assert stats.sum_sq == exact_order_sum(x**2)
    assert stats.sse == pytest.approx(float((err**2).sum()), rel=1e-12)
    assert stats.sum_sq == pytest.approx(float((x**2).sum()), rel=1e-12)
    assert stats.max_abs_error == float(err.abs().max())
    assert stats.amax == float(x.abs().max())
    assert stats.mse == pytest.approx(stats.sse / stats.elements, rel=1e-15)
    assert stats.sqnr_db == pytest.approx(10 * math.log10(stats.sum_sq / stats.sse), rel=1e-12)
    # Saturation from the definition: the block amax significand exceeds 1.75.
    block_amax = x.reshape(-1, 32).abs().amax(dim=1).tolist()
    over = sum(1 for a in block_amax if a and 2 * math.frexp(a)[0] > 1.75)
    assert stats.saturated_blocks == (over if recipe is ScaleRecipe.OCP_FLOOR else 0)
    assert over > 0


# -- sums that do not depend on the machine -------------------------------------------


def tree_sum(values: list[float]) -> float:
    """The pairwise tree exact_order_sum documents, one Python float addition at a time."""
    if not values:
        return 0.0
    while len(values) > 1:
        width, keep = len(values), (len(values) + 1) // 2
        pairs = [a + b for a, b in zip(values[: width - keep], values[keep:], strict=True)]
        values = pairs + values[width - keep : keep]  # an odd middle element waits a level
    return values[0]


def test_exact_order_sum_hand_checked() -> None:
    # Pairs (0, 2) and (1, 3): 1e16 - 1e16 + (1 + 1) = 2, where a running sum loses both
    # ones to rounding (1e16 + 1 rounds to 1e16, ties to even).
    values = [1e16, 1.0, -1e16, 1.0]
    assert exact_order_sum(torch.tensor(values, dtype=torch.float64)) == 2.0
    assert sum(values) == 1.0
    # Odd width: element 0 pairs with element 2 and the middle one waits a level, so
    # 2**53 + 1 rounds back to 2**53 before the other 1 comes (2**53 + 2 in any order
    # that adds the two ones first).
    assert exact_order_sum(torch.tensor([2.0**53, 1.0, 1.0], dtype=torch.float64)) == 2.0**53
    assert exact_order_sum(torch.tensor([], dtype=torch.float64)) == 0.0
    assert exact_order_sum(torch.tensor(3.5, dtype=torch.float64)) == 3.5
    assert exact_order_sum(torch.tensor([[1.5], [-0.5]], dtype=torch.float64)) == 1.0
    # Rows (the last dimension) are summed first: 1 + 2**53 rounds to 2**53 in the first
    # row, and again when the second row's 1 comes; flattened, the same four values pair
    # the ones together (elements 0 and 2) and give 2**53 + 2.
    rows = torch.tensor([[1.0, 2.0**53], [1.0, 0.0]], dtype=torch.float64)
    assert exact_order_sum(rows) == 2.0**53
    assert exact_order_sum(rows.flatten()) == 2.0**53 + 2


@pytest.mark.parametrize("width", [*range(1, 40), 63, 64, 65, 255, 256, 257, 1000])
def test_exact_order_sum_is_the_pairwise_tree(width: int) -> None:
    generator = torch.Generator().manual_seed(width)
    # Values spread over 60 binades, so that the order of the additions shows in the result.
    x = torch.randn(3, width, generator=generator, dtype=torch.float64) * torch.exp2(
        torch.randint(-30, 30, (3, width), generator=generator, dtype=torch.float64)
    )
    before = x.clone()
    assert exact_order_sum(x[0]) == tree_sum(x[0].tolist())
    assert exact_order_sum(x) == tree_sum([tree_sum(row) for row in x.tolist()])
    assert torch.equal(x, before)  # the input is not folded in place
    # A narrower dtype is widened exactly first.
    assert exact_order_sum(x.float()) == tree_sum([tree_sum(row) for row in x.float().double().tolist()])
    # Leading dimensions are rows in row-major order.
    stacked = x.reshape(3, 1, width).expand(3, 5, width)
    assert exact_order_sum(stacked) == tree_sum([tree_sum(row) for row in stacked.reshape(15, width).tolist()])


_THREADS_SCRIPT = """
import json
import torch
from qualify.mxfp8.codec import quantize
from qualify.mxfp8.statistics import exact_order_sum, weight_statistics
out = {"threads": torch.get_num_threads(), "torch_sum": [], "exact_order_sum": [], "statistics": []}
for seed in range(4):
    g = torch.Generator().manual_seed(seed)
    scale = torch.exp2(torch.randint(-8, 8, (32, 1), generator=g))
    w = (torch.randn(32, 2048, generator=g) * scale).to(torch.bfloat16)
    squares = w.double().square().flatten()
    out["torch_sum"].append(repr(float(squares.sum())))
    out["exact_order_sum"].append(repr(exact_order_sum(squares)))
    stats = weight_statistics(w, quantize(w, "modelopt"), "modelopt")
    out["statistics"].append({k: repr(v) for k, v in stats.to_dict().items()})
print(json.dumps(out))
"""


def _run_with_threads(threads: int) -> dict[str, object]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    done = subprocess.run(
        [sys.executable, "-c", _THREADS_SCRIPT], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["threads"] == threads
    return result


@pytest.mark.slow
def test_sums_are_the_same_on_one_and_two_threads() -> None:
    one, two = _run_with_threads(1), _run_with_threads(2)
    # torch's own float64 sum of the same squares differs between thread counts for some
    # of these weights (whether it does depends on the values); without that this test
    # would show nothing.
    assert one["torch_sum"] != two["torch_sum"], "torch.sum gives the same on 1 and 2 threads: pick other tensors"
    assert one["exact_order_sum"] == two["exact_order_sum"]
    assert one["statistics"] == two["statistics"]


def test_aggregate_does_not_depend_on_the_order_of_the_tensors() -> None:
    base = stats_of([block(1.0)], "modelopt")
    big, one = dataclasses.replace(base, sse=2.0**53, sum_sq=2.0**53), dataclasses.replace(base, sse=1.0, sum_sq=1.0)
    # In a running sum, 2**53 + 1 + 1 is 2**53 but 1 + 1 + 2**53 is 2**53 + 2.
    forward, backward = aggregate([big, one, one]), aggregate([one, one, big])
    assert forward == backward
    assert forward.sse == forward.sum_sq == 2.0**53 + 2


def test_stored_scales_decide_saturation() -> None:
    # A checkpoint that used ocp-floor scales while claiming modelopt: the counts
    # follow what is stored.
    source = torch.tensor([block(500.0)])
    stored = quantize(source, "ocp-floor")
    assert weight_statistics(source, stored, "modelopt").saturated_blocks == 1


def test_errors() -> None:
    source = torch.tensor([block(1.0)])
    q = quantize(source)
    with pytest.raises(QuantizationError, match=r"tensor 'w'.*shape \[1, 32\] differs from the source's \[2, 32\]"):
        weight_statistics(torch.zeros(2, 32), q, "modelopt", name="w")
    with pytest.raises(QuantizationError, match="block size 32, expected 16"):
        weight_statistics(source, q, "modelopt", block_size=16)
    with pytest.raises(QuantizationError, match="floating-point"):
        weight_statistics(source.to(torch.int32), q, "modelopt")
    with pytest.raises(ValueError, match="known recipes"):
        weight_statistics(source, q, "rceil")
    bad = source.clone()
    bad[0, 3] = math.nan
    with pytest.raises(QuantizationError, match=r"tensor 'w'.*non-finite"):
        weight_statistics(bad, q, "modelopt", name="w")
    nan_data = q.data.view(torch.uint8).clone()
    nan_data[0, 5] = 0x7F
    with pytest.raises(QuantizationError, match=r"tensor 'w'.*NaN"):
        weight_statistics(source, MXFP8Weight(nan_data.view(torch.float8_e4m3fn), q.scale), "modelopt", name="w")
    with pytest.raises(QuantizationError, match="0xFF"):
        weight_statistics(source, MXFP8Weight(q.data, torch.full_like(q.scale, 0xFF)), "modelopt")


# -- aggregate -----------------------------------------------------------------------


def test_aggregate_pools_sums() -> None:
    first = stats_of([block(448.0, 1.0625)], "modelopt")  # sse 2**-8
    second = stats_of([block(500.0), block()], "ocp-floor")  # sse 52**2
    total = aggregate([first, second])
    sse = 2.0**-8 + 52.0**2
    sum_sq = 448.0**2 + 1.0625**2 + 500.0**2
    assert total == AggregateStatistics(
        tensors=2,
        elements=96,
        sse=sse,
        sum_sq=sum_sq,
        mse=sse / 96,
        max_abs_error=52.0,
        relative_rms_error=math.sqrt(sse / sum_sq),
        sqnr_db=10 * math.log10(sum_sq / sse),
    )
    assert json.loads(json.dumps(total.to_dict(), allow_nan=False))["tensors"] == 2


def test_aggregate_of_nothing_and_of_exact_tensors() -> None:
    empty = aggregate([])
    assert (empty.tensors, empty.elements, empty.sse, empty.mse, empty.sqnr_db) == (0, 0, 0.0, 0.0, None)
    exact = aggregate(iter([stats_of([block(1.0)], "modelopt")] * 3))
    assert exact.tensors == 3 and exact.elements == 96 and exact.sqnr_db is None


# -- compare -------------------------------------------------------------------------


@pytest.fixture
def recomputed() -> dict[str, object]:
    return stats_of([block(448.0, 1.0625), block()], "modelopt").to_dict()


def test_compare_accepts_identical_and_tiny_differences(recomputed: dict[str, object]) -> None:
    assert compare(recomputed, recomputed, rtol=1e-6, atol=0.0) == []
    nudged = dict(recomputed)
    for key in ("sse", "mse", "sum_sq", "relative_rms_error", "sqnr_db", "amax"):
        value = recomputed[key]
        assert isinstance(value, float)
        nudged[key] = value * (1 + 1e-9)
    assert compare(nudged, recomputed, rtol=1e-6, atol=0.0) == []
    # Extra claimed fields are not compared.
    assert compare({**recomputed, "recipe": "modelopt"}, recomputed, rtol=1e-6, atol=0.0) == []


def test_compare_flags_a_one_percent_difference(recomputed: dict[str, object]) -> None:
    mse = recomputed["mse"]
    assert isinstance(mse, float)
    claimed = {**recomputed, "mse": mse * 1.01}
    assert compare(claimed, recomputed, rtol=1e-3, atol=0.0) == [
        f"mse: claimed {json.dumps(mse * 1.01)}, recomputed {json.dumps(mse)}"
    ]
    assert compare(claimed, recomputed, rtol=0.02, atol=0.0) == []
    assert compare(claimed, recomputed, rtol=0.0, atol=mse) == []


def test_compare_line_format() -> None:
    assert compare({"mse": 1.2e-05}, {"mse": 1.3e-05}, rtol=1e-3, atol=0.0) == [
        "mse: claimed 1.2e-05, recomputed 1.3e-05"
    ]


def test_compare_integers_exactly_and_none_only_with_none(recomputed: dict[str, object]) -> None:
    claimed = {**recomputed, "elements": 65, "zero_blocks": 1.0, "sqnr_db": None}
    lines = compare(claimed, recomputed, rtol=1.0, atol=1.0)
    assert lines == [
        "elements: claimed 65, recomputed 64",
        f"sqnr_db: claimed null, recomputed {json.dumps(recomputed['sqnr_db'])}",
    ]
    assert compare({"sqnr_db": None}, {"sqnr_db": None}, rtol=0.0, atol=0.0) == []
    assert compare({"sqnr_db": 0.0}, {"sqnr_db": None}, rtol=1.0, atol=1.0) == ["sqnr_db: claimed 0.0, recomputed null"]


def test_compare_missing_nan_strings_and_bools() -> None:
    recomputed = {"sse": 1.0, "blocks": 2, "flag": True, "label": "a"}
    claimed = {"sse": math.nan, "flag": 1, "label": "a"}
    assert compare(claimed, recomputed, rtol=1.0, atol=1.0) == [
        "sse: claimed NaN, recomputed 1.0",
        "blocks: claimed missing, recomputed 2",
        "flag: claimed 1, recomputed true",
    ]
    assert compare({"sse": "1.0"}, {"sse": 1.0}, rtol=1.0, atol=1.0) == ['sse: claimed "1.0", recomputed 1.0']
    assert compare({"x": math.inf}, {"x": math.inf}, rtol=0.0, atol=0.0) == []
    with pytest.raises(ValueError):
        compare({}, {}, rtol=-1.0, atol=0.0)
