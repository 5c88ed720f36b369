#!/usr/bin/env python3
"""vLLM 0.32's DFlash 2 Triton kernels against the CPU paths the vLLM CPU plugin serves with.

Two comparisons, on the same random inputs (the DFlash 2 fixture's shapes and a few edge shapes):

- the candidate walk: vLLM's ``_selector_walk_kernel`` (launched by its own
  ``CandidateSampler.sample``) at temperature 0, against ``candidate_walk`` of the plugin
  (``runtimes/vllm-cpu/plugin/qualify_vllm_cpu/candidate_walk.py``): the draft tokens and
  the realized scores must be equal bit for bit;
- the grouped convolution: vLLM's ``_dflash2_grouped_conv_kernel`` (launched by its own
  ``dflash2_grouped_conv_impl``) against ``_grouped_conv``'s PyTorch path (what a CPU server
  runs), computed on the CPU. float32: bit for bit in Triton's interpreter; on a GPU the
  kernel may fuse a multiply-add, so within 2 float32 ulps a tap of sum(|coefficient * x|);
  bfloat16: the PyTorch path rounds each coefficient, product and sum to bfloat16 while the
  kernel keeps float32 and rounds once, so within 2 bfloat16 ulps a tap (:data:`ULPS_PER_TAP`).

Needs python3 with torch and triton only, no vLLM: the kernels are read from copies of
vLLM's source files in a folder given as an argument (``speculator.py`` of
``v1/worker/gpu/spec_decode/dflash2/``, ``gumbel.py`` of ``v1/worker/gpu/sample/`` and
``qwen3_dflash2.py`` of ``model_executor/models/``), and only the definitions named in
:data:`DEFINITIONS` are executed, bound to the real ``triton``. A definition that is missing
or whose parameters changed is refused by name (exit 2).

    python3 scripts/gpu/dflash2_kernels.py VLLM_SRC_DIR                      # on a CUDA GPU
    TRITON_INTERPRET=1 python3 scripts/gpu/dflash2_kernels.py VLLM_SRC_DIR --device cpu

Prints one JSON object (cases, equal counts, max abs differences, versions, the GPU's name);
exit 0 when every comparison holds, 1 when one does not.

Measured 2026-12-04 on one NVIDIA H200 (torch 2.11.0+cu130, Triton 3.6.0, ``--repeats 5``, 4.3 s):
the walk equal bit for bit in 60 of 60 cases; the convolution within tolerance in 35 of 35, float32
not bit-equal (as a fused multiply-add predicts) but at most 1.63 float32 ulps of sum(|coefficient *
x|) (9.5e-07 absolute), bfloat16 at most 1.42 bfloat16 ulps (0.031 absolute). In Triton 3.9's
interpreter (CPU): the walk 12 of 12, float32 convolution bit for bit, bfloat16 1.87 ulps.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

REPO_ROOT = Path(__file__).resolve().parents[2]
WALK_FILE = REPO_ROOT / "runtimes" / "vllm-cpu" / "plugin" / "qualify_vllm_cpu" / "candidate_walk.py"

#: Per source file: the top-level definitions executed, in order, and each function's parameters.
#: A kernel or helper that moved or changed its parameters is refused rather than guessed at.
DEFINITIONS: dict[str, dict[str, tuple[str, ...] | None]] = {
    "gumbel.py": {
        "_DRAFT_NOISE_SALT": None,
        "_murmur3_rotl32": ("value", "shift"),
        "_murmur3_mix": ("h", "key"),
        "_murmur3_fmix32": ("h",),
        "murmur3_hash32": ("seed", "pos", "offset", "domain"),
        "murmur3_uniform32": ("seed", "pos", "offset"),
        "_uniform64_from_random53": ("random53",),
        "murmur3_uniform64": ("seed", "pos", "offset"),
        "_log1p_neg_stable": ("value",),
        "gumbel_noised_argmax": ("logits", "keys", "mask", "seed", "pos", "temp", "IS_DRAFTING", "USE_FP64",
                                 "APPLY_TEMPERATURE"),
    },
    "speculator.py": {
        "_selector_walk_kernel": ("scores_ptr", "candidate_ptr", "sample_pos_ptr", "req_state_ptr",
                                  "temperature_ptr", "seeds_ptr", "tokens_ptr", "realized_scores_ptr", "num_steps",
                                  "top_k", "BLOCK_K", "SAMPLE_PROBABILISTIC", "USE_FP64"),
        "_cache_draft_logits_kernel": ("draft_logits_ptr", "cached_candidate_ptr", "candidate_ptr", "scores_ptr",
                                       "req_state_ptr", "draft_logits_stride_0", "draft_logits_stride_1",
                                       "num_steps", "top_k", "BLOCK_K"),
        "CandidateSampler": None,
    },
    "qwen3_dflash2.py": {
        "_dflash2_grouped_conv_kernel": ("x_ptr", "delta_ptr", "base_ptr", "output_ptr", "x_stride_row",
                                         "delta_stride_row", "delta_stride_tap", "base_stride_tap",
                                         "output_stride_row", "NUM_CHANNELS", "BLOCK_SIZE", "GROUP_SIZE", "TAPS",
                                         "ELEMENT_BLOCK"),
        "dflash2_grouped_conv_impl": ("x", "delta", "base", "block_size", "group_size"),
        "_grouped_conv": ("hidden_states", "delta", "base", "block_size", "num_groups", "group_size", "taps"),
    },
}
#: ``CandidateSampler.sample``'s parameters (the launcher of the walk kernel).
SAMPLE_PARAMS = ("self", "candidate_ids", "scores", "num_reqs", "sample_pos", "idx_mapping", "temperature", "seeds",
                 "draft_tokens", "draft_logits", "use_fp64")

#: Walk cases: (name, num_reqs, num_steps, top_k, kind). The fixture's head: top_k 8, and 15 steps
#: (block_size 16) or the serving profile's 4.
WALK_CASES: tuple[tuple[str, int, int, int, str], ...] = (
    ("fixture-15-steps", 64, 15, 8, "random"),
    ("fixture-4-steps", 64, 4, 8, "random"),
    ("fixture-bf16-scores", 32, 15, 8, "bf16"),
    ("fixture-fp64", 32, 15, 8, "fp64"),
    ("ties", 32, 6, 8, "ties"),
    ("infinities", 32, 6, 8, "inf"),
    ("some-rows-invalid", 16, 5, 8, "invalid"),
    ("top-k-1", 8, 4, 1, "random"),
    ("top-k-5-not-power-of-2", 16, 7, 5, "random"),
    ("one-step", 16, 1, 8, "random"),
    ("one-request", 1, 15, 8, "random"),
    ("top-k-64", 8, 3, 64, "random"),
)
#: Convolution cases: (name, rows, channels, group_size, taps, block_size, dtype). The fixture: hidden 256,
#: group 16, 2 taps, block 1 + num_speculative_tokens; rows a multiple of the block, as the runners lay out.
CONV_CASES: tuple[tuple[str, int, int, int, int, int, torch.dtype], ...] = (
    ("fixture-block-16", 64, 256, 16, 2, 16, torch.float32),
    ("fixture-block-5", 40, 256, 16, 2, 5, torch.float32),
    ("fixture-bf16", 64, 256, 16, 2, 16, torch.bfloat16),
    ("4-taps", 48, 256, 16, 4, 8, torch.float32),
    ("128-rows-1024-channels", 128, 1024, 32, 3, 16, torch.float32),
    ("one-row", 1, 256, 16, 2, 16, torch.float32),
    ("channels-not-multiple-of-512", 20, 96, 8, 2, 5, torch.float32),
)
#: The convolution's bound, per tap, in ulps of the output dtype relative to sum(|coefficient * x|). bfloat16:
#: the PyTorch path rounds the coefficient, the product and the sum (3 unit roundoffs a tap) and the kernel
#: rounds once at the end; float32: a fused multiply-add saves at most one rounding a tap. 2 ulps (4 unit
#: roundoffs) a tap covers both.
ULPS_PER_TAP = 2


class KernelSourceError(RuntimeError):
    """A vLLM definition this script runs is missing from its file or has changed its parameters."""


def _params(node: ast.FunctionDef) -> tuple[str, ...]:
    args = node.args
    return tuple(a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs])


def load_vllm_definitions(src_dir: Path, triton: Any, tl: Any) -> dict[str, Any]:
    """Execute the definitions of :data:`DEFINITIONS`, read from vLLM's source files in ``src_dir``.

    Args:
        src_dir: a folder holding ``gumbel.py``, ``speculator.py`` and ``qwen3_dflash2.py`` of vLLM 0.32.
        triton: the real ``triton`` module the kernels are bound to.
        tl: ``triton.language``.

    Returns:
        The namespace the definitions were executed in (each name of :data:`DEFINITIONS` is in it).

    Raises:
        KernelSourceError: a file, a definition or a parameter list is not the one this script was written for.
    """
    import torch.nn.functional as F

    namespace: dict[str, Any] = {"torch": torch, "F": F, "triton": triton, "tl": tl, "Any": Any,
                                 "__name__": "vllm_dflash2_kernels"}
    for filename, wanted in DEFINITIONS.items():
        path = src_dir / filename
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise KernelSourceError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
        tree = ast.parse(text, filename=str(path))
        lines = text.splitlines(keepends=True)
        nodes: dict[str, ast.stmt] = {}
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                nodes[node.name] = node
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                nodes[node.targets[0].id] = node
        for name, params in wanted.items():
            node = nodes.get(name)
            if node is None:
                raise KernelSourceError(f"{path}: {name} not found (the vLLM source moved; this script runs "
                                        "vLLM 0.32's definitions and refuses to guess)")
            if params is not None:
                if not isinstance(node, ast.FunctionDef):
                    raise KernelSourceError(f"{path}: {name} is no longer a function")
                found = _params(node)
                if found != params:
                    raise KernelSourceError(f"{path}: {name} takes ({', '.join(found)}), not ({', '.join(params)})")
            if name == "CandidateSampler":
                assert isinstance(node, ast.ClassDef)
                sample = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "sample"), None)
                if sample is None or _params(sample) != SAMPLE_PARAMS:
                    raise KernelSourceError(f"{path}: CandidateSampler.sample is missing or takes other parameters")
            decorators = getattr(node, "decorator_list", [])
            start = min([node.lineno, *(d.lineno for d in decorators)])
            end = node.end_lineno or node.lineno
            source = "".join(lines[start - 1:end])
            # Blank lines keep the kernels' line numbers, so a Triton error points at vLLM's line.
            exec(compile("\n" * (start - 1) + source, str(path), "exec"), namespace)
    return namespace


def patch_interpreter_comparisons() -> list[str]:
    """Tag the Triton interpreter's comparison results as ``int1``, as compiled Triton types them.

    Triton 3.9's interpreter computes a comparison with numpy (a bool array) but tags the result with
    the operands' element type (``binary_op``: ``tl_dtype = lhs.dtype.scalar``). A scalar comparison
    that is then broadcast against a block, as the walk kernel's ``mask & valid`` (``valid = req_state
    >= 0``), is splatted as an int32 array, and the interpreter's ``load`` refuses it: "mask has
    unsupported dtype". Re-tagging the result changes no value (the data is the same bool array), so
    the kernels run unmodified from vLLM's source. Does nothing outside the interpreter.

    Returns:
        The builder methods re-tagged.
    """
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    patched = []
    for name, original in sorted(vars(builder).items()):
        if name.startswith(("create_icmp", "create_fcmp")) and not getattr(original, "_int1", False):
            setattr(builder, name, _int1_comparison(interpreter, original))
            patched.append(name)
    return patched


def _int1_comparison(interpreter: Any, original: Any) -> Any:
    def compare(self: Any, lhs: Any, rhs: Any) -> Any:
        result = original(self, lhs, rhs)
        return interpreter.TensorHandle(result.data.astype(bool), interpreter.tl.int1)

    compare._int1 = True  # type: ignore[attr-defined]
    return compare


def load_walk(path: Path = WALK_FILE) -> ModuleType:
    """The plugin's pure-torch candidate walk, loaded by path (no vLLM, no package needed)."""
    spec = importlib.util.spec_from_file_location("qualify_candidate_walk", path)
    if spec is None or spec.loader is None:
        raise KernelSourceError(f"{path}: cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def walk_inputs(num_reqs: int, num_steps: int, top_k: int, kind: str,
                gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Scores, candidate ids and each request's state index (-1: a padded row) for one walk case."""
    shape = (num_reqs, num_steps, top_k, top_k)
    scores = torch.randn(shape, generator=gen, dtype=torch.float32) * 4
    if kind == "bf16":
        scores = scores.to(torch.bfloat16)
    elif kind == "ties":
        # Few distinct values: most rows hold ties the walk must break towards the lowest index.
        scores = torch.randint(0, 3, shape, generator=gen).to(torch.float32)
    elif kind == "inf":
        pick = torch.rand(shape, generator=gen)
        scores = torch.where(pick < 0.3, torch.tensor(float("-inf")), scores)
        scores = torch.where(pick > 0.97, torch.tensor(float("inf")), scores)
        scores[0] = float("-inf")
    candidate_ids = torch.randint(0, 2048, (num_reqs, num_steps, top_k), generator=gen, dtype=torch.int64)
    req_state = torch.randperm(num_reqs, generator=gen).to(torch.int32)
    if kind == "invalid":
        req_state[torch.rand(num_reqs, generator=gen) < 0.4] = -1
    return scores, candidate_ids, req_state


def run_walk_kernel(ns: dict[str, Any], scores: torch.Tensor, candidate_ids: torch.Tensor, req_state: torch.Tensor,
                    device: str, use_fp64: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's walk at temperature 0 through ``CandidateSampler.sample``: (tokens, realized scores)."""
    num_reqs, num_steps, top_k, _ = scores.shape
    sampler = ns["CandidateSampler"](num_reqs, num_steps, top_k, torch.device(device))
    sampler.scores.fill_(-7.0)  # a sentinel: rows the kernel must not write keep it
    idx_mapping = req_state.repeat_interleave(num_steps).to(device)
    max_reqs = max(num_reqs, 1)
    draft_tokens = torch.full((num_reqs, num_steps), -5, dtype=torch.int64, device=device)
    sampler.sample(
        candidate_ids.to(device), scores.to(device), num_reqs,
        torch.arange(num_reqs * num_steps, dtype=torch.int64, device=device) + 100,
        idx_mapping, torch.zeros(max_reqs, dtype=torch.float32, device=device),
        torch.arange(max_reqs, dtype=torch.int64, device=device), draft_tokens, None, use_fp64)
    return draft_tokens.cpu(), sampler.scores.cpu()


def compare_walk(ns: dict[str, Any], walk: ModuleType, case: tuple[str, int, int, int, str], device: str,
                 gen: torch.Generator) -> dict[str, Any]:
    name, num_reqs, num_steps, top_k, kind = case
    scores, candidate_ids, req_state = walk_inputs(num_reqs, num_steps, top_k, kind, gen)
    tokens, realized = run_walk_kernel(ns, scores, candidate_ids, req_state, device, use_fp64=kind == "fp64")
    cpu_tokens, cpu_realized = walk.candidate_walk(scores, candidate_ids)
    valid = req_state >= 0
    tokens_equal = torch.equal(tokens[valid], cpu_tokens[valid])
    realized_equal = torch.equal(realized[valid].view(torch.int32), cpu_realized[valid].view(torch.int32))
    untouched = bool((tokens[~valid] == -5).all()) and bool((realized[~valid] == -7.0).all())
    return {"case": name, "shape": [num_reqs, num_steps, top_k], "kind": kind, "valid_rows": int(valid.sum()),
            "tokens_equal": tokens_equal, "realized_scores_bit_equal": realized_equal,
            "invalid_rows_untouched": untouched,
            "tokens_differing": int((tokens[valid] != cpu_tokens[valid]).sum()),
            "ok": tokens_equal and realized_equal and untouched}


def conv_inputs(rows: int, channels: int, group_size: int, taps: int, dtype: torch.dtype,
                gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x, delta and base as the model hands them over: delta a strided view of the kernel projection."""
    groups = channels // group_size
    x = torch.randn(rows, channels, generator=gen).to(dtype)
    projection = torch.randn(rows, 2 * taps * groups, generator=gen).to(dtype) * 0.5
    delta = projection.reshape(rows, 2, taps, groups)[:, 1]
    base = (torch.randn(2, taps, channels, generator=gen) * 0.5).to(dtype)[1]
    return x, delta, base


def compare_conv(ns: dict[str, Any], case: tuple[str, int, int, int, int, int, torch.dtype], device: str,
                 gen: torch.Generator) -> dict[str, Any]:
    name, rows, channels, group_size, taps, block_size, dtype = case
    x, delta, base = conv_inputs(rows, channels, group_size, taps, dtype, gen)
    kernel = ns["dflash2_grouped_conv_impl"](x.to(device), delta.to(device), base.to(device), block_size,
                                             group_size).cpu()
    reference = ns["_grouped_conv"](x, delta, base, block_size, channels // group_size, group_size, taps)
    # Each output's error scale: sum over taps of |coefficient| * |x| (|base| + |delta| bounds |coefficient|),
    # so a cancelling sum is judged against the products that were rounded, not its small result.
    magnitude = ns["_grouped_conv"](x.double().abs(), delta.double().abs(), base.double().abs(), block_size,
                                    channels // group_size, group_size, taps)
    diff = (kernel.double() - reference.double()).abs()
    ulp = magnitude * (2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -23)
    bound = ulp * ULPS_PER_TAP * taps
    within = bool((diff <= bound).all())
    worst = (diff / ulp.clamp_min(torch.finfo(torch.float64).tiny)).max() if diff.numel() else torch.tensor(0.0)
    return {"case": name, "shape": {"rows": rows, "channels": channels, "group_size": group_size, "taps": taps,
                                    "block_size": block_size}, "dtype": str(dtype).removeprefix("torch."),
            "bit_equal": torch.equal(kernel, reference), "max_abs_diff": float(diff.max()) if diff.numel() else 0.0,
            "max_diff_in_ulps": float(worst),
            "tolerance": f"{ULPS_PER_TAP * taps} {str(dtype).removeprefix('torch.')} ulps of sum(|coefficient * x|)",
            "within_tolerance": within, "ok": within}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("vllm_src", type=Path, help="folder with vLLM's speculator.py, gumbel.py, qwen3_dflash2.py")
    parser.add_argument("--device", default=None, help="cuda (default when one is present) or cpu "
                                                       "(needs TRITON_INTERPRET=1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1, help="each case this many times, new inputs each time")
    parser.add_argument("--walk", type=Path, default=WALK_FILE, help="the candidate_walk.py to compare with")
    args = parser.parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    if device == "cpu" and not interpret:
        print("dflash2_kernels: --device cpu runs the kernels in Triton's interpreter: set TRITON_INTERPRET=1",
              file=sys.stderr)
        return 2
    import triton
    import triton.language as tl

    if interpret:
        patch_interpreter_comparisons()
    try:
        ns = load_vllm_definitions(args.vllm_src, triton, tl)
        walk = load_walk(args.walk)
    except KernelSourceError as exc:
        print(f"dflash2_kernels: {exc}", file=sys.stderr)
        return 2
    gen = torch.Generator().manual_seed(args.seed)
    t0 = time.perf_counter()
    walks = [compare_walk(ns, walk, case, device, gen) for _ in range(args.repeats) for case in WALK_CASES]
    convs = [compare_conv(ns, case, device, gen) for _ in range(args.repeats) for case in CONV_CASES]
    summary = {
        "ok": all(r["ok"] for r in walks + convs),
        "device": device,
        "gpu": torch.cuda.get_device_name(0) if device.startswith("cuda") else None,
        "triton_interpret": interpret,
        "torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
        "seed": args.seed, "repeats": args.repeats,
        "walk": {"cases": len(walks), "equal": sum(r["ok"] for r in walks), "results": walks},
        "conv": {"cases": len(convs), "within_tolerance": sum(r["ok"] for r in convs),
                 "bit_equal": sum(r["bit_equal"] for r in convs),
                 "max_abs_diff": max(r["max_abs_diff"] for r in convs), "results": convs},
        "seconds": round(time.perf_counter() - t0, 2),
    }
    print(json.dumps(summary, indent=1))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
