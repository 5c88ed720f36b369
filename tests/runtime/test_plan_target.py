"""Tests for qualify.runtime.plan's target revision enforcement: the launcher's revision variable, the pinned
target snapshot (``--target-snapshot``), and what the plan records when neither holds the target.

The vLLM CPU launcher is run for real (its own python, no vLLM needed) to show that the variable the CPU
profile declares is one it obeys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from qualify.errors import UsageError
from qualify.profile import Profile, load_profile
from qualify.runtime import companions as comp
from qualify.runtime import image as images
from qualify.runtime import plan as plans
from qualify.runtime import vllm_cpu_image
from tests.docker_support import CANDIDATE
from tests.profile.support import PROFILES_DIR, TARGET_REV, profile_error, write_variant

TARGET_REPO = "local-inference-lab/GLM-5.3-Flash-NVFP4"
OTHER_REV = "f" * 40


@pytest.fixture(scope="module")
def cpu() -> Profile:
    return load_profile("fixture-dflash-cpu")


def hub_snapshot(root: Path, repo: str = TARGET_REPO, revision: str = TARGET_REV, *, ref: str | None = "main") -> Path:
    """A hub cache laid out as huggingface_hub writes it: the snapshot's files link into the repository's blobs."""
    repo_dir = root / "hub" / ("models--" + repo.replace("/", "--"))
    (repo_dir / "blobs").mkdir(parents=True)
    snapshot = repo_dir / "snapshots" / revision
    snapshot.mkdir(parents=True)
    for name, data in (("config.json", b"{}"), ("model-00001.safetensors", b"weights")):
        blob = repo_dir / "blobs" / f"blob-{name}"
        blob.write_bytes(data)
        (snapshot / name).symlink_to(Path("..") / ".." / "blobs" / blob.name)
    if ref is not None:
        (repo_dir / "refs").mkdir()
        (repo_dir / "refs" / ref).write_text(revision)
    return snapshot


# -- the seed: its launcher takes no revision variable ------------------------------------


def test_the_seed_plan_does_not_enforce_its_target_and_says_why(seed: Profile) -> None:
    plan = plans.build_plan(seed, draft_revision=CANDIDATE)
    pin = plan.target_pin
    assert (pin.revision, pin.enforced, pin.method, pin.variable) == (TARGET_REV, False, None, None)
    assert pin.reason == (
        "the launcher takes no target revision variable (profile glm53-flash-dflash2-mxfp8-tp4 declares no "
        "$.runtime.target_revision_env) and no pinned snapshot was mounted (--target-snapshot): the runtime loads "
        f"{TARGET_REPO} at whatever revision its launcher resolves")
    assert "MODEL_REVISION" not in plan.env_dict and plan.env_dict["MODEL"] == TARGET_REPO
    record = plan.to_dict()["target_revision_enforcement"]
    assert record == {"revision": TARGET_REV, "enforced": False, "method": None, "variable": None, "snapshot": None,
                      "reason": pin.reason}
    # The load level's pinning evidence records the same, and does not fail the run for it.
    ev = images.check_pinning(plan)
    assert ev.measured["target_revision_enforcement"] == record
    assert "target_revision_enforced_by_env" not in ev.measured


def test_the_seed_with_its_snapshot_mounted_enforces_it(seed: Profile, tmp_path: Path) -> None:
    snapshot = hub_snapshot(tmp_path)
    plan = plans.build_plan(seed, draft_revision=CANDIDATE, target_snapshot=snapshot)
    folder = "models--local-inference-lab--GLM-5.3-Flash-NVFP4"
    mounted = f"{plans.TARGET_SNAPSHOT_ROOT}/{folder}"
    env = plan.env_dict
    assert env["MODEL"] == f"{mounted}/snapshots/{TARGET_REV}" and env["HF_HUB_OFFLINE"] == "1"
    assert plans.Mount(str(snapshot.parent.parent), mounted, read_only=True) in plan.mounts
    pin = plan.target_pin
    assert (pin.enforced, pin.method, pin.reason, pin.revision) == (True, plans.BY_SNAPSHOT, None, TARGET_REV)
    assert pin.snapshot is not None and pin.snapshot.refs == ("main",) and pin.snapshot.files == 2
    assert f"-v {snapshot.parent.parent}:{mounted}:ro" in plans.render_docker_run(plan)
    assert json.loads(json.dumps(plan.to_dict()))["target_revision_enforcement"]["snapshot"]["model_path"] == \
        env["MODEL"]
    # Every arm derived from the plan loads the same pinned target: the reference and the source draft's.
    for role, source in ((comp.REFERENCE, None), (comp.SOURCE, comp.SourceDraft(tmp_path, "org/src", "c" * 40))):
        arm = comp.companion_plan(plan, role, port=18000, source=source)
        assert arm.env_dict["MODEL"] == env["MODEL"] and arm.env_dict["HF_HUB_OFFLINE"] == "1"
        assert plans.Mount(str(snapshot.parent.parent), mounted, read_only=True) in arm.mounts


def test_a_snapshot_at_another_revision_is_refused(seed: Profile, tmp_path: Path) -> None:
    other = hub_snapshot(tmp_path, revision=OTHER_REV)
    with pytest.raises(UsageError) as info:
        plans.build_plan(seed, draft_revision=CANDIDATE, target_snapshot=other)
    assert str(info.value) == (
        f"--target-snapshot {other}: a snapshot of {TARGET_REPO} at revision {OTHER_REV}, not at "
        f"[target].revision {TARGET_REV}; the run would load another target than the one it attests")


def test_a_snapshot_of_another_repository_or_layout_is_refused(seed: Profile, tmp_path: Path) -> None:
    wrong_repo = hub_snapshot(tmp_path / "a", repo="someone/Other-Model")
    plain = tmp_path / "b" / TARGET_REV
    plain.mkdir(parents=True)
    (plain / "config.json").write_text("{}")
    for folder in (wrong_repo, plain):
        with pytest.raises(UsageError, match=r"not a hub-cache snapshot of local-inference-lab/GLM-5\.3-Flash-NVFP4 "
                           r"\(expected \.\.\./models--local-inference-lab--GLM-5\.3-Flash-NVFP4/snapshots/"):
            plans.build_plan(seed, target_snapshot=folder)
    with pytest.raises(UsageError, match="not a folder"):
        plans.build_plan(seed, target_snapshot=tmp_path / "nowhere")


def test_a_snapshot_whose_files_do_not_resolve_in_it_is_refused(seed: Profile, tmp_path: Path) -> None:
    dangling = hub_snapshot(tmp_path / "a")
    (dangling.parent.parent / "blobs" / "blob-config.json").unlink()
    with pytest.raises(UsageError, match=r"config\.json is a dangling link \(its blob is missing from "):
        plans.build_plan(seed, target_snapshot=dangling)
    outside = hub_snapshot(tmp_path / "b")
    stray = tmp_path / "stray.bin"
    stray.write_bytes(b"x")
    (outside / "extra.bin").symlink_to(stray)
    with pytest.raises(UsageError, match=r"extra\.bin resolves outside .*which is all the runtime is given"):
        plans.build_plan(seed, target_snapshot=outside)
    empty = tmp_path / "c" / "hub" / "models--local-inference-lab--GLM-5.3-Flash-NVFP4" / "snapshots" / TARGET_REV
    empty.mkdir(parents=True)
    with pytest.raises(UsageError, match="the snapshot holds no file"):
        plans.build_plan(seed, target_snapshot=empty)


def test_a_ref_naming_another_revision_is_not_recorded(seed: Profile, tmp_path: Path) -> None:
    snapshot = hub_snapshot(tmp_path, ref=None)
    refs = snapshot.parent.parent / "refs"
    refs.mkdir()
    (refs / "main").write_text(OTHER_REV)  # main moved on; the snapshot is still the pinned commit
    plan = plans.build_plan(seed, target_snapshot=snapshot)
    assert plan.target_pin.enforced and plan.target_pin.snapshot is not None
    assert plan.target_pin.snapshot.refs == ()


def test_a_profile_that_pins_no_target_revision_enforces_nothing(tmp_path: Path) -> None:
    text = (PROFILES_DIR / "glm53-flash-dflash2-mxfp8-tp4.toml").read_text(encoding="utf-8")
    unpinned = load_profile(write_variant(tmp_path, text, f'revision = "{TARGET_REV}"', 'revision = ""'))
    pin = plans.build_plan(unpinned).target_pin
    assert not pin.enforced and pin.reason == f"profile {unpinned.name} pins no target revision ([target].revision)"
    with pytest.raises(UsageError, match=r"--target-snapshot: profile .* pins no target revision"):
        plans.build_plan(unpinned, target_snapshot=hub_snapshot(tmp_path))


# -- the CPU profile: its launcher takes MODEL_REVISION ----------------------------------------


def test_the_cpu_profile_sets_its_launchers_revision_variable(cpu: Profile) -> None:
    assert cpu.target is not None and cpu.runtime.target_revision_env == "MODEL_REVISION"
    for plan in (plans.build_plan(cpu, draft_revision=CANDIDATE), plans.build_plan(cpu, serving=True)):
        assert plan.env_dict["MODEL_REVISION"] == cpu.target.revision
        pin = plan.target_pin
        assert (pin.enforced, pin.method, pin.variable, pin.revision) == (
            True, plans.BY_LAUNCHER_ENV, "MODEL_REVISION", cpu.target.revision)
    # Where the CPU image mounts the target is where the launcher will look for it.
    assert cpu.launch_env()["MODEL_REVISION"] == cpu.target.revision


def _launch(env: dict[str, str], hub: Path) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DFLASH", "MODEL", "HF_"))}
    return subprocess.run([sys.executable, str(vllm_cpu_image.CONTEXT_DIR / "launch.py")], capture_output=True,
                          text=True, timeout=60, env={**clean, **env, "HF_HUB_CACHE": str(hub)})


def test_the_cpu_launcher_loads_the_target_at_the_planned_revision_or_nothing(cpu: Profile, tmp_path: Path) -> None:
    """The plan's env, handed to the real CPU launcher: it takes MODEL at MODEL_REVISION, never another snapshot."""
    assert cpu.target is not None and cpu.target.repo is not None and cpu.target.revision is not None
    env = plans.build_plan(cpu, draft_revision=CANDIDATE).env_dict
    hub_snapshot(tmp_path, cpu.checkpoint.repo or "", CANDIDATE, ref=None)  # the draft, at its revision
    hub_snapshot(tmp_path, cpu.target.repo, OTHER_REV, ref=None)  # the target at another revision only
    hub = tmp_path / "hub"
    done = _launch(env, hub)
    assert done.returncode == 1
    assert f"MODEL {cpu.target.repo} at revision {cpu.target.revision} is not in" in done.stdout
    # With the pinned snapshot there as well, that one is what vLLM is given (its exec then fails: no venv here).
    (hub / ("models--" + cpu.target.repo.replace("/", "--")) / "snapshots" / cpu.target.revision).mkdir()
    (hub / ("models--" + cpu.target.repo.replace("/", "--")) / "snapshots" / cpu.target.revision /
     "config.json").write_text("{}")
    done = _launch(env, hub)
    line = next(x for x in done.stdout.splitlines() if x.startswith("qualify-vllm-cpu launcher: $ "))
    argv = line.split(" ")
    assert argv[argv.index("--model") + 1].endswith(f"snapshots/{cpu.target.revision}")


def test_a_declared_revision_variable_needs_a_pinned_target_the_env_agrees_with(tmp_path: Path) -> None:
    text = (PROFILES_DIR / "fixture-dflash-cpu.toml").read_text(encoding="utf-8")
    revision = load_profile("fixture-dflash-cpu").target.revision  # type: ignore[union-attr]
    unpinned = write_variant(tmp_path, text, f'repo = "qualify-fixtures/dflash2-tiny-target"\nrevision = "{revision}"',
                             'repo = "qualify-fixtures/dflash2-tiny-target"\nrevision = ""', name="a.toml")
    assert ("$.runtime.target_revision_env: names MODEL_REVISION, but $.target.revision pins no revision for it"
            in profile_error(unpinned))
    contradicting = write_variant(tmp_path, text, '\nMODEL_REVISION = ""', f'\nMODEL_REVISION = "{OTHER_REV}"',
                                  name="b.toml")
    assert (f"$.runtime.env.MODEL_REVISION: '{OTHER_REV}' contradicts $.target.revision ('{revision}')"
            in profile_error(contradicting))
    other_var = write_variant(tmp_path, text, 'target_revision_env = "MODEL_REVISION"',
                              'target_revision_env = "DFLASH_MODEL_REVISION"', name="c.toml")
    assert "target_revision_env" in profile_error(other_var)


def test_a_run_given_a_snapshot_at_another_revision_is_refused_before_any_level(tmp_path: Path,
                                                                                capsys: pytest.CaptureFixture[str]):
    from qualify.cli import main
    from tests.helpers import FIXTURE, TRACEBACK

    other = hub_snapshot(tmp_path, revision=OTHER_REV)
    reports = tmp_path / "reports"
    code = main(["check", str(FIXTURE / "mxfp8"), "--profile", "glm53-flash-dflash2-mxfp8-tp4", "--levels",
                 "structure", "--report-dir", str(reports), "--target-snapshot", str(other)])
    out, err = capsys.readouterr()
    assert code == 2 and TRACEBACK not in out + err
    assert f"--target-snapshot {other}: a snapshot of {TARGET_REPO} at revision {OTHER_REV}, not at" in err
    assert not reports.exists()  # nothing ran, nothing was written
