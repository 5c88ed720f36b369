"""Level "reproduction": re-quantize the pinned source and compare every weight and scale byte."""

from __future__ import annotations

import pytest

from qualify.checks import reproduction as r

pytestmark = pytest.mark.reproduction


@pytest.fixture(scope="module")
def plan(manifest):
    return [r.PlanItem(t.source_name, t.action) for t in manifest.tensors]


def test_quantized_tensors(plan, manifest, checkpoint, source, profile, record):
    """Every quantized weight and scale byte equals the reference quantizer's output from the source."""
    declared = manifest.scale_recipe or profile.format.scale_recipe  # None: detect it, and say so
    record(r.check_quantized(plan, checkpoint, source, declared_recipe=declared,
                             source_revision=manifest.source_revision))


def test_unquantized_tensors(plan, checkpoint, source, record):
    """Kept and excluded tensors (lm_head, norms) are byte-identical to the source."""
    record(r.check_unquantized(plan, checkpoint, source))
