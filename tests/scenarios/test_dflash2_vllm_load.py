"""vLLM 0.32's own DFlash 2 class loads the shipped DFlash 2 fixture's weights on CPU, and refuses the layouts
format.draft_model fails, with the errors that check quotes (scripts/vllm_load_draft.py, in vLLM's venv).

No engine, no V2 runner, no forward pass: the model is built and its weights loaded by vLLM's default
loader. Without the vLLM venv these tests FAIL and name the setup script.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fixtures import corpus
from fixtures.serving import build as build_serving
from qualify.runtime.vllm_cpu import find_vllm_python
from qualify.runtime.vllm_cpu_plugin import server_env

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "vllm_load_draft.py"
LOAD_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def target() -> Path:
    """Any target vLLM builds on CPU will do: only its config is read (the serving fixture's tiny Llama)."""
    return build_serving().target


def vllm_load(draft: Path, target: Path) -> dict[str, Any]:
    env = {**os.environ, **server_env(), "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([str(find_vllm_python()), str(SCRIPT), str(draft), str(target)], capture_output=True,
                          text=True, env=env, timeout=LOAD_TIMEOUT_S, cwd=REPO)
    last = (proc.stdout.strip().splitlines() or ["{}"])[-1]
    result = json.loads(last)
    assert (proc.returncode == 0) == bool(result.get("loaded")), proc.stderr[-3000:]
    return result


def test_vllm_loads_the_shipped_dflash2_fixture(target: Path) -> None:
    result = vllm_load(REPO / "fixtures" / "dflash2-tiny" / "mxfp8", target)
    assert result["loaded"], result
    assert result["model_class"] == "DFlash2Qwen3ForCausalLM" and result["quantization"] == "modelopt_mxfp8"
    assert result["hidden_projection_method"] == "UnquantizedLinearMethod"
    assert result["kernel_projection_method"] == "ModelOptLinearMethod"
    assert result["base_kernel_shape"] == [2, 2, 256] and result["conv_groups"] == 16 and result["selector_top_k"] == 8


@pytest.mark.parametrize("name", ["selector_projection_quantized", "dflash2_conv_group_size_missing"])
def test_vllm_refuses_what_the_format_level_fails(name: str, target: Path, tmp_path: Path) -> None:
    case = next(c for c in corpus.CASES if c.name == name)
    ckpt, _ = corpus.build(case, tmp_path / name)
    result = vllm_load(ckpt, target)
    assert not result["loaded"], result
    expected = {"selector_projection_quantized":
                "ValueError: There is no module or parameter named 'candidate_selector.hidden_projection.weight_scale'",
                "dflash2_conv_group_size_missing": "KeyError: 'conv_group_size'"}[name]
    assert result["error"].startswith(expected), result
