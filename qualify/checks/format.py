"""MXFP8 format checks: what a runtime's MXFP8 loader needs to find in the tensors and configs.

Each function checks one rule over the whole checkpoint and returns
:class:`~qualify.report.model.Evidence` naming every offending file and tensor. The rules
follow what vLLM's ModelOpt MXFP8 path loads: ``<module>.weight`` F8_E4M3 ``[N, K]`` with
K a multiple of 32 (also per tensor-parallel shard of K), ``<module>.weight_scale`` U8
``[N, K/32]`` holding biased E8M0 exponents, unswizzled, and excluded modules left
unquantized with no scale.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from qualify.checkpoint.checksums import thread_map
from qualify.checkpoint.quant_config import (
    HF_QUANT_CONFIG,
    MODEL_CONFIG,
    QuantConfig,
    is_excluded,
    kv_cache_algo,
    module_of,
)
from qualify.checkpoint.safetensors_io import Checkpoint
from qualify.core import Evidence
from qualify.mxfp8 import codec as mxfp8
from qualify.mxfp8.constants import (
    BLOCK_MAX_RANGE,
    E4M3_MAGNITUDE_MASK,
    E4M3_NEGATIVE_NAN,
    E4M3_POSITIVE_NAN,
    ELEMENT_DTYPE,
    SCALE_DTYPE,
)

FP8 = ELEMENT_DTYPE
SCALE = SCALE_DTYPE
WEIGHT_SUFFIX = ".weight"
SCALE_SUFFIX = ".weight_scale"
UNQUANTIZED_DTYPES = ("BF16", "F16", "F32")
#: 8-bit dtypes a mistaken exporter might use for MXFP8 elements.
OTHER_8BIT_DTYPES = ("F8_E5M2", "F8_E8M0", "U8", "I8")

#: Module-name patterns of linear layers in DFlash / Llama-style drafts (fnmatch, as vLLM matches).
LINEAR_PATTERNS: tuple[str, ...] = ("*_proj", "*projection", "fc", "*.fc", "lm_head", "*.lm_head")
#: Row-parallel linears shard their input dimension K across tensor-parallel ranks.
ROW_PARALLEL_PATTERNS: tuple[str, ...] = ("*.o_proj", "*.down_proj")
#: Tensors other quantization schemes add; an MXFP8 checkpoint carrying them was made for something else.
FOREIGN_SUFFIXES: tuple[str, ...] = (".weight_scale_2", ".input_scale", ".weight_scale_inv", ".k_scale", ".v_scale")

#: With a 1x32 E8M0 scale chosen from the block's amax, the block's largest |element| lands in


def _matches(module: str, patterns: Iterable[str]) -> bool:
    return is_excluded(module, patterns)


@dataclass(frozen=True)
class Layout:
    """The checkpoint's tensors sorted into the roles the format rules talk about."""

    quantized: list[str]  # weight names stored as F8_E4M3
    scales: list[str]
    linear_unquantized: list[str]  # 2-D linear weights stored in a float dtype

    @classmethod
    def of(cls, ckpt: Checkpoint, linear_patterns: Iterable[str] = LINEAR_PATTERNS) -> Layout:
        pats = tuple(linear_patterns)
        quantized, scales, unq = [], [], []
        for name in ckpt.names():
            info = ckpt.info(name)
            if name.endswith(SCALE_SUFFIX):
                scales.append(name)
            elif info.dtype == FP8:
                quantized.append(name)
            elif (
                name.endswith(WEIGHT_SUFFIX)
                and len(info.shape) == 2
                and info.dtype in UNQUANTIZED_DTYPES
                and _matches(module_of(name), pats)
            ):
                unq.append(name)
        return cls(quantized, scales, unq)


def _u8(ckpt: Checkpoint, name: str) -> torch.Tensor:
    raw = ckpt.raw(name)
    if len(raw) == 0:
        return torch.empty(0, dtype=torch.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # read-only mappings are only read here
        return torch.frombuffer(raw, dtype=torch.uint8)


#: Bytes per step of the whole-tensor scans below: 1 MiB of scratch stays in cache and is
#: reused, where a tensor-sized scratch costs a page fault per 4 KiB on every tensor.
_SCAN_CHUNK = 1 << 20


def _count_e4m3_nans(data: torch.Tensor) -> int:
    """How many of the E4M3 bytes ``data`` (flat uint8) are NaN encodings (0x7F or 0xFF).

    Those are the largest byte as uint8 (0xFF) and the largest as int8 (0x7F), so two
    reductions, which write nothing, show whether there are any; only then are they
    counted (in chunks: a bool mask summed makes an int64 copy, 8 bytes per element).
    """
    if not data.numel() or (int(data.max()) != E4M3_NEGATIVE_NAN
                            and int(data.view(torch.int8).max()) != E4M3_POSITIVE_NAN):
        return 0
    return sum(int(torch.count_nonzero(mxfp8.fp8_nan_mask(data[i:i + _SCAN_CHUNK])))
               for i in range(0, data.numel(), _SCAN_CHUNK))


def _block_max_magnitude(blocks: torch.Tensor) -> torch.Tensor:
    """float32 ``[N, K/block]``: the largest |element| of each block of E4M3 bytes ``[N, K/block, block]``.

    Read off the bytes instead of decoding every element to float32 (torch decodes
    float8 one element at a time): an E4M3 byte's low 7 bits order as the magnitudes
    they encode, with the NaN code 0x7F above all of them, so the uint8 max of
    ``byte & 0x7F`` decodes to the same float32 as the max of the decoded |elements|,
    NaN included.
    """
    rows = blocks.shape[0]
    top = torch.empty(blocks.shape[:-1], dtype=torch.uint8)
    step = max(1, _SCAN_CHUNK // max(1, blocks.shape[1] * blocks.shape[2]))  # rows per step; there may be none
    scratch = torch.empty((min(step, rows), *blocks.shape[1:]), dtype=torch.uint8)
    for start in range(0, rows, step):
        stop = min(start + step, rows)
        magnitude = torch.bitwise_and(blocks[start:stop], E4M3_MAGNITUDE_MASK, out=scratch[: stop - start])
        torch.amax(magnitude, dim=-1, out=top[start:stop])
    return top.view(torch.float8_e4m3fn).float()


def check_weights(ckpt: Checkpoint, *, block_size: int = mxfp8.BLOCK_SIZE, tensor_parallel_size: int = 1) -> Evidence:
    """Quantized weights are F8_E4M3 ``[N, K]``, K divisible by the block (per TP shard too), no NaN bytes."""
    layout = Layout.of(ckpt)
    ev = Evidence(f"quantized linear weights are {FP8} [N, K] with K a multiple of {block_size} "
                  f"(per shard at tensor-parallel size {tensor_parallel_size}) and hold no fp8 NaN")
    ev.expected.update(dtype=FP8, block_size=block_size, tensor_parallel_size=tensor_parallel_size)
    if not layout.quantized:
        ev.add(f"no {FP8} tensor found: the checkpoint is not MXFP8-quantized")
    nan_total = 0
    for name in ckpt.names():
        dtype = ckpt.info(name).dtype
        if dtype in OTHER_8BIT_DTYPES and name.endswith(WEIGHT_SUFFIX) and not name.endswith(SCALE_SUFFIX):
            ev.add(f"weight is stored as {dtype}; MXFP8 elements are {FP8} (float8_e4m3fn)",
                   file=ckpt.file_of(name), tensor=name)
    # The NaN scan reads every weight byte: done on worker threads up front, reported in order below.
    two_d = [name for name in layout.quantized if len(ckpt.info(name).shape) == 2]
    nan_counts = dict(zip(two_d, thread_map(lambda name: _count_e4m3_nans(_u8(ckpt, name)), two_d), strict=True))
    for name in layout.quantized:
        info, file = ckpt.info(name), ckpt.file_of(name)
        if not name.endswith(WEIGHT_SUFFIX):
            ev.add(f"{FP8} tensor is not a '<module>{WEIGHT_SUFFIX}'", file=file, tensor=name)
        if len(info.shape) != 2:
            ev.add(f"has shape {list(info.shape)}; an MXFP8 linear weight is 2-D [N, K]", file=file, tensor=name)
            continue
        k = info.shape[1]
        if k % block_size:
            ev.add(f"K = {k} is not a multiple of the block size {block_size}: runtimes refuse to load it",
                   file=file, tensor=name)
        elif _matches(module_of(name), ROW_PARALLEL_PATTERNS) and k % (block_size * tensor_parallel_size):
            ev.add(f"K = {k} split over {tensor_parallel_size} tensor-parallel ranks gives shards of "
                   f"{k / tensor_parallel_size:g}, not a multiple of {block_size}: unloadable at TP="
                   f"{tensor_parallel_size}", file=file, tensor=name)
        nans = nan_counts[name]
        if nans:
            nan_total += nans
            ev.add(f"{nans} element(s) hold an E4M3 NaN encoding (0x7F/0xFF); a quantizer never produces one",
                   file=file, tensor=name)
    ev.measured.update(quantized_weights=len(layout.quantized), nan_elements=nan_total)
    return ev


def check_scales(ckpt: Checkpoint, *, block_size: int = mxfp8.BLOCK_SIZE) -> Evidence:
    """Every quantized weight has a U8 ``[N, K/32]`` E8M0 scale, with no 0xFF (NaN) byte and no orphan."""
    layout = Layout.of(ckpt)
    ev = Evidence(f"each quantized weight has a {SCALE} [N, K/{block_size}] weight_scale of biased E8M0 "
                  "exponents (row-major, unswizzled) with no NaN (0xFF) byte")
    ev.expected.update(dtype=SCALE, layout="row-major-unswizzled")
    weights = set(layout.quantized)
    nan_total = 0
    if not weights:
        ev.add(f"no {FP8} weight found, so no scale can be verified")
    for name in layout.quantized:
        scale = name + "_scale"  # '<module>.weight_scale' for a '<module>.weight'; check_weights names other names
        file = ckpt.file_of(name)
        if scale not in ckpt:
            ev.add(f"quantized weight has no '{scale}'", file=file, tensor=name)
            continue
        w, s = ckpt.info(name), ckpt.info(scale)
        sfile = ckpt.file_of(scale)
        if s.dtype != SCALE:
            hint = " (this format stores E8M0 exponents as U8)" if s.dtype == "F8_E8M0" else ""
            ev.add(f"scale dtype is {s.dtype}, expected {SCALE}{hint}", file=sfile, tensor=scale)
            continue
        if len(w.shape) == 2:
            want = [w.shape[0], -(-w.shape[1] // block_size)]
            if list(s.shape) != want:
                why = _scale_shape_hint(list(w.shape), list(s.shape), block_size)
                ev.add(f"scale shape {list(s.shape)} does not match weight {list(w.shape)}: expected {want}{why}",
                       file=sfile, tensor=scale)
                continue
        scale_bytes = _u8(ckpt, scale)
        # The NaN byte is the largest: one reduction says whether there is any to count.
        any_nan = scale_bytes.numel() and int(scale_bytes.max()) == mxfp8.E8M0_NAN
        nans = int(torch.count_nonzero(scale_bytes == mxfp8.E8M0_NAN)) if any_nan else 0
        if nans:
            nan_total += nans
            ev.add(f"{nans} scale byte(s) are 0xFF, the E8M0 NaN encoding", file=sfile, tensor=scale)
    for scale in layout.scales:
        weight = scale[: -len(SCALE_SUFFIX)] + WEIGHT_SUFFIX
        if weight not in weights:
            ev.add(f"scale without an {FP8} weight '{weight}'", file=ckpt.file_of(scale), tensor=scale)
    for name in ckpt.names():
        if name.endswith(FOREIGN_SUFFIXES):
            ev.add("tensor belongs to another quantization scheme (NVFP4/FP8 per-tensor); MXFP8 has none",
                   file=ckpt.file_of(name), tensor=name)
    ev.measured.update(scales=len(layout.scales), nan_scale_bytes=nan_total)
    return ev


def _scale_shape_hint(w: list[int], s: list[int], block: int) -> str:
    if s == [w[1] // block, w[0]] or s == [w[1], w[0] // block]:
        return " (transposed: scales must be [N, K/32], blocks along the input dimension)"
    if len(s) == 2 and s[0] == w[0] and s[1] * 16 == w[1]:
        return " (blocks of 16, not 32)"
    if len(s) == 2 and ((s[0] % 128 == 0 and s[0] > w[0]) or (s[1] % 4 == 0 and s[1] > -(-w[1] // block))):
        return " (padded to 128x4 tiles: a swizzled layout; this format stores scales unswizzled)"
    return ""


def check_block_normalization(ckpt: Checkpoint, *, block_size: int = mxfp8.BLOCK_SIZE) -> Evidence:
    """Every non-zero block's largest |element| sits where a 1x32 amax-derived E8M0 scale puts it."""
    lo, hi = BLOCK_MAX_RANGE
    ev = Evidence(f"each non-zero 1x{block_size} block's largest |element| lies in [{lo:g}, {hi:g}], "
                  "as an E8M0 scale derived from the block's amax makes it")
    ev.expected.update(block_max_range=[lo, hi])
    blocks = bad_total = 0
    layout = Layout.of(ckpt)

    def examine(name: str) -> tuple[int, tuple[int, int, int, float] | None] | None:
        """(blocks, None or (bad blocks, first row, first block, its max |element|)); None if not examinable."""
        info = ckpt.info(name)
        scale = name[: -len(WEIGHT_SUFFIX)] + SCALE_SUFFIX
        if len(info.shape) != 2 or info.shape[1] % block_size or scale not in ckpt:
            return None  # reported by check_weights / check_scales
        sinfo = ckpt.info(scale)
        rows, per_row = info.shape[0], info.shape[1] // block_size
        if sinfo.dtype != SCALE or list(sinfo.shape) != [rows, per_row]:
            return None
        # Explicit dimensions: a weight with no rows has no bytes, and -1 would be ambiguous.
        bmax = _block_max_magnitude(_u8(ckpt, name).reshape(rows, per_row, block_size))
        clamped = _u8(ckpt, scale).reshape(bmax.shape) == 0  # exponent clamped at -127: tiny values
        off = (bmax != 0) & ~clamped & ((bmax < lo) | (bmax > hi))
        n = int(torch.count_nonzero(off))
        if not n:
            return bmax.numel(), None
        row, col = (int(i) for i in off.nonzero()[0])
        return bmax.numel(), (n, row, col, float(bmax[row, col]))

    # Every weight byte is read here, so tensors are examined on worker threads, reported in order.
    for name, found in zip(layout.quantized, thread_map(examine, layout.quantized), strict=True):
        if found is None:
            continue
        count, bad = found
        blocks += count
        if bad:
            n, row, col, value = bad
            bad_total += n
            ev.add(f"{n} of {count} blocks are not normalised by their scale (first: row {row}, "
                   f"block {col}, max |element| {value:g}); the elements were not scaled "
                   "per 1x32 block along K (transposed, per-tensor or wrongly blocked)",
                   file=ckpt.file_of(name), tensor=name)
    ev.measured.update(blocks=blocks, unnormalised_blocks=bad_total)
    if not blocks and not ev.findings:
        ev.add("no quantized block could be examined")
    return ev


def check_exclusions(ckpt: Checkpoint, excluded_modules: Iterable[str], qc: QuantConfig) -> Evidence:
    """Excluded modules (the profile's and the config's) are present, unquantized and carry no scale."""
    profile_pats = tuple(excluded_modules)
    ev = Evidence(f"excluded modules ({', '.join(profile_pats) or 'none'}) stay unquantized with no scale")
    ev.expected["excluded_modules"] = list(profile_pats)
    names = ckpt.names()
    for pat in profile_pats:
        hits = [n for n in names if n.endswith(WEIGHT_SUFFIX) and is_excluded(module_of(n), (pat,))]
        if not hits:
            ev.add(f"the profile requires module '{pat}' to be present and excluded from quantization, "
                   "but the checkpoint has no such weight")
    for name in names:
        module = module_of(name)
        if not is_excluded(module, (*profile_pats, *qc.exclude_modules)):
            continue
        info = ckpt.info(name)
        if name.endswith(SCALE_SUFFIX) or name.endswith(FOREIGN_SUFFIXES):
            ev.add("excluded module carries a quantization scale", file=ckpt.file_of(name), tensor=name)
        elif info.dtype == FP8:
            ev.add(f"excluded module is quantized ({FP8}); it must stay in its source dtype",
                   file=ckpt.file_of(name), tensor=name)
        elif info.dtype not in UNQUANTIZED_DTYPES:
            ev.add(f"excluded module is stored as {info.dtype}, not a float dtype", file=ckpt.file_of(name),
                   tensor=name)
    ev.measured["config_exclusions"] = list(qc.exclude_modules)
    return ev


def check_linear_coverage(ckpt: Checkpoint, excluded_modules: Iterable[str], qc: QuantConfig) -> Evidence:
    """Every linear layer that is not excluded is quantized: none was left in BF16 by accident."""
    pats = (*tuple(excluded_modules), *qc.exclude_modules)
    ev = Evidence("every linear weight that is not excluded is quantized")
    layout = Layout.of(ckpt)
    for name in layout.linear_unquantized:
        if not is_excluded(module_of(name), pats):
            ev.add(f"linear weight is left in {ckpt.info(name).dtype} but is not excluded: the runtime would "
                   "expect MXFP8 weights and scales here", file=ckpt.file_of(name), tensor=name)
    ev.measured.update(quantized=len(layout.quantized), unquantized_linear=len(layout.linear_unquantized))
    if not layout.quantized:
        ev.add("no quantized linear weight found")
    return ev


def check_quant_config(
    ckpt: Checkpoint, qc: QuantConfig, *, excluded_modules: Iterable[str], kv_cache_quant_algo: str | None,
    block_size: int = mxfp8.BLOCK_SIZE,
) -> Evidence:
    """The quantization config declares MXFP8, group 32, the KV-cache setting and the tensors' exclusions."""
    ev = Evidence("the quantization config (hf_quant_config.json / config.json) declares MXFP8, group size "
                  f"{block_size}, kv_cache_quant_algo, and exactly the exclusions the tensors show")
    ev.expected.update(quant_algo="MXFP8", group_size=block_size, kv_cache_quant_algo=kv_cache_quant_algo)
    if not qc.schemes:
        ev.add("no quantization config: neither hf_quant_config.json nor config.json quantization_config exists; "
               "a runtime would load the FP8 bytes as if unquantized")
        return ev
    layout = Layout.of(ckpt)
    runtime = qc.runtime_scheme
    if runtime is None:
        ev.add(f"{MODEL_CONFIG} has no quantization_config: vLLM 0.32 then reads {HF_QUANT_CONFIG}, from which it "
               "does not detect MXFP8 (it loads the FP8 bytes unquantized, or with producer 'modelopt' refuses "
               "'Unknown ModelOpt quant algo: MXFP8'); declare the scheme in config.json's quantization_config",
               file=HF_QUANT_CONFIG)
    else:
        if runtime.quant_method is None:
            ev.add("has no quant_method: vLLM detects ModelOpt MXFP8 only from quant_method 'modelopt' and would "
                   "load the FP8 bytes unquantized", file=runtime.file)
        if runtime.nested and runtime.producer == "modelopt":
            ev.add("producer.name is 'modelopt': vLLM 0.32 then maps only FP8 and NVFP4 and refuses the checkpoint "
                   "('Unknown ModelOpt quant algo: MXFP8')", file=runtime.file)
    for s in qc.schemes:
        for conflict in s.conflicts:
            ev.add(f"{conflict}; a reader of the other key would load another model", file=s.file)
        if s.quant_method not in (None, "modelopt"):
            ev.add(f"quant_method is {s.quant_method!r}; this layout is ModelOpt's ('modelopt')", file=s.file)
        if s.quant_algo != "MXFP8":
            ev.add(f"quant_algo is {s.quant_algo!r}, expected 'MXFP8'", file=s.file)
        if s.declares_group_size and (type(s.group_size) is not int or s.group_size != block_size):
            # 32.0 == 32 in Python, but a loader that indexes or ranges with it fails: an integer is required.
            kind = "" if type(s.group_size) is int else f" ({type(s.group_size).__name__}, not an integer)"
            ev.add(f"group_size is {s.group_size!r}{kind}, expected {block_size}", file=s.file)
        if s.exclude_modules is None:
            ev.add("declares no exclusion list (exclude_modules / ignore); vLLM requires one", file=s.file)
        if s.nested and not s.declares_kv_cache:
            ev.add("has no 'kv_cache_quant_algo' key; vLLM's ModelOpt loader requires it (null for none)",
                   file=s.file)
        if s.declares_kv_cache and s.kv_cache_quant_algo != kv_cache_quant_algo:
            ev.add(f"kv_cache_quant_algo is {s.kv_cache_quant_algo!r}, the profile expects {kv_cache_quant_algo!r}",
                   file=s.file)
        pats = s.exclude_modules or ()
        for name in layout.quantized:
            if is_excluded(module_of(name), pats):
                ev.add(f"quantized, but the config excludes it (pattern list {list(pats)}): the runtime would "
                       "read fp8 bytes as an unquantized weight", file=s.file, tensor=name)
        for name in layout.linear_unquantized:
            if not is_excluded(module_of(name), pats):
                ev.add("unquantized linear weight is not in the config's exclusions: the runtime would look "
                       "for MXFP8 scales", file=s.file, tensor=name)
        for pat in excluded_modules:
            if not any(is_excluded(module_of(n), pats) for n in ckpt.names() if is_excluded(module_of(n), (pat,))):
                ev.add(f"the profile excludes '{pat}' but the config does not declare it excluded", file=s.file)
        _check_substring_exclusions(ckpt, pats, s.file, ev)
    if not any(s.declares_group_size for s in qc.schemes):
        ev.measured["group_size_note"] = "no file states group_size; MXFP8 fixes it at 32 (OCP MX v1.0)"
    if len(qc.schemes) > 1:
        a, b = qc.schemes[0], qc.schemes[1]
        if set(a.exclude_modules or ()) != set(b.exclude_modules or ()):
            ev.add(f"{a.file} excludes {sorted(a.exclude_modules or ())} but {b.file} excludes "
                   f"{sorted(b.exclude_modules or ())}: runtimes reading different files would disagree")
        if a.quant_algo != b.quant_algo:
            ev.add(f"{a.file} says {a.quant_algo!r} but {b.file} says {b.quant_algo!r}")
        if a.declares_kv_cache and b.declares_kv_cache and \
                kv_cache_algo(a.kv_cache_quant_algo) != kv_cache_algo(b.kv_cache_quant_algo):
            ev.add(f"{a.file} declares a KV cache of {a.kv_cache_quant_algo!r} but {b.file} one of "
                   f"{b.kv_cache_quant_algo!r}: runtimes reading different files would disagree")
    ev.measured["declared_in"] = [s.file for s in qc.schemes]
    ev.measured["exclude_modules"] = list(qc.exclude_modules)
    return ev


def _check_substring_exclusions(ckpt: Checkpoint, patterns: Iterable[str], file: str, ev: Evidence) -> None:
    """Findings for exclusion patterns vLLM also matches as substrings, beyond the modules they name.

    vLLM's ModelOpt ``is_layer_excluded`` takes a module as excluded when a pattern occurs anywhere
    in its name (``layers.1`` excludes ``layers.10.mlp.up_proj`` too), besides the fnmatch match;
    a module only that rule excludes is one the runtime builds unquantized while the tensors say
    otherwise, so such a pattern is refused naming the first module it reaches.
    """
    modules = sorted({module_of(n) for n in ckpt.names() if n.endswith(WEIGHT_SUFFIX)})
    for pat in patterns:
        reached = [m for m in modules
                   if (pat in m or pat in "model." + m) and not is_excluded(m, (pat,))]
        if reached:
            ev.add(f"exclusion pattern {pat!r} also excludes {reached[0]!r}"
                   + (f" (and {len(reached) - 1} more)" if len(reached) > 1 else "")
                   + " in vLLM, which matches a pattern anywhere in a module's name: name modules exactly",
                   file=file)


_LAYER_RE = re.compile(r"^(?:model\.)?layers\.(\d+)\.")


def check_model_config(ckpt: Checkpoint, config: dict[str, Any]) -> Evidence:
    """``config.json``'s architecture numbers agree with the tensor shapes."""
    ev = Evidence(f"{MODEL_CONFIG} (hidden size, layers, heads, head_dim, intermediate size, vocabulary) "
                  "agrees with the tensor shapes")

    def num(key: str) -> int | None:
        v = config.get(key)
        if v is None:
            return None
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            ev.add(f"'{key}' is {v!r}, not a positive integer", file=MODEL_CONFIG)
            return None
        return v

    hidden = num("hidden_size")
    heads = num("num_attention_heads")
    kv_heads = num("num_key_value_heads") or heads
    head_dim = num("head_dim") or (hidden // heads if hidden and heads else None)
    inter = num("intermediate_size")
    vocab = num("vocab_size")
    layers = num("num_hidden_layers")
    target_ids = (config.get("dflash_config") or {}).get("target_layer_ids")
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads"):
        if key not in config:
            ev.add(f"'{key}' is missing", file=MODEL_CONFIG)

    expect: list[tuple[str, list[int | None]]] = [
        ("*.self_attn.q_proj", [heads * head_dim if heads and head_dim else None, hidden]),
        ("*.self_attn.k_proj", [kv_heads * head_dim if kv_heads and head_dim else None, hidden]),
        ("*.self_attn.v_proj", [kv_heads * head_dim if kv_heads and head_dim else None, hidden]),
        ("*.self_attn.o_proj", [hidden, heads * head_dim if heads and head_dim else None]),
        ("*.mlp.gate_proj", [inter, hidden]),
        ("*.mlp.up_proj", [inter, hidden]),
        ("*.mlp.down_proj", [hidden, inter]),
        ("lm_head", [vocab, hidden]),
        ("*embed_tokens", [vocab, hidden]),
        ("*input_layernorm", [hidden]),
        ("*post_attention_layernorm", [hidden]),
        ("norm", [hidden]),
        ("hidden_norm", [hidden]),
        ("*.q_norm", [head_dim]),
        ("*.k_norm", [head_dim]),
    ]
    if isinstance(target_ids, list) and hidden:
        expect.append(("fc", [hidden, hidden * len(target_ids)]))
    compared = 0
    seen_layers: set[int] = set()
    for name in ckpt.names():
        m = _LAYER_RE.match(name)
        if m:
            seen_layers.add(int(m.group(1)))
        if not name.endswith(WEIGHT_SUFFIX):
            continue
        module = module_of(name)
        for pat, shape in expect:
            if _matches(module, (pat,)):
                got = list(ckpt.info(name).shape)
                if None in shape:
                    break
                compared += 1
                if got != shape:
                    ev.add(f"shape {got} contradicts {MODEL_CONFIG}, which implies {shape}", file=ckpt.file_of(name),
                           tensor=name)
                break
    if layers is not None:
        want = set(range(layers))
        if seen_layers != want:
            ev.add(f"num_hidden_layers is {layers} but the tensors have layers {sorted(seen_layers)}",
                   file=MODEL_CONFIG)
    if not compared:
        ev.add("no tensor could be compared with the config (unknown tensor names?)", file=MODEL_CONFIG)
    ev.measured.update(tensors_compared=compared, layers=sorted(seen_layers))
    return ev



def check_declared_format(declared: dict[str, Any], spec: Any, *, file: str = "conversion_manifest.json") -> Evidence:
    """The manifest's declared quantization block agrees with the profile's format (a ``FormatSpec``)."""
    ev = Evidence("the manifest declares the profile's format (block size, layout, exclusions, recipe)")
    ev.measured.update(declared)
    ev.expected.update(block_size=spec.block_size, scale_layout=spec.scale_layout,
                       excluded_modules=list(spec.excluded_modules), scale_recipe=spec.scale_recipe)
    if declared.get("block_size") != spec.block_size:
        ev.add(f"block size {declared.get('block_size')}, the profile says {spec.block_size}", file=file)
    if declared.get("scale_layout") != spec.scale_layout:
        ev.add(f"scale layout {declared.get('scale_layout')!r}, the profile says {spec.scale_layout!r}", file=file)
    missing = [p for p in spec.excluded_modules if p not in (declared.get("excluded_modules") or [])]
    if missing:
        ev.add(f"does not exclude {missing}, which the profile requires excluded", file=file)
    recipe = declared.get("scale_recipe")
    if spec.scale_recipe and recipe not in (None, spec.scale_recipe):
        ev.add(f"scale recipe {recipe!r}, the profile pins {spec.scale_recipe!r}", file=file)
    return ev
