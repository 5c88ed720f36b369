"""Config faithfulness (qualify.checks.source_config): every key compared, every difference named with both values."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from qualify.checks import source_config as sc

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "dflash2-tiny"


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    shutil.copytree(FIXTURE, tmp_path / "f")
    return tmp_path / "f" / "mxfp8", tmp_path / "f" / "source"


def edit(path: Path, fn) -> None:
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data, indent=2))


def findings(ev) -> list[str]:
    return [str(f) for f in ev.findings]


# ----------------------------------------------------------------------------- pure


def test_differences_are_named_where_they_are() -> None:
    source = {"a": 1, "b": {"c": [1, 2, 3], "d": "x"}, "gone": None, "l": [1, 2]}
    output = {"a": 1, "b": {"c": [1, 5, 3], "d": "x"}, "new": True, "l": [1, 2, 3]}
    diffs = sc.config_differences(output, source)
    assert [(sc.key_path(d.path), d.output, d.source) for d in diffs] == [
        ("b.c[1]", 5, 2), ("gone", sc.MISSING, None), ("l", [1, 2, 3], [1, 2]), ("new", True, sc.MISSING)]
    assert sc.config_differences(source, json.loads(json.dumps(source))) == []


@pytest.mark.parametrize(("output", "source"), [(1, 1.0), (True, 1), (False, 0), (0, None), ("1", 1), ([1], (1,)),
                                                ({"a": 1}, {"a": 1.0}), ([True], [1])])
def test_json_types_are_kept_apart(output, source) -> None:
    assert sc.config_differences({"k": output}, {"k": source}), (output, source)


def test_key_path_quotes_what_is_not_a_name() -> None:
    assert sc.key_path(("dflash_config", "target_layer_ids", 1)) == "dflash_config.target_layer_ids[1]"
    assert sc.key_path(("a.b", "x\ny", 0)) == '["a.b"]["x\\ny"][0]'
    assert sc.key_path(()) == "(the whole document)"


def test_allowed_changes() -> None:
    assert sc.is_allowed(("quantization_config",), ())
    assert sc.is_allowed(("quantization_config", "ignore", 0), ())
    assert not sc.is_allowed(("dflash_config", "quantization_config"), ())  # only the top-level one is conversion's
    assert sc.is_allowed(("transformers_version",), ("transformers_version",))
    assert sc.is_allowed(("dflash_config", "x"), ("dflash_config",))
    assert sc.is_allowed(("layer_types", 3), ("layer_types",))
    assert not sc.is_allowed(("rms_norm_eps",), ("rms",))  # a prefix of a name is not the key
    assert not sc.is_allowed(("dflash_config_extra",), ("dflash_config",))


def test_messages_give_both_values_and_call_dflash_keys_critical() -> None:
    critical = sc.Difference(("dflash_config", "mask_token_id"), 0, 2047)
    assert sc.difference_message(critical) == (
        "dflash_config.mask_token_id is 0 in the checkpoint but 2047 in the source (acceptance-critical: a DFlash "
        "runtime reads it to wire the draft to its target and draft tokens; a change collapses acceptance silently)")
    plain = sc.Difference(("hidden_act",), "gelu", "silu")
    assert sc.difference_message(plain) == 'hidden_act is "gelu" in the checkpoint but "silu" in the source'
    absent = sc.difference_message(sc.Difference(("x",), sc.MISSING, 1))
    assert absent == "x is absent in the checkpoint but 1 in the source"
    for key in ("architectures", "layer_types", "block_size", "target_layer_ids"):
        assert sc.Difference((key,), 1, 2).critical, key


def test_a_hostile_value_cannot_forge_a_line() -> None:
    text = sc.difference_message(sc.Difference(("k",), "ok\n\x1b[2Kverdict: qualified", "v"))
    assert "\n" not in text and "\x1b" not in text and "\\u001b" in text
    long = sc.difference_message(sc.Difference(("k",), "x" * 1000, "v"))
    assert "..." in long and len(long) < 300


# ----------------------------------------------------------------------------- the files


def test_the_fixture_config_is_its_source_s(pair: tuple[Path, Path]) -> None:
    ev = sc.check_source_config(*pair)
    assert ev.ok, ev.failure_text()
    assert ev.measured["files_compared"] == ["config.json"] and ev.measured["allowed_differences"] == 1


@pytest.mark.parametrize(("change", "finding"), [
    (lambda d: d["dflash_config"].update(target_layer_ids=[1, 2]),
     "dflash_config.target_layer_ids[1] is 2 in the checkpoint but 3 in the source (acceptance-critical"),
    (lambda d: d.update(rms_norm_eps=1e-6), "rms_norm_eps is 1e-06 in the checkpoint but 1e-05 in the source"),
    (lambda d: d.update(tie_word_embeddings=True), "tie_word_embeddings is true in the checkpoint but false"),
    (lambda d: d.update(architectures=["X"]), 'architectures[0] is "X" in the checkpoint but "DFlash2DraftModel"'),
    (lambda d: d.pop("vocab_size"), "vocab_size is absent in the checkpoint but 2048 in the source"),
])
def test_a_changed_key_fails_naming_it(pair: tuple[Path, Path], change, finding: str) -> None:
    edit(pair[0] / "config.json", change)
    got = findings(sc.check_source_config(*pair))
    assert len(got) == 1 and got[0].startswith("config.json: " + finding), got


def test_the_quantization_config_and_listed_paths_may_change(pair: tuple[Path, Path]) -> None:
    edit(pair[0] / "config.json", lambda d: d.update(transformers_version="4.57.0", quantization_config={"x": 1}))
    assert findings(sc.check_source_config(*pair)) == [
        'config.json: transformers_version is "4.57.0" in the checkpoint but absent in the source']
    ev = sc.check_source_config(*pair, allowed=("transformers_version",))
    assert ev.ok and ev.measured["allowed_differences"] == 2
    assert ev.expected["allowed_changes"] == ["quantization_config", "transformers_version"]


def test_a_quantization_config_in_the_source_may_be_replaced(pair: tuple[Path, Path]) -> None:
    edit(pair[1] / "config.json", lambda d: d.update(quantization_config={"quant_method": "fp8"}))
    assert sc.check_source_config(*pair).ok


def test_missing_or_broken_configs(pair: tuple[Path, Path]) -> None:
    ckpt, src = pair
    (src / "config.json").write_text('{"a": 1, "a": 2}')
    assert findings(sc.check_source_config(ckpt, src)) == ["source config.json: duplicate key 'a'"]
    (src / "config.json").unlink()
    assert findings(sc.check_source_config(ckpt, src)) == [
        "source config.json: the source has no config.json: the checkpoint's cannot be shown to be the source's"]
    (ckpt / "config.json").unlink()
    assert "config.json: the checkpoint has no config.json" in findings(sc.check_source_config(ckpt, src))


def test_generation_and_tokenizer_files_are_compared_where_both_have_them(pair: tuple[Path, Path]) -> None:
    ckpt, src = pair
    (ckpt / "generation_config.json").write_text('{"eos_token_id": 7}')
    (ckpt / "tokenizer.model").write_bytes(b"only here")
    assert sc.check_source_config(ckpt, src).ok  # the source has neither: nothing to compare
    (src / "generation_config.json").write_text('{"eos_token_id": 2}')
    (src / "tokenizer.model").write_bytes(b"another")
    ev = sc.check_source_config(ckpt, src)
    assert findings(ev) == [
        "generation_config.json: eos_token_id is 7 in the checkpoint but 2 in the source",
        "tokenizer.model: differs from the source's byte for byte (a runtime tokenizes with it)"]
    assert ev.measured["files_compared"] == ["config.json", "generation_config.json", "tokenizer.model"]
    # The conversion's allowances are config.json's: a generation config's keys must all be the source's.
    (ckpt / "generation_config.json").write_text('{"eos_token_id": 2, "quantization_config": {}}')
    assert "generation_config.json: quantization_config is {} in the checkpoint but absent in the source" \
        in findings(sc.check_source_config(ckpt, src))


def test_a_change_of_kind_is_one_difference() -> None:
    for output, source in (({"a": 1}, 1), (1, {"a": 1}), ([1], {"a": 1}), ({"a": 1}, [1]), ("x", [1])):
        diffs = sc.config_differences({"k": output}, {"k": source})
        assert [(d.path, d.output, d.source) for d in diffs] == [(("k",), output, source)]


def test_values_are_shown_escaped_sorted_and_bounded() -> None:
    bidi = sc.difference_message(sc.Difference(("k",), "abc\u202edef", "x"))
    assert "\u202e" not in bidi and "\\u202e" in bidi  # a bidi override cannot reorder what a reader sees
    assert sc.difference_message(sc.Difference(("k",), {"b": 1, "a": 2}, 1)).startswith('k is {"a": 2, "b": 1} in')
    fits, over = "x" * 118, "x" * 119  # 120 and 121 characters with their quotes
    shown = sc.difference_message(sc.Difference(("k",), fits, 1))
    assert shown == f'k is "{fits}" in the checkpoint but 1 in the source'
    assert sc.difference_message(sc.Difference(("k",), over, 1)) == (
        f'k is "{over[:116]}... in the checkpoint but 1 in the source')


def test_the_rule_names_the_allowed_changes(pair: tuple[Path, Path]) -> None:
    assert sc.check_source_config(*pair).summary == (
        "config.json and the generation/tokenizer files equal the source's, but for the quantization config")
    assert sc.check_source_config(*pair, allowed=("a", "b.c")).summary.endswith(
        "but for the quantization config and a, b.c")


def test_a_broken_companion_does_not_hide_the_others(pair: tuple[Path, Path]) -> None:
    ckpt, src = pair
    for root in (ckpt, src):
        (root / "generation_config.json").write_text('{"a": ')
        (root / "tokenizer_config.json").write_text('{"a": 1}')
    (ckpt / "tokenizer_config.json").write_text('{"a": 2}')
    got = findings(sc.check_source_config(ckpt, src))
    assert got[0].startswith("generation_config.json: not valid JSON")
    assert got[1:] == ["tokenizer_config.json: a is 2 in the checkpoint but 1 in the source"]
