"""qualify.run.checks.format: each format check reads its declared inputs and holds the tensors to the profile's
format (the library's own rules are tested in tests/checks/)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from qualify.checks.catalogue import level_checks
from qualify.core import Evidence
from qualify.profile import Profile


@pytest.mark.parametrize("check_id", level_checks()["format"])
def test_every_check_passes_on_the_shipped_fixture(check_id: str, run_check: Any) -> None:
    evidence = run_check(check_id)
    assert isinstance(evidence, Evidence)
    assert evidence.ok, evidence.failure_text()


def test_the_weights_are_checked_per_shard_of_the_profiles_tensor_parallelism(run_check: Any,
                                                                               profile: Profile) -> None:
    # The fixture's row-parallel weights have K = 256: 64 per shard at TP 4, 16 (not a multiple of 32) at TP 16.
    evidence = run_check("format.weights", profile=dataclasses.replace(profile, tensor_parallel_size=16))
    assert not evidence.ok
    assert "split over 16 tensor-parallel ranks" in evidence.failure_text()


def test_the_exclusions_are_the_profiles(run_check: Any, profile: Profile) -> None:
    excluded = (*profile.format.excluded_modules, "layers.0.mlp.down_proj")
    fmt = dataclasses.replace(profile.format, excluded_modules=excluded)
    evidence = run_check("format.exclusions", profile=dataclasses.replace(profile, format=fmt))
    assert not evidence.ok
    assert "down_proj" in evidence.failure_text()
