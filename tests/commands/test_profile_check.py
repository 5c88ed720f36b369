"""``qualify profile-check``: the paired level's error rates by design, and its exit codes."""

from __future__ import annotations

import pytest

from qualify.cli import main
from qualify.profile.rehearsal import REHEARSAL_PROFILE


def test_a_profile_without_a_pilot_spread_claims_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile-check", "fixture"]) == 1
    out = capsys.readouterr().out
    assert "not computed: profile 'fixture' states no [paired] pilot_spread" in out
    assert "acceptance: not computed: profile 'fixture' states no [acceptance] pilot_rate" in out


def test_the_rates_are_printed_and_too_few_trials_show_no_target(capsys: pytest.CaptureFixture[str]) -> None:
    # Three simulated runs cannot bound an error rate at 1%: the targets are not shown met, so exit 1.
    assert main(["profile-check", REHEARSAL_PROFILE, "--trials", "3"]) == 1
    out = capsys.readouterr().out
    assert f"profile: {REHEARSAL_PROFILE}" in out and "spread source: make qualify's run" in out
    assert "per-prompt spread 3.60%; 3 simulated runs per scenario" in out
    assert "concurrency 1, category 'math':" in out and "concurrency 4, overall:" in out
    assert "no loss: paired level right" in out and "NOT MET" in out
    assert "a draft at the pilot rate: probability the criterion fails" in out  # the floors, at [acceptance]'s pilot


@pytest.mark.parametrize("argv", [["profile-check", "no-such-profile"],
                                  ["profile-check", REHEARSAL_PROFILE, "--spread", "2", "--trials", "1"],
                                  ["profile-check", REHEARSAL_PROFILE, "--trials", "0"]])
def test_bad_input_is_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("qualify: error: ") and "Traceback" not in err
