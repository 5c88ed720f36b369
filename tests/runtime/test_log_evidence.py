"""Tests for qualify.runtime.log_evidence: the profile's load evidence read off a server log."""

from __future__ import annotations

from pathlib import Path

from qualify.profile import load_profile
from qualify.runtime.log_evidence import check_log_evidence, read_log


def test_log_evidence_rules() -> None:
    fixture = load_profile("fixture")
    good = "\n".join([
        "INFO Detected ModelOpt MXFP8 checkpoint",
        "INFO Using B12xMxfp8LinearKernel for draft GEMMs",
        "INFO Using B12xMxfp8LinearKernel for fused DFlash context_kv_proj",
        "INFO Loading drafter model weights took 0.0026 GiB",
    ])
    assert check_log_evidence(good, fixture, "load").ok
    missing = check_log_evidence(good.replace("Detected ModelOpt MXFP8", "Detected nothing"), fixture, "load")
    assert [f.message.split(":")[0] for f in missing.findings] == ["missing evidence 'modelopt_mxfp8_detected'"]
    # A second, disagreeing weight size must not be outvoted by the right one.
    twice = check_log_evidence(good + "\nINFO Loading drafter model weights took 9.9900 GiB", fixture, "load")
    assert "shows 0.0026, 9.99 GB, the profile expects 0.0026" in twice.failure_text()
    empty = check_log_evidence("", fixture, "load")
    assert "the server log is empty" in empty.failure_text() and len(empty.findings) == 5
    assert not check_log_evidence(good, fixture, "smoke").ok  # no smoke items: nothing shows anything


def test_a_log_not_written_yet_reads_as_empty_and_bad_bytes_as_replacements(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    assert read_log(None) == "" and read_log(log) == ""  # no log yet: nothing shown yet, never an error
    log.write_bytes(b"INFO loaded \xff\n")
    assert read_log(log) == "INFO loaded \ufffd\n"
    assert read_log(tmp_path) == ""  # a folder where the log should be: unreadable, so nothing shown



def test_an_anchored_item_is_looked_for_after_its_anchor_only() -> None:
    profile = load_profile("fixture-dflash-cpu")
    target_only = "INFO Filesystem type for checkpoints: OVERLAY. Checkpoint size: 0.00 GiB. Available RAM: 9.00 GiB."
    ev = check_log_evidence(target_only, profile, "load")
    assert ("missing evidence 'draft_weights_loaded': no line of the server log matches its anchor "
            "'Loading drafter model\\\\.\\\\.\\\\.'") in ev.failure_text()
    ev = check_log_evidence("INFO Loading drafter model...\n" + target_only, profile, "load")
    assert ev.measured["items"]["draft_weights_loaded"]["gb"] == [0.0]
    assert ev.expected["draft_weights_loaded"]["source"]["where"] == "vllm/model_executor/model_loader/weight_utils.py"
