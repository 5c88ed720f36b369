"""Source BF16 checkpoint -> MXFP8 checkpoint, quantization config and manifest.

The layout is what ModelOpt exports and the seed describes: ``<module>.weight`` F8_E4M3
``[N, K]`` and ``<module>.weight_scale`` U8 ``[N, K/32]``, row-major and unswizzled, no
``weight_scale_2``, excluded modules copied unchanged. One tensor is in memory at a
time; the output directory appears whole or not at all.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from qualify import __version__
from qualify.checkpoint.manifest import (
    MANIFEST_NAME,
    SCALE_SUFFIX,
    build_manifest,
    list_checkpoint_files,
    write_manifest,
)
from qualify.checkpoint.quant_config import HF_QUANT_CONFIG, MODEL_CONFIG, is_excluded, module_of
from qualify.checkpoint.safetensors_io import Checkpoint
from qualify.checkpoint.safetensors_writer import PlannedTensor, write_safetensors
from qualify.checks.draft_model import unquantized_modules_for
from qualify.checks.format import LINEAR_PATTERNS
from qualify.errors import QuantizationError, UsageError
from qualify.mxfp8 import codec as mxfp8
from qualify.mxfp8 import statistics
from qualify.util.atomic import default_mode
from qualify.util.identifiers import is_commit
from qualify.util.jsonio import load_json_file

OUTPUT_WEIGHTS = "model.safetensors"
QUANTIZABLE_DTYPES = ("BF16", "F16", "F32")
#: Source files never copied: the source's own weights and index are replaced by the output's.
_NOT_COPIED = (".safetensors", "model.safetensors.index.json", MANIFEST_NAME, HF_QUANT_CONFIG)


@dataclass(frozen=True)
class Plan:
    name: str
    action: str  # quantized | kept | excluded
    reason: str


def plan_tensors(
    source: Checkpoint, *, exclude: Iterable[str], linear_patterns: Iterable[str] = LINEAR_PATTERNS
) -> list[Plan]:
    """Decide, per source tensor, what the conversion does with it."""
    excl, lin = tuple(exclude), tuple(linear_patterns)
    plans = []
    for name in sorted(source.names()):
        info = source.info(name)
        module = module_of(name)
        linear = name.endswith(".weight") and len(info.shape) == 2 and is_excluded(module, lin)
        if linear and is_excluded(module, excl):
            plans.append(Plan(name, "excluded", f"module matches an exclusion in {list(excl)}"))
        elif linear and info.dtype in QUANTIZABLE_DTYPES:
            plans.append(Plan(name, "quantized", ""))
        else:
            plans.append(Plan(name, "kept", "not a linear weight"))
    return plans


def convert(
    source_dir: Path,
    output_dir: Path,
    *,
    source_repo: str,
    source_revision: str,
    recipe: str = "modelopt",
    exclude: Iterable[str] = ("lm_head",),
    kv_cache_quant_algo: str | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Quantize ``source_dir`` into ``output_dir``; returns the manifest written there."""
    source_dir, output_dir = Path(source_dir), Path(output_dir)
    rec = mxfp8.parse_recipe(recipe)
    exclude = _with_runtime_exclusions(source_dir, tuple(exclude))
    _check_separate(source_dir, output_dir)
    if output_dir.exists() and any(output_dir.iterdir()) and not overwrite:
        raise UsageError(f"{output_dir}: exists and is not empty; refusing to overwrite it")
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", dir=output_dir.parent))
    try:
        manifest = _convert_into(source_dir, tmp, source_repo, source_revision, rec, exclude, kv_cache_quant_algo)
        os.chmod(tmp, default_mode(0o777))
        if output_dir.exists():
            shutil.rmtree(output_dir)
        os.replace(tmp, output_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def _with_runtime_exclusions(source_dir: Path, exclude: tuple[str, ...]) -> tuple[str, ...]:
    """``exclude`` plus the modules the runtime builds unquantized for the source's architecture.

    Quantizing one of those makes a checkpoint the runtime refuses (vLLM's DFlash 2 class
    builds ``candidate_selector.hidden_projection`` with no quantization method), so the
    conversion never does, whatever it was asked.
    """
    cfg_path = source_dir / MODEL_CONFIG
    if not cfg_path.exists():
        return exclude
    cfg = load_json_file(cfg_path, error=UsageError, require_object=True)
    return exclude + tuple(m for m in unquantized_modules_for(cfg) if m not in exclude)


def _check_separate(source_dir: Path, output_dir: Path) -> None:
    """Refuse an output folder inside the source, the source itself, or one that holds the source.

    Raises:
        UsageError: naming both folders and why: the conversion would read its own output as
            source files (and list it in the manifest's source checksums), or replace the source.
    """
    src, out = source_dir.resolve(), output_dir.resolve()
    if out == src or out.is_relative_to(src):
        raise UsageError(f"output {output_dir} is inside the source {source_dir}: the conversion would write into the "
                         "folder it reads, and the source's file list and checksums would then include the output; "
                         "choose an output folder outside the source")
    if src.is_relative_to(out):
        raise UsageError(f"output {output_dir} contains the source {source_dir}: replacing the output would delete "
                         "the source; choose an output folder outside it")


def _check_scale_names(source: Checkpoint, plans: list[Plan]) -> None:
    """A source tensor that already has the name a quantized weight's scale will get cannot be converted.

    Raises:
        QuantizationError: naming the tensor and its file.
    """
    names = set(source.names())
    for plan in plans:
        scale = plan.name + SCALE_SUFFIX
        if plan.action == "quantized" and scale in names:
            raise QuantizationError(
                f"the source already has a tensor of this name, which the conversion gives the scales of "
                f"'{plan.name}': is the source already quantized? Convert an unquantized source, or remove the "
                "stray tensor", tensor=scale, file=source.file_of(scale))


def _convert_into(
    source_dir: Path,
    out: Path,
    source_repo: str,
    source_revision: str,
    recipe: mxfp8.ScaleRecipe,
    exclude: tuple[str, ...],
    kv_cache_quant_algo: str | None,
) -> dict[str, Any]:
    with Checkpoint.open(source_dir) as source:
        plans = plan_tensors(source, exclude=exclude)
        _check_scale_names(source, plans)
        entries: list[dict[str, Any]] = []
        stats: list[statistics.WeightStatistics] = []
        planned: list[PlannedTensor] = []
        pending: dict[str, mxfp8.MXFP8Weight] = {}

        def quantized(name: str) -> mxfp8.MXFP8Weight:
            # Weight and scale are written one after the other: quantize once, hand out both halves.
            if name not in pending:
                src = source.tensor(name)
                q = mxfp8.quantize(src, recipe, name=name)
                stats.append(st := statistics.weight_statistics(src, q, recipe))
                entry = next(e for e in entries if e["source_name"] == name)
                entry["statistics"] = st.to_dict()
                pending[name] = q
            return pending[name]

        # What the writer calls for each tensor's bytes, in the order it writes them.
        def weight_data(name: str) -> torch.Tensor:
            return quantized(name).data

        def weight_scale(name: str) -> torch.Tensor:
            return pending.pop(name).scale

        def raw_bytes(name: str) -> bytes:
            return bytes(source.raw(name))

        for plan in plans:
            info = source.info(plan.name)
            entry: dict[str, Any] = {
                "source_name": plan.name,
                "action": plan.action,
                "source_dtype": info.dtype,
                "source_shape": list(info.shape),
            }
            if plan.reason:
                entry["reason"] = plan.reason
            if plan.action == "quantized":
                n, k = info.shape
                if k % mxfp8.BLOCK_SIZE:
                    raise QuantizationError(
                        f"K = {k} is not a multiple of {mxfp8.BLOCK_SIZE}; MXFP8 cannot block it and runtimes "
                        "refuse such a weight (exclude the module instead)", tensor=plan.name,
                        file=source.file_of(plan.name))
                scale_shape = (n, k // mxfp8.BLOCK_SIZE)
                entry["outputs"] = [
                    {"name": plan.name, "role": "weight", "dtype": "F8_E4M3", "shape": [n, k]},
                    {"name": plan.name + SCALE_SUFFIX, "role": "scale", "dtype": "U8", "shape": list(scale_shape)},
                ]
                planned.append(PlannedTensor(plan.name, "F8_E4M3", (n, k), partial(weight_data, plan.name)))
                planned.append(PlannedTensor(plan.name + SCALE_SUFFIX, "U8", scale_shape,
                                             partial(weight_scale, plan.name)))
            else:
                entry["outputs"] = [{"name": plan.name, "role": "tensor", "dtype": info.dtype,
                                     "shape": list(info.shape)}]
                planned.append(PlannedTensor(plan.name, info.dtype, tuple(info.shape), partial(raw_bytes, plan.name)))
            entries.append(entry)
        write_safetensors(out / OUTPUT_WEIGHTS, planned, metadata={"format": "pt"})

    exclusions = sorted({module_of(p.name) for p in plans if p.action == "excluded"} | set(exclude))
    _write_configs(source_dir, out, exclusions, kv_cache_quant_algo)
    manifest = build_manifest(
        source_dir=source_dir, output_dir=out, source_repo=source_repo, source_revision=source_revision,
        entries=entries, aggregate=statistics.aggregate(stats), recipe=str(recipe), excluded_modules=list(exclude),
    )
    write_manifest(out, manifest)
    return manifest


def kv_cache_scheme(algo: str) -> dict[str, Any]:
    """The flat block's ``kv_cache_scheme`` for a KV-cache algorithm: vLLM 0.32 reads FP8 from it, nothing else.

    Raises:
        UsageError: an algorithm the flat block cannot declare.
    """
    if algo.upper() != "FP8":
        raise UsageError(f"KV-cache algorithm {algo!r}: config.json's quantization_config can declare FP8 only "
                         "(vLLM reads kv_cache_scheme {type: float, num_bits: 8})")
    return {"type": "float", "num_bits": 8, "dynamic": False, "strategy": "tensor"}


def _write_configs(source_dir: Path, out: Path, exclusions: list[str], kv_cache_quant_algo: str | None) -> None:
    for rel in list_checkpoint_files(source_dir):
        if rel.endswith(_NOT_COPIED) or rel == MODEL_CONFIG:
            continue
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source_dir / rel, out / rel)
    hf_quant = {
        "producer": {"name": "qualify", "version": __version__},
        "quantization": {
            "quant_algo": "MXFP8",
            "kv_cache_quant_algo": kv_cache_quant_algo,
            "group_size": mxfp8.BLOCK_SIZE,
            "exclude_modules": exclusions,
        },
    }
    (out / HF_QUANT_CONFIG).write_text(json.dumps(hf_quant, indent=2) + "\n", encoding="utf-8")
    cfg_path = source_dir / MODEL_CONFIG
    if cfg_path.exists():
        cfg = load_json_file(cfg_path, error=UsageError, require_object=True)
        # The flat block as vLLM reads it (modelopt.py): exclusions under "ignore", an FP8 KV cache as a
        # kv_cache_scheme. kv_cache_quant_algo is not read here; it is kept, always saying the same, for the
        # readers of ModelOpt's own layout.
        block: dict[str, Any] = {"quant_method": "modelopt", "quant_algo": "MXFP8",
                                 "kv_cache_quant_algo": kv_cache_quant_algo, "group_size": mxfp8.BLOCK_SIZE,
                                 "ignore": exclusions}
        if kv_cache_quant_algo is not None:
            block["kv_cache_scheme"] = kv_cache_scheme(kv_cache_quant_algo)
        cfg["quantization_config"] = block
        (out / MODEL_CONFIG).write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")



def describe_conversion(
    source_dir: Path,
    output_dir: Path,
    *,
    source_repo: str,
    source_revision: str,
    producer: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``conversion_manifest.json`` for a conversion made by another tool (ModelOpt, say).

    What happened to each tensor is read off the files: an F8_E4M3 weight with a scale was
    quantized, anything else was copied (excluded if the checkpoint's config excludes it).
    The scale recipe is the known recipe that reproduces the quantized tensors, or null
    when none does (the reproduction level will then say so).
    """
    from qualify.checkpoint.quant_config import read_quant_config
    from qualify.checks.reproduction import PlanItem, plan_from_checkpoint, resolve_recipe

    source_dir, output_dir = Path(source_dir), Path(output_dir)
    if not is_commit(source_revision):
        raise UsageError(f"--source-revision {source_revision!r} is not a 40-hex commit; a manifest pins the "
                         "immutable revision the conversion read")
    exclusions = list(read_quant_config(output_dir).exclude_modules)
    with Checkpoint.open(source_dir) as source, Checkpoint.open(output_dir) as output:
        plan = plan_from_checkpoint(output, source)
        planned = {p.name for p in plan} | {p.name + "_scale" for p in plan if p.action == "quantized"}
        extra = sorted(set(output.names()) - planned)
        dropped = sorted(set(source.names()) - {p.name for p in plan})
        if extra or dropped:
            raise UsageError(
                f"{output_dir}: cannot account for every tensor: "
                + (f"not in the source: {extra[:5]} " if extra else "")
                + (f"dropped from the source: {dropped[:5]}" if dropped else "")
            )
        plan = [PlanItem(p.name, "excluded" if p.action == "kept" and _is_excluded_linear(source, p.name, exclusions)
                         else p.action) for p in plan]
        recipe, _, _ = resolve_recipe(plan, output, source, None)
        entries, stats = [], []
        for item in plan:
            info = source.info(item.name)
            entry: dict[str, Any] = {"source_name": item.name, "action": item.action, "source_dtype": info.dtype,
                                     "source_shape": list(info.shape)}
            if item.action == "quantized":
                scale = output.info(item.name + "_scale")
                entry["outputs"] = [
                    {"name": item.name, "role": "weight", "dtype": output.info(item.name).dtype,
                     "shape": list(output.info(item.name).shape)},
                    {"name": item.name + "_scale", "role": "scale", "dtype": scale.dtype, "shape": list(scale.shape)},
                ]
                q = mxfp8.MXFP8Weight(data=output.tensor(item.name), scale=output.tensor(item.name + "_scale"))
                st = statistics.weight_statistics(source.tensor(item.name), q, recipe or mxfp8.ScaleRecipe.MODELOPT)
                entry["statistics"] = st.to_dict()
                stats.append(st)
            else:
                o = output.info(item.name)
                entry["outputs"] = [{"name": item.name, "role": "tensor", "dtype": o.dtype, "shape": list(o.shape)}]
                if item.action == "excluded":
                    entry["reason"] = "excluded by the checkpoint's quantization config"
            entries.append(entry)
    manifest = build_manifest(
        source_dir=source_dir, output_dir=output_dir, source_repo=source_repo, source_revision=source_revision,
        entries=entries, aggregate=statistics.aggregate(stats), recipe=str(recipe) if recipe else None,
        excluded_modules=exclusions, producer=producer,
    )
    write_manifest(output_dir, manifest)
    return manifest


def _is_excluded_linear(source: Checkpoint, name: str, exclusions: list[str]) -> bool:
    info = source.info(name)
    return (name.endswith(".weight") and len(info.shape) == 2 and is_excluded(module_of(name), exclusions)
            and info.dtype in QUANTIZABLE_DTYPES)
