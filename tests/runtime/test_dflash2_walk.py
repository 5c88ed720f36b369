"""The plugin's temperature-0 candidate walk (runtimes/vllm-cpu/plugin/qualify_vllm_cpu/candidate_walk.py).

Pure torch, so it runs in the harness's own venv: a walk worked by hand, ties to the lowest
index, infinities, and shapes that do not fit refused with both shapes named. Its equality with
vLLM's Triton kernel is tests/runtime/test_dflash2_kernels.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
import torch

PLUGIN = Path(__file__).resolve().parents[2] / "runtimes" / "vllm-cpu" / "plugin"
WALK = PLUGIN / "qualify_vllm_cpu" / "candidate_walk.py"


@pytest.fixture(scope="module")
def walk() -> ModuleType:
    spec = importlib.util.spec_from_file_location("candidate_walk_under_test", WALK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_step_follows_the_previous_pick(walk: ModuleType) -> None:
    # One request, 3 steps, top_k 2. Step 0 reads row 0; then the row of the index picked before.
    scores = torch.tensor([[[[1.0, 5.0], [9.0, 0.0]],     # step 0: row 0 -> index 1
                            [[7.0, 0.0], [0.0, 3.0]],     # step 1: row 1 -> index 1 (row 0 would pick 0)
                            [[0.0, 2.0], [4.0, 1.0]]]])   # step 2: row 1 -> index 0
    candidates = torch.tensor([[[10, 11], [20, 21], [30, 31]]])
    tokens, realized = walk.candidate_walk(scores, candidates)
    assert tokens.tolist() == [[11, 21, 30]]
    assert realized.tolist() == [[[1.0, 5.0], [0.0, 3.0], [4.0, 1.0]]]
    assert tokens.dtype == torch.int64 and realized.dtype == torch.float32


def test_ties_go_to_the_lowest_index_and_infinities_are_scores(walk: ModuleType) -> None:
    scores = torch.full((2, 2, 3, 3), float("-inf"))
    scores[1, 0, 0] = torch.tensor([2.0, float("inf"), float("inf")])
    scores[1, 1, 1] = torch.tensor([3.0, 3.0, -1.0])
    candidates = torch.arange(12, dtype=torch.int32).view(2, 2, 3)
    tokens, _ = walk.candidate_walk(scores, candidates)
    # Request 0: every score -inf, index 0 at each step. Request 1: +inf at 1 and 2 -> 1; then a tie -> 0.
    assert tokens.tolist() == [[0, 3], [7, 9]]


def test_bfloat16_scores_are_read_as_float32(walk: ModuleType) -> None:
    scores = torch.randn(3, 4, 8, 8, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    candidates = torch.randint(0, 100, (3, 4, 8), generator=torch.Generator().manual_seed(2))
    tokens, realized = walk.candidate_walk(scores, candidates)
    again, realized32 = walk.candidate_walk(scores.float(), candidates)
    assert torch.equal(tokens, again) and torch.equal(realized, realized32)


@pytest.mark.parametrize(("scores", "candidates", "words"), [
    ((2, 3, 4, 5), (2, 3, 4), "scores must be [reqs, steps, top_k, top_k], got [2, 3, 4, 5]"),
    ((2, 3, 4), (2, 3, 4), "scores must be [reqs, steps, top_k, top_k], got [2, 3, 4]"),
    ((2, 3, 4, 4), (2, 3, 5), "candidate_ids [2, 3, 5] do not match scores [2, 3, 4, 4] (expected [2, 3, 4])"),
])
def test_shapes_that_do_not_fit_are_refused(walk: ModuleType, scores: tuple[int, ...], candidates: tuple[int, ...],
                                            words: str) -> None:
    with pytest.raises(ValueError, match="candidate walk: ") as info:
        walk.candidate_walk(torch.zeros(scores), torch.zeros(candidates, dtype=torch.int64))
    assert words in str(info.value)
