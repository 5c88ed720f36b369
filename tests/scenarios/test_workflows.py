"""The CI workflows do what docs/ci.md says: qualify, publish the evidence, gate; and run the tests."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest
import yaml

from qualify.profile import load_profile
from qualify.report.model import read_json
from tests.helpers import FIXTURE, REPO, run_qualify

WORKFLOWS = REPO / ".github" / "workflows"


def load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    # YAML 1.1 reads the key `on` as the boolean true.
    data["on"] = data.pop(True, data.get("on"))
    return data


@pytest.fixture(scope="module")
def gpu() -> dict[str, Any]:
    return load("gpu-qualify.yml")


@pytest.fixture(scope="module")
def ci() -> dict[str, Any]:
    return load("ci.yml")


def steps(workflow: dict[str, Any], job: str | None = None) -> list[dict[str, Any]]:
    """The steps of ``job``, else of the workflow's first job (the GPU workflow's qualify job)."""
    jobs = workflow["jobs"]
    return jobs[job or next(iter(jobs))]["steps"]


def step_running(workflow: dict[str, Any], pattern: str, job: str | None = None) -> tuple[int, dict[str, Any]]:
    found = [(i, s) for i, s in enumerate(steps(workflow, job)) if re.search(pattern, s.get("run", ""))]
    assert len(found) == 1, f"expected one step running {pattern!r}, found {len(found)}"
    return found[0]


def step_using(workflow: dict[str, Any], action: str, job: str | None = None) -> tuple[int, dict[str, Any]]:
    found = [(i, s) for i, s in enumerate(steps(workflow, job)) if s.get("uses", "").split("@")[0] == action]
    assert len(found) == 1, f"expected one step using {action}, found {len(found)}"
    return found[0]


# -- the GPU qualification --------------------------------------------------------------


def test_gpu_workflow_is_manual_only_with_the_inputs_make_qualify_needs(gpu):
    # A self-hosted GPU runner must never run a pull request's code.
    assert set(gpu["on"]) == {"workflow_dispatch"}
    inputs = gpu["on"]["workflow_dispatch"]["inputs"]
    assert inputs["checkpoint"]["required"] and inputs["source"]["required"]
    assert inputs["profile"]["default"] == "glm53-flash-dflash2-mxfp8-tp4"
    load_profile(inputs["profile"]["default"])  # a shipped profile, so the gate can take its required levels


def test_gpu_workflow_runs_on_a_four_gpu_self_hosted_runner_one_at_a_time(gpu):
    assert list(gpu["jobs"]) == ["qualify", "release"]
    for job in gpu["jobs"].values():  # the release job reads the same checkpoint directory
        assert {"self-hosted", "linux", "gpu-4x"} <= set(job["runs-on"])
    assert gpu["concurrency"]["cancel-in-progress"] is False
    assert gpu["permissions"]["contents"] == "read"


def test_gpu_workflow_runs_make_qualify_with_profile_checkpoint_and_source(gpu):
    _, step = step_running(gpu, r"\bmake qualify\b")
    run = step["run"]
    for var in ("PROFILE", "CHECKPOINT", "SOURCE", "REPORTS"):
        assert f'{var}="${var}"' in run, var
    env = gpu["jobs"]["qualify"]["env"]
    assert env["PROFILE"] == "${{ inputs.profile }}" and env["CHECKPOINT"] == "${{ inputs.checkpoint }}"
    assert env["SOURCE"] == "${{ inputs.source }}"
    # JUnit through the environment variable qualify check reads (make qualify passes no flag).
    from qualify.commands.check import JUNIT_ENV

    assert JUNIT_ENV in env and env[JUNIT_ENV].startswith(env["REPORTS"])
    # Not qualified (exit 1) must still publish its evidence: the step records the code instead of failing.
    assert "set +e" in run and "GITHUB_OUTPUT" in run


def test_gpu_workflow_publishes_the_run_folder_summary_and_junit_even_when_not_qualified(gpu):
    i_upload, upload = step_using(gpu, "actions/upload-artifact")
    assert "always()" in upload["if"]
    assert upload["with"]["path"] == "${{ env.REPORTS }}" and upload["with"]["if-no-files-found"] == "error"
    i_summary, summary = step_running(gpu, r"GITHUB_STEP_SUMMARY")
    assert "report.md" in summary["run"] and "always()" in summary["if"]
    i_junit, junit = step_using(gpu, "mikepenz/action-junit-report")
    assert "always()" in junit["if"] and junit["with"]["report_paths"] == "${{ env.QUALIFY_JUNIT_XML }}"
    assert gpu["permissions"]["checks"] == "write"
    i_gate, _ = step_running(gpu, r"qualify gate")
    assert max(i_upload, i_summary, i_junit) < i_gate


def test_gpu_workflow_gates_last_on_the_checkpoint_it_qualified(gpu):
    i_gate, gate = step_running(gpu, r"qualify gate")
    assert i_gate == len(steps(gpu)) - 1
    assert "if" not in gate  # runs only when everything before it succeeded
    # The report beside its attestation, verified with the public key: the report must be the one signed.
    assert re.search(r'qualify gate "\$RUN_DIR/report.json" --verify-key "\$RUNNER_TEMP/qualify-verify-key.pub.pem"'
                     r' \\\s+--checkpoint "\$CHECKPOINT" --revision "\$DRAFT_REVISION" --profile "\$PROFILE"',
                     gate["run"])
    assert "--allow-unsigned" not in gate["run"]
    assert "QUALIFY_RC" in gate["run"]  # a harness that exited non-zero fails the job too


def test_gpu_workflow_signs_with_a_key_from_the_secret_store(gpu):
    i_sign, sign = step_running(gpu, r"\bmake qualify\b")
    # The secret reaches the script by env only, into a file only the job's user can read, named by
    # QUALIFY_SIGN_KEY (the variable qualify run reads), and removed whatever happens.
    assert sign["env"]["SIGN_KEY_PEM"] == "${{ secrets.QUALIFY_SIGN_KEY }}"
    run = sign["run"]
    assert "umask 077" in run and "trap 'rm -f \"$key\"' EXIT" in run and 'rm -f "$key"' in run
    from qualify.release.attestation import SIGN_KEY_ENV

    assert f'{SIGN_KEY_ENV}="$key" make qualify' in run and "--sign-model" in run
    i_key, key = step_running(gpu, r"qualify-verify-key.pub.pem\"$", "qualify")
    assert key["env"]["VERIFY_KEY_PEM"] == "${{ vars.QUALIFY_VERIFY_KEY }}" and "always()" in key["if"]
    i_gate, _ = step_running(gpu, r"qualify gate")
    assert i_sign < i_key < i_gate


def test_the_release_job_verifies_the_attestation_before_it_publishes(gpu):
    job = gpu["jobs"]["release"]
    assert job["needs"] == "qualify" and job["environment"] == "release"
    i_fetch, fetch = step_using(gpu, "actions/download-artifact", "release")
    _, upload = step_using(gpu, "actions/upload-artifact", "qualify")
    assert fetch["with"]["name"] == upload["with"]["name"]
    i_verify, verify = step_running(gpu, r"qualify gate", "release")
    assert verify["env"]["VERIFY_KEY_PEM"] == "${{ vars.QUALIFY_VERIFY_KEY }}"
    assert re.search(r'qualify gate --attestation "\$\{found\[0\]\}" --verify-key "\$key" --checkpoint '
                     r'"\$CHECKPOINT" \\\s+--revision "\$DRAFT_REVISION" --profile "\$PROFILE"', verify["run"])
    # The release is pinned to the profile the qualify job ran: the one the workflow was given.
    assert job["env"]["PROFILE"] == gpu["jobs"]["qualify"]["env"]["PROFILE"] == "${{ inputs.profile }}"
    assert "--allow-unsigned" not in verify["run"]
    i_publish, publish = step_running(gpu, r"hf upload", "release")
    assert i_fetch < i_verify < i_publish == len(steps(gpu, "release")) - 1
    assert '"$CHECKPOINT"' in publish["run"] and "if" not in publish  # the very directory the gate verified
    assert publish["env"]["HF_TOKEN"] == "${{ secrets.HF_RELEASE_TOKEN }}"
    # The signing key never reaches the release job.
    assert "QUALIFY_SIGN_KEY" not in str(job)


def test_no_workflow_pastes_an_expression_into_a_shell_script(gpu, ci):
    """${{ inputs.x }} inside run: is shell injection; inputs go through env."""
    for workflow in (gpu, ci):
        for job in workflow["jobs"]:
            for step in steps(workflow, job):
                assert "${{" not in step.get("run", ""), step.get("name")


# -- the harness's own CI ---------------------------------------------------------------


def test_ci_runs_the_ci_script_on_ubuntu_for_pushes_and_pull_requests(ci):
    assert {"push", "pull_request"} <= set(ci["on"])
    (job,) = ci["jobs"].values()
    assert str(job["runs-on"]).startswith("ubuntu")
    step_running(ci, r"^\.ci/run$")
    _, py = step_using(ci, "actions/setup-python")
    assert float(py["with"]["python-version"]) >= 3.11
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_docs_show_the_same_steps_for_other_ci_systems():
    text = (REPO / "docs" / "ci.md").read_text()
    for words in ("GitLab", "Jenkins", "make qualify", "qualify gate", "QUALIFY_JUNIT_XML", "junit", "report.md",
                  "artifacts", "QUALIFY_SIGN_KEY", "--verify-key", "attestation.intoto.jsonl", "keyless", "OIDC",
                  "sigstore"):
        assert words in text, words


# -- what the workflow relies on ---------------------------------------------------------


@pytest.mark.slow
def test_qualify_check_writes_junit_named_by_the_environment(tmp_path):
    """The workflow's JUnit comes from QUALIFY_JUNIT_XML: one test case per check of the report."""
    import os
    import subprocess
    import sys

    junit = tmp_path / "out" / "junit.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "qualify.cli", "check", str(FIXTURE / "mxfp8"), "--report-dir", str(tmp_path / "r")],
        cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, "QUALIFY_JUNIT_XML": str(junit)},
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr  # no --source: source checks skipped, not qualified
    (report,) = (tmp_path / "r").glob("*/report.json")
    checks = [c for lvl in read_json(report).levels for c in lvl.checks]
    cases = ET.parse(junit).getroot().findall(".//testcase")
    assert len(cases) == len(checks) > 0
    assert {c.get("name").removeprefix("test_") for c in cases} == {c.id.split(".", 1)[1] for c in checks}
    skipped = [c for c in cases if c.find("skipped") is not None]
    assert len(skipped) == sum(1 for c in checks if str(c.status) == "skipped") > 0


@pytest.mark.slow
def test_the_junit_xml_flag_writes_junit(tmp_path):
    proc = run_qualify("check", str(FIXTURE / "mxfp8"), "--levels", "format", "--report-dir", str(tmp_path / "r"),
                       "--junit-xml", str(tmp_path / "j.xml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ET.parse(tmp_path / "j.xml").getroot().findall(".//testcase")
    assert f"junit:  {tmp_path / 'j.xml'}" in proc.stdout


def test_check_help_documents_junit(capsys):
    from qualify.cli import main

    with pytest.raises(SystemExit):
        main(["check", "--help"])
    out = capsys.readouterr().out
    assert "--junit-xml PATH" in out and "QUALIFY_JUNIT_XML" in out

