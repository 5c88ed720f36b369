"""Level "format": what a runtime's MXFP8 loader needs to find in the tensors and the configs."""

from __future__ import annotations

from typing import Any

from qualify.checkpoint.manifest import Manifest
from qualify.checkpoint.quant_config import QuantConfig
from qualify.checkpoint.safetensors_io import Checkpoint
from qualify.checks import format as f
from qualify.checks.draft_model import check_draft_model
from qualify.core import Evidence
from qualify.profile import Profile


def weights(checkpoint: Checkpoint, profile: Profile) -> Evidence:
    return f.check_weights(checkpoint, block_size=profile.format.block_size,
                           tensor_parallel_size=profile.tensor_parallel_size)


def scales(checkpoint: Checkpoint, profile: Profile) -> Evidence:
    return f.check_scales(checkpoint, block_size=profile.format.block_size)


def block_normalization(checkpoint: Checkpoint, profile: Profile) -> Evidence:
    return f.check_block_normalization(checkpoint, block_size=profile.format.block_size)


def quant_config(checkpoint: Checkpoint, profile: Profile, quant_config: QuantConfig) -> Evidence:
    return f.check_quant_config(checkpoint, quant_config, excluded_modules=profile.format.excluded_modules,
                                kv_cache_quant_algo=profile.format.kv_cache_quant_algo,
                                block_size=profile.format.block_size)


def exclusions(checkpoint: Checkpoint, profile: Profile, quant_config: QuantConfig) -> Evidence:
    return f.check_exclusions(checkpoint, profile.format.excluded_modules, quant_config)


def linear_coverage(checkpoint: Checkpoint, profile: Profile, quant_config: QuantConfig) -> Evidence:
    return f.check_linear_coverage(checkpoint, profile.format.excluded_modules, quant_config)


def model_config(checkpoint: Checkpoint, model_config: dict[str, Any]) -> Evidence:
    return f.check_model_config(checkpoint, model_config)


def draft_model(checkpoint: Checkpoint, model_config: dict[str, Any]) -> Evidence:
    return check_draft_model(checkpoint, model_config)


def declared_format(manifest: Manifest, profile: Profile) -> Evidence:
    return f.check_declared_format(manifest.quantization, profile.format, file=manifest.path.name)
