"""``qualify preflight`` on the real CPU image: every arm of the CPU rehearsal passes, and launchers broken the ways a
community launcher could be (built here as images FROM the CPU image, its launch.py edited) are each caught by name.

Each container stops in the recording stand-in before vLLM imports torch: a start costs about a second and a half
on 2 cores; the broken launchers launch only the arm that shows their fault (the image's vLLM is located once per
image, one more start)."""

from __future__ import annotations

import copy
import dataclasses
import io
import tarfile
import uuid
from collections.abc import Iterator
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import pytest

from qualify import cli
from qualify.errors import ExitCode, LaunchMismatch, UsageError, exit_code_for
from qualify.profile import Profile, load_profile
from qualify.run import preflight_arms
from qualify.run.preflight_arms import PreflightOptions, run_arms
from qualify.runtime import companions as comp
from qualify.runtime import preflight, vllm_cpu_image
from tests.docker_support import docker_client_fixture, standin_fixture  # noqa: F401  (fixtures)

PROFILE = "fixture-dflash2-cpu"
LAUNCHER = (vllm_cpu_image.CONTEXT_DIR / "launch.py").read_text(encoding="utf-8")
TARGET_REV = "e6b7f88f172c6ab930f512d3a393cc2c273fc43c"
TARGET_AT = f"/root/.cache/huggingface/hub/models--qualify-fixtures--dflash2-tiny-target/snapshots/{TARGET_REV}"


def test_the_arms_are_those_the_runs_jobs_name_checkpoint_first() -> None:
    assert run_arms(load_profile(PROFILE)) == list(comp.ARMS)
    # No speedup measured as published in the stand-in fixture: no published arms.
    assert run_arms(load_profile("fixture")) == [comp.CHECKPOINT, comp.SOURCE, comp.REFERENCE]


def test_an_arm_the_run_does_not_serve_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--arm checkpoint-published: profile fixture's run serves checkpoint, "
                                         "source, reference"):
        preflight_arms.arm_plans(PreflightOptions(load_profile("fixture"), arms=("checkpoint-published",)),
                                 image_digest=None)
    with pytest.raises(UsageError, match=r"--checkpoint .*nowhere: not a folder"):
        preflight_arms.arm_plans(PreflightOptions(load_profile("fixture"), checkpoint=tmp_path / "nowhere"),
                                 image_digest=None)


# -- on the CPU image

@pytest.fixture(scope="module")
def cpu_image(docker_client: Any) -> str:
    return vllm_cpu_image.ensure_image(docker_client).image_id


@pytest.fixture
def folders(tmp_path: Path) -> dict[str, Path]:
    """A draft, a source and a target folder: nothing is loaded, so a config.json each is all a launch needs."""
    out = {}
    for name in ("draft", "source", "target"):
        out[name] = tmp_path / name
        out[name].mkdir()
        (out[name] / "config.json").write_text("{}")
    return out


def cpu_profile(folders: dict[str, Path], image: str | None = None) -> Profile:
    """The CPU rehearsal's profile with the folders made here (its specs are read from ``data``)."""
    profile = load_profile(PROFILE)
    data = copy.deepcopy(profile.data)
    data["local_server"].update(target=str(folders["target"]), source_draft=str(folders["source"]))
    if image:
        data["runtime"]["image"] = image
    return dataclasses.replace(profile, data=data)


@pytest.mark.docker
@pytest.mark.slow
def test_every_arm_of_the_cpu_rehearsal_passes_on_the_shipped_image(cpu_image: str, folders: dict[str, Path]) -> None:
    report = preflight_arms.run(PreflightOptions(cpu_profile(folders), checkpoint=folders["draft"],
                                                 source=folders["source"]))
    assert report.ok, report.findings()
    preflight.raise_on_findings(report)
    record = report.to_dict()
    assert [a["arm"] for a in record["arms"]] == list(comp.ARMS) and record["image_id"] == cpu_image
    checkpoint = record["arms"][0]
    assert checkpoint["vllm_version"] == "0.32.0" and checkpoint["entry"] == "vllm.entrypoints.openai.api_server"
    assert checkpoint["draft_path"].startswith("/root/.cache/huggingface/hub/models--qualify-fixtures--dflash2-cpu-"
                                               "tiny-mxfp8/snapshots/")
    assert checkpoint["target_path"] == TARGET_AT
    assert record["arms"][2]["draft_path"] is None  # the reference: no speculative config at all
    assert any(line.startswith("arm checkpoint-published: ok") for line in preflight.render(report))


@pytest.mark.docker
def test_an_image_without_vllm_is_exit_3_from_the_command(standin: str) -> None:
    err = io.StringIO()
    with redirect_stderr(err):
        code = cli.main(["preflight", "--profile", "fixture", "--arm", "checkpoint"])
    assert code == ExitCode.HARNESS, err.getvalue()
    assert "harness error: no vLLM package (a vllm/__init__.py beside vllm/entrypoints) in qualify-standin" in (
        err.getvalue())


#: name -> (the launcher's text replaced, its replacement, the arm that shows it, the finding expected).
BROKEN: dict[str, tuple[str, str, str, str]] = {
    "ignores-speculator-none": (
        '    speculating = env.get("SPECULATOR") != NO_SPECULATOR\n',
        '    if env.get("SPECULATOR") == NO_SPECULATOR:  # a reference server speculates with the target as draft\n'
        '        env = {**env, "SPECULATOR": "draft_model", "NUM_SPECULATIVE_TOKENS": "3",\n'
        '               "DFLASH_MODEL": env["MODEL"], "DFLASH_MODEL_REVISION": env.get("MODEL_REVISION", "")}\n'
        '    speculating = env.get("SPECULATOR") != NO_SPECULATOR\n',
        comp.REFERENCE, "arm reference: SPECULATOR: the arm means none: no speculative config, vLLM was given {"),
    "downloads-model": (
        '    model = resolve(env["MODEL"], env.get("MODEL_REVISION", ""), "MODEL")\n',
        '    model = env["MODEL"]  # the repository id, for vLLM to fetch\n',
        comp.CHECKPOINT, f"arm checkpoint: MODEL: the arm means {TARGET_AT}, vLLM was given "
        "qualify-fixtures/dflash2-tiny-target"),
    "drops-the-revision": (
        '        draft = resolve(env["DFLASH_MODEL"], env.get("DFLASH_MODEL_REVISION", ""), "DFLASH_MODEL")\n',
        '        draft = env["DFLASH_MODEL"]  # no revision: vLLM resolves the main branch\n',
        comp.CHECKPOINT, "arm checkpoint: DFLASH_MODEL_REVISION: the arm means {revision}, vLLM was given (none: "
        "vLLM resolves the hub's main branch)"),
    "renames-port": (
        '"--port", env["PORT"]', '"--port", env.get("VLLM_PORT", "8000")',
        comp.CHECKPOINT, "arm checkpoint: PORT: the arm means {port}, vLLM was given 8000"),
}


@pytest.fixture
def broken_image(request: pytest.FixtureRequest, docker_client: Any, cpu_image: str,
                 tmp_path: Path) -> Iterator[str]:
    old, new = BROKEN[request.param][:2]
    assert LAUNCHER.count(old) == 1, f"launch.py no longer holds {old!r}: update the {request.param} variant"
    text = LAUNCHER.replace(old, new)
    if request.param == "downloads-model":  # and lets the hub client go online
        assert LAUNCHER.count('"HF_HUB_OFFLINE": "1", ') == 1
        text = text.replace('"HF_HUB_OFFLINE": "1", ', "")
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (("Dockerfile", f"FROM {cpu_image}\nCOPY launch.py /opt/qualify-vllm-cpu/launch.py\n"),
                           ("launch.py", text)):
            info = tarfile.TarInfo(name)
            info.size = len(data.encode())
            tar.addfile(info, io.BytesIO(data.encode()))
    context.seek(0)
    tag = f"qualify-preflight-broken-{request.param}:{uuid.uuid4().hex[:8]}"
    image, _ = docker_client.images.build(fileobj=context, custom_context=True, tag=tag, pull=False, rm=True,
                                          forcerm=True)
    try:
        yield tag
    finally:
        docker_client.images.remove(image.id, force=True)


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("broken_image", sorted(BROKEN), indirect=True)
def test_each_broken_launcher_is_caught_by_name(docker_client: Any, broken_image: str,
                                                folders: dict[str, Path]) -> None:
    name = broken_image.split(":")[0].removeprefix("qualify-preflight-broken-")
    arm, finding = BROKEN[name][2:]
    image_id = docker_client.images.get(broken_image).id
    opts = PreflightOptions(cpu_profile(folders, broken_image), checkpoint=folders["draft"], source=folders["source"],
                            image_digest=image_id, arms=(arm,), timeout_s=120)
    report = preflight_arms.run(opts)
    plan = preflight_arms.arm_plans(dataclasses.replace(opts, arms=(comp.CHECKPOINT,)), image_digest=image_id)
    port = next((s.expected for s in report.arms[0].settings if s.variable == "PORT"), None)
    finding = finding.replace("{revision}", str(plan[comp.CHECKPOINT].draft_revision)).replace("{port}", str(port))
    assert not report.ok and [a.arm for a in report.arms] == [arm]
    assert any(f.startswith(finding) for f in report.findings()), report.findings()
    with pytest.raises(LaunchMismatch) as caught:
        preflight.raise_on_findings(report)
    assert exit_code_for(caught.value) is ExitCode.HARNESS and finding.split(", vLLM")[0] in str(caught.value)


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("broken_image", ["renames-port"], indirect=True)
def test_a_runs_first_container_is_not_started_on_a_launcher_that_does_not_do_what_the_arm_means(
        docker_client: Any, broken_image: str, folders: dict[str, Path]) -> None:
    from qualify.checkpoint.checksums import folder_revision
    from qualify.runtime.session import RuntimeSession
    from qualify.util.identifiers import new_run_id

    session = RuntimeSession(cpu_profile(folders, broken_image), run_id=new_run_id("preflight-wired"),
                             draft_revision=folder_revision(folders["draft"]), checkpoint_dir=folders["draft"],
                             image_digest=docker_client.images.get(broken_image).id, launcher_preflight=True)
    try:
        with pytest.raises(LaunchMismatch, match=r"arm checkpoint: PORT: the arm means \d+, vLLM was given 8000"):
            session.start()
        with pytest.raises(LaunchMismatch):  # asked again: the same fault, nothing launched a second time
            session.start()
        assert session.runtime is None  # the checkpoint's own container never started
        record = session.summary()["launcher_preflight"]
        assert record["ok"] is False and [a["arm"] for a in record["arms"]] == [comp.CHECKPOINT]
    finally:
        assert session.close() is None
