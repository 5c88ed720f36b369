"""Tests for qualify.profile.model: the profile's conditions match the seed's published command, and the
launch environment applies the qualification overrides and pins the draft's revision."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qualify.errors import UsageError
from qualify.profile import Profile, load_profile
from tests.profile.support import (
    CANDIDATE_REV,
    SEED,
    SEED_ENV,
    SEED_IMAGE,
    SOURCE_REV,
    TARGET_REV,
    parse_seed_docker_run,
    write_variant,
)


@pytest.mark.skipif(not SEED.exists(), reason="seed model card not present; hard values are checked above")
def test_seed_profile_equals_the_seed_text(seed_profile: Profile) -> None:
    text = SEED.read_text(encoding="utf-8")
    docker = parse_seed_docker_run(text)
    runtime = seed_profile.data["runtime"]

    assert docker["positional"] == [runtime["image"]] == [SEED_IMAGE]
    assert docker["env"] == list(runtime["env"].items())
    assert dict(docker["env"]) == SEED_ENV
    flags = docker["flags"]
    assert flags.pop("gpus") == f'"device={runtime["gpus"]}"'
    assert flags.pop("rm") == ""
    assert flags == {k: runtime[k] for k in ("network", "ipc", "shm_size")}

    # The immutable revisions the seed names are exactly the profile's source and target.
    assert set(re.findall(r"(?<![0-9a-f])[0-9a-f]{40}(?![0-9a-f])", text)) == {
        seed_profile.data["source"]["revision"],
        seed_profile.data["target"]["revision"],
    }
    assert f"{seed_profile.data['source']['repo']}\nat immutable revision {SOURCE_REV}" in text
    assert f"{seed_profile.data['target']['repo']}revision{TARGET_REV}" in text
    assert f"available at {runtime['endpoint']}." in text
    assert f"four {seed_profile.data['hardware']['gpu_name']} GPUs" in text
    assert "CUDA graph mode:\nNONEfor the load-and-inference qualification" in text
    assert "DFlash proposal length: seven tokens" in text
    assert "auto(BF16)" in text
    assert "loaded 1.20 GB of\ndraft weights" in text
    assert "completed a 32-token speculative request" in text
    assert "Runtime\nthroughput and CUDA graph performance are not qualified" in text


# -- launch_env ------------------------------------------------------------------------


def test_launch_env_applies_the_qualification_override(seed_profile: Profile) -> None:
    env = seed_profile.launch_env()
    assert env["CUDAGRAPH_MODE"] == "NONE"
    assert {k: v for k, v in env.items() if k != "CUDAGRAPH_MODE"} == {
        k: v for k, v in SEED_ENV.items() if k != "CUDAGRAPH_MODE"
    }
    env["TP"] = "1"  # a copy: changing it must not change the profile
    assert seed_profile.data["runtime"]["env"]["CUDAGRAPH_MODE"] == "FULL"
    assert seed_profile.launch_env()["TP"] == "4"
    assert load_profile("fixture").launch_env()["CUDAGRAPH_MODE"] == "NONE"


def test_launch_env_pins_the_draft_revision(seed_profile: Profile) -> None:
    assert seed_profile.launch_env(draft_revision=CANDIDATE_REV)["DFLASH_MODEL_REVISION"] == CANDIDATE_REV
    for bad in ("main", "", CANDIDATE_REV.upper(), CANDIDATE_REV[:-1]):
        with pytest.raises(UsageError, match="40 lowercase hex"):
            seed_profile.launch_env(draft_revision=bad)


def test_launch_env_uses_a_pinned_checkpoint_revision(tmp_path: Path, fixture_text: str) -> None:
    unpinned = ("# folder's content revision (qualify.checkpoint.checksums.folder_revision), which changes with any"
                " byte.\n"
                "revision = \"\"")
    path = write_variant(tmp_path, fixture_text, unpinned, f'revision = "{CANDIDATE_REV}"')
    profile = load_profile(path)
    assert profile.launch_env()["DFLASH_MODEL_REVISION"] == CANDIDATE_REV
    with pytest.raises(UsageError, match="contradicts"):
        profile.launch_env(draft_revision="f" * 40)
