"""The CPU DFlash fixture (fixtures/dflash-cpu): what vLLM's DFlash proposer reads, and the checkpoint levels.

The draft is served by the real vLLM in ``tests/scenarios/test_dflash_cpu_live.py`` (slow); here, the
contract it must meet to be served at all, checked on the shipped bytes, and the damaged
variants, each a consistent checkpoint that differs from the good one only as intended.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from fixtures import dflash_cpu, serving
from qualify.checkpoint.checksums import folder_revision
from qualify.profile import load_profile
from tests.helpers import TRACEBACK, run_qualify

DRAFT = dflash_cpu.DEFAULT_OUT
PROFILE = "fixture-dflash-cpu"


def _names(path: Path) -> dict[str, tuple[list[int], str]]:
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        keys = list(f.keys())
        return {k: (list(f.get_slice(k).get_shape()), f.get_slice(k).get_dtype()) for k in keys}


def test_config_is_what_vllms_dflash_proposer_reads() -> None:
    config = json.loads((DRAFT / "mxfp8" / "config.json").read_text())
    assert config["architectures"] == ["DFlashDraftModel"] and config["model_type"] == "qwen3"
    dflash = config["dflash_config"]
    profile = load_profile(PROFILE)
    k = int(profile.launch_env()["NUM_SPECULATIVE_TOKENS"])
    assert dflash["block_size"] == k + 1
    assert all(0 <= i < serving.SHAPE.num_hidden_layers for i in dflash["target_layer_ids"])
    # The mask token is never in a prompt the tokenizer makes, and the target never predicts it.
    assert dflash["mask_token_id"] == serving.SPECIAL_TOKENS.index("<s>")
    assert config["hidden_size"] == serving.SHAPE.hidden_size and config["vocab_size"] == serving.SHAPE.vocab_size
    assert config["quantization_config"]["quant_algo"] == "MXFP8"


def test_tensors_are_named_as_vllm_loads_them_and_share_the_targets_head() -> None:
    names = _names(DRAFT / "source")
    assert set(names) == set(dflash_cpu.draft_tensor_shapes())
    assert not any(n.startswith("model.") or "embed_tokens" in n for n in names)  # the target's embeddings
    for name, shape in dflash_cpu.draft_tensor_shapes().items():
        assert names[name] == (list(shape), "BF16"), name
    # lm_head is an exact copy of the target's, so vLLM shares it (and the checkpoint holds the excluded module).
    from safetensors.torch import load_file

    target = load_file(str(serving.build().target / "model.safetensors"))["lm_head.weight"]
    draft = load_file(str(DRAFT / "source" / "model.safetensors"))["lm_head.weight"]
    assert torch.equal(draft.to(torch.float32), target)


def test_the_profile_pins_the_shipped_source() -> None:
    assert load_profile(PROFILE).source_revision == folder_revision(DRAFT / "source")


@pytest.mark.slow
def test_the_shipped_draft_passes_the_checkpoint_levels(tmp_path: Path) -> None:
    done = run_qualify("check", str(DRAFT / "mxfp8"), "--source", str(DRAFT / "source"), "--profile", PROFILE,
                       "--levels", "structure,format,reproduction", "--report-dir", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verdict: qualified" in done.stdout and TRACEBACK not in done.stdout + done.stderr


@pytest.mark.slow
def test_damaged_variants_differ_only_as_intended(tmp_path: Path) -> None:
    # The variants the live tests serve (fixtures/build/dflash-cpu-variants, rebuilt unless built from this source
    # by this generator): what is checked here is what they serve.
    paths = dflash_cpu.build_variants(DRAFT / "source")
    good = json.loads((DRAFT / "source" / "config.json").read_text())
    good_tensors, _ = dflash_cpu.read_source(DRAFT / "source")
    checks: dict[str, tuple[Path, Path]] = {}
    for name, path in paths.items():
        config = json.loads((path / "source" / "config.json").read_text())
        tensors, _ = dflash_cpu.read_source(path / "source")
        changed_config = {k for k in good["dflash_config"] if good["dflash_config"][k] != config["dflash_config"][k]}
        changed = {k for k in good_tensors if not torch.equal(good_tensors[k], tensors[k])}
        if name in dflash_cpu.WRONG_TARGET_LAYERS:
            assert changed_config == {"target_layer_ids"} and not changed
            ids = config["dflash_config"]["target_layer_ids"]
            assert len(ids) == 2 and sorted(ids) != sorted(good["dflash_config"]["target_layer_ids"])
        elif name == "wrong-mask-token":
            assert changed_config == {"mask_token_id"} and not changed
            assert config["dflash_config"]["mask_token_id"] >= len(serving.SPECIAL_TOKENS)
        else:
            assert not changed_config and changed and all(k.endswith("_proj.weight") for k in changed)
            for k in changed:  # the same values, other rows
                assert torch.equal(good_tensors[k].flatten().sort().values, tensors[k].flatten().sort().values)
        # A consistent checkpoint: its conversion reproduces from its own source, so only the runtime can tell it
        # is damaged. (Its source is not the one the shipped profile pins: a profile pinning it is written here.)
        pinned = load_profile(PROFILE)
        text = pinned.path.read_text(encoding="utf-8").replace(pinned.source_revision or "-",
                                                               folder_revision(path / "source"))
        profile = tmp_path / f"{name}.toml"
        profile.write_text(text.replace('"../../', f'"{pinned.path.parent.parent.parent}/'), encoding="utf-8")
        checks[name] = (path, profile)

    def check(name: str) -> tuple[str, subprocess.CompletedProcess[str]]:
        path, profile = checks[name]
        return name, run_qualify("check", str(path / "mxfp8"), "--source", str(path / "source"), "--profile",
                                 str(profile), "--levels", "format,reproduction", "--report-dir", str(tmp_path / name))

    # Each run has its own profile copy and report folder: two at a time, one per core.
    with ThreadPoolExecutor(2) as ex:
        for name, done in ex.map(check, checks):
            assert done.returncode == 0, f"{name}: {done.stdout}{done.stderr}"


def test_the_scale_damaged_conversion_differs_only_in_scale_bytes_each_one_higher(tmp_path: Path) -> None:
    """The paired level's damaged variant (test_dflash_cpu_live.py): scale bytes +1, the folder consistent."""
    out = dflash_cpu.scale_bytes_off_by_one(DRAFT / "mxfp8", tmp_path / "damaged")
    good, bad = _names(DRAFT / "mxfp8"), _names(out)
    assert good == bad
    changed = 0
    with safe_open(str(DRAFT / "mxfp8" / "model.safetensors"), "pt") as g, \
            safe_open(str(out / "model.safetensors"), "pt") as b:
        for name in good:
            x, y = g.get_tensor(name), b.get_tensor(name)
            if torch.equal(x, y):
                continue
            assert name.endswith("weight_scale"), name
            diff = y.to(torch.int16) - x.to(torch.int16)
            assert set(diff.unique().tolist()) == {0, 1}, name
            changed += int(diff.sum())
    assert changed > 0
    manifest = json.loads((out / "conversion_manifest.json").read_text())
    for entry in manifest["output"]["files"]:
        assert hashlib.sha256((out / entry["path"]).read_bytes()).hexdigest() == entry["sha256"], entry["path"]


def test_the_paired_level_serves_the_pinned_bf16_source_as_the_checkpoint_is_served() -> None:
    """make qualify's release question: the checkpoint against the very BF16 draft it was converted from."""
    profile = load_profile(PROFILE)
    spec, paired = profile.local_server, profile.paired
    assert spec is not None and paired is not None and profile.speedup is not None
    assert "paired" in profile.required_levels and "speedup" in profile.measured_levels
    assert spec.source_draft == (DRAFT / "source").resolve()
    # The served source is the source the checkpoint's manifest names and the profile pins.
    manifest = json.loads((DRAFT / "mxfp8" / "conversion_manifest.json").read_text())
    assert folder_revision(spec.source_draft) == profile.source_revision == manifest["source"]["revision"]
    assert json.loads((spec.source_draft / "config.json").read_text())["dtype"] == "bfloat16"
    assert spec.serve_checkpoint and spec.method == "dflash"
    # Batch 1 and the runtime's MAX_NUM_SEQS, both gated.
    assert paired.concurrency == (1, int(profile.launch_env()["MAX_NUM_SEQS"]))
