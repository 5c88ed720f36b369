"""The human-readable report claims exactly what the checks show, in the model card's words."""

from __future__ import annotations

from qualify.core import Evidence, Status
from qualify.profile import load_profile
from qualify.report.markdown import render_markdown, summary_lines, validation_status
from qualify.report.model import Check, LevelResult, Run
from tests.run_builders import verified_identity

SEED = "glm53-flash-dflash2-mxfp8-tp4"


def run_with(levels: dict[str, Status], profile: str = SEED) -> Run:
    p = load_profile(profile)
    run = Run(run_id="r-1", harness_version="0", started_at="2026-01-01T00:00:00Z",
              profile={"name": p.name, "sha256": p.sha256, "conditions": p.conditions()},
              checkpoint={"path": "/ckpt", "manifest_sha256": "a" * 64},
              source={"path": "/src", "identity": verified_identity(p.source_repo, p.source_revision)})
    for name, status in levels.items():
        ev = Evidence("rule")
        if status is Status.FAILED:
            ev.add("it is broken", file="model.safetensors", tensor="lm_head.weight")
        run.levels.append(LevelResult(name, checks=[Check(f"{name}.c", name, "t", status, "m", ev)]))
    return run


def test_a_qualified_seed_run_states_the_seed_conditions():
    run = run_with({n: Status.PASSED for n in ("structure", "format", "reproduction", "load", "smoke")})
    text = validation_status(run)
    assert text.startswith("Status: qualified for checkpoint structure, MXFP8 format, exact format reproduction, "
                           "loading, and smoke inference under the following conditions:")
    for line in (
        "- Target: local-inference-lab/GLM-5.3-Flash-NVFP4 revision 520de24eabf507659eaef7c70f14fd584527facc",
        "- Runtime: voipmonitor/vllm:glm53-flash-nvfp4-dflash2-community-20260830-r5",
        "- Hardware: four NVIDIA RTX PRO 6000 Blackwell Workstation Edition GPUs",
        "- Parallelism: tensor parallel size 4 and decode-context parallel size 1",
        "- Target attention, MoE, linear, and tensor-parallel all-reduce: B12X",
        "- DFlash attention: FlashAttention 2",
        "- DFlash linear: B12X MXFP8",
        "- DFlash proposal length: seven tokens",
        "- CUDA graph mode: NONE for the load-and-inference qualification",
        "- Source: incoai/GLM-5.3-Flash-DFlash2 at immutable revision dc77ff1c99eeb2df044ee3d4f0094eb033fee410 "
        "(identity verified by hub cache snapshot and hub)",
    ):
        assert line in text.splitlines(), line
    assert "Not qualified by this run: runtime throughput, CUDA graph performance" in text


def test_checkpoint_only_runs_do_not_claim_runtime_conditions():
    text = validation_status(run_with({"structure": Status.PASSED, "format": Status.PASSED}, "fixture"))
    assert "Hardware" not in text and "Runtime:" not in text
    assert "Status: qualified for checkpoint structure and MXFP8 format" in text
    assert "loading" in text.split("Not qualified by this run:")[1]


def test_a_failed_level_is_named_and_nothing_is_claimed_qualified():
    run = run_with({"structure": Status.PASSED, "format": Status.FAILED, "reproduction": Status.SKIPPED})
    text = validation_status(run)
    assert text.startswith("Status: not qualified.")
    assert "MXFP8 format (failed)" in text and "exact format reproduction (skipped)" in text
    assert "qualified for" not in text
    md = render_markdown(run)
    assert "**Verdict: not qualified**" in md
    assert "model.safetensors: tensor 'lm_head.weight': it is broken" in md
    lines = summary_lines(run)
    assert lines[-1] == "verdict: not qualified"
    assert any("failed format.c" in line for line in lines)


def test_a_chart_is_linked_from_its_level(tmp_path):
    from qualify.run.runner import finish_run

    run = run_with({"acceptance": Status.PASSED})
    run.levels[0].checks[0].evidence.measured["position_chart_svg"] = "<svg xmlns='http://www.w3.org/2000/svg'/>"
    finish_run(run, tmp_path)
    assert (tmp_path / "acceptance.c.svg").read_text().startswith("<svg")
    assert "![per-position acceptance](acceptance.c.svg)" in (tmp_path / "report.md").read_text()


def test_the_summary_gives_each_not_run_check_its_own_reason():
    run = run_with({"smoke": Status.FAILED})
    acceptance = LevelResult("acceptance", checks=[
        Check("acceptance.rate", "acceptance", "t", Status.NOT_RUN, "not run: level smoke failed before it", None),
        Check("acceptance.len", "acceptance", "t", Status.NOT_RUN, "not run: level smoke failed before it", None),
    ])
    structure = LevelResult("structure", checks=[
        Check("structure.a", "structure", "t", Status.FAILED, "m", Evidence("rule")),
        Check("structure.b", "structure", "t", Status.NOT_RUN,
              "not run: an input it needs is broken (see structure.a)", None),
    ])
    run.levels[:0] = [structure]
    run.levels.append(acceptance)
    lines = summary_lines(run)
    assert "  not run (level smoke failed before it): acceptance.rate, acceptance.len" in lines
    assert "  not run (an input it needs is broken (see structure.a)): structure.b" in lines
    assert not any("input" in line for line in lines[lines.index("acceptance    not-run  2 checks"):]), lines


def test_the_summary_says_when_the_source_was_trusted_without_proof():
    from qualify.checkpoint.identity import identity_record

    run = run_with({"structure": Status.PASSED})
    assert not any(line.startswith("source:") for line in summary_lines(run))
    run.source["identity"] = identity_record(verified=False, trusted=True, method=None, repo="o/n", revision="a" * 40)
    lines = summary_lines(run)
    assert lines[-2].startswith("source: Source identity not verified: the source folder was trusted on "
                                "--trust-local-source")
    assert lines[-1] == "verdict: qualified"


def test_a_run_that_built_its_image_names_the_image_id_it_ran() -> None:
    """A profile pinning no digest ran the image the run built: the card names that ID, or nothing pins it."""
    built = {"image": "qualify-vllm-cpu:latest", "image_id": "sha256:" + "ab" * 32, "built": False,
             "pinned": "to the image ID built from this repository's runtimes/vllm-cpu"}
    run = run_with({n: Status.PASSED for n in ("structure", "format", "reproduction", "load")}, "fixture-dflash-cpu")
    assert "- Runtime: qualify-vllm-cpu:latest" in validation_status(run).splitlines()  # no build recorded: no ID
    run.environment["runtime_image_build"] = built
    assert (f"- Runtime: qualify-vllm-cpu:latest (image sha256:{'ab' * 32}, pinned to the image ID built from this "
            "repository's runtimes/vllm-cpu)") in validation_status(run).splitlines()
    run.environment["runtime_image_build"] = {"error": "no Docker engine answers"}  # a failed build pins nothing
    assert "- Runtime: qualify-vllm-cpu:latest" in validation_status(run).splitlines()


def test_the_paired_error_rates_at_the_measured_spread_are_printed() -> None:
    from qualify.report.markdown import operating_lines

    oc = {"computed": True, "spread": 0.0594, "pilot_spread": 0.036, "trials": 400,
          "targets": [{"scenario": "no loss", "wanted": 0.99, "met": False, "right": 0.5275, "right_95_bound": 0.4864},
                      {"scenario": "category loss", "wanted": 0.9, "met": True, "right": 0.9775,
                       "right_95_bound": 0.9617}]}
    lines = operating_lines(oc)
    assert lines[0].startswith("- Error rates by design at the per-prompt spread this run measured (5.94%; the "
                               "profile's pilot 3.60%), 400 simulated runs each")
    assert lines[1] == "  - no loss: the level right 52.75% (95% bound 48.64%), wanted >= 99%: **not met**"
    assert lines[2].endswith("wanted >= 90%: met")
    assert operating_lines({"computed": False, "why": "fewer than two prompts"}) == [
        "- Error rates by design: not computed (fewer than two prompts)"]
    assert operating_lines(None) == []
