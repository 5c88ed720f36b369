"""Tests for qualify.profile.levels: a level run on a stand-in is measured, never required."""

from __future__ import annotations

from pathlib import Path

import pytest

from qualify.profile import load_profile
from tests.profile.support import (
    profile_error,
    write_variant,
)


def test_the_fixture_profile_requires_only_what_no_stand_in_shows() -> None:
    fixture = load_profile("fixture")
    assert fixture.required_levels == ("structure", "format", "reproduction")
    assert fixture.stand_in_levels == ("load", "smoke", "acceptance", "paired", "losslessness", "throughput", "speedup")
    assert set(fixture.measured_levels) == set(fixture.stand_in_levels)
    assert fixture.conditions()["stand_in_levels"] == list(fixture.stand_in_levels)
    # The real runtimes: the pinned image, and the vLLM CPU image serving the checkpoint itself.
    assert load_profile("glm53-flash-dflash2-mxfp8-tp4").stand_in_levels == ()
    assert load_profile("fixture-dflash-cpu").stand_in_levels == ()


@pytest.mark.parametrize(("levels", "named"), [
    ('required = ["structure", "format", "reproduction", "load"]\nmeasured = ["smoke"]',
     "load runs on the stand-in image"),
    ('required = ["structure", "format", "reproduction", "paired"]\nmeasured = ["load"]',
     "paired runs on [local_server]'s draft, which is not the checkpoint"),
])
def test_a_level_run_on_a_stand_in_cannot_be_required(tmp_path: Path, fixture_text: str, levels: str,
                                                       named: str) -> None:
    block = ('required = ["structure", "format", "reproduction"]\nmeasured = ["load", "smoke", "acceptance", '
             '"paired", "losslessness", "throughput", "speedup"]')
    assert block in fixture_text
    message = profile_error(write_variant(tmp_path, fixture_text, block, levels))
    assert f"$.levels.required: {named}" in message and "cannot qualify; list it under measured" in message
