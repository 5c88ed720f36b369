"""`qualify card`: the model card's Validation status, written from a report, and never more than it shows.

The seed model card's section is the model: its status line and conditions are reproduced word for word. Its
runtime sentence is not: the card claims the profile's evidence items that passed, in their descriptions'
words, and the seed profile's evidence is the lines vLLM 0.32 prints, not the seed card's sentence.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from qualify.core import Status
from qualify.report.card import CARD_WORDING_NOTE, EVIDENCE_HEAD, indefinite_article, validation_status_section
from qualify.report.conditions import NOT_SHOWN_HEAD
from qualify.report.markdown import summary_lines, validation_status
from qualify.report.model import Run, write_json
from tests.helpers import TRACEBACK, run_qualify
from tests.run_builders import COMPLETION, LOAD_LOG, evidence_expected, log_evidence, seed_run

SEED = Path("/work/shared/seed/000_dc485141736b43eb.txt")

# The status line and conditions as the card prints them: the seed's words with the whitespace its text
# extraction lost put back ("NVFP4revision520de..." is "NVFP4 revision 520de...", "auto(BF16)" is
# "auto (BF16)", "NONEfor" is "NONE for"), and blank lines between blocks.
EXPECTED_STATUS_AND_CONDITIONS = """\
## Validation status

Status: qualified for checkpoint structure, exact format reproduction, loading, and smoke inference under the \
following conditions:

- Target: local-inference-lab/GLM-5.3-Flash-NVFP4 revision 520de24eabf507659eaef7c70f14fd584527facc
- Runtime: voipmonitor/vllm:glm53-flash-nvfp4-dflash2-community-20260830-r5
- Hardware: four NVIDIA RTX PRO 6000 Blackwell Workstation Edition GPUs
- Parallelism: tensor parallel size 4 and decode-context parallel size 1
- Target attention, MoE, linear, and tensor-parallel all-reduce: B12X
- DFlash attention: FlashAttention 2
- DFlash linear: B12X MXFP8
- DFlash proposal length: seven tokens
- DFlash KV cache: auto (BF16)
- CUDA graph mode: NONE for the load-and-inference qualification
"""
# What the seed profile's load evidence, found in a log as vLLM 0.32 prints it, lets the card say: each item's
# description, the draft's size in the unit vLLM printed (GiB, where the seed card says GB), and the one line no
# vLLM source prints (the community image's B12X context K/V projection line) marked as the seed card's wording.
# "detected ModelOpt MXFP8" is not claimed: no evidence item shows it (vLLM 0.32 prints no such line).
EXPECTED_EVIDENCE = f"""\
{EVIDENCE_HEAD}

- The engine runs vLLM's DFlash speculator with 7 speculative tokens
- vLLM resolved the draft as a DFlash 2 draft model (the candidate head's class)
- B12xMxfp8LinearKernel selected for the draft GEMMs
- B12xMxfp8LinearKernel selected for the fused DFlash context K/V projection ({CARD_WORDING_NOTE})
- 1.20 GiB of draft weights loaded
"""
EXPECTED_REQUEST = """\
The runtime completed a 32-token speculative request. Runtime throughput and CUDA graph performance are not \
qualified by that smoke test.
"""
# The card claims a launch setting only where the runtime's log showed it (the engine line and the attention
# backends' lines, qualify/serving/engine_config.py); the rest of the seed's conditions follow NOT_SHOWN_HEAD,
# the seed's combined target-backends line split where the log shows the attention backend alone.
EXPECTED_CARD_CONDITIONS = f"""\
## Validation status

Status: qualified for checkpoint structure, exact format reproduction, loading, and smoke inference under the \
following conditions:

- Target: local-inference-lab/GLM-5.3-Flash-NVFP4 revision 520de24eabf507659eaef7c70f14fd584527facc
- Runtime: voipmonitor/vllm:glm53-flash-nvfp4-dflash2-community-20260830-r5
- Hardware: four NVIDIA RTX PRO 6000 Blackwell Workstation Edition GPUs
- Parallelism: tensor parallel size 4 and decode-context parallel size 1
- Target attention: B12X
- DFlash attention: FlashAttention 2
- DFlash proposal length: seven tokens
- CUDA graph mode: NONE for the load-and-inference qualification

{NOT_SHOWN_HEAD}

- Target MoE, linear, and tensor-parallel all-reduce: B12X
- DFlash linear: B12X MXFP8
- DFlash KV cache: auto (BF16)
"""
EXPECTED = "\n".join((EXPECTED_CARD_CONDITIONS, EXPECTED_EVIDENCE, EXPECTED_REQUEST))
#: The seed profile's load items, in its order, with the claim each makes in EXPECTED.
SEED_CLAIMS = {
    "dflash_speculative_config": "- The engine runs vLLM's DFlash speculator with 7 speculative tokens",
    "dflash2_draft_architecture": "- vLLM resolved the draft as a DFlash 2 draft model (the candidate head's class)",
    "b12x_mxfp8_linear_kernel_draft_gemms": "- B12xMxfp8LinearKernel selected for the draft GEMMs",
    "b12x_mxfp8_linear_kernel_context_kv_proj": "- B12xMxfp8LinearKernel selected for the fused DFlash context K/V "
                                                "projection",
    "draft_weights_loaded": "- 1.20 GiB of draft weights loaded",
}


def _squash(text: str) -> str:
    """A line with the whitespace, inline-code marks and heading marks that the seed's text lost removed."""
    return re.sub(r"[\s`]", "", text).lstrip("#")


def seed_section(text: str) -> str:
    lines = text.splitlines()
    start = lines.index("Validation status")
    end = lines.index("Serving", start)
    return "\n".join(lines[start:end])


def evidence_claims(card: str) -> list[str]:
    """The card's list of claimed evidence items (the lines after EVIDENCE_HEAD)."""
    lines = card.splitlines()
    if EVIDENCE_HEAD not in lines:
        return []
    at = lines.index(EVIDENCE_HEAD) + 2
    end = lines.index("", at) if "" in lines[at:] else len(lines)
    return lines[at:end]


def with_load_evidence(run: Run, measured: dict[str, Any], expected: dict[str, Any]) -> Run:
    """``run`` with its passed load evidence check recording ``measured`` and ``expected``."""
    [check] = [c for c in run.level("load").checks if c.id == "load.load_evidence"]
    assert check.evidence is not None
    check.evidence.measured, check.evidence.expected = measured, expected
    return run


# -- the seed's words, where the run verified them ---------------------------------------


def test_a_passing_seed_report_prints_what_its_evidence_verified_exactly():
    card = validation_status_section(seed_run())
    for i, (got, want) in enumerate(zip(card.splitlines(), EXPECTED.splitlines(), strict=True)):
        assert got == want, f"line {i + 1}"


@pytest.mark.skipif(not SEED.exists(), reason="seed model card not present; the expected text is checked above")
def test_the_status_and_conditions_are_the_seeds_section_line_by_line():
    """Every line of the status and conditions, whitespace aside, is the next stretch of the seed's section; what
    follows in the seed is its runtime sentence, which the card words from the evidence instead."""
    seed = _squash(seed_section(SEED.read_text(encoding="utf-8")))
    at = 0
    for line in EXPECTED_STATUS_AND_CONDITIONS.splitlines():
        piece = _squash(line)
        assert seed.startswith(piece, at), f"seed differs at {line!r}: seed has {seed[at:at + len(piece) + 20]!r}"
        at += len(piece)
    assert seed[at:].startswith(_squash("The runtime detected ModelOpt MXFP8, selected B12xMxfp8LinearKernel"))
    # Every condition of the seed is the card's, claimed or set but not shown (the backends' line split in two).
    card_lines = [x for x in EXPECTED_CARD_CONDITIONS.splitlines() if x.startswith("- ")]
    split = {"- Target attention: B12X", "- Target MoE, linear, and tensor-parallel all-reduce: B12X"}
    seed_lines = [x for x in EXPECTED_STATUS_AND_CONDITIONS.splitlines() if x.startswith("- ")]
    assert sorted(x for x in card_lines if x not in split) == sorted(
        x for x in seed_lines if x != "- Target attention, MoE, linear, and tensor-parallel all-reduce: B12X")
    # The seed's words the revised evidence does not verify are not the card's; the ones it does verify are.
    card = validation_status_section(seed_run())
    for said in ("detected ModelOpt MXFP8", "loaded 1.20 GB of draft weights", "ModelOpt MXFP8 integration"):
        assert _squash(said) in seed and said not in card, said
    for said in ("B12xMxfp8LinearKernel", "the fused DFlash context K/V projection", "a 32-token speculative request",
                 "Runtime throughput and CUDA graph performance are not qualified by that smoke test."):
        assert _squash(said) in seed and said in card, said


def test_the_card_comes_from_the_report_not_from_constants():
    """Change what the log printed, what the request returned and an item's recorded description, and the card
    says the new values."""
    run = seed_run(
        load_log=LOAD_LOG.replace("Checkpoint size: 1.20 GiB", "Checkpoint size: 1.2 GiB"),
        measured={"smoke.request": {"completions": [{**COMPLETION, "completion_tokens": 8}]}},
    )
    check = next(c for c in run.level("load").checks if c.id == "load.load_evidence")
    assert check.evidence is not None
    check.evidence.expected["b12x_mxfp8_linear_kernel_draft_gemms"]["description"] = "OtherKernel chosen for GEMMs"
    card = validation_status_section(run)
    assert "- 1.2 GiB of draft weights loaded" in card  # as printed: never rounded, never called GB
    assert "completed an 8-token speculative request" in card
    assert "- OtherKernel chosen for GEMMs" in card
    assert "B12xMxfp8LinearKernel selected for the draft GEMMs" not in card


def test_a_card_never_claims_a_line_no_passing_evidence_showed():
    """Each claim is a passed item's description; an item whose line was not found is not claimed, the others are."""
    items = log_evidence(LOAD_LOG, "load")["items"]
    assert list(items) == list(SEED_CLAIMS)
    full = evidence_claims(validation_status_section(seed_run()))
    assert [c.removesuffix(f" ({CARD_WORDING_NOTE})") for c in full] == list(SEED_CLAIMS.values())
    for name in SEED_CLAIMS:
        card = validation_status_section(seed_run(measured={"load.load_evidence": {"items": {**items, name: None}}}))
        claims = [c.removesuffix(f" ({CARD_WORDING_NOTE})") for c in evidence_claims(card)]
        assert claims == [claim for other, claim in SEED_CLAIMS.items() if other != name], name
    # Nothing of the seed card's sentence that no item of the seed profile shows.
    card = validation_status_section(seed_run())
    assert "ModelOpt" not in card and "detected" not in card and "GB" not in card.replace("GiB", "")
    assert "unsupported in vLLM builds" not in card


def test_an_item_without_a_recorded_description_is_not_claimed():
    """A report that says a line was found but not what it shows gives the card no words for it."""
    expected = evidence_expected("load")
    del expected["dflash2_draft_architecture"]["description"]
    expected["dflash_speculative_config"]["description"] = " "
    del expected["b12x_mxfp8_linear_kernel_draft_gemms"]
    run = with_load_evidence(seed_run(), log_evidence(LOAD_LOG, "load"), expected)
    claims = evidence_claims(validation_status_section(run))
    assert [c.split(" (")[0] for c in claims] == [SEED_CLAIMS["b12x_mxfp8_linear_kernel_context_kv_proj"],
                                                   SEED_CLAIMS["draft_weights_loaded"]]
    assert EVIDENCE_HEAD not in validation_status_section(with_load_evidence(seed_run(), log_evidence(
        LOAD_LOG, "load"), {}))


def test_only_a_line_no_source_prints_is_marked_as_the_model_cards_wording():
    card = validation_status_section(seed_run())
    marked = [c for c in evidence_claims(card) if c.endswith(f" ({CARD_WORDING_NOTE})")]
    assert marked == [f"{SEED_CLAIMS['b12x_mxfp8_linear_kernel_context_kv_proj']} ({CARD_WORDING_NOTE})"]
    expected = evidence_expected("load")
    del expected["b12x_mxfp8_linear_kernel_context_kv_proj"]["unverified"]
    card = validation_status_section(with_load_evidence(seed_run(), log_evidence(LOAD_LOG, "load"), expected))
    assert CARD_WORDING_NOTE not in card


def test_a_hostile_description_cannot_forge_card_lines():
    expected = evidence_expected("load")
    expected["dflash_speculative_config"]["description"] = "x\n\nStatus: qualified for everything"
    expected["dflash2_draft_architecture"]["description"] = "# A heading <script>"
    expected["draft_weights_loaded"]["description"] = "1.20 GB of *draft* weights\n- loaded"
    card = validation_status_section(with_load_evidence(seed_run(), log_evidence(LOAD_LOG, "load"), expected))
    assert "\nStatus: qualified for everything" not in card and "\n- loaded" not in card
    claims = evidence_claims(card)
    assert claims[0] == r"- x\\n\\nStatus: qualified for everything"  # a newline shown as \n, escaped
    assert claims[1] == r"- \# A heading \<script\>"
    assert claims[-1] == r"- 1.20 GiB of \*draft\* weights\\n- loaded"


def test_modelopt_mxfp8_is_claimed_only_where_an_item_showing_it_passed():
    """The stand-in profile has an item for it (its entrypoint prints the line): claimed, with the support sentence."""
    log = "\n".join(["INFO Detected ModelOpt MXFP8 checkpoint", "INFO Using B12xMxfp8LinearKernel for draft GEMMs",
                     "INFO Using B12xMxfp8LinearKernel for fused DFlash context_kv_proj",
                     "INFO Loading drafter model weights took 0.0026 GiB"])
    measured, expected = log_evidence(log, "load", "fixture"), evidence_expected("load", "fixture")
    card = validation_status_section(with_load_evidence(seed_run(), measured, expected))
    assert "- The runtime detected ModelOpt MXFP8" in evidence_claims(card)
    assert ("- 0.0026 GiB of draft weights loaded (the fixture's 2,758,144 tensor bytes, as the stand-in prints them)"
            in evidence_claims(card))
    assert ("The checkpoint is unsupported in vLLM builds that do not contain the DFlash 2 and ModelOpt MXFP8 "
            "integration used by the qualified runtime.") in card
    # Its line not found: neither claimed nor the support sentence.
    card = validation_status_section(with_load_evidence(seed_run(), {"items": {
        **measured["items"], "modelopt_mxfp8_detected": None}}, expected))
    assert "ModelOpt" not in card and "unsupported in vLLM builds" not in card
    assert "- B12xMxfp8LinearKernel selected for the draft GEMMs" in card
    # A line that does not say ModelOpt MXFP8 does not make the support sentence, whatever the description says.
    measured["items"]["modelopt_mxfp8_detected"]["line"] = "Detected some other format"
    card = validation_status_section(with_load_evidence(seed_run(), measured, expected))
    assert "unsupported in vLLM builds" not in card


def test_a_request_without_speculative_evidence_is_not_called_speculative():
    card = validation_status_section(seed_run(measured={"smoke.smoke_evidence": {"items": {
        "speculative_request_completed": None}}}))
    assert "completed a 32-token request" in card and "speculative request" not in card


def test_the_smoke_evidence_is_said_by_the_request_sentence_not_listed():
    card = validation_status_section(seed_run())
    assert "32-token speculative request completed" not in card  # its description: the count is the request's
    assert card.count("32-token") == 1


def test_render_and_card_share_the_runtime_conditions():
    run = seed_run()
    report_md = validation_status(run).splitlines()
    conditions = [line for line in EXPECTED_CARD_CONDITIONS.splitlines() if line.startswith("- ")]
    assert len(conditions) == 11 and NOT_SHOWN_HEAD in report_md
    for line in conditions:
        assert line in report_md, line


# -- never more than the report shows ---------------------------------------------------


def test_a_failed_smoke_level_claims_no_smoke_inference():
    run = seed_run(status={"smoke.request": Status.FAILED})
    card = validation_status_section(run)
    status_line = card.splitlines()[2]
    assert status_line.startswith("Status: not qualified.")
    assert "qualified for" not in card
    assert "Not passed: smoke inference (failed)." in status_line
    # What did pass is named as not sufficient, not as qualified.
    assert "Passed, but not sufficient for a release: checkpoint structure, exact format reproduction, and loading." \
        in status_line
    assert "32-token" not in card and "completed" not in card
    assert "by that smoke test" not in card
    assert "Runtime throughput and CUDA graph performance are not qualified." in card
    # Loading passed: what its evidence showed is still said.
    assert [c.removesuffix(f" ({CARD_WORDING_NOTE})") for c in evidence_claims(card)] == list(SEED_CLAIMS.values())


@pytest.mark.parametrize("measured", [{}, {"items": {}}, {"items": "none"},
                                      {"items": {n: None for n in log_evidence(LOAD_LOG, "load")["items"]}},
                                      {"items": {n: {"line": " "} for n in log_evidence(LOAD_LOG, "load")["items"]}}])
def test_a_report_without_load_evidence_claims_nothing_the_runtime_showed(measured):
    card = validation_status_section(seed_run(measured={"load.load_evidence": measured}))
    assert EVIDENCE_HEAD not in card and evidence_claims(card) == []
    assert "loaded" not in card and "GiB" not in card
    assert "B12xMxfp8LinearKernel" not in card and "DFlash speculator" not in card
    assert "unsupported in vLLM builds" not in card
    # The smoke request is still shown: its own checks recorded it.
    assert "The runtime completed a 32-token speculative request." in card


def test_a_report_without_runtime_levels_claims_no_runtime_facts_or_conditions():
    card = validation_status_section(seed_run(levels=("structure", "format", "reproduction")))
    assert card.splitlines()[2] == ("Status: qualified for checkpoint structure and exact format reproduction under "
                                    "the following conditions:")
    for word in ("loading", "smoke inference", "Runtime:", "Hardware:", "The runtime", "1.20 G", "unsupported"):
        assert word not in card, word
    assert ("- Source: incoai/GLM-5.3-Flash-DFlash2 at immutable revision dc77ff1c99eeb2df044ee3d4f0094eb033fee410 "
            "(identity verified by hub cache snapshot and hub)") in card


def test_passed_levels_recorded_as_stand_in_plumbing_claim_nothing():
    run = seed_run()
    for lvl in run.levels:
        lvl.required = lvl.name not in ("load", "smoke")
    run.profile["conditions"]["stand_in_levels"] = ["load", "smoke"]
    card = validation_status_section(run)
    assert card.splitlines()[2] == ("Status: qualified for checkpoint structure and exact format reproduction under "
                                    "the following conditions:")
    for word in ("qualified for checkpoint structure, exact format reproduction, loading", "Runtime:", "Hardware:",
                 "The runtime", "1.20 G", "B12xMxfp8LinearKernel", "32-token", "unsupported in vLLM builds"):
        assert word not in card, word
    words = " ".join(card.split())
    assert ("Stand-in plumbing, not qualification: loading ran on the stand-in image, whose entrypoint prints load "
            "evidence; smoke inference ran against local servers serving another draft than this checkpoint.") in words
    report = validation_status(run)
    assert "Not qualified by this run:" in report and "loading (stand-in plumbing)" in report
    assert "Runtime:" not in report and "1.20 G" not in report
    summary = summary_lines(run)
    marked = [line.split()[0] for line in summary if line.endswith(" (stand-in: plumbing, qualifies nothing)")]
    assert marked == ["load", "smoke"]
    assert summary[-1] == "verdict: qualified"  # for the checkpoint levels, which the status line names
    # Measured only without a stand-in (a throughput figure, say): no stand-in words.
    for lvl in run.levels:
        lvl.required = True
    run.profile["conditions"]["stand_in_levels"] = []
    assert "Stand-in" not in validation_status_section(run) and "stand-in" not in validation_status(run)


def test_a_failed_load_level_proves_nothing_even_where_one_of_its_checks_passed():
    run = seed_run(status={"load.ready": Status.FAILED})
    card = validation_status_section(run)
    assert "loading (failed)" in card
    assert EVIDENCE_HEAD not in card and "B12xMxfp8LinearKernel" not in card and "GiB" not in card


def test_a_failed_format_level_is_not_called_exact_format_reproduction():
    card = validation_status_section(seed_run(status={"format.scales": Status.FAILED}))
    assert "exact format reproduction" not in card
    assert "MXFP8 format (failed)" in card
    assert "bit-exact reproduction from the source" in card


def test_skipped_or_not_run_levels_are_not_claimed():
    card = validation_status_section(seed_run(status={"reproduction.quantized_tensors": Status.SKIPPED,
                                                      "smoke.request": Status.NOT_RUN}))
    assert card.splitlines()[2].startswith("Status: not qualified.")
    assert "bit-exact reproduction from the source (skipped)" in card and "smoke inference (not-run)" in card
    assert "exact format reproduction" not in card


@pytest.mark.parametrize(("gb", "line"), [
    (True, "drafter took 1 GB"), ([-1.2], "drafter took -1.2 GB"), ("1.20", "drafter 1.20 GB"),
    ([float("nan")], "drafter nan GB"), (None, "drafter 1.20 GB"), ([], "drafter 1.20 GB"),
    ([1.2, 1.3], "drafter 1.20 GB and 1.30 GB"),  # two sizes that differ at the card's precision
    ([1.2], "drafter weights 1.2"),  # no unit after the number: GB or GiB cannot be told
    ([1.2], "Checkpoint size: 1.25 GiB"),  # the line does not print the size recorded
])
def test_a_weight_size_that_cannot_be_stated_exactly_is_not_written(gb, line):
    items = log_evidence(LOAD_LOG, "load")["items"]
    items["draft_weights_loaded"] = {"line": line, "matches": 1, "gb": gb}
    card = validation_status_section(seed_run(measured={"load.load_evidence": {"items": items}}))
    assert "of draft weights" not in card
    assert "- B12xMxfp8LinearKernel selected for the draft GEMMs" in card  # the rest is still said


@pytest.mark.parametrize(("gb", "line", "claim"), [
    ([1.2], "Checkpoint size: 1.20 GB.", "- 1.20 GB of draft weights loaded"),  # the unit the line printed
    ([1.2, 1.2], "Checkpoint size: 1.2GiB", "- 1.2 GiB of draft weights loaded"),
    ([0.0], "Checkpoint size: 0.00 GiB. Available RAM: 0.00 GiB.", "- 0.00 GiB of draft weights loaded"),
])
def test_a_weight_size_is_written_as_the_log_printed_it(gb, line, claim):
    items = log_evidence(LOAD_LOG, "load")["items"]
    items["draft_weights_loaded"] = {"line": line, "matches": len(gb), "gb": gb}
    assert claim in evidence_claims(validation_status_section(seed_run(measured={"load.load_evidence": {
        "items": items}})))
    # A description that states no size is given the printed one.
    expected = evidence_expected("load")
    expected["draft_weights_loaded"]["description"] = "The draft's weights loaded"
    run = with_load_evidence(seed_run(), {"items": items}, expected)
    assert f"- The draft's weights loaded ({claim[2:].split(' of ')[0]})" in validation_status_section(run)


@pytest.mark.parametrize("measured", [
    {"completion_tokens": True}, {"completion_tokens": 0}, {"completion_tokens": -3}, {"completion_tokens": 32.0},
    {"completion_tokens": "32"}, {"completions": []}, {"completions": [{**COMPLETION, "completion_tokens": None}]},
    {"completions": [COMPLETION, {**COMPLETION, "completion_tokens": 31}]}, {"completions": ["x"]},
])
def test_a_token_count_that_cannot_be_stated_is_not_written(measured):
    card = validation_status_section(seed_run(measured={"smoke.request": measured}))
    assert "-token" not in card
    assert "by that smoke test" not in card


def test_interrupted_and_errored_runs_say_so():
    run = seed_run()
    run.interrupted = "SIGTERM"
    run.errors.append("container exited")
    head = validation_status_section(run).splitlines()[2]
    assert head.startswith("Status: not qualified. The run was interrupted (SIGTERM)")
    assert "The harness reported errors: container exited." in head


@pytest.mark.parametrize(("n", "article"), [(1, "a"), (7, "a"), (8, "an"), (11, "an"), (18, "an"), (32, "a"),
                                            (80, "an"), (110, "a"), (800, "an"), (11_000, "an"), (180_000, "a")])
def test_indefinite_article(n, article):
    assert indefinite_article(n) == article


# -- the command ------------------------------------------------------------------------


def test_cli_prints_the_card_and_exits_0_for_a_qualified_report(tmp_path):
    write_json(seed_run(), tmp_path / "report.json")
    proc = run_qualify("card", str(tmp_path / "report.json"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == EXPECTED


def test_cli_exits_1_for_a_not_qualified_report_and_says_so(tmp_path):
    write_json(seed_run(status={"smoke.request": Status.FAILED}), tmp_path / "report.json")
    proc = run_qualify("card", "--no-heading", str(tmp_path / "report.json"))
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("Status: not qualified.")


def test_cli_refuses_an_altered_report(tmp_path):
    path = tmp_path / "report.json"
    write_json(seed_run(status={"smoke.request": Status.FAILED}), path)
    data = json.loads(path.read_text())
    data["verdict"] = "qualified"  # edited by hand to say more than the checks show
    path.write_text(json.dumps(data))
    proc = run_qualify("card", str(path))
    assert proc.returncode == 2
    assert "contradicts its checks" in proc.stderr and TRACEBACK not in proc.stderr
    assert proc.stdout == ""


def test_what_a_local_runtime_exercised_is_said_in_the_card_and_the_report():
    from qualify.report.markdown import render_markdown

    run = seed_run()
    assert "Serving runtime:" not in validation_status_section(run)
    run.environment["local_server"] = {
        "note": "local servers", "method": "dflash", "draft_is_checkpoint": True,
        "exercised": "DFlash proposer on CPU; DFlash 2 candidate head not exercised on this runtime",
        "plugin": {"vllm_version": "0.32.0", "changes": ["float32 allowed"]},
        "servers": {"speculative": {"ready_s": 3.0, "plan": {"endpoint": "http://x"}, "log": "l",
                                    "plugin_active": True}},
    }
    card = validation_status_section(run)
    assert _squash("Serving runtime: DFlash proposer on CPU; DFlash 2 candidate head not exercised on this "
                   "runtime.") in _squash(card)
    md = render_markdown(run)
    assert "- Exercised: DFlash proposer on CPU; DFlash 2 candidate head not exercised on this runtime" in md
    assert "the served draft is the checkpoint under test" in md
    assert "Serving runtime: DFlash proposer on CPU" in validation_status(run)
    assert "- vLLM CPU plugin (vLLM 0" in md and "): float32 allowed" in md and "plugin active" in md


# -- the source, as proven ---------------------------------------------------------------


def _checkpoint_card(identity: dict | None) -> str:
    run = seed_run(levels=("structure", "format", "reproduction"))
    if identity is None:
        run.source.pop("identity")
    else:
        run.source["identity"] = identity
    return validation_status_section(run)


def test_the_card_names_the_verified_source_and_how():
    from tests.run_builders import verified_identity

    card = _checkpoint_card(verified_identity("org/verified", "a" * 40, method="profile digests"))
    assert f"- Source: org/verified at immutable revision {'a' * 40} (identity verified by profile digests)" in card
    assert "incoai/GLM-5.3-Flash-DFlash2" not in card  # never the profile's name for what was proven


def test_the_card_never_claims_an_unproven_source():
    from qualify.checkpoint.identity import identity_record

    pinned = "incoai/GLM-5.3-Flash-DFlash2 at dc77ff1c99eeb2df044ee3d4f0094eb033fee410"
    trusted = identity_record(verified=False, trusted=True, method=None, repo="incoai/GLM-5.3-Flash-DFlash2",
                              revision="dc77ff1c99eeb2df044ee3d4f0094eb033fee410")
    card = _checkpoint_card(trusted)
    assert f"- Source: source identity not verified; the local folder was trusted on --trust-local-source as {pinned}" \
        in card
    assert "Source identity not verified: the source folder was trusted on --trust-local-source" in card
    assert "immutable revision" not in card
    missing = _checkpoint_card(None)
    assert f"- Source: source identity not verified (the profile pins {pinned})" in missing
    refuted = _checkpoint_card({**trusted, "status": "not verified", "trusted": False, "method": None})
    assert f"- Source: source identity not verified (the profile pins {pinned})" in refuted


def test_the_card_says_when_the_manifest_names_another_source():
    from tests.run_builders import verified_identity

    revision = "dc77ff1c99eeb2df044ee3d4f0094eb033fee410"
    card = _checkpoint_card(verified_identity("incoai/GLM-5.3-Flash-DFlash2", revision, manifest_repo="someone/else"))
    assert ("- The manifest names source someone/else at dc77ff1c99eeb2df044ee3d4f0094eb033fee410, which is not the "
            "verified source") in card


def test_a_hostile_manifest_repository_cannot_forge_card_lines():
    from tests.run_builders import verified_identity

    revision = "dc77ff1c99eeb2df044ee3d4f0094eb033fee410"
    card = _checkpoint_card(verified_identity("incoai/GLM-5.3-Flash-DFlash2", revision,
                                              manifest_repo="x\n\nStatus: qualified for everything"))
    assert "\nStatus: qualified for everything" not in card
    assert "The manifest names source x" in card


def test_a_cpu_runtime_claims_no_parallelism_backends_or_cuda_graphs_it_did_not_run():
    from qualify.profile import load_profile
    from qualify.report.conditions import runtime_conditions

    cpu = load_profile("fixture-dflash-cpu").conditions()
    lines = runtime_conditions(cpu)
    text = "\n".join(lines)
    assert "- Hardware: CPU only (no GPU)" in lines
    assert "tensor parallel size 4 and decode-context" not in text
    assert ("- Parallelism: none (one CPU process); tensor parallel size 4 was checked only as a format condition "
            "(every sharded dimension divides evenly), not run") in lines
    assert "CUDA graph mode" not in text
    # The same conditions with GPUs keep every claim: what hides them is the CPU, nothing else.
    gpu = {**cpu, "hardware": {"count": 4, "name": "NVIDIA H200"}, "backends": {"dflash_attention": "FA2"}}
    gpu_text = "\n".join(runtime_conditions(gpu))
    assert "- Parallelism: tensor parallel size 4 and decode-context parallel size 1" in gpu_text
    assert "CUDA graph mode: NONE" in gpu_text and "DFlash attention: FA2" in gpu_text
    cpu_with_backends = {**cpu, "backends": {"dflash_attention": "FA2"}}
    assert "FA2" not in "\n".join(runtime_conditions(cpu_with_backends))
