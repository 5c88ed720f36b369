"""What vLLM itself reads from a checkpoint folder: run with the python of the vLLM CPU venv, never imported.

    <vllm venv>/bin/python tests/data/vllm_file_rules.py < request.json

The request is ``{"weights": [folder, ...], "quant": [folder, ...]}``. For each ``weights``
folder, the weight files vLLM 0.32's default loader selects with ``load_format="auto"``
(``DefaultModelLoader._prepare_weights``: the mistral check on ``consolidated*.safetensors``,
the ``*.safetensors`` / ``*.bin`` / ``*.pt`` patterns in order, ``filter_duplicate_safetensors_files``
against the index, ``filter_files_not_needed_for_inference``), relative to the folder. For each
``quant`` folder, the quantization method vLLM detects (``ModelConfig``, which reads config.json's
``quantization_config`` or else hf_quant_config.json) and, for ModelOpt, what its config class
ended up with (``get_quant_config`` -> ``ModelOptMxFp8Config.from_config``): the exclusion
patterns and the KV-cache algorithm. Nothing is re-implemented here: vLLM's own functions run.

The answer is one line on stdout, ``VLLM_FILE_RULES <json>``; vLLM's logs may come before it.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

MARKER = "VLLM_FILE_RULES "


def weight_files(folder: str) -> dict[str, Any]:
    from vllm.config import LoadConfig
    from vllm.model_executor.model_loader.default_loader import DefaultModelLoader

    loader = DefaultModelLoader(LoadConfig(load_format="auto"))
    try:
        # (model, subfolder, revision, fall_back_to_pt, allow_patterns_overrides): what
        # DefaultModelLoader.Source passes by default.
        _, found, use_safetensors, index = loader._prepare_weights(folder, None, None, True, None)
    except (RuntimeError, FileNotFoundError, ValueError) as exc:
        return {"files": [], "error": f"{type(exc).__name__}: {exc}"}
    return {"files": sorted(os.path.relpath(f, folder) for f in found), "use_safetensors": use_safetensors,
            "index": index, "error": None}


def quant_reading(folder: str) -> dict[str, Any]:
    from vllm.config import LoadConfig, ModelConfig
    from vllm.model_executor.model_loader.weight_utils import get_quant_config

    try:
        model_config = ModelConfig(model=folder, skip_tokenizer_init=True)
        method = model_config.quantization
        if method is None:
            return {"method": None, "error": None}
        config = get_quant_config(model_config, LoadConfig())
    except Exception as exc:  # any refusal is the answer
        text = str(exc)
        # pydantic wraps the reason: "1 validation error ... Value error, <reason> [type=...".
        if "Value error, " in text:
            text = text.split("Value error, ", 1)[1].split(" [type=", 1)[0]
        return {"method": None, "error": f"{type(exc).__name__}: {text}"}
    return {"method": method, "config_class": type(config).__name__,
            "exclude_modules": list(getattr(config, "exclude_modules", []) or []),
            "kv_cache_quant_algo": getattr(config, "kv_cache_quant_algo", None), "error": None}


def main() -> int:
    request = json.load(sys.stdin)
    import vllm

    answer = {
        "vllm_version": vllm.__version__,
        "weights": {folder: weight_files(folder) for folder in request.get("weights", [])},
        "quant": {folder: quant_reading(folder) for folder in request.get("quant", [])},
    }
    print(MARKER + json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
