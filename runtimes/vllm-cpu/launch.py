"""The vLLM CPU runtime's launcher: the serving image's environment contract, turned into a vLLM server.

It reads the same variables as the GPU runtime's launcher (``MODEL``, ``DFLASH_MODEL`` at
``DFLASH_MODEL_REVISION``, ``SPECULATOR``, ``NUM_SPECULATIVE_TOKENS``, ``PORT``, the serving
limits), finds both models where the Hugging Face cache keeps them (the harness mounts
them there read-only), and replaces itself with vLLM's OpenAI-compatible server from the
mounted venv, with the plugin on ``PYTHONPATH`` (``/opt/qualify-vllm-cpu/plugin``).
``SPECULATOR=none`` serves the target alone (no ``DFLASH_MODEL`` needed): the same engine
settings without a speculator, for a reference server. ``PER_REQUEST_SPEC_DECODE_METRICS``
(e.g. ``summary``) passes vLLM's ``--per-request-spec-decode-metrics`` to a speculating server.
Variables a CPU build cannot honour (tensor and context parallelism, the GPU backends,
CUDA graphs) are named on one line and not applied. Standard library only: it runs on the
image's own python3.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

VENV_PYTHON = "/opt/vllm-venv/bin/python"
PLUGIN = "/opt/qualify-vllm-cpu/plugin"
HUB = Path(os.environ.get("HF_HUB_CACHE") or "/root/.cache/huggingface/hub")
REQUIRED = ("MODEL", "SERVED_MODEL_NAME", "PORT", "SPECULATOR")
#: Required unless SPECULATOR is NO_SPECULATOR.
REQUIRED_SPECULATIVE = ("NUM_SPECULATIVE_TOKENS", "DFLASH_MODEL")
NO_SPECULATOR = "none"
NOT_ON_CPU = ("TP", "DCP", "DFLASH_KV_CACHE_DTYPE", "DFLASH_ATTENTION_BACKEND", "ATTENTION_BACKEND", "MOE_BACKEND",
              "LINEAR_BACKEND", "B12X_PCIE_ALLREDUCE", "CUDAGRAPH_MODE", "VLLM_B12X_MOE_FP4_FORCE_A16")


def say(message: str) -> None:
    print(f"qualify-vllm-cpu launcher: {message}", flush=True)


def fail(message: str) -> None:
    say(f"error: {message}")
    sys.exit(1)


def resolve(repo: str, revision: str, what: str) -> str:
    """A local folder as is; else the hub cache's snapshot of ``repo`` at ``revision`` (the only one if none given)."""
    if Path(repo).is_dir():
        return repo
    snapshots = HUB / ("models--" + repo.replace("/", "--")) / "snapshots"
    if revision:
        folder = snapshots / revision
        if not (folder / "config.json").is_file():
            fail(f"{what} {repo} at revision {revision} is not in {snapshots} (nothing is downloaded)")
        return str(folder)
    found = sorted(p for p in snapshots.glob("*") if (p / "config.json").is_file()) if snapshots.is_dir() else []
    if len(found) != 1:
        fail(f"{what} {repo}: no revision given and {len(found)} snapshots in {snapshots}; give its revision")
    return str(found[0])


def main() -> None:
    env = os.environ
    speculating = env.get("SPECULATOR") != NO_SPECULATOR
    missing = [k for k in REQUIRED + (REQUIRED_SPECULATIVE if speculating else ()) if not env.get(k)]
    if missing:
        fail(f"missing {', '.join(missing)}")
    model = resolve(env["MODEL"], env.get("MODEL_REVISION", ""), "MODEL")
    ignored = [f"{k}={env[k]}" for k in NOT_ON_CPU if env.get(k)]
    if ignored:
        say("not applied on a CPU (one process, no GPU backends, no CUDA graphs): " + " ".join(ignored))
    argv = [VENV_PYTHON, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
            "--served-model-name", env["SERVED_MODEL_NAME"], "--host", env.get("HOST", "127.0.0.1"),
            "--port", env["PORT"], "--dtype", env.get("DTYPE", "float32"),
            "--max-model-len", env.get("MAX_MODEL_LEN", "4096"), "--max-num-seqs", env.get("MAX_NUM_SEQS", "4"),
            "--max-num-batched-tokens", env.get("MAX_NUM_BATCHED_TOKENS", "4096"), "--seed", "0",
            "--enforce-eager", "--generation-config", "vllm"]
    if speculating:
        draft = resolve(env["DFLASH_MODEL"], env.get("DFLASH_MODEL_REVISION", ""), "DFLASH_MODEL")
        spec = {"method": env["SPECULATOR"], "model": draft,
                "num_speculative_tokens": int(env["NUM_SPECULATIVE_TOKENS"])}
        argv += ["--speculative-config", json.dumps(spec, sort_keys=True)]
        if env.get("PER_REQUEST_SPEC_DECODE_METRICS"):
            argv += ["--per-request-spec-decode-metrics", env["PER_REQUEST_SPEC_DECODE_METRICS"]]
        say(f"draft {env['DFLASH_MODEL']} at {draft}; target {env['MODEL']} at {model}")
    else:
        say(f"no speculator (SPECULATOR={NO_SPECULATOR}); target {env['MODEL']} at {model}")
    say("$ " + " ".join(argv))
    # vLLM's speculative-decoding metrics line (the smoke level's log evidence) every second, not every
    # ten: a logging cadence, nothing computed differs.
    child_env = {**env, "PYTHONPATH": PLUGIN, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                 "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
                 "VLLM_CPU_KVCACHE_SPACE": env.get("VLLM_CPU_KVCACHE_SPACE", "1"),
                 "VLLM_LOG_STATS_INTERVAL": env.get("VLLM_LOG_STATS_INTERVAL", "1")}
    os.execve(VENV_PYTHON, argv, child_env)


if __name__ == "__main__":
    main()
