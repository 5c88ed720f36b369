"""Level "format": what a runtime's MXFP8 loader needs to find in the tensors and the configs."""

from __future__ import annotations

import pytest

from qualify import format_checks as f
from qualify.report import Evidence

pytestmark = pytest.mark.format


def test_weights(checkpoint, profile, record):
    """Quantized linear weights are F8_E4M3 [N, K], K a multiple of 32 (per TP shard too), with no fp8 NaN."""
    record(f.check_weights(checkpoint, block_size=profile.format.block_size,
                           tensor_parallel_size=profile.tensor_parallel_size))


def test_scales(checkpoint, profile, record):
    """Every quantized weight has a U8 [N, K/32] E8M0 scale with no 0xFF byte; no orphan or foreign scales."""
    record(f.check_scales(checkpoint, block_size=profile.format.block_size))


def test_block_normalization(checkpoint, profile, record):
    """Every non-zero block's largest element sits where its 1x32 E8M0 scale puts it."""
    record(f.check_block_normalization(checkpoint, block_size=profile.format.block_size))


def test_quant_config(checkpoint, profile, quant_config, record):
    """The quantization config declares MXFP8, group 32, kv_cache_quant_algo and the tensors' exclusions."""
    record(f.check_quant_config(checkpoint, quant_config, excluded_modules=profile.format.excluded_modules,
                                kv_cache_quant_algo=profile.format.kv_cache_quant_algo,
                                block_size=profile.format.block_size))


def test_exclusions(checkpoint, profile, quant_config, record):
    """Excluded modules (lm_head) are present, unquantized and carry no scale."""
    record(f.check_exclusions(checkpoint, profile.format.excluded_modules, quant_config))


def test_linear_coverage(checkpoint, profile, quant_config, record):
    """No linear layer that is not excluded was left unquantized."""
    record(f.check_linear_coverage(checkpoint, profile.format.excluded_modules, quant_config))


def test_model_config(checkpoint, model_config, record):
    """config.json's architecture agrees with the tensor shapes."""
    record(f.check_model_config(checkpoint, model_config))


def test_declared_format(manifest, profile, record):
    """The manifest's declared quantization format is the profile's."""
    spec, q = profile.format, manifest.quantization
    ev = Evidence("the manifest declares the profile's format (block size, layout, exclusions, recipe)")
    ev.measured.update(q)
    ev.expected.update(block_size=spec.block_size, scale_layout=spec.scale_layout,
                       excluded_modules=list(spec.excluded_modules), scale_recipe=spec.scale_recipe)
    if q["block_size"] != spec.block_size:
        ev.add(f"block size {q['block_size']}, the profile says {spec.block_size}", file=manifest.path.name)
    if q["scale_layout"] != spec.scale_layout:
        ev.add(f"scale layout {q['scale_layout']!r}, the profile says {spec.scale_layout!r}", file=manifest.path.name)
    missing = [p for p in spec.excluded_modules if p not in q["excluded_modules"]]
    if missing:
        ev.add(f"does not exclude {missing}, which the profile requires excluded", file=manifest.path.name)
    if spec.scale_recipe and q["scale_recipe"] not in (None, spec.scale_recipe):
        ev.add(f"scale recipe {q['scale_recipe']!r}, the profile pins {spec.scale_recipe!r}", file=manifest.path.name)
    record(ev)
