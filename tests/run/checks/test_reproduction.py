"""qualify.run.checks.reproduction: the recipe re-quantized with is the manifest's, else the profile's (the
reproduction itself is tested in tests/checks/test_reproduction.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from qualify.checkpoint.manifest import Manifest
from qualify.checks.catalogue import level_checks
from qualify.core import Evidence
from qualify.profile import Profile


@pytest.mark.parametrize("check_id", level_checks()["reproduction"])
def test_every_check_passes_on_the_shipped_fixture(check_id: str, run_check: Any) -> None:
    evidence = run_check(check_id)
    assert isinstance(evidence, Evidence)
    assert evidence.ok, evidence.failure_text()


def _without_recipe(manifest: Manifest) -> Manifest:
    quantization = {k: v for k, v in manifest.quantization.items() if k != "scale_recipe"}
    return dataclasses.replace(manifest, quantization=quantization)


def _with_recipe(profile: Profile, recipe: str | None) -> Profile:
    return dataclasses.replace(profile, format=dataclasses.replace(profile.format, scale_recipe=recipe))


def test_the_manifests_recipe_comes_first(run_check: Any, manifest: Manifest, profile: Profile) -> None:
    assert manifest.scale_recipe == "modelopt"
    evidence = run_check("reproduction.quantized_tensors", profile=_with_recipe(profile, "ocp-floor"))
    assert evidence.ok and evidence.measured["recipe"] == "modelopt"


def test_without_the_manifests_recipe_the_profiles_is_used(run_check: Any, manifest: Manifest,
                                                           profile: Profile) -> None:
    evidence = run_check("reproduction.quantized_tensors", manifest=_without_recipe(manifest),
                         profile=_with_recipe(profile, "ocp-floor"))
    assert not evidence.ok
    assert evidence.measured["recipe"] == "ocp-floor"


def test_with_neither_the_recipe_is_detected(run_check: Any, manifest: Manifest, profile: Profile) -> None:
    evidence = run_check("reproduction.quantized_tensors", manifest=_without_recipe(manifest),
                         profile=_with_recipe(profile, None))
    assert evidence.ok and evidence.measured["recipe"] == "modelopt"
    assert evidence.measured["recipe_chosen"] != "declared"
