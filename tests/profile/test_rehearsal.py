"""Tests for qualify.profile.rehearsal: the CPU rehearsal may differ from the release profile only where allowed."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from qualify.profile import Profile, load_profile
from qualify.profile.rehearsal import (
    ALLOWED,
    REHEARSAL_PROFILE,
    REHEARSAL_PROFILES,
    RELEASE_PROFILE,
    AllowedKey,
    disallowed_leaves,
    drift,
    judge_all,
)

#: Keys that decide how the run goes: never on the allow-list, whatever else is added to it.
ORCHESTRATION_KEYS = (
    "runtime.qualification_overrides.CUDAGRAPH_MODE",
    "runtime.qualification_overrides.PER_REQUEST_SPEC_DECODE_METRICS",
    "runtime.env.CUDAGRAPH_MODE",
    "runtime.env.NUM_SPECULATIVE_TOKENS",
    "runtime.env.SPECULATOR",
    "runtime.env.TP",
    "dflash.proposal_length",
    "dflash.kv_cache",
    "paired.temperature",
    "paired.full_block",
    "paired.confidence",
    "acceptance.temperature",
    "smoke.temperature",
    "smoke.max_tokens",
    "levels.required",
    "levels.measured",
    "orchestration.arms",
    "format.block_size",
)


def _data(profile: Profile) -> dict[str, Any]:
    return copy.deepcopy(profile.data)


def test_every_rule_states_its_reason() -> None:
    assert ALLOWED and all(rule.reason.strip() for rule in ALLOWED)


@pytest.mark.parametrize("key", ORCHESTRATION_KEYS)
def test_no_rule_allows_an_orchestration_key(key: str) -> None:
    assert [r.pattern for r in ALLOWED if r.matches(key)] == []


def test_rule_patterns() -> None:
    assert AllowedKey("evidence[*].**", "r").matches("evidence[name=x].pattern")
    assert AllowedKey("evidence[*].**", "r").matches("evidence[name=x].source.format")
    assert not AllowedKey("evidence[*].**", "r").matches("evidence")
    assert AllowedKey("*.request_timeout_s", "r").matches("paired.request_timeout_s")
    assert not AllowedKey("*.request_timeout_s", "r").matches("paired.x.request_timeout_s")
    assert AllowedKey("acceptance.min_*", "r").matches("acceptance.min_prompts")
    assert not AllowedKey("acceptance.min_*", "r").matches("acceptance.max_tokens")
    assert not AllowedKey("runtime.env.MODEL", "r").matches("runtime.env.MODEL_REVISION")  # whole keys only


def test_allowed_differences_are_not_drift(seed_profile: Profile) -> None:
    b = _data(seed_profile)
    b["runtime"]["image"] = "qualify-vllm-cpu:latest"
    b["runtime"]["env"]["MAX_NUM_SEQS"] = "4"
    b["paired"]["concurrency"] = [1, 4]  # the same rule (batch 1 and MAX_NUM_SEQS) at another size
    b["paired"]["pilot_spread"] = 0.036  # each design's measured spread prices it; it decides nothing
    b["hardware"] = {"gpu_count": 0}
    del b["backends"]
    b["evidence"][0]["pattern"] = "another line"
    judged = judge_all(seed_profile, b)
    assert len(judged) == 8 and all(j.allowed for j in judged)
    assert drift(seed_profile, b) == []


@pytest.mark.parametrize(("where", "value", "key"), [
    (("runtime", "qualification_overrides", "CUDAGRAPH_MODE"), "FULL",
     "runtime.qualification_overrides.CUDAGRAPH_MODE"),
    (("dflash", "proposal_length"), 5, "dflash.proposal_length"),
    (("paired", "temperature"), 0.7, "paired.temperature"),
    (("paired", "concurrency"), [1, 8], "paired.concurrency"),  # MAX_NUM_SEQS is 16: another rule, not a size
    # The paired level's decision rules: the rehearsal decides by the release's.
    (("paired", "margin"), 0.08, "paired.margin"),
    (("paired", "category_margin"), 0.02, "paired.category_margin"),
    (("paired", "confidence"), 0.9, "paired.confidence"),
    (("paired", "bootstrap_resamples"), 500, "paired.bootstrap_resamples"),
    (("levels", "required"), ["structure"], "levels.required"),
    (("runtime", "qualification_overrides", "PER_REQUEST_SPEC_DECODE_METRICS"), "summary",
     "runtime.qualification_overrides.PER_REQUEST_SPEC_DECODE_METRICS"),
])
def test_an_orchestration_difference_is_drift_naming_its_key(seed_profile: Profile, where: tuple[str, ...],
                                                             value: Any, key: str) -> None:
    b = _data(seed_profile)
    node = b
    for part in where[:-1]:
        node = node[part]
    node[where[-1]] = value
    assert [d.key for d in drift(seed_profile, b)] == [key]


def test_a_table_on_one_side_is_allowed_only_if_every_key_under_it_is(seed_profile: Profile) -> None:
    b = _data(seed_profile)
    del b["orchestration"], b["losslessness"], b["hardware"]  # each table on one side only
    judged = {j.difference.key: j for j in judge_all(seed_profile, b)}
    assert judged["hardware"].allowed  # every key under it allowed with its reason
    # a size and a reason are allowed, the near-tie tolerance (a decision rule) is not
    assert not judged["losslessness"].allowed
    assert disallowed_leaves(judged["losslessness"], seed_profile.data, b) == ["losslessness.near_tie_tolerance"]
    assert not judged["orchestration"].allowed
    assert disallowed_leaves(judged["orchestration"], seed_profile.data, b) == ["orchestration.arms"]
    b = _data(seed_profile)
    b["losslessness"]["rounds"] = 3
    judged = {j.difference.key: j for j in judge_all(seed_profile, b)}
    assert disallowed_leaves(judged["losslessness.rounds"], seed_profile.data, b) == ["losslessness.rounds"]


@pytest.mark.parametrize("cpu_profile", REHEARSAL_PROFILES)
def test_the_release_profile_and_its_cpu_rehearsal_differ_only_where_allowed(cpu_profile: str) -> None:
    release, rehearsal = load_profile(RELEASE_PROFILE), load_profile(cpu_profile)
    bad = drift(release, rehearsal)
    assert [d.key for d in bad] == [], "the CPU rehearsal differs from the release profile in orchestration"



def test_local_servers_the_rehearsal_starts_itself_are_drift(seed_profile: Profile) -> None:
    cpu = load_profile(REHEARSAL_PROFILE)
    b = _data(cpu)
    assert drift(seed_profile, b) == []  # kind runtime: the serving levels talk to the run's own containers
    b["local_server"]["kind"] = "vllm-cpu"  # local processes beside the container: another path
    assert "local_server" in [d.key for d in drift(seed_profile, b)]


def test_the_excluded_modules_may_differ_only_by_what_vllm_never_quantizes(seed_profile: Profile) -> None:
    b = _data(seed_profile)
    b["format"]["excluded_modules"] = ["lm_head", "candidate_selector.hidden_projection"]
    assert drift(seed_profile, b) == []
    b["format"]["excluded_modules"] = ["lm_head", "layers.0.mlp.down_proj"]
    assert [d.key for d in drift(seed_profile, b)] == ["format.excluded_modules"]
