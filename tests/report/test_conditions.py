"""qualify.report.conditions: the runtime conditions in the card's words, a launch setting claimed only where the
runtime's log showed it (the load check's engine settings), the rest listed as set, not shown by the runtime."""

from __future__ import annotations

from qualify.profile import load_profile
from qualify.report.card import EVIDENCE_HEAD, validation_status_section
from qualify.report.conditions import NOT_SHOWN_HEAD, engine_settings, number_words, runtime_conditions
from tests.run_builders import LOAD_LOG, seed_run


def test_number_words() -> None:
    assert [number_words(n) for n in (1, 4, 7, 9)] == ["one", "four", "seven", "9"]


def test_the_seed_run_s_settings_are_read_from_its_passed_load_check() -> None:
    shown = engine_settings(seed_run())
    assert shown["tensor_parallel_size"]["status"] == "agrees"
    assert shown["draft_kv_cache_dtype"]["status"] == "not shown"
    assert engine_settings(seed_run(levels=("structure", "format", "reproduction"))) == {}


def _conditions(card: str) -> tuple[list[str], list[str]]:
    """The card's claimed condition lines and those set but not shown."""
    lines = card.splitlines()
    head = lines.index(NOT_SHOWN_HEAD) if NOT_SHOWN_HEAD in lines else len(lines)
    claimed = [x for x in lines[:head] if x.startswith("- ") and lines.index(x) < lines.index(EVIDENCE_HEAD)]
    end = lines.index("", head + 2) if head < len(lines) else head
    return claimed, lines[head + 2:end]


def test_a_launch_setting_the_log_did_not_show_is_set_not_claimed():
    # No attention backend line (a runtime that selects its backend silently): both backends move out.
    log = "\n".join(x for x in LOAD_LOG.splitlines() if "[cuda.py:446]" not in x) + "\n"
    claimed, hidden = _conditions(validation_status_section(seed_run(load_log=log)))
    assert not any("attention" in x for x in claimed)
    assert hidden == ["- Target attention, MoE, linear, and tensor-parallel all-reduce: B12X",
                      "- DFlash attention: FlashAttention 2", "- DFlash linear: B12X MXFP8",
                      "- DFlash KV cache: auto (BF16)"]
    # A load check that recorded no engine settings (an older report): nothing the launch set is claimed.
    run = seed_run()
    check = next(c for c in run.level("load").checks if c.id == "load.load_evidence")
    assert check.evidence is not None
    del check.evidence.measured["engine_settings"]
    claimed, hidden = _conditions(validation_status_section(run))
    assert [x.split(":")[0] for x in claimed] == ["- Target", "- Runtime", "- Hardware"]
    assert len(hidden) == 7 and hidden[0].startswith("- Parallelism: tensor parallel size 4")


def test_a_setting_the_runtime_s_launcher_did_not_apply_says_so():
    cpu = load_profile("fixture-dflash2-cpu").conditions()
    shown = {"num_speculative_tokens": {"status": "agrees"}, "speculative_method": {"status": "agrees"},
             "draft_kv_cache_dtype": {"status": "not applied"}}
    lines = runtime_conditions(cpu, shown=shown)
    assert "- DFlash proposal length: seven tokens" in lines[:lines.index(NOT_SHOWN_HEAD)]
    assert lines[lines.index(NOT_SHOWN_HEAD) + 2:] == [
        "- DFlash KV cache: auto (not applied by the runtime's launcher)"]
