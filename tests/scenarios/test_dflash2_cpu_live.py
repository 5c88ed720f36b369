"""DFlash 2 on the real vLLM CPU runtime: ``fixture-dflash2-cpu`` qualifies the CPU DFlash 2 fixture, every level.

``qualify run`` as a user runs it, once per session (make qualify's run, tests/live_runs.py): the MXFP8
DFlash 2 draft of ``fixtures/dflash2-cpu`` against its BF16 source, every level (the serving levels against vLLM 0.32's
own DFlash 2 model code in the vLLM CPU container, the candidate walk by the CPU plugin's proposer).
Beside it, the damaged variant the cheapest served level must catch: the draft configured for the wrong
target layers fails the load level (vLLM's own line names the layers it reads; one container, no request).
What catches each of the other variants is measured and stated in the profile's comments
(qualify/profiles/fixture-dflash2-cpu.toml). Without Docker or the vLLM venv this FAILS with the setup hint.
"""

from __future__ import annotations

import pytest

from fixtures import dflash2_cpu
from qualify.core import Status, Verdict
from qualify.profile import load_profile
from qualify.report.model import Run
from tests.live_runs import Finished, QualifyRun

pytestmark = [pytest.mark.slow, pytest.mark.serving]

PROFILE = "fixture-dflash2-cpu"
WRONG_LAYERS = dflash2_cpu.VARIANTS[0]


@pytest.fixture(scope="module")
def runs(make_qualify_run: QualifyRun, dflash2_wrong_layers_run: QualifyRun) -> dict[str, Finished]:
    """make qualify's run (this profile on the good draft) and the wrong-layers variant's load, both the session's
    (tests/live_runs.py: started as the session starts, each with its own containers and free ports)."""
    good = make_qualify_run.wait()
    assert good.run.profile["name"] == PROFILE
    return {"good": good, WRONG_LAYERS: dflash2_wrong_layers_run.wait()}


def _check(run: Run, check_id: str) -> object:
    (found,) = [c for lv in run.levels for c in lv.checks if c.id == check_id]
    return found


def test_the_dflash2_fixture_qualifies_through_every_level_on_real_vllm(runs: dict[str, Finished]) -> None:
    code, output, run = runs["good"].code, runs["good"].output, runs["good"].run
    statuses = {lv.name: lv.status for lv in run.levels}
    required = ["structure", "format", "reproduction", "load", "smoke", "acceptance", "paired", "losslessness"]
    assert all(statuses[name] is Status.PASSED for name in required), (statuses, output[-4000:])
    # Measured, not qualified (the profile states no bound): figures, never a failure.
    for check_id in ("throughput.serving_throughput", "speedup.speculative_speedup"):
        check = _check(run, check_id)
        assert check.status is Status.SKIPPED and " measured (" in check.message, check  # type: ignore[attr-defined]
    assert run.verdict is Verdict.QUALIFIED and code == 0 and run.qualified_levels == required
    length = _check(run, "acceptance.draft_acceptance").evidence.measured["mean_acceptance_length"]  # type: ignore[attr-defined]
    assert length["low"] >= 1.5, length


def test_the_shipped_draft_has_no_divergence_from_the_target_alone(runs: dict[str, Finished]) -> None:
    """Greedy outputs with the DFlash 2 speculator against the target alone (another container, same image): every
    prompt identical to its last token, so no divergence needed a lookup, no near-tie was allowed."""
    check = _check(runs["good"].run, "losslessness.greedy_identical")
    evidence = check.evidence  # type: ignore[attr-defined]
    spec = load_profile(PROFILE).losslessness
    assert spec is not None and check.status is Status.PASSED, evidence.failure_text()  # type: ignore[attr-defined]
    m = evidence.measured
    assert m["prompts"] == len(m["per_prompt"]) > 0 and m["identical"] == m["prompts"], m["per_prompt"]
    assert m["divergences"] == {"near_tie": 0, "real": 0, "unverified": 0} and m["near_ties"] == []
    assert all(r["speculative_tokens"] == r["reference_tokens"] == spec.max_tokens for r in m["per_prompt"])
    assert evidence.expected["near_tie_tolerance"] == spec.near_tie_tolerance
    assert m["reference"]["endpoint"] != m["server"].get("endpoint")  # the target alone, not the speculative server


def test_the_load_evidence_is_vllms_dflash2_and_the_plugins_candidate_head(runs: dict[str, Finished]) -> None:
    run, run_dir = runs["good"].run, runs["good"].folder
    load = _check(run, "load.load_evidence").evidence.measured["items"]  # type: ignore[attr-defined]
    assert {"vllm_cpu_plugin_dflash2", "dflash2_draft_architecture", "mxfp8_linear_kernel_draft_gemms",
            "draft_weights_loaded"} <= set(load), load
    assert "Resolved architecture: DFlash2DraftModel" in load["dflash2_draft_architecture"]["line"]
    assert "Using EmulationMxfp8LinearKernel for MXFP8 GEMM" in load["mxfp8_linear_kernel_draft_gemms"]["line"]
    # Logged once, at the first draft (the smoke level's first request): the candidate head drafted.
    log = (run_dir / "server.log").read_text(encoding="utf-8", errors="replace")
    assert ("qualify-vllm-cpu: DFlash 2 candidate head drafting (vLLM's compute_candidates and candidate_selector, "
            "temperature-0 candidate walk; top_k=8, steps=7)") in log


def test_the_wrong_target_layers_fail_the_load_level_on_real_vllm(runs: dict[str, Finished]) -> None:
    """vLLM reads the draft's target_layer_ids at load: the wrong pair is in its own log line, before any request."""
    code, output, run = runs[WRONG_LAYERS].code, runs[WRONG_LAYERS].output, runs[WRONG_LAYERS].run
    check = _check(run, "load.load_evidence")
    assert check.status is Status.FAILED, output[-3000:]  # type: ignore[attr-defined]
    failure = check.evidence.failure_text()  # type: ignore[attr-defined]
    assert "missing evidence 'dflash_target_layers'" in failure, failure
    assert "Using auxiliary layers from speculative config" in failure, failure
    # It loaded and served: only the layers it reads are wrong.
    assert _check(run, "load.ready").status is Status.PASSED  # type: ignore[attr-defined]
    assert run.verdict is not Verdict.QUALIFIED and code == 1


def test_a_scrambled_candidate_selector_fails_acceptance_on_real_vllm(dflash2_scrambled_run: QualifyRun) -> None:
    """The selector's codebooks scrambled (the file still self-consistent): it loads, serves, drafts, and its
    candidate walk picks worse: the acceptance level fails it."""
    done = dflash2_scrambled_run.wait()
    run = done.run
    assert run.level("load").status is Status.PASSED and run.level("smoke").status is Status.PASSED, done.proc.stdout
    check = _check(run, "acceptance.draft_acceptance")
    assert check.status is Status.FAILED, done.proc.stdout[-3000:]  # type: ignore[attr-defined]
    assert "mean acceptance length" in check.evidence.failure_text()  # type: ignore[attr-defined]
    assert run.verdict is Verdict.NOT_QUALIFIED and done.proc.returncode == 1


def test_scale_bytes_off_by_one_fail_the_paired_level_on_real_vllm(dflash2_scale_run: QualifyRun) -> None:
    """Every 256th scale byte one too high, the folder self-consistent: it clears the absolute acceptance floor,
    and only the comparison with its BF16 source shows the loss."""
    done = dflash2_scale_run.wait()
    run = done.run
    assert run.level("acceptance").status is Status.PASSED, done.proc.stdout[-3000:]
    check = _check(run, "paired.non_inferiority")
    assert check.status is Status.FAILED, done.proc.stdout[-3000:]  # type: ignore[attr-defined]
    failure = check.evidence.failure_text()  # type: ignore[attr-defined]
    # One request at a time and under load (the profile's batched concurrency), each on its own prompts' pairs.
    for concurrency in _paired_concurrency():
        assert f"at concurrency {concurrency}, overall: acceptance rate of the candidate relative to the source " \
               "draft" in failure, failure
    assert run.verdict is Verdict.NOT_QUALIFIED and done.proc.returncode == 1


def _paired_concurrency() -> tuple[int, ...]:
    spec = load_profile(PROFILE).paired
    assert spec is not None and len(spec.concurrency) > 1
    return spec.concurrency
