"""Level "format": what a runtime's MXFP8 loader needs to find in the tensors and the configs."""

from __future__ import annotations

import pytest

from qualify.checks import draft_model
from qualify.checks import format as f

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


def test_draft_model(checkpoint, model_config, record):
    """The runtime's draft model class finds every config key it reads, its shapes, and unquantized what it
    builds unquantized."""
    record(draft_model.check_draft_model(checkpoint, model_config))


def test_declared_format(manifest, profile, record):
    """The manifest's declared quantization format is the profile's."""
    record(f.check_declared_format(manifest.quantization, profile.format, file=manifest.path.name))
