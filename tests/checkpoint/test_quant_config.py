"""Tests for qualify.checkpoint.quant_config: every declaration of the quantization scheme is read and
normalised (hf_quant_config.json, config.json's quantization_config, flat or nested), exclusions match
as vLLM matches them, and a malformed declaration names its file. (Whether the declarations agree with
the checkpoint and the profile is tested in tests/checks/test_format.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qualify.checkpoint import quant_config as qc
from qualify.errors import QuantConfigError
from tests.helpers import hf_quant


def write(root: Path, *, hf: object = None, config: object = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    if hf is not None:
        (root / qc.HF_QUANT_CONFIG).write_text(json.dumps(hf))
    if config is not None:
        (root / qc.MODEL_CONFIG).write_text(json.dumps(config))
    return root


@pytest.mark.parametrize(("name", "module"), [
    ("layers.0.mlp.up_proj.weight", "layers.0.mlp.up_proj"), ("fc.weight_scale", "fc"), ("bias", "bias")])
def test_module_of_drops_the_last_part(name: str, module: str) -> None:
    assert qc.module_of(name) == module


@pytest.mark.parametrize(("module", "patterns", "excluded"), [
    ("lm_head", ["lm_head"], True),
    ("lm_head.inner", ["lm_head"], True),  # below an excluded module
    ("lm_headx", ["lm_head"], False),
    ("model.lm_head", ["lm_head"], True),  # with and without the model. prefix
    ("lm_head", ["model.lm_head"], True),
    ("layers.3.self_attn.q_proj", ["layers.*.self_attn*"], True),
    ("layers.3.mlp.up_proj", ["layers.*.self_attn*"], False),
    ("Lm_Head", ["lm_head"], False),  # case matters, as in vLLM
    ("fc", [], False),
])
def test_exclusions_match_as_vllm_reads_them(module: str, patterns: list[str], excluded: bool) -> None:
    assert qc.is_excluded(module, patterns) is excluded


def test_no_config_file_declares_nothing(tmp_path: Path) -> None:
    assert qc.read_quant_config(write(tmp_path)).schemes == ()
    assert qc.read_quant_config(write(tmp_path, config={"model_type": "x"})).schemes == ()


def test_hf_quant_config_is_read_and_an_absent_key_told_from_null(tmp_path: Path) -> None:
    doc = hf_quant(exclude=("lm_head", "fc"))
    del doc["quantization"]["group_size"]
    (scheme,) = qc.read_quant_config(write(tmp_path, hf=doc)).schemes
    assert (scheme.file, scheme.quant_method, scheme.quant_algo) == (qc.HF_QUANT_CONFIG, "modelopt", "MXFP8")
    assert scheme.exclude_modules == ("lm_head", "fc")
    assert scheme.declares_kv_cache and scheme.kv_cache_quant_algo is None  # null: "not quantized", declared
    assert not scheme.declares_group_size
    del doc["quantization"]["kv_cache_quant_algo"]
    (scheme,) = qc.read_quant_config(write(tmp_path, hf=doc)).schemes
    assert not scheme.declares_kv_cache


def test_config_json_flat_and_nested_declarations_read_alike(tmp_path: Path) -> None:
    flat = {"quant_method": "modelopt", "quant_algo": "MXFP8", "group_size": 32, "ignore": ["lm_head"],
            "kv_cache_scheme": None}
    nested = {"quant_method": "modelopt", "quantization": {"quant_algo": "MXFP8", "group_size": 32,
                                                           "exclude_modules": ["lm_head"],
                                                           "kv_cache_quant_algo": None}}
    read = [qc.read_quant_config(write(tmp_path / name, config={"quantization_config": q})).schemes[0]
            for name, q in (("flat", flat), ("nested", nested))]
    for scheme in read:
        assert scheme.file == "config.json quantization_config"
        assert (scheme.quant_method, scheme.quant_algo, scheme.group_size) == ("modelopt", "MXFP8", 32)
        assert scheme.exclude_modules == ("lm_head",)
        assert scheme.declares_kv_cache and scheme.kv_cache_quant_algo is None


def test_both_files_are_read_and_their_exclusions_merged_in_order(tmp_path: Path) -> None:
    root = write(tmp_path, hf=hf_quant(exclude=("lm_head", "fc")),
                 config={"quantization_config": {"quant_method": "modelopt", "ignore": ["fc", "embed"]}})
    config = qc.read_quant_config(root)
    assert [s.file for s in config.schemes] == [qc.HF_QUANT_CONFIG, "config.json quantization_config"]
    assert config.exclude_modules == ("lm_head", "fc", "embed")


@pytest.mark.parametrize(("hf", "config", "file", "says"), [
    ({"producer": {}}, None, qc.HF_QUANT_CONFIG, "has no 'quantization' object"),
    ({"quantization": {"exclude_modules": "lm_head"}}, None, qc.HF_QUANT_CONFIG,
     "'exclude_modules' must be a list of strings"),
    (None, {"quantization_config": "modelopt"}, qc.MODEL_CONFIG, "'quantization_config' must be an object"),
    (None, {"quantization_config": {"ignore": [1]}}, "config.json quantization_config",
     "'ignore' must be a list of strings"),
    (None, {"quantization_config": {"ignore": [], "exclude_modules": "lm_head"}}, "config.json quantization_config",
     "'exclude_modules' must be a list of strings"),
    (None, {"quantization_config": {"quantization": []}}, "config.json quantization_config",
     "'quantization' must be an object"),
    (None, [], qc.MODEL_CONFIG, "must be a JSON object"),
])
def test_a_malformed_declaration_names_its_file(tmp_path: Path, hf: object, config: object, file: str,
                                                says: str) -> None:
    with pytest.raises(QuantConfigError) as info:
        qc.read_quant_config(write(tmp_path, hf=hf, config=config))
    assert info.value.file == file and info.value.detail == says


def test_a_duplicate_key_in_a_config_file_is_refused(tmp_path: Path) -> None:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / qc.HF_QUANT_CONFIG).write_text('{"quantization": {"quant_algo": "MXFP8", "quant_algo": "FP8"}}')
    with pytest.raises(QuantConfigError, match="duplicate key 'quant_algo' at quantization"):
        qc.read_quant_config(tmp_path)


# -- the keys vLLM 0.32 reads (ModelOptQuantConfigBase.from_config), and the ones it does not ---------------

FLAT = {"quant_method": "modelopt", "quant_algo": "MXFP8", "group_size": 32}


def config_scheme(tmp_path: Path, block: dict) -> qc.DeclaredScheme:
    (scheme,) = qc.read_quant_config(write(tmp_path, config={"quantization_config": block})).schemes
    return scheme


def test_a_flat_block_excludes_what_its_ignore_says_not_its_exclude_modules(tmp_path: Path) -> None:
    scheme = config_scheme(tmp_path / "both", {**FLAT, "ignore": ["lm_head", "*layers.1.*"],
                                               "exclude_modules": ["lm_head"]})
    assert scheme.exclude_modules == ("lm_head", "*layers.1.*")
    assert scheme.conflicts == ("exclude_modules is ['lm_head'] but ignore, which vLLM reads here, is "
                                "['lm_head', '*layers.1.*']: vLLM excludes ['lm_head', '*layers.1.*']",)
    alone = config_scheme(tmp_path / "alone", {**FLAT, "exclude_modules": ["lm_head"]})
    assert alone.exclude_modules == ()  # vLLM excludes nothing
    assert alone.conflicts == ("exclude_modules is ['lm_head'] but ignore, which vLLM reads here, is absent: "
                               "vLLM excludes nothing",)
    agree = config_scheme(tmp_path / "agree", {**FLAT, "ignore": ["lm_head"], "exclude_modules": ["lm_head"]})
    assert agree.exclude_modules == ("lm_head",) and agree.conflicts == ()


def test_a_flat_block_declares_its_kv_cache_by_kv_cache_scheme(tmp_path: Path) -> None:
    fp8 = {"type": "float", "num_bits": 8, "dynamic": False}
    scheme = config_scheme(tmp_path / "scheme", {**FLAT, "ignore": [], "kv_cache_scheme": fp8})
    assert scheme.declares_kv_cache and scheme.kv_cache_quant_algo == "FP8" and scheme.conflicts == ()
    algo_only = config_scheme(tmp_path / "algo", {**FLAT, "ignore": [], "kv_cache_quant_algo": "FP8"})
    assert algo_only.kv_cache_quant_algo is None  # vLLM runs the KV cache unquantized
    assert algo_only.conflicts == ("kv_cache_quant_algo is 'FP8' but kv_cache_scheme, which vLLM reads here, is "
                                   "absent: vLLM runs a KV cache of None",)
    agree = config_scheme(tmp_path / "agree", {**FLAT, "ignore": [], "kv_cache_quant_algo": "fp8",
                                               "kv_cache_scheme": fp8})
    assert agree.kv_cache_quant_algo == "FP8" and agree.conflicts == ()
    odd = config_scheme(tmp_path / "odd", {**FLAT, "ignore": [], "kv_cache_scheme": {"type": "int", "num_bits": 8}})
    assert odd.kv_cache_quant_algo is None
    assert odd.conflicts == ("kv_cache_scheme {'type': 'int', 'num_bits': 8} is not one vLLM recognises (only type "
                             "'float' with num_bits 8, an FP8 KV cache): vLLM runs the KV cache unquantized",)


def test_a_nested_block_is_read_from_its_quantization_object(tmp_path: Path) -> None:
    block = {"quant_method": "modelopt", "ignore": ["lm_head", "fc"],
             "kv_cache_scheme": {"type": "float", "num_bits": 8}, "quant_algo": "FP8",
             "quantization": {"quant_algo": "MXFP8", "kv_cache_quant_algo": None, "exclude_modules": ["lm_head"]}}
    scheme = config_scheme(tmp_path, block)
    assert scheme.nested and scheme.exclude_modules == ("lm_head",) and scheme.kv_cache_quant_algo is None
    assert scheme.quant_algo == "MXFP8"
    assert scheme.conflicts == (
        "ignore is ['lm_head', 'fc'] but quantization.exclude_modules, which vLLM reads here, is ['lm_head']",
        "kv_cache_scheme {'type': 'float', 'num_bits': 8} means a KV cache of 'FP8' but "
        "quantization.kv_cache_quant_algo, which vLLM reads here, is None",
        "quant_algo is 'FP8' but quantization.quant_algo, which vLLM reads here, is 'MXFP8'",
    )


def test_hf_quant_config_keys_vllm_does_not_read_are_conflicts_when_they_disagree(tmp_path: Path) -> None:
    doc = hf_quant(exclude=("lm_head",))
    doc["quantization"]["ignore"] = ["lm_head", "*layers.1.*"]
    (scheme,) = qc.read_quant_config(write(tmp_path, hf=doc)).schemes
    assert scheme.nested and scheme.producer == "test" and scheme.exclude_modules == ("lm_head",)
    assert scheme.conflicts == ("quantization.ignore is ['lm_head', '*layers.1.*'] but quantization.exclude_modules, "
                                "which vLLM reads here, is ['lm_head']",)


def test_the_runtime_reads_config_json_whenever_it_declares_the_scheme(tmp_path: Path) -> None:
    both = qc.read_quant_config(write(tmp_path / "both", hf=hf_quant(),
                                      config={"quantization_config": {**FLAT, "ignore": ["lm_head"]}}))
    assert both.runtime_scheme is not None and both.runtime_scheme.file == qc.RUNTIME_FILE == qc.CONFIG_BLOCK
    assert qc.read_quant_config(write(tmp_path / "hf", hf=hf_quant())).runtime_scheme is None
