"""Level "reproduction": re-quantize the pinned source and compare every weight and scale byte."""

from __future__ import annotations

from qualify.checkpoint.manifest import Manifest
from qualify.checkpoint.safetensors_io import Checkpoint
from qualify.checks import reproduction as r
from qualify.core import Evidence
from qualify.profile import Profile


def quantized_tensors(plan: list[r.PlanItem], manifest: Manifest, checkpoint: Checkpoint, source: Checkpoint,
                      profile: Profile) -> Evidence:
    declared = manifest.scale_recipe or profile.format.scale_recipe  # None: detect it, and say so
    return r.check_quantized(plan, checkpoint, source, declared_recipe=declared,
                             source_revision=manifest.source_revision)


def unquantized_tensors(plan: list[r.PlanItem], checkpoint: Checkpoint, source: Checkpoint) -> Evidence:
    return r.check_unquantized(plan, checkpoint, source)
