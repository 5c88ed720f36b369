"""A genuine NVIDIA ModelOpt MXFP8 export, checked with the harness's own library.

The export comes from :mod:`fixtures.modelopt_export` (a tiny random Llama through
``mtq.quantize(..., MXFP8_DEFAULT_CFG)`` and ``export_hf_checkpoint``). ModelOpt is a declared
test dependency: without it these tests fail, naming the pip command; they never skip.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
from pathlib import Path

import pytest
import torch

from fixtures.modelopt_export import LLAMA_CONFIG, PIP_INSTALL, ModelOptUnavailableError, export_tiny_llama
from qualify.checkpoint.quant_config import read_model_config, read_quant_config
from qualify.checkpoint.safetensors_io import Checkpoint
from qualify.checks import format as f
from qualify.mxfp8 import codec as mxfp8

H = LLAMA_CONFIG["hidden_size"]
I = LLAMA_CONFIG["intermediate_size"]  # noqa: E741
V = LLAMA_CONFIG["vocab_size"]
KV = LLAMA_CONFIG["num_key_value_heads"] * LLAMA_CONFIG["head_dim"]
Q = LLAMA_CONFIG["num_attention_heads"] * LLAMA_CONFIG["head_dim"]
LAYERS = LLAMA_CONFIG["num_hidden_layers"]
B = mxfp8.BLOCK_SIZE

#: Every linear inside a decoder layer, with its [N, K].
LAYER_LINEARS = {
    "self_attn.q_proj": [Q, H],
    "self_attn.k_proj": [KV, H],
    "self_attn.v_proj": [KV, H],
    "self_attn.o_proj": [H, Q],
    "mlp.gate_proj": [I, H],
    "mlp.up_proj": [I, H],
    "mlp.down_proj": [H, I],
}
QUANTIZED = {f"model.layers.{n}.{m}.weight": shape for n in range(LAYERS) for m, shape in LAYER_LINEARS.items()}
#: Tensors ModelOpt leaves in BF16: the excluded lm_head and embedding, and every norm.
UNQUANTIZED = {
    "lm_head.weight": [V, H],
    "model.embed_tokens.weight": [V, H],
    "model.norm.weight": [H],
    **{f"model.layers.{n}.{norm}.weight": [H] for n in range(LAYERS)
       for norm in ("input_layernorm", "post_attention_layernorm")},
}
PROFILE_EXCLUDED = ["lm_head"]

# Importing ModelOpt scripts a few modules with torch.jit, which torch 2.13 deprecates; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:.*torch.jit.script:DeprecationWarning")


def _modelopt_version() -> str:
    return importlib.metadata.version("nvidia-modelopt")


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    try:
        return export_tiny_llama(tmp_path_factory.mktemp("modelopt"))
    except ModelOptUnavailableError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def ckpts(export: tuple[Path, Path]):
    source_dir, export_dir = export
    with Checkpoint.open(source_dir) as source, Checkpoint.open(export_dir) as exported:
        yield source, exported


@pytest.mark.slow
def test_modelopt_and_transformers_are_installed():
    for module in ("modelopt.torch.quantization", "modelopt.torch.export", "transformers"):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            pytest.fail(f"{module} does not import ({exc}): nvidia-modelopt and transformers are test dependencies "
                        f"of the ModelOpt export fixture; install them with: {PIP_INSTALL}")
    assert str(torch.__version__).startswith("2.13."), f"torch {torch.__version__}: pip replaced the pinned torch"


@pytest.mark.slow
def test_export_layout(ckpts):
    source, exported = ckpts
    layout = {name: (exported.info(name).dtype, list(exported.info(name).shape)) for name in exported.names()}
    want = {name: ("F8_E4M3", shape) for name, shape in QUANTIZED.items()}
    want.update({name[: -len(".weight")] + ".weight_scale": ("U8", [n, k // B]) for name, (n, k) in QUANTIZED.items()})
    want.update({name: ("BF16", shape) for name, shape in UNQUANTIZED.items()})
    assert layout == want
    # The source is the same model in BF16 under the same (HF Llama) names: no prefix to strip.
    assert {name: (source.info(name).dtype, list(source.info(name).shape)) for name in source.names()} == {
        name: ("BF16", shape) for name, shape in {**QUANTIZED, **UNQUANTIZED}.items()}


@pytest.mark.slow
def test_export_quant_config_files(export):
    source_dir, export_dir = export
    producer = {"name": "modelopt", "version": _modelopt_version()}
    hf_quant = json.loads((export_dir / "hf_quant_config.json").read_text())
    print("hf_quant_config.json:", json.dumps(hf_quant, indent=2))
    assert hf_quant == {
        "producer": producer,
        "quantization": {
            "quant_algo": "MXFP8",
            "kv_cache_quant_algo": None,
            "group_size": 32,
            "exclude_modules": ["lm_head", "model.embed_tokens"],
        },
    }
    config = json.loads((export_dir / "config.json").read_text())
    print("config.json quantization_config:", json.dumps(config["quantization_config"], indent=2))
    assert config.pop("quantization_config") == {
        "ignore": ["lm_head", "model.embed_tokens"],
        "quant_algo": "MXFP8",
        "producer": producer,
        "quant_method": "modelopt",
    }
    # Apart from that block the export's config.json is the source's.
    assert config == json.loads((source_dir / "config.json").read_text())


@pytest.mark.slow
def test_quantized_bytes_equal_the_modelopt_recipe(ckpts):
    source, exported = ckpts
    floor_differs: dict[str, int] = {}
    for name in QUANTIZED:
        scale_name = name[: -len(".weight")] + ".weight_scale"
        src = source.tensor(name)
        assert src.dtype == torch.bfloat16
        data, scale = exported.tensor(name), exported.tensor(scale_name)
        ours = mxfp8.quantize(src, "modelopt", name=name)
        assert torch.equal(data.view(torch.uint8), ours.data.view(torch.uint8)), name
        assert torch.equal(scale, ours.scale), scale_name
        floor = mxfp8.quantize(src, "ocp-floor", name=name)
        floor_differs[name] = int((floor.scale != scale).sum())
    print("scale bytes differing from ocp-floor:", floor_differs)
    # Blocks whose amax significand exceeds 1.75 get a one-higher exponent under ModelOpt's rule.
    assert sum(floor_differs.values()) > 0
    assert sum(1 for n in floor_differs.values() if n) >= len(QUANTIZED) // 2


@pytest.mark.slow
def test_unquantized_tensors_are_the_source_bytes(ckpts):
    source, exported = ckpts
    for name in UNQUANTIZED:
        assert bytes(exported.raw(name)) == bytes(source.raw(name)), name


@pytest.mark.slow
def test_export_is_deterministic(export, tmp_path):
    again = export_tiny_llama(tmp_path)
    for first, second in zip(export, again, strict=True):
        for file in ("model.safetensors", "config.json"):
            assert (first / file).read_bytes() == (second / file).read_bytes(), f"{second.name}/{file}"
    assert (export[1] / "hf_quant_config.json").read_bytes() == (again[1] / "hf_quant_config.json").read_bytes()


CHECKS = {
    "check_weights": lambda ckpt, qc, cfg: f.check_weights(ckpt, tensor_parallel_size=1),
    "check_scales": lambda ckpt, qc, cfg: f.check_scales(ckpt),
    "check_block_normalization": lambda ckpt, qc, cfg: f.check_block_normalization(ckpt),
    "check_exclusions": lambda ckpt, qc, cfg: f.check_exclusions(ckpt, PROFILE_EXCLUDED, qc),
    "check_linear_coverage": lambda ckpt, qc, cfg: f.check_linear_coverage(ckpt, PROFILE_EXCLUDED, qc),
    "check_quant_config": lambda ckpt, qc, cfg: f.check_quant_config(
        ckpt, qc, excluded_modules=PROFILE_EXCLUDED, kv_cache_quant_algo=None),
    "check_model_config": lambda ckpt, qc, cfg: f.check_model_config(ckpt, cfg),
}


@pytest.mark.format
@pytest.mark.parametrize("check", list(CHECKS))
def test_format_checks_accept_the_genuine_export(export, ckpts, check):
    _, export_dir = export
    _, exported = ckpts
    qc, cfg = read_quant_config(export_dir), read_model_config(export_dir)
    assert [s.file for s in qc.schemes] == ["hf_quant_config.json", "config.json quantization_config"]
    ev = CHECKS[check](exported, qc, cfg)
    assert ev.ok, ev.failure_text()


@pytest.mark.slow
def test_qualify_manifest_then_check_qualifies_the_export(export, tmp_path):
    """The user path: `qualify manifest` on a ModelOpt export, then `qualify check` runs every checkpoint level."""
    import shutil

    from qualify.checkpoint.checksums import folder_revision
    from qualify.profile import load_profile
    from tests.helpers import run_qualify

    source_dir, export_dir = export
    ckpt = tmp_path / "export"
    shutil.copytree(export_dir, ckpt)
    revision = "1" * 40
    proc = run_qualify("manifest", str(source_dir), str(ckpt), "--source-repo", "qualify-fixtures/tiny-llama",
                       "--source-revision", revision)
    assert proc.returncode == 0, proc.stderr
    assert "scale recipe modelopt" in proc.stdout
    profile = tmp_path / "tiny-llama.toml"
    text = load_profile("fixture").path.read_text()
    # The export's source is proven by its content revision, as the fixture's is.
    fixture = load_profile("fixture")
    text = text.replace(f'content_revision = "{fixture.source_content_revision}"',
                        f'content_revision = "{folder_revision(source_dir)}"')
    # A Llama export has no DFlash 2 candidate selector: lm_head is its only excluded module.
    excluded = 'excluded_modules = ["lm_head", "candidate_selector.hidden_projection"]'
    assert excluded in text
    profile.write_text(text.replace(fixture.source_revision, revision)
                       .replace('repo = "qualify-fixtures/dflash2-tiny"', 'repo = "qualify-fixtures/tiny-llama"')
                       .replace(excluded, 'excluded_modules = ["lm_head"]'))
    check = run_qualify("check", str(ckpt), "--source", str(source_dir), "--profile", str(profile),
                        "--report-dir", str(tmp_path / "reports"))
    assert check.returncode == 0, check.stdout + check.stderr
    for level in ("structure", "format", "reproduction"):
        assert f"{level:<13} passed" in check.stdout
