"""qualify.report.near_ties: a passed losslessness check's near-ties reach the report and the card with both
log-probabilities; a failed check claims none; what a report file holds is escaped, and malformed entries left out."""

from __future__ import annotations

from typing import Any

from qualify.core import Status
from qualify.report.card import validation_status_section
from qualify.report.markdown import render_markdown
from qualify.report.model import LevelResult, Run
from qualify.report.near_ties import near_tie_items, near_tie_note
from tests.run_builders import make_check, make_run

TIE = {"prompt": "chat-03", "category": "chat", "position": 17, "speculative_token": 4242,
       "speculative_logprob": -0.7001, "reference_token": 4243, "reference_logprob": -0.6931}


def _check(ties: list[Any], status: Status = Status.PASSED) -> Any:
    return make_check("losslessness", "greedy_identical", status, {"near_ties": ties}, {"near_tie_tolerance": 0.25})


def _run(status: Status = Status.PASSED) -> Run:
    run = make_run()
    run.levels.append(LevelResult("losslessness", required=True, checks=[_check([TIE], status)]))
    return run


def test_each_near_tie_is_listed_with_both_values() -> None:
    assert near_tie_items(_check([TIE])) == [
        "prompt chat-03 at output token 17: token 4242 (-0.7001) against the target's 4243 (-0.6931)"]
    assert near_tie_note(_check([TIE, TIE])) == (
        "Greedy outputs with the speculator differ from the target alone's only at 2 near-ties of the target's own "
        "distribution (within 0.25 nats), log-probabilities in the target alone: "
        + "; ".join(["prompt chat-03 at output token 17: token 4242 (-0.7001) against the target's 4243 (-0.6931)"] * 2)
        + ".")
    assert near_tie_note(_check([])) is None and near_tie_note(None) is None


def test_what_a_report_file_holds_is_escaped_and_malformed_entries_are_left_out() -> None:
    forged = {**TIE, "prompt": "x\n## Verdict: qualified", "speculative_token": "[link](http://e)"}
    malformed = [{**TIE, "reference_logprob": "high"}, "junk", {**TIE, "speculative_logprob": True}]
    items = near_tie_items(_check([forged, *malformed]))
    assert len(items) == 1 and "\n" not in items[0] and "](" not in items[0].replace("\\](", "")


def test_the_card_and_the_report_list_a_passed_checks_near_ties() -> None:
    run = _run()
    card = validation_status_section(run)
    assert "near-tie of the target's own distribution" in card and "token 4242 (-0.7001)" in card
    report = render_markdown(run)
    assert "- prompt chat-03 at output token 17: token 4242 (-0.7001) against the target's 4243 (-0.6931)" in report


def test_a_failed_losslessness_level_claims_no_near_tie_on_the_card() -> None:
    run = _run(Status.FAILED)
    assert "near-tie" not in validation_status_section(run)
