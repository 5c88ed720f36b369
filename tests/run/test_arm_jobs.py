"""qualify.run.arm_jobs: the jobs of the levels a run performs, on the arms each level compares."""

from __future__ import annotations

import pytest

from qualify.profile import Profile, load_profile
from qualify.run.arm_jobs import arm_jobs, paired_request


@pytest.fixture(scope="module")
def cpu() -> Profile:
    return load_profile("fixture-dflash-cpu")


def test_each_level_measures_on_the_arms_it_compares(cpu: Profile) -> None:
    jobs = arm_jobs(cpu, {"paired", "losslessness", "throughput", "speedup"})
    assert [(j.level, j.arm) for j in jobs] == [
        ("paired", "checkpoint"), ("paired", "source"), ("losslessness", "checkpoint"), ("losslessness", "reference"),
        ("throughput", "checkpoint"), ("speedup", "checkpoint"), ("speedup", "reference"),
        # As users run it (the published environment): measured only.
        ("speedup", "checkpoint-published"), ("speedup", "reference-published")]


def test_only_the_runs_levels_have_jobs(cpu: Profile) -> None:
    assert arm_jobs(cpu, {"load", "smoke", "acceptance"}) == []
    assert {j.level for j in arm_jobs(cpu, {"losslessness"})} == {"losslessness"}


def test_both_paired_arms_are_asked_the_same_way(cpu: Profile) -> None:
    req = paired_request(cpu)
    assert cpu.paired is not None
    assert (req.max_tokens, req.temperature, req.proposal_length) == (cpu.paired.max_tokens, cpu.paired.temperature,
                                                                      cpu.proposal_length)
    paired = [j for j in arm_jobs(cpu, {"paired"})]
    assert paired[0].measure is paired[1].measure  # one function, so the same prompts in the same order
