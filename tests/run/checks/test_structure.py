"""qualify.run.checks.structure: each structure check reads its declared inputs and hands the profile's settings to
the library (the library's own rules are tested in tests/checks/)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from qualify.checks.catalogue import level_checks
from qualify.core import Evidence
from qualify.profile import Profile
from qualify.run.checks import structure


# Those the run pins or proves itself (the pinned copy, the source's identity) are tested with their inputs
# (tests/run/fixtures/test_inputs.py, tests/checkpoint/test_pinned.py).
@pytest.mark.parametrize("check_id", [c for c in level_checks()["structure"]
                                      if c not in ("structure.pinned", "structure.source_identity")])
def test_every_check_passes_on_the_shipped_fixture(check_id: str, run_check: Any) -> None:
    evidence = run_check(check_id)
    assert isinstance(evidence, Evidence)
    assert evidence.ok, evidence.failure_text()


def test_the_source_must_be_the_revision_the_profile_pins(run_check: Any, manifest_raw: dict[str, Any],
                                                           profile: Profile) -> None:
    other = {**manifest_raw, "source": {**manifest_raw["source"], "revision": "1" * 40}}
    evidence = run_check("structure.source_pinned", manifest_raw=other)
    assert not evidence.ok
    assert profile.source_revision is not None and profile.source_revision in evidence.failure_text()


def test_the_statistics_are_held_to_the_profiles_tolerances(run_check: Any, profile: Profile,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def check_statistics(*args: Any, **kw: Any) -> Evidence:
        seen.update(kw)
        return Evidence("recorded")

    monkeypatch.setattr(structure.m, "check_statistics", check_statistics)
    run_check("structure.statistics", profile=dataclasses.replace(profile, statistics_rtol=0.25, statistics_atol=0.5))
    assert seen == {"rtol": 0.25, "atol": 0.5}


def test_the_inputs_evidence_is_the_source_identitys_and_the_pins() -> None:
    identity = Evidence("the source is proven")
    assert structure.source_identity(identity) is identity
