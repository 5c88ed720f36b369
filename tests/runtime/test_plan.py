"""Tests for qualify.runtime.plan: the launch plan built from a profile, its ``docker run`` line and the
engine's create arguments. All pure: no Docker engine is asked anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qualify.errors import UsageError
from qualify.profile import DEFAULT_STARTUP_TIMEOUT_S, Profile
from qualify.runtime import labels
from qualify.runtime import plan as plans
from tests.docker_support import CANDIDATE
from tests.helpers import FIXTURE
from tests.profile.support import SEED, SEED_ENV, SEED_IMAGE, parse_seed_docker_run

CHECKPOINT = FIXTURE / "mxfp8"
TOKEN = "hf_QualifyTestTokenDoNotLeak0123456789ab"


def seed_block() -> str:
    lines = SEED.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("docker run"))
    block = []
    for line in lines[start:]:
        block.append(line.strip())
        if not line.rstrip().endswith("\\"):
            break
    return "\n".join(block)


def test_published_plan_renders_the_seed_command_exactly(seed: Profile) -> None:
    rendered = plans.render_docker_run(plans.build_plan(seed, serving=True))
    if SEED.exists():
        assert rendered == seed_block()
    parsed = parse_seed_docker_run(rendered)
    assert parsed["positional"] == [SEED_IMAGE]
    assert parsed["env"] == list(SEED_ENV.items())
    assert parsed["flags"] == {"rm": "", "gpus": '"device=0,1,2,3"', "network": "host", "ipc": "host",
                               "shm_size": "32g"}


def test_qualification_plan_differs_only_by_the_overrides_and_the_pin(seed: Profile) -> None:
    published = plans.build_plan(seed, serving=True).env_dict
    plan = plans.build_plan(seed, draft_revision=CANDIDATE)
    assert [k for k, _ in plan.env] == list(SEED_ENV)  # same variables, same order
    diff = {k: v for k, v in plan.env if published[k] != v}
    assert diff == {"CUDAGRAPH_MODE": "NONE", "DFLASH_MODEL_REVISION": CANDIDATE}
    assert plan.draft_revision == CANDIDATE and plan.target_revision == seed.data["target"]["revision"]
    assert plan.unpinned == [f"runtime image {SEED_IMAGE} (a tag; the profile pins no digest)"]
    assert (plan.host, plan.port, plan.served_model_name) == ("127.0.0.1", 8000, "GLM-5.3-Flash-NVFP4")
    assert plan.startup_timeout_s == DEFAULT_STARTUP_TIMEOUT_S
    plan_labels = dict(plan.labels)
    assert plan_labels[labels.LABEL_HARNESS] == "qualify" and plan_labels[labels.LABEL_RUN] == plan.run_id
    assert plan_labels[labels.LABEL_OWNER] == labels.owner_id() and plan.name == f"qualify-{plan.run_id}"


def test_create_kwargs_are_the_seed_command(seed: Profile) -> None:
    from docker.types import DeviceRequest

    plan = plans.build_plan(seed, draft_revision=CANDIDATE, run_id="r1")
    kw = plans.create_kwargs(plan, image_ref="sha256:" + "a" * 64)
    assert kw["image"] == "sha256:" + "a" * 64  # the inspected ID, never the tag
    assert kw["device_requests"] == [DeviceRequest(device_ids=["0", "1", "2", "3"], capabilities=[["gpu"]])]
    assert (kw["network_mode"], kw["ipc_mode"], kw["shm_size"]) == ("host", "host", "32g")
    assert kw["environment"] == [f"{k}={v}" for k, v in plan.env]
    assert kw["auto_remove"] is False and kw["detach"] is True and kw["name"] == "qualify-r1"
    assert "mounts" not in kw
    without = plans.create_kwargs(plan, with_gpus=False)
    assert "device_requests" not in without
    assert {k: v for k, v in kw.items() if k not in ("device_requests", "image")} == {
        k: v for k, v in without.items() if k != "image"}


def test_a_local_checkpoint_is_mounted_read_only_at_its_revision(seed: Profile) -> None:
    plan = plans.build_plan(seed, draft_revision=CANDIDATE, checkpoint_dir=CHECKPOINT)
    target = (f"/root/.cache/huggingface/hub/models--local-inference-lab--GLM-5.3-Flash-DFlash2-MXFP8/snapshots/"
              f"{CANDIDATE}")
    assert plan.mounts == (plans.Mount(str(CHECKPOINT.resolve()), target, True),)
    assert f"-v {CHECKPOINT.resolve()}:{target}:ro \\" in plans.render_docker_run(plan)
    kw = plans.create_kwargs(plan)
    assert [(m["Source"], m["Target"], m["Type"], m["ReadOnly"]) for m in kw["mounts"]] == [
        (str(CHECKPOINT.resolve()), target, "bind", True)]
    cache = plans.build_plan(seed, draft_revision=CANDIDATE, hf_cache=Path("/tmp"))
    assert cache.mounts == (plans.Mount("/tmp", plans.HF_CACHE_TARGET, True),)


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"draft_revision": "main"}, "40 lowercase hex"),
    ({"draft_revision": CANDIDATE.upper()}, "40 lowercase hex"),
    ({"checkpoint_dir": CHECKPOINT}, "give the draft revision"),
    ({"draft_revision": CANDIDATE, "checkpoint_dir": CHECKPOINT, "hf_cache": Path("/tmp")}, "not both"),
    ({"pass_hf_token": True}, "HF_TOKEN is not set"),
])
def test_plans_that_cannot_be_launched(seed: Profile, monkeypatch: pytest.MonkeyPatch, kwargs: dict,
                                       words: str) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with pytest.raises(UsageError, match=words):
        plans.build_plan(seed, **kwargs)


def test_tokens_are_passed_by_name_and_never_rendered(seed: Profile, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    plan = plans.build_plan(seed, draft_revision=CANDIDATE, pass_hf_token=True)
    rendered = plans.render_docker_run(plan)
    assert "-e HF_TOKEN \\" in rendered and TOKEN not in rendered
    assert TOKEN not in json.dumps(plan.to_dict())
    assert f"HF_TOKEN={TOKEN}" in plans.create_kwargs(plan)["environment"]  # the container does get it



def test_on_port_moves_the_port_and_the_endpoint_together(seed: Profile) -> None:
    from qualify.runtime.plan import build_plan, on_port

    plan = on_port(build_plan(seed, draft_revision="0" * 40), 18999)
    assert (plan.port, dict(plan.env)["PORT"], plan.endpoint) == (18999, "18999", "http://127.0.0.1:18999/v1")
    assert plan.base_url == "http://127.0.0.1:18999"
