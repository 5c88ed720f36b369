"""DFlash 2's candidate walk at temperature 0, on the CPU: what vLLM 0.32's Triton kernel computes.

vLLM's V2 runner walks a DFlash 2 draft's candidates with ``_selector_walk_kernel``
(``vllm/v1/worker/gpu/spec_decode/dflash2/speculator.py``), one program per request. At
temperature 0 ``gumbel_noised_argmax`` is a plain ``tl.max(..., return_indices=True)``, so
the walk is an argmax chain:

- step 0 reads row 0 of the pairwise scores (the anchor token is every row's predecessor
  there, so all rows are the same);
- step ``s`` reads the row of the index picked at step ``s - 1``;
- the draft token of a step is the candidate at the picked index; the row read is kept as
  the step's realized scores (the kernel stores it for adaptive verification and the
  draft-logits cache).

The kernel casts the scores to float32 (float64 with ``USE_FP64``: the same argmax, the cast is
exact) and breaks ties towards the lowest index (Triton's ``tie_break_left`` default, as
``torch.argmax``). Inputs with NaN scores are outside what the two agree on: Triton's
combine never lets a NaN win, ``torch.argmax`` always does.

Pure torch, no vLLM import: ``scripts/gpu/dflash2_kernels.py`` loads this file by path on a
GPU machine that has no vLLM, and holds vLLM's kernel to it there.
"""

from __future__ import annotations

import torch


def candidate_walk(scores: torch.Tensor, candidate_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The temperature-0 walk of every request's candidates.

    Args:
        scores: ``[num_reqs, num_steps, top_k, top_k]``: at step ``s``, ``scores[r, s, p, c]`` scores
            candidate ``c`` after the candidate picked at index ``p`` of step ``s - 1`` (any float dtype).
        candidate_ids: ``[num_reqs, num_steps, top_k]`` token ids (any integer dtype).

    Returns:
        ``(tokens, realized)``: ``tokens`` ``[num_reqs, num_steps]`` int64, the draft tokens;
        ``realized`` ``[num_reqs, num_steps, top_k]`` float32, the score row each step read.

    Raises:
        ValueError: the shapes do not fit together.
    """
    if scores.dim() != 4 or scores.shape[2] != scores.shape[3]:
        raise ValueError(f"candidate walk: scores must be [reqs, steps, top_k, top_k], got {list(scores.shape)}")
    if candidate_ids.shape != scores.shape[:3]:
        raise ValueError(f"candidate walk: candidate_ids {list(candidate_ids.shape)} do not match scores "
                         f"{list(scores.shape)} (expected {list(scores.shape[:3])})")
    num_reqs, num_steps, top_k, _ = scores.shape
    tokens = torch.empty(num_reqs, num_steps, dtype=torch.int64, device=scores.device)
    realized = torch.empty(num_reqs, num_steps, top_k, dtype=torch.float32, device=scores.device)
    rows = torch.arange(num_reqs, device=scores.device)
    previous = torch.zeros(num_reqs, dtype=torch.int64, device=scores.device)
    for step in range(num_steps):
        row_scores = scores[rows, step, previous].to(torch.float32)
        index = row_scores.argmax(dim=-1)
        realized[:, step] = row_scores
        tokens[:, step] = candidate_ids[rows, step, index].to(torch.int64)
        previous = index
    return tokens, realized


__all__ = ["candidate_walk"]
