"""The draft model contract (qualify.checks.draft_model): each rule has a broken checkpoint that fails it, by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from qualify.checkpoint.safetensors_io import Checkpoint
from qualify.checks import draft_model as dm
from qualify.mxfp8 import codec as mxfp8
from tests.helpers import write_checkpoint

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "fixtures" / "dflash2-tiny"
PROJ = "candidate_selector.hidden_projection"


def fixture_config() -> dict[str, Any]:
    return json.loads((FIXTURE / "mxfp8" / "config.json").read_text())


def check(root: Path, config: dict[str, Any] | None = None) -> Any:
    with Checkpoint.open(root) as ckpt:
        return dm.check_draft_model(ckpt, config if config is not None else fixture_config())


def text(ev: Any) -> str:
    return " | ".join(str(x) for x in ev.findings)


def rewritten(tmp_path: Path, edit: Any) -> Path:
    """The fixture checkpoint's tensors through ``edit``, written to a folder of their own."""
    tensors = edit(dict(load_file(str(FIXTURE / "mxfp8" / "model.safetensors"))))
    return write_checkpoint(tmp_path / "ckpt", tensors, config=fixture_config())


def test_the_shipped_fixture_meets_the_dflash2_contract() -> None:
    ev = check(FIXTURE / "mxfp8")
    assert ev.ok, text(ev)
    assert ev.measured["contract"] == dm.DFLASH2.runtime_class
    assert ev.measured["kernel_projection_rows"] == 64  # 2 sides x 2 taps x 256 / 16


def test_the_dflash_cpu_fixture_meets_the_dflash_contract() -> None:
    root = REPO / "fixtures" / "dflash-cpu" / "mxfp8"
    ev = check(root, json.loads((root / "config.json").read_text()))
    assert ev.ok, text(ev)
    assert ev.measured["contract"] == dm.DFLASH.runtime_class


@pytest.mark.parametrize("key", ["conv_group_size", "selector_top_k", "conv_kernel_size", "selector_rank",
                                 "mask_token_id"])
def test_a_key_the_runtime_reads_with_no_default_is_required(key: str) -> None:
    config = fixture_config()
    del config["dflash_config"][key]
    ev = check(FIXTURE / "mxfp8", config)
    assert f"config.json: dflash_config.{key} is missing" in text(ev)
    assert "KeyError" in text(ev)


@pytest.mark.parametrize("value", [16.5, "16", True, 0, -16, None])
def test_a_key_that_is_not_a_positive_integer_fails(value: Any) -> None:
    config = fixture_config()
    config["dflash_config"]["conv_group_size"] = value
    assert f"dflash_config.conv_group_size is {value!r}, not a positive integer" in text(check(FIXTURE / "mxfp8",
                                                                                               config))


@pytest.mark.parametrize("value", [False, -1, 3.0, "7"])
def test_a_mask_token_that_is_not_a_token_id_fails(value: Any) -> None:
    config = fixture_config()
    config["dflash_config"]["mask_token_id"] = value
    assert f"dflash_config.mask_token_id is {value!r}, not a token id" in text(check(FIXTURE / "mxfp8", config))
    config["dflash_config"]["mask_token_id"] = 0
    assert check(FIXTURE / "mxfp8", config).ok


def test_a_group_size_that_contradicts_the_kernel_projection_fails() -> None:
    config = fixture_config()
    config["dflash_config"]["conv_group_size"] = 32
    found = text(check(FIXTURE / "mxfp8", config))
    assert "layers.1.mlp_conv.kernel_projection.weight" in found
    assert "shape [64, 256]" in found and "builds it [32, 256]" in found


def test_a_group_size_that_does_not_divide_the_hidden_size_fails() -> None:
    config = fixture_config()
    config["dflash_config"]["conv_group_size"] = 24
    assert "conv_group_size 24 does not divide hidden_size 256" in text(check(FIXTURE / "mxfp8", config))


def test_top_k_beyond_the_vocabulary_and_mask_token_outside_it_fail() -> None:
    config = fixture_config()
    config["dflash_config"].update(selector_top_k=4096, mask_token_id=2048)
    found = text(check(FIXTURE / "mxfp8", config))
    assert "selector_top_k 4096 exceeds the vocabulary (2048 tokens)" in found
    assert "mask_token_id 2048 is outside the vocabulary" in found


def test_the_base_kernel_in_the_transposed_layout_fails(tmp_path: Path) -> None:
    config = fixture_config()
    config["dflash_config"]["conv_kernel_size"] = 3  # [2, 3, 256] expected, the fixture's are [2, 2, 256]
    found = text(check(FIXTURE / "mxfp8", config))
    assert "layers.0.attention_conv.base_kernel" in found and "builds it [2, 3, 256]" in found


def test_a_missing_selector_codebook_fails(tmp_path: Path) -> None:
    name = "candidate_selector.successor_codebook"
    root = rewritten(tmp_path, lambda t: {k: v for k, v in t.items() if k != name})
    found = text(check(root))
    assert f"tensor '{name}': is missing" in found and "[2048, 32]" in found


def test_a_quantized_hidden_projection_fails_with_the_runtime_s_words(tmp_path: Path) -> None:
    def edit(t: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        q = mxfp8.quantize(t[PROJ + ".weight"], "modelopt")
        return {**t, PROJ + ".weight": q.data, PROJ + ".weight_scale": q.scale}

    found = text(check(rewritten(tmp_path, edit)))
    assert f"tensor '{PROJ}.weight': quantized (F8_E4M3)" in found
    assert f"There is no module or parameter named '{PROJ}.weight_scale'" in found
    assert f"exclude '{PROJ}' from quantization" in found


def test_a_hidden_projection_in_an_integer_dtype_fails(tmp_path: Path) -> None:
    root = rewritten(tmp_path, lambda t: {**t, PROJ + ".weight": t[PROJ + ".weight"].to(torch.int16)})
    assert f"tensor '{PROJ}.weight': stored as I16" in text(check(root))


def test_the_speculators_format_is_read_as_vllm_reads_it() -> None:
    layer = {k: v for k, v in fixture_config().items() if k not in ("architectures", "dflash_config")}
    config = {"speculators_model_type": "dflash2", "transformer_layer_config": layer, "mask_token_id": 2047,
              "aux_hidden_state_layer_ids": [2, 4], "conv_kernel_size": 2, "conv_group_size": 16, "selector_rank": 32}
    assert dm.contract_for(config) is dm.DFLASH2
    found = text(check(FIXTURE / "mxfp8", config))
    assert "dflash_config.selector_top_k is missing" in found and "conv_group_size" not in found
    # The shapes come from transformer_layer_config, as vLLM builds the model from it.
    config.update(selector_top_k=8, conv_group_size=32)
    assert "builds it [32, 256]" in text(check(FIXTURE / "mxfp8", config))
    del config["transformer_layer_config"], config["aux_hidden_state_layer_ids"]
    found = text(check(FIXTURE / "mxfp8", config))
    assert "'transformer_layer_config' is missing" in found and "'aux_hidden_state_layer_ids' is missing" in found


def test_an_unknown_architecture_is_not_verified() -> None:
    config = dict(fixture_config(), architectures=["MysteryDraftModel"])
    assert "name no draft model this harness knows" in text(check(FIXTURE / "mxfp8", config))
    assert check(FIXTURE / "mxfp8", dict(fixture_config(), architectures=["LlamaForCausalLM"])).ok


