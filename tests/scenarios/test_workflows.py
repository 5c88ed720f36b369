"""The CI workflows do what docs/ci.md says: qualify, publish the evidence, gate; and run the tests."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest
import yaml

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

GUARD = "github.ref == 'refs/heads/main' || startsWith(github.ref, 'refs/tags/v')"
#: Actions by the full commit of the tag in the comment beside it (never a tag: it can be moved).
PINNED = re.compile(r"^[\w.-]+/[\w.-]+@[0-9a-f]{40}$")


def test_gpu_workflow_is_manual_only_and_takes_data_never_policy(gpu):
    # A self-hosted GPU runner must never run a pull request's code.
    assert set(gpu["on"]) == {"workflow_dispatch"}
    inputs = gpu["on"]["workflow_dispatch"]["inputs"]
    # Which folders and which commit: the dispatcher's. The profile, levels and repository: the policy's.
    assert set(inputs) == {"checkpoint", "source", "draft_revision", "image_digest", "target_snapshot"}
    assert all(i["required"] for i in inputs.values())


def test_gpu_workflow_runs_on_a_four_gpu_self_hosted_runner_one_at_a_time(gpu):
    assert list(gpu["jobs"]) == ["qualify", "release"]
    for job in gpu["jobs"].values():  # the release job reads the same checkpoint directory
        assert {"self-hosted", "linux", "gpu-4x"} <= set(job["runs-on"])
    assert gpu["concurrency"]["cancel-in-progress"] is False


def test_only_main_or_a_release_tag_reaches_the_key_and_the_token(gpu):
    """The signing key and the hub token live in protected environments that only these refs may use."""
    assert gpu["permissions"] == {}
    qualify, release = gpu["jobs"]["qualify"], gpu["jobs"]["release"]
    assert qualify["environment"] == "signing" and release["environment"] == "release"
    for job in (qualify, release):
        assert job["if"] == GUARD
        assert job["permissions"] == {"contents": "read"}  # the least each job needs
    assert "secrets.QUALIFY_SIGN_KEY" in str(qualify) and "secrets.QUALIFY_SIGN_KEY" not in str(release)
    assert "secrets.HF_RELEASE_TOKEN" in str(release) and "secrets.HF_RELEASE_TOKEN" not in str(qualify)


def test_every_action_is_pinned_to_a_commit_and_checkout_keeps_no_credentials(gpu, ci):
    for workflow in (gpu, ci):
        for job in workflow["jobs"]:
            for step in steps(workflow, job):
                if "uses" in step:
                    assert PINNED.match(step["uses"]), step["uses"]
                    if step["uses"].startswith("actions/checkout@"):
                        assert step["with"]["persist-credentials"] is False
    text = (WORKFLOWS / "gpu-qualify.yml").read_text() + (WORKFLOWS / "ci.yml").read_text()
    assert re.findall(r"@[0-9a-f]{40}  # v\d", text)  # the tag stays readable beside its commit


def test_the_jobs_install_from_the_lock_with_hashes_and_run_the_ci_scripts(gpu):
    for job in ("qualify", "release"):
        step_running(gpu, r"scripts/ci/install\.sh", job)
    install_sh = (REPO / "scripts" / "ci" / "install.sh").read_text()
    assert "--require-hashes" in install_sh and "requirements/release.lock" in install_sh
    _, sign = step_running(gpu, r"scripts/ci/qualify\.sh", "qualify")
    assert sign["env"]["SIGN_KEY_PEM"] == "${{ secrets.QUALIFY_SIGN_KEY }}"
    env = gpu["jobs"]["qualify"]["env"]
    for var, given in (("CHECKPOINT", "checkpoint"), ("SOURCE", "source"), ("DRAFT_REVISION", "draft_revision"),
                       ("IMAGE_DIGEST", "image_digest")):
        assert env[var] == "${{ inputs." + given + " }}"
    # No step hands an input to make, where $(...) in a value would be evaluated.
    assert "make " not in str(gpu)


def test_gpu_workflow_publishes_the_run_folder_and_summary_even_when_not_qualified(gpu):
    i_upload, upload = step_using(gpu, "actions/upload-artifact")
    assert "always()" in upload["if"]
    assert upload["with"]["path"] == "${{ env.REPORTS }}" and upload["with"]["if-no-files-found"] == "error"
    i_summary, summary = step_running(gpu, r"scripts/ci/summary\.sh")
    assert "always()" in summary["if"]
    i_gate, gate = step_running(gpu, r"scripts/ci/gate\.sh", "qualify")
    assert max(i_upload, i_summary) < i_gate == len(steps(gpu)) - 1
    assert "if" not in gate and "QUALIFY_RC" in gate["run"]  # a harness that exited non-zero fails the job too
    assert gate["env"]["VERIFY_KEY_PEM"] == "${{ vars.QUALIFY_VERIFY_KEY }}"


def test_the_release_job_verifies_the_attestation_before_it_publishes(gpu):
    job = gpu["jobs"]["release"]
    assert job["needs"] == "qualify"
    i_fetch, fetch = step_using(gpu, "actions/download-artifact", "release")
    _, upload = step_using(gpu, "actions/upload-artifact", "qualify")
    assert fetch["with"]["name"] == upload["with"]["name"]
    i_release, release = step_running(gpu, r"scripts/ci/release\.sh", "release")
    assert i_fetch < i_release == len(steps(gpu, "release")) - 1
    assert release["env"]["HF_TOKEN"] == "${{ secrets.HF_RELEASE_TOKEN }}"
    script = (REPO / "scripts" / "ci" / "release.sh").read_text()
    # The gate under the release policy, then the publish of exactly that folder to the policy's repository.
    assert script.index("scripts/ci/gate.sh") < script.index("\"$QUALIFY_BIN\" publish")
    assert "ci_policy repository" in script and "RELEASE_REPO" not in script
    gate = (REPO / "scripts" / "ci" / "gate.sh").read_text()
    assert "--release-policy" in gate and "--allow-unsigned" not in gate


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
    assert ci["permissions"] == {} and job["permissions"] == {"contents": "read"}
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

