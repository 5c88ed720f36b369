"""The launcher preflight without an engine: the comparison of a recorded vLLM command with an arm's intent (the
seed's release arms, as the community launcher would have to launch them), and the recording stand-in run for
real as a ``vllm`` package's ``__init__.py`` (this venv's Python and huggingface_hub, a hub cache made here).

The containers themselves are exercised in tests/run/test_preflight_arms.py, on the CPU image."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from qualify.errors import ExitCode, LaunchMismatch, exit_code_for
from qualify.profile import Profile
from qualify.runtime import companions as comp
from qualify.runtime import plan as plans
from qualify.runtime import preflight, vllm_cpu_image
from qualify.runtime.preflight import ArmPreflight, PreflightReport, assess, compare, parse_record
from tests.docker_support import CANDIDATE
from tests.runtime.test_plan_target import TARGET_REPO, hub_snapshot

DRAFT_REPO = "local-inference-lab/GLM-5.3-Flash-DFlash2-MXFP8"
PUBLISHED = {"CUDAGRAPH_MODE": "FULL"}


@pytest.fixture
def arms(seed: Profile, tmp_path: Path) -> dict[str, plans.LaunchPlan]:
    """The seed's checkpoint and reference arms with the target pinned by snapshot (the release run's launch)."""
    checkpoint = tmp_path / "draft"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    plan = plans.build_plan(seed, draft_revision=CANDIDATE, checkpoint_dir=checkpoint,
                            target_snapshot=hub_snapshot(tmp_path))
    return {comp.CHECKPOINT: plan,
            comp.REFERENCE: comp.companion_plan(plan, comp.REFERENCE, port=plan.port, published=PUBLISHED),
            comp.CHECKPOINT_PUBLISHED: comp.companion_plan(plan, comp.CHECKPOINT_PUBLISHED, port=plan.port,
                                                           published=PUBLISHED)}


def community_record(plan: plans.LaunchPlan) -> dict[str, Any]:
    """What a launcher that does what the seed's card means would hand vLLM for ``plan`` (``vllm serve``)."""
    env = plan.env_dict
    model = plan.target_pin.snapshot.model_path if plan.target_pin.snapshot else env["MODEL"]
    args = ["serve", model, "--served-model-name", env["SERVED_MODEL_NAME"], "--port", env["PORT"],
            "-tp", env["TP"], "-dcp", env["DCP"], "--max-num-seqs", env["MAX_NUM_SEQS"],
            "--compilation-config", json.dumps({"cudagraph_mode": env["CUDAGRAPH_MODE"]}),
            "--attention-backend", env["ATTENTION_BACKEND"], "--moe-backend", env["MOE_BACKEND"],
            "--linear-backend", env["LINEAR_BACKEND"]]
    record: dict[str, Any] = {"entry": "vllm", "args": args, "env": {"HF_HUB_OFFLINE": "1"},
                              "target": {"path": model}, "vllm_version": "0.32.0"}
    if env["SPECULATOR"] != "none":
        spec = {"method": env["SPECULATOR"], "model": env["DFLASH_MODEL"], "revision": env["DFLASH_MODEL_REVISION"],
                "num_speculative_tokens": int(env["NUM_SPECULATIVE_TOKENS"]),
                "kv_cache_dtype": env["DFLASH_KV_CACHE_DTYPE"], "attention_backend": env["DFLASH_ATTENTION_BACKEND"]}
        args += ["--speculative-config", json.dumps(spec)]
        record["draft"] = {"path": comp.hub_snapshot(env["DFLASH_MODEL"], env["DFLASH_MODEL_REVISION"])}
    return record


def findings(arm: str, plan: plans.LaunchPlan, record: dict[str, Any]) -> list[str]:
    return PreflightReport("image", "sha256:x", ("/v/vllm/__init__.py",), (assess(arm, plan, record),)).findings()


def test_a_launcher_that_does_what_each_arm_means_passes(arms: dict[str, plans.LaunchPlan]) -> None:
    for arm, plan in arms.items():
        result = assess(arm, plan, community_record(plan))
        assert result.ok, result.mismatches
        compared = {s.variable for s in result.settings}
        assert {"MODEL", "HF_HUB_OFFLINE", "SERVED_MODEL_NAME", "PORT", "TP", "DCP", "CUDAGRAPH_MODE",
                "ATTENTION_BACKEND", "MOE_BACKEND", "LINEAR_BACKEND", "SPECULATOR"} <= compared
    assert {s.variable for s in assess("checkpoint", arms["checkpoint"], community_record(arms["checkpoint"])).settings
            } >= {"NUM_SPECULATIVE_TOKENS", "DFLASH_MODEL", "DFLASH_MODEL_REVISION", "DFLASH_KV_CACHE_DTYPE",
                  "DFLASH_ATTENTION_BACKEND"}


def _args(record: dict[str, Any], old: str, new: str) -> None:
    i = record["args"].index(old)
    record["args"][i + 1] = new


def _spec(record: dict[str, Any], **change: Any) -> None:
    i = record["args"].index("--speculative-config")
    spec = {k: v for k, v in {**json.loads(record["args"][i + 1]), **change}.items() if v is not None}
    record["args"][i + 1] = json.dumps(spec)


def _drop_revision(record: dict[str, Any]) -> None:
    _spec(record, revision=None)
    record["draft"] = {"error": "LocalEntryNotFoundError: Cannot find an appropriate cached snapshot folder"}


def _fetch_model(record: dict[str, Any]) -> None:
    record["args"][1] = TARGET_REPO
    record["target"] = {"error": "LocalEntryNotFoundError: ..."}
    record["env"] = {}


def _speculate(record: dict[str, Any]) -> None:
    record["args"] += ["--speculative-config", json.dumps({"method": "dflash", "model": DRAFT_REPO,
                                                            "num_speculative_tokens": 7})]


def _rename_port(record: dict[str, Any]) -> None:
    i = record["args"].index("--port")
    del record["args"][i:i + 2]


CASES: list[tuple[str, str, Callable[[dict[str, Any]], None], str]] = [
    ("ignores SPECULATOR=none", "reference", _speculate,
     "arm reference: SPECULATOR: the arm means none: no speculative config, vLLM was given {"),
    ("downloads MODEL", "checkpoint", _fetch_model,
     f"arm checkpoint: MODEL: the arm means /opt/qualify/target/models--local-inference-lab--GLM-5.3-Flash-NVFP4/"
     f"snapshots/520de24eabf507659eaef7c70f14fd584527facc, vLLM was given {TARGET_REPO}"),
    ("downloads MODEL", "checkpoint", _fetch_model,
     "arm checkpoint: HF_HUB_OFFLINE: the arm means 1 (nothing is fetched), vLLM was given (not given"),
    ("drops the revision", "checkpoint", _drop_revision,
     f"arm checkpoint: DFLASH_MODEL_REVISION: the arm means {CANDIDATE}, vLLM was given (none: vLLM resolves the "
     "hub's main branch)"),
    ("drops the revision", "checkpoint", _drop_revision,
     "arm checkpoint: DFLASH_MODEL: the arm means /root/.cache/huggingface/hub/models--local-inference-lab--GLM-5.3-"
     f"Flash-DFlash2-MXFP8/snapshots/{CANDIDATE}, vLLM was given not found offline: LocalEntryNotFoundError"),
    ("renames PORT", "checkpoint", _rename_port, "arm checkpoint: PORT: the arm means 8000, vLLM was given 8000"),
    ("TP", "checkpoint", lambda r: _args(r, "-tp", "2"), "arm checkpoint: TP: the arm means 4, vLLM was given 2"),
    ("DCP", "reference", lambda r: _args(r, "-dcp", "2"), "arm reference: DCP: the arm means 1, vLLM was given 2"),
    ("graphs", "checkpoint", lambda r: _args(r, "--compilation-config", '{"cudagraph_mode": "FULL"}'),
     "arm checkpoint: CUDAGRAPH_MODE: the arm means NONE, vLLM was given FULL"),
    ("published graphs", "checkpoint-published", lambda r: r["args"].append("--enforce-eager"),
     "arm checkpoint-published: CUDAGRAPH_MODE: the arm means FULL, vLLM was given NONE"),
    ("MoE backend", "checkpoint", lambda r: _args(r, "--moe-backend", "triton"),
     "arm checkpoint: MOE_BACKEND: the arm means b12x, vLLM was given triton"),
    ("attention backend", "reference", lambda r: _args(r, "--attention-backend", "FLASHINFER"),
     "arm reference: ATTENTION_BACKEND: the arm means B12X, vLLM was given FLASHINFER"),
    ("draft KV cache", "checkpoint", lambda r: _spec(r, kv_cache_dtype="fp8"),
     "arm checkpoint: DFLASH_KV_CACHE_DTYPE: the arm means auto, vLLM was given fp8"),
    ("draft attention", "checkpoint", lambda r: _spec(r, attention_backend=None),
     "arm checkpoint: DFLASH_ATTENTION_BACKEND: the arm means FLASH_ATTN, vLLM was given (not given"),
    ("proposal length", "checkpoint", lambda r: _spec(r, num_speculative_tokens=5),
     "arm checkpoint: NUM_SPECULATIVE_TOKENS: the arm means 7, vLLM was given 5"),
    ("method", "checkpoint", lambda r: _spec(r, method="eagle3"),
     "arm checkpoint: SPECULATOR: the arm means dflash, vLLM was given eagle3"),
    ("served name", "checkpoint", lambda r: _args(r, "--served-model-name", "glm"),
     "arm checkpoint: SERVED_MODEL_NAME: the arm means GLM-5.3-Flash-NVFP4, vLLM was given glm"),
    ("entry", "checkpoint", lambda r: r.update(entry="unknown: /launch.py"),
     "arm checkpoint: (vLLM entry): the arm means vLLM's own command line"),
]


@pytest.mark.parametrize(("what", "arm", "breaks", "finding"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_each_broken_launch_is_named_with_the_arm_the_variable_and_both_values(
        arms: dict[str, plans.LaunchPlan], what: str, arm: str, breaks: Callable[[dict[str, Any]], None],
        finding: str) -> None:
    plan = arms[arm]
    if what == "renames PORT":  # the plan's port is another one than vLLM's default
        plan = plans.on_port(plan, 18999)
        finding = finding.replace("means 8000", "means 18999")
    record = community_record(plan)
    breaks(record)
    found = findings(arm, plan, record)
    assert any(f.startswith(finding) for f in found), found


def test_a_target_that_is_not_mounted_is_named(seed: Profile) -> None:
    plan = plans.build_plan(seed, draft_revision=CANDIDATE)
    record = community_record(plan)
    found = findings("checkpoint", plan, record)
    assert any(f.startswith("arm checkpoint: MODEL: the arm means a mounted local folder (none is mounted: vLLM "
                            f"would fetch {TARGET_REPO})") for f in found), found


def test_findings_are_a_harness_error_exit_3_never_a_checkpoint_failure(arms: dict[str, plans.LaunchPlan]) -> None:
    record = community_record(arms["checkpoint"])
    _args(record, "-tp", "2")
    report = PreflightReport("image", "sha256:x", (), (assess("checkpoint", arms["checkpoint"], record),))
    with pytest.raises(LaunchMismatch, match="arm checkpoint: TP: the arm means 4, vLLM was given 2") as caught:
        preflight.raise_on_findings(report)
    assert exit_code_for(caught.value) is ExitCode.HARNESS
    clean = PreflightReport("image", "sha256:x", (), (assess("checkpoint", arms["checkpoint"],
                                                             community_record(arms["checkpoint"])),))
    preflight.raise_on_findings(clean)
    assert clean.ok and not PreflightReport("image", None, (), ()).ok  # no arm launched is no pass


def test_a_launch_that_never_reached_vllm_is_a_finding() -> None:
    arm = ArmPreflight("source", "c", error="the launcher exited with code 1 before it started vLLM")
    assert PreflightReport("i", "x", (), (arm,)).findings() == [
        "arm source: the launcher exited with code 1 before it started vLLM"]


def test_declared_unapplied_variables_are_reported_not_compared(arms: dict[str, plans.LaunchPlan]) -> None:
    record = community_record(arms["checkpoint"])
    _args(record, "-tp", "1")
    settings = {s.variable: s for s in compare(arms["checkpoint"], record, not_applied=("TP",))}
    assert settings["TP"].ok and settings["TP"].note.startswith("not applied")


def test_the_cpu_images_unapplied_variables_are_its_launchers() -> None:
    tree = ast.parse((vllm_cpu_image.CONTEXT_DIR / "launch.py").read_text(encoding="utf-8"))
    declared = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "NOT_ON_CPU" for t in n.targets))
    assert tuple(declared) == vllm_cpu_image.NOT_APPLIED


def test_parse_record_reads_the_last_marker_line() -> None:
    log = f"launcher: hi\n{preflight.MARKER}{{\"a\": 1}}\nnoise\n{preflight.MARKER}{{\"a\": 2}}\n"
    assert parse_record(log) == {"a": 2}
    assert parse_record("nothing") is None
    assert "not JSON" in (parse_record(f"{preflight.MARKER}{{broken") or {})["error"]


# -- the stand-in, run for real as vllm/__init__.py

def _standin_package(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "site"
    pkg = site / "vllm"
    (pkg / "entrypoints" / "openai").mkdir(parents=True)
    shutil.copy(preflight.STANDIN, pkg / "__init__.py")
    (pkg / "version.py").write_text('__version__ = "0.32.0"\n')
    for folder in (pkg / "entrypoints", pkg / "entrypoints" / "openai"):
        (folder / "__init__.py").write_text("")
    # Reaching vLLM's server module means the stand-in did not stop the process.
    (pkg / "entrypoints" / "openai" / "api_server.py").write_text('print("reached vLLM server")\n')
    reader = tmp_path / "reader"
    reader.mkdir()
    shutil.copy(preflight.ARGS_READER, reader / "vllm_args.py")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PYTHON"))}
    return {**clean, "PYTHONPATH": f"{site}{os.pathsep}{reader}", "HF_HUB_CACHE": str(tmp_path / "hub"),
            "HF_HUB_OFFLINE": "1", "HF_TOKEN": "hf_QualifyTestTokenDoNotLeak0123456789ab"}


def test_the_standin_records_the_command_and_resolves_the_draft_offline_before_vllm_runs(tmp_path: Path) -> None:
    env = _standin_package(tmp_path)
    draft = hub_snapshot(tmp_path, DRAFT_REPO, CANDIDATE, ref=None)  # a bare snapshots/<rev>, no refs/
    target = tmp_path / "target"
    target.mkdir()
    spec = {"method": "dflash", "model": DRAFT_REPO, "revision": CANDIDATE, "num_speculative_tokens": 7}
    done = subprocess.run([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(target),
                           "--speculative-config", json.dumps(spec)], capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "reached vLLM" not in done.stdout
    record = parse_record(done.stdout)
    assert record is not None
    assert record["entry"] == "vllm.entrypoints.openai.api_server" and record["vllm_version"] == "0.32.0"
    assert record["target"]["path"] == str(target)
    assert Path(record["draft"]["path"]) == draft
    assert record["env"]["HF_HUB_OFFLINE"] == "1" and record["env"]["HF_TOKEN"] == "<set>"
    assert "hf_QualifyTestToken" not in done.stdout


def test_the_standin_finds_no_draft_without_its_revision_and_sees_the_console_script(tmp_path: Path) -> None:
    env = _standin_package(tmp_path)
    hub_snapshot(tmp_path, DRAFT_REPO, CANDIDATE, ref=None)
    spec = json.dumps({"method": "dflash", "model": DRAFT_REPO, "num_speculative_tokens": 7})
    code = f"import sys; sys.argv = ['/usr/local/bin/vllm', 'serve', 'org/t', '-sc', {spec!r}]; import vllm"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                          check=False)
    record = parse_record(done.stdout)
    assert record is not None, done.stderr
    assert record["entry"] == "vllm" and record["args"][:2] == ["serve", "org/t"]
    assert "path" not in record["draft"] and "LocalEntryNotFound" in record["draft"]["error"]
    assert "path" not in record["target"]


def test_the_standin_and_the_harness_agree_on_the_marker() -> None:
    text = preflight.STANDIN.read_text(encoding="utf-8")
    assert f'MARKER = "{preflight.MARKER}"' in text and f'HERE = "{preflight.STANDIN_DIR}"' in text


def test_an_arm_that_fetches_a_model_is_said_so(seed: Profile, arms: dict[str, plans.LaunchPlan],
                                                tmp_path: Path) -> None:
    assert all(preflight.unmounted(plan) is None for plan in arms.values())
    bare = plans.build_plan(seed, draft_revision=CANDIDATE)
    assert preflight.unmounted(bare) == f"the target {TARGET_REPO} is not mounted (no --target-snapshot)"
    fetched = plans.build_plan(seed, draft_revision=CANDIDATE, target_snapshot=hub_snapshot(tmp_path / "t"))
    assert preflight.unmounted(fetched) == (f"the draft {DRAFT_REPO} at {CANDIDATE} is not mounted (the launcher "
                                            "fetches it)")
    cached = plans.build_plan(seed, draft_revision=CANDIDATE, target_snapshot=hub_snapshot(tmp_path / "c"),
                              hf_cache=tmp_path / "c" / "hub")
    assert preflight.unmounted(cached) is None  # a whole hub cache mounted holds it
    reference = comp.companion_plan(fetched, comp.REFERENCE, port=fetched.port, published=PUBLISHED)
    assert preflight.unmounted(reference) is None


def test_a_run_leaves_out_the_arms_that_fetch_and_says_why(seed: Profile) -> None:
    from qualify.runtime.session import RuntimeSession

    def no_engine() -> Any:
        raise AssertionError("nothing to check: the engine is not asked")

    session = RuntimeSession(seed, run_id="r-preflight", draft_revision=CANDIDATE, companions={comp.REFERENCE: None},
                             client_factory=no_engine, launcher_preflight=True)
    session._check_launcher()
    assert session.preflight_record == {"ok": None, "arms": [], "skipped": {
        comp.CHECKPOINT: f"the target {TARGET_REPO} is not mounted (no --target-snapshot)",
        comp.REFERENCE: f"the target {TARGET_REPO} is not mounted (no --target-snapshot)"}}
