"""qualify.runtime.companions: the reference and source draft's servers, derived from the load level's plan.

Pure: the plans are compared variable by variable and mount by mount with the load level's.
"""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from pathlib import Path
from typing import Any

import pytest

from qualify.errors import UsageError
from qualify.profile import load_profile
from qualify.runtime import companions as comp
from qualify.runtime import labels
from qualify.runtime import plan as plans
from tests.docker_support import docker_client_fixture, standin_fixture  # noqa: F401  (fixtures)
from tests.helpers import REPO

CHECKPOINT = REPO / "fixtures" / "dflash-cpu" / "mxfp8"
SOURCE = comp.SourceDraft(REPO / "fixtures" / "dflash-cpu" / "source", "qualify-fixtures/dflash-cpu-tiny", "f" * 40)
REVISION = "e" * 40


@pytest.fixture(scope="module")
def plan() -> plans.LaunchPlan:
    profile = load_profile("fixture-dflash-cpu")
    base = plans.build_plan(profile, run_id="test-companions", draft_revision=REVISION, checkpoint_dir=CHECKPOINT)
    # What the vLLM CPU image mounts besides the draft (its venv, its Python, the target), as the session adds it.
    extra = (plans.Mount("/venv", "/opt/vllm-venv"), plans.Mount("/target", comp.hub_snapshot("t/t", "a" * 40)))
    return plans.LaunchPlan(**{**base.__dict__, "mounts": base.mounts + extra})


def _changed(a: plans.LaunchPlan, b: plans.LaunchPlan) -> dict[str, tuple[str | None, str | None]]:
    ea, eb = a.env_dict, b.env_dict
    return {k: (ea.get(k), eb.get(k)) for k in sorted(set(ea) | set(eb)) if ea.get(k) != eb.get(k)}


def test_the_source_server_differs_from_the_checkpoints_only_in_the_draft(plan: plans.LaunchPlan) -> None:
    source = comp.companion_plan(plan, comp.SOURCE, port=23456, source=SOURCE)
    assert _changed(plan, source) == {
        "DFLASH_MODEL": ("qualify-fixtures/dflash-cpu-tiny-mxfp8", SOURCE.repo),
        "DFLASH_MODEL_REVISION": (REVISION, SOURCE.revision),
        "PORT": ("18391", "23456"),
    }
    checkpoint_at = comp.hub_snapshot("qualify-fixtures/dflash-cpu-tiny-mxfp8", REVISION)
    assert plans.Mount(str(CHECKPOINT.resolve()), checkpoint_at) in plan.mounts
    assert set(plan.mounts) - set(source.mounts) == {plans.Mount(str(CHECKPOINT.resolve()), checkpoint_at)}
    assert set(source.mounts) - set(plan.mounts) == {
        plans.Mount(str(SOURCE.path.resolve()), comp.hub_snapshot(SOURCE.repo, SOURCE.revision))}
    assert source.endpoint == "http://127.0.0.1:23456/v1" and source.port == 23456
    assert source.name == f"{plan.name}-source" and source.draft_revision == SOURCE.revision
    # The same image, pin, labels (the run's teardown finds it), network and readiness deadline.
    for field in ("image", "image_digest", "labels", "network", "shm_size", "startup_timeout_s", "run_id",
                  "served_model_name"):
        assert getattr(source, field) == getattr(plan, field), field


def test_the_reference_server_is_the_target_alone(plan: plans.LaunchPlan) -> None:
    reference = comp.companion_plan(plan, comp.REFERENCE, port=23457)
    env = reference.env_dict
    assert env["SPECULATOR"] == comp.NO_SPECULATOR
    assert not {"DFLASH_MODEL", "DFLASH_MODEL_REVISION", "NUM_SPECULATIVE_TOKENS"} & set(env)
    # Every other variable is the load level's (the target, its revision, dtype and limits).
    kept = {k: v for k, v in plan.env if k not in comp._DRAFT_VARS and k not in ("SPECULATOR", "PORT")}
    assert {k: env[k] for k in kept} == kept
    assert all("dflash-cpu-tiny-mxfp8" not in m.target for m in reference.mounts)
    assert len(reference.mounts) == len(plan.mounts) - 1
    assert reference.endpoint == "http://127.0.0.1:23457/v1"


def test_engines_are_spread_over_the_cores(plan: plans.LaunchPlan) -> None:
    assert [comp.core_of(i, (0, 1)) for i in range(3)] == [0, 1, 0]
    assert comp.core_of(2, ()) is None
    bound = comp.bind_core(plan, 1)
    assert _changed(plan, bound) == {comp.CORE_BIND_VAR: (None, "1")}


def test_the_published_arms_differ_from_the_qualification_launch_only_in_its_overrides(
        plan: plans.LaunchPlan) -> None:
    # A variable the published command does not set (None) is dropped, not set to anything.
    published = {"CUDAGRAPH_MODE": "FULL", "QUALIFY_ONLY": None}
    with_extra = dataclasses.replace(plan, env=(*plan.env, ("QUALIFY_ONLY", "1")))
    checkpoint = comp.companion_plan(with_extra, comp.CHECKPOINT_PUBLISHED, port=3, published=published)
    assert _changed(with_extra, checkpoint) == {"CUDAGRAPH_MODE": ("NONE", "FULL"), "QUALIFY_ONLY": ("1", None),
                                                "PORT": (plan.env_dict["PORT"], "3")}
    assert checkpoint.mounts == plan.mounts and checkpoint.draft_revision == plan.draft_revision
    reference = comp.companion_plan(plan, comp.REFERENCE_PUBLISHED, port=4, published=published)
    assert reference.env_dict["SPECULATOR"] == comp.NO_SPECULATOR and "DFLASH_MODEL" not in reference.env_dict
    assert reference.env_dict["CUDAGRAPH_MODE"] == "FULL"
    with pytest.raises(UsageError, match="needs the published values of the qualification overrides"):
        comp.companion_plan(plan, comp.CHECKPOINT_PUBLISHED, port=3)


def test_what_cannot_be_planned_is_refused(plan: plans.LaunchPlan) -> None:
    with pytest.raises(UsageError, match="unknown companion server 'draft'"):
        comp.companion_plan(plan, "draft", port=1)
    with pytest.raises(UsageError, match=r"needs the source draft's folder \(--source\)"):
        comp.companion_plan(plan, comp.SOURCE, port=1)


def test_a_source_on_a_relative_path_is_mounted_absolute(plan: plans.LaunchPlan, monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "src").mkdir()
    source = comp.companion_plan(plan, comp.SOURCE, port=2, source=comp.SourceDraft(Path("src"), "o/s", "c" * 40))
    assert plans.Mount(str(tmp_path / "src"), comp.hub_snapshot("o/s", "c" * 40)) in source.mounts


# -- with the stand-in runtime (real containers; the docker tests' rules: see tests/runtime/test_container.py) --

@pytest.mark.slow
@pytest.mark.docker
def test_companions_start_with_the_runtime_and_leave_with_it(docker_client: Any, standin: str,
                                                             tmp_path: Path) -> None:
    from qualify.checkpoint.checksums import folder_revision
    from qualify.errors import RuntimeNotStarted
    from qualify.runtime.serving_record import serving_summary
    from qualify.runtime.session import RuntimeSession
    from tests.docker_support import CANDIDATE, docker_ps, fixture_variant
    from tests.helpers import FIXTURE

    profile = load_profile(fixture_variant(tmp_path, arms="side-by-side"))
    source = comp.SourceDraft(FIXTURE / "source", "org/source", folder_revision(FIXTURE / "source"))
    run_id = f"test-{uuid.uuid4().hex[:10]}"
    # The stand-in always drafts: the reference (no DFLASH_MODEL) is refused, and the refusal is quoted.
    session = RuntimeSession(profile, run_id=run_id, log_dir=tmp_path, draft_revision=CANDIDATE,
                             checkpoint_dir=FIXTURE / "mxfp8", allow_unpinned=True,
                             companions={comp.SOURCE: source, comp.REFERENCE: None}, cores=(0, 1))
    try:
        assert session.start().ok
        assert session.ready().ok
        names = {session.plan.name, f"{session.plan.name}-source", f"{session.plan.name}-reference"}
        assert set(docker_ps(f"{labels.LABEL_RUN}={run_id}")) == names
        endpoint = session.companion_endpoint(comp.SOURCE)
        assert session.companions[comp.SOURCE].readiness is not None  # waited for in the background
        assert endpoint != session.plan.endpoint and session.companion_endpoint(comp.SOURCE) == endpoint
        log = session.server_logs()[comp.SOURCE]()
        assert f"Loading DFlash draft org/source at revision {source.revision}" in log
        assert "Loading DFlash draft qualify-fixtures/dflash2-tiny-mxfp8" in session.server_logs()["runtime"]()
        with pytest.raises(RuntimeNotStarted, match=r"the reference server did not start: .*exited with code 1.*"
                                                    r"missing required environment: NUM_SPECULATIVE_TOKENS, "
                                                    r"DFLASH_MODEL"):
            session.companion_endpoint(comp.REFERENCE)
        with pytest.raises(RuntimeNotStarted, match="no draft server: this run asked for none"):
            session.companion_endpoint("draft")
        armed = session.teardown_armed()
        assert armed.ok, armed.failure_text()
        assert armed.measured["containers"] == sorted(names)
        # The engines are spread over the cores: the runtime on the first, the others round robin.
        assert session.plan.env_dict[comp.CORE_BIND_VAR] == "0"
        assert session.companions[comp.SOURCE].plan.env_dict[comp.CORE_BIND_VAR] == "1"
        assert session.companions[comp.REFERENCE].plan.env_dict[comp.CORE_BIND_VAR] == "0"
    finally:
        record = session.close()
    assert record is not None and record.ok and set(record.removed) == names
    assert docker_ps(f"{labels.LABEL_RUN}={run_id}") == []
    summary = serving_summary(session)
    assert summary["kind"] == "runtime" and set(summary["servers"]) == {"speculative", "source", "reference"}
    assert summary["servers"]["speculative"]["container"] == session.plan.name
    assert "missing required environment" in summary["servers"]["reference"]["error"]
    assert summary["source_draft"] == {"path": str(FIXTURE / "source"), "repo": "org/source",
                                       "revision": source.revision}


@pytest.mark.slow
@pytest.mark.docker
def test_arms_one_after_another_never_overlap(docker_client: Any, standin: str, tmp_path: Path) -> None:
    from qualify.checkpoint.checksums import folder_revision
    from qualify.errors import RuntimeNotStarted
    from qualify.runtime.session import RuntimeSession
    from tests.docker_support import CANDIDATE, docker_ps, fixture_variant
    from tests.helpers import FIXTURE

    profile = load_profile(fixture_variant(tmp_path))  # the default: one arm at a time
    assert not profile.arms_side_by_side
    source = comp.SourceDraft(FIXTURE / "source", "org/source", folder_revision(FIXTURE / "source"))
    run_id = f"test-{uuid.uuid4().hex[:10]}"
    session = RuntimeSession(profile, run_id=run_id, log_dir=tmp_path, draft_revision=CANDIDATE,
                             checkpoint_dir=FIXTURE / "mxfp8", allow_unpinned=True,
                             companions={comp.SOURCE: source, comp.REFERENCE: None}, cores=(0, 1))
    try:
        assert session.start().ok and session.ready().ok
        # Ready, and alone: no companion started beside it, and all cores are its own.
        assert docker_ps(f"{labels.LABEL_RUN}={run_id}") == [session.plan.name]
        assert comp.CORE_BIND_VAR not in session.plan.env_dict
        assert session.arm_endpoint(comp.CHECKPOINT) == session.plan.endpoint
        endpoint = session.arm_endpoint(comp.SOURCE)
        # The checkpoint's container was removed before the source's started; its log stays readable.
        assert docker_ps(f"{labels.LABEL_RUN}={run_id}") == [f"{session.plan.name}-source"]
        assert endpoint != session.plan.endpoint
        assert "Loading DFlash draft qualify-fixtures/dflash2-tiny-mxfp8" in session.server_logs()["runtime"]()
        with pytest.raises(RuntimeNotStarted, match="was stopped for the next arm; an arm runs once"):
            session.arm_endpoint(comp.CHECKPOINT)
        # The stand-in refuses a server without a draft: the refusal is the arm's reason, and nothing is left.
        with pytest.raises(RuntimeNotStarted, match=r"the reference server did not start: .*missing required "
                                                    r"environment"):
            session.arm_endpoint(comp.REFERENCE)
        assert docker_ps(f"{labels.LABEL_RUN}={run_id}") in ([], [f"{session.plan.name}-reference"])
    finally:
        record = session.close()
    assert record is not None and record.ok, record
    assert docker_ps(f"{labels.LABEL_RUN}={run_id}") == []
    timeline = session.summary()["arms"]["timeline"]
    assert [t["arm"] for t in timeline] == ["checkpoint", "source", "reference"]
    # At no instant two at once: each arm started after the one before it was stopped.
    for before, after in itertools.pairwise(timeline):
        assert before["stopped"] is not None and before["stopped"] <= after["started"], timeline


def test_usable_cores_are_this_processes_affinity_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 1}, raising=False)
    assert comp.usable_cores() == (1, 3)
    assert [comp.core_of(i, comp.usable_cores()) for i in range(3)] == [1, 3, 1]
    monkeypatch.delattr(os, "sched_getaffinity")
    assert comp.usable_cores() == () and comp.core_of(0, comp.usable_cores()) is None  # a platform that cannot tell
