"""The stand-in serving runtime: honours the real launcher's environment contract on a CPU.

It runs inside the ``qualify-standin`` image (Debian bookworm's own python3, standard
library only) so the harness's container launch, readiness wait, log capture, load
evidence extraction and teardown are exercised for real on a machine without GPUs. It
is *not* an inference engine: it reads the draft checkpoint it is pointed at (the same
way the real launcher finds it: ``DFLASH_MODEL`` at ``DFLASH_MODEL_REVISION`` in the
Hugging Face cache, or a local path), prints load lines in vLLM's style that describe
what it actually found (quantization algorithm, tensor bytes), and serves ``/health``,
``/v1/models``, ``/v1/completions`` and ``/metrics``.

``STANDIN_FAULT`` makes it misbehave the ways a real runtime does, so the harness's
failure paths are tested: ``crash`` (exits during load), ``hang`` (never serves),
``wrong-evidence`` (another kernel, another weight size), ``wrong-model`` (serves another
name), ``crash-after-ready`` (dies once serving), ``leak-env`` (prints its environment,
secrets included, as some launchers do). ``STANDIN_LOAD_SECONDS`` stretches the load.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CONTRACT = (
    "MODEL", "SERVED_MODEL_NAME", "PORT", "TP", "DCP", "MAX_NUM_SEQS", "MAX_MODEL_LEN", "MAX_NUM_BATCHED_TOKENS",
    "SPECULATOR", "NUM_SPECULATIVE_TOKENS", "DFLASH_MODEL", "DFLASH_MODEL_REVISION", "DFLASH_KV_CACHE_DTYPE",
    "DFLASH_ATTENTION_BACKEND", "ATTENTION_BACKEND", "MOE_BACKEND", "LINEAR_BACKEND", "B12X_PCIE_ALLREDUCE",
    "CUDAGRAPH_MODE", "VLLM_B12X_MOE_FP4_FORCE_A16",
)
REQUIRED = ("MODEL", "SERVED_MODEL_NAME", "PORT", "TP", "SPECULATOR", "NUM_SPECULATIVE_TOKENS", "DFLASH_MODEL")
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
KV_CACHE_DTYPES = ("auto", "bfloat16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2")
DTYPE_BYTES = {"F8_E4M3": 1, "F8_E5M2": 1, "U8": 1, "I8": 1, "BOOL": 1, "BF16": 2, "F16": 2, "I16": 2,
               "F32": 4, "I32": 4, "U32": 4, "F64": 8, "I64": 8, "U64": 8}
FAULT = os.environ.get("STANDIN_FAULT", "")
STATS = {"requests": 0, "generated": 0, "drafts": 0, "drafted": 0, "accepted": 0}
_LOCK = threading.Lock()


class LoadError(Exception):
    """The runtime cannot load what it was told to (exit 1, like vLLM's engine core failing)."""


def log(level: str, where: str, message: str) -> None:
    stamp = time.strftime("%m-%d %H:%M:%S", time.gmtime())
    print(f"{level} {stamp} [{where}] {message}", flush=True)


def env(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def int_env(name: str, minimum: int) -> int:
    raw = env(name)
    try:
        value = int(raw)
    except ValueError:
        raise LoadError(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise LoadError(f"{name}={value} must be at least {minimum}")
    return value


def hub_cache() -> Path:
    if env("HF_HUB_CACHE"):
        return Path(env("HF_HUB_CACHE"))
    return Path(env("HF_HOME", "/root/.cache/huggingface")) / "hub"


def resolve_draft(repo: str, revision: str) -> tuple[Path, str]:
    """Where the draft's files are, and the revision they are at; the stand-in never downloads."""
    if repo.startswith("/"):
        path = Path(repo)
        if not path.is_dir():
            raise LoadError(f"draft model path {repo} does not exist")
        return path, revision or "(local path)"
    folder = hub_cache() / ("models--" + repo.replace("/", "--"))
    if not revision:
        ref = folder / "refs" / "main"
        if not ref.is_file():
            raise LoadError(f"{repo}: no revision given and no cached refs/main under {folder} (the stand-in never"
                            " downloads)")
        revision = ref.read_text().strip()
        log("WARNING", "dflash.py:64", f"DFLASH_MODEL_REVISION is empty: resolved {repo} main -> {revision}")
    snapshot = folder / "snapshots" / revision
    if not snapshot.is_dir():
        raise LoadError(f"{repo} at revision {revision} is not in the Hugging Face cache at {snapshot}")
    return snapshot, revision


def tensor_bytes(path: Path) -> int:
    """Bytes of tensor data a safetensors file declares, from its header (what a loader would allocate)."""
    with path.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    total = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        total += end - begin
    return total


def load() -> dict[str, object]:
    missing = [name for name in REQUIRED if not env(name)]
    if missing:
        raise LoadError(f"missing required environment: {', '.join(missing)}")
    tp = int_env("TP", 1)
    int_env("DCP", 1) if env("DCP") else None
    k = int_env("NUM_SPECULATIVE_TOKENS", 1)
    port = int_env("PORT", 1)
    if env("SPECULATOR") != "dflash":
        raise LoadError(f"SPECULATOR={env('SPECULATOR')!r}: this runtime only drafts with dflash")
    graphs = env("CUDAGRAPH_MODE", "NONE")
    if graphs not in CUDAGRAPH_MODES:
        raise LoadError(f"CUDAGRAPH_MODE={graphs!r} is not one of {', '.join(CUDAGRAPH_MODES)}")
    kv = env("DFLASH_KV_CACHE_DTYPE", "auto")
    if kv not in KV_CACHE_DTYPES:
        raise LoadError(f"DFLASH_KV_CACHE_DTYPE={kv!r} is not one of {', '.join(KV_CACHE_DTYPES)}")
    given = {name: env(name) for name in CONTRACT if name in os.environ}
    log("INFO", "api_server.py:1", f"stand-in runtime, non-default args: {json.dumps(given, sort_keys=True)}")
    if FAULT == "leak-env":
        log("INFO", "envs.py:1", f"environment: {json.dumps(dict(os.environ), sort_keys=True)}")
    log("INFO", "parallel_state.py:1", f"tensor parallel size {tp}, decode context parallel size {env('DCP', '1')}"
        " (stand-in: one CPU process)")
    log("INFO", "model_runner.py:1", f"Loading target model {env('MODEL')} (stand-in: no target weights are"
        " loaded)")
    delay = float(env("STANDIN_LOAD_SECONDS", "0.2"))
    time.sleep(delay / 2)

    draft_dir, revision = resolve_draft(env("DFLASH_MODEL"), env("DFLASH_MODEL_REVISION"))
    log("INFO", "dflash.py:40", f"Loading DFlash draft {env('DFLASH_MODEL')} at revision {revision}")
    quant_path = draft_dir / "hf_quant_config.json"
    quant = json.loads(quant_path.read_text())["quantization"] if quant_path.is_file() else {}
    algo = quant.get("quant_algo")
    if FAULT == "crash":
        log("ERROR", "core.py:700", "EngineCore failed to start.")
        raise LoadError("RuntimeError: CUDA error: an illegal memory access was encountered (STANDIN_FAULT=crash)")
    # wrong-evidence: a runtime that misreads the checkpoint as plain FP8 (and so picks another kernel).
    shown = "FP8" if FAULT == "wrong-evidence" and algo else algo
    if shown == "MXFP8":
        log("INFO", "modelopt.py:123", f"Detected ModelOpt MXFP8 checkpoint (group size {quant.get('group_size')},"
            f" excluded: {', '.join(quant.get('exclude_modules') or []) or 'none'})")
    elif shown:
        log("INFO", "modelopt.py:130", f"Detected ModelOpt {shown} checkpoint")
    else:
        log("WARNING", "modelopt.py:140", "no hf_quant_config.json: loading the draft unquantized")
    kernel = "B12xMxfp8LinearKernel" if env("LINEAR_BACKEND") == "b12x" else "CutlassMxfp8LinearKernel"
    if FAULT == "wrong-evidence":
        kernel = "MarlinFp8LinearKernel"
    if algo == "MXFP8":
        log("INFO", "mxfp8.py:88", f"Using {kernel} for draft GEMMs")
        log("INFO", "dflash.py:51", f"Using {kernel} for fused DFlash context_kv_proj")
    files = sorted(draft_dir.glob("*.safetensors"))
    if not files:
        raise LoadError(f"no *.safetensors in {draft_dir}")
    nbytes = sum(tensor_bytes(f) for f in files)
    gib = 9.99 if FAULT == "wrong-evidence" else nbytes / 2**30
    time.sleep(delay / 2)
    log("INFO", "gpu_model_runner.py:1700", f"Loading drafter model weights took {gib:.4f} GiB")
    log("INFO", "dflash.py:90", f"DFlash proposal length {k}, KV cache dtype {kv}, attention backend "
        f"{env('DFLASH_ATTENTION_BACKEND', 'auto')}, CUDA graph mode {graphs}")
    return {"port": port, "k": k, "served": env("SERVED_MODEL_NAME"), "max_model_len": env("MAX_MODEL_LEN")}


def completion(body: dict, config: dict) -> dict:
    prompt = body.get("prompt", "")
    if isinstance(prompt, list):
        prompt = " ".join(map(str, prompt))
    max_tokens = int(body.get("max_tokens") or 16)
    seed = hashlib.sha256(str(prompt).encode()).digest()
    words = [f"t{seed[i % len(seed)]:02x}" for i in range(max_tokens)]
    k = config["k"]
    steps = -(-max_tokens // (k + 1))  # each verify step yields up to k accepted + 1 bonus token
    drafted, accepted = steps * k, max_tokens - steps
    with _LOCK:
        STATS["requests"] += 1
        STATS["generated"] += max_tokens
        STATS["drafts"] += steps
        STATS["drafted"] += drafted
        STATS["accepted"] += accepted
    mean = 1 + accepted / steps if steps else 0.0
    log("INFO", "metrics.py:90", f"SpecDecoding metrics: Mean acceptance length: {mean:.2f}, "
        f"Accepted: {accepted} tokens, Drafted: {drafted} tokens")
    return {
        "id": f"cmpl-{seed.hex()[:16]}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": config["served"],
        "choices": [{"index": 0, "text": " " + " ".join(words), "finish_reason": "length", "logprobs": None}],
        "usage": {"prompt_tokens": len(str(prompt).split()), "completion_tokens": max_tokens,
                  "total_tokens": len(str(prompt).split()) + max_tokens},
    }


def metrics_text(served: str) -> str:
    label = f'{{model_name="{served}"}}'
    with _LOCK:
        s = dict(STATS)
    lines = [
        "# HELP vllm:request_success_total Count of successfully processed requests.",
        "# TYPE vllm:request_success_total counter",
        f"vllm:request_success_total{label} {float(s['requests'])}",
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
        "# TYPE vllm:generation_tokens_total counter",
        f"vllm:generation_tokens_total{label} {float(s['generated'])}",
        "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        f"vllm:spec_decode_num_drafts_total{label} {float(s['drafts'])}",
        "# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.",
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
        f"vllm:spec_decode_num_draft_tokens_total{label} {float(s['drafted'])}",
        "# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.",
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
        f"vllm:spec_decode_num_accepted_tokens_total{label} {float(s['accepted'])}",
    ]
    return "\n".join(lines) + "\n"


def make_handler(config: dict) -> type[BaseHTTPRequestHandler]:
    served = config["served"] + ("-other" if FAULT == "wrong-model" else "")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *args: object) -> None:
            status = args[1] if len(args) > 1 else ""
            log("INFO", "api_server.py:2", f'{self.client_address[0]} "{self.requestline}" {status}')

        def send(self, code: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def send_json(self, code: int, data: dict) -> None:
            self.send(code, json.dumps(data).encode())

        def do_GET(self) -> None:
            if self.path == "/health":
                self.send(200, b"", "text/plain")
            elif self.path == "/v1/models":
                self.send_json(200, {"object": "list", "data": [{
                    "id": served, "object": "model", "created": 0, "owned_by": "vllm", "root": env("MODEL"),
                    "max_model_len": int(config["max_model_len"] or 0)}]})
            elif self.path == "/metrics":
                self.send(200, metrics_text(served).encode(), "text/plain; version=0.0.4")
            else:
                self.send_json(404, {"error": {"message": f"no route {self.path}", "type": "NotFoundError"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except json.JSONDecodeError:
                self.send_json(400, {"error": {"message": "body is not JSON", "type": "BadRequestError"}})
                return
            if self.path != "/v1/completions":
                self.send_json(404, {"error": {"message": f"no route {self.path}", "type": "NotFoundError"}})
            elif body.get("model") != served:
                self.send_json(404, {"error": {"message": f"The model `{body.get('model')}` does not exist.",
                                               "type": "NotFoundError"}})
            else:
                self.send_json(200, completion(body, config))

    return Handler


def main() -> int:
    # The harness stops the container with SIGTERM (docker stop) or SIGKILL; exit cleanly on the former.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        config = load()
    except LoadError as exc:
        log("ERROR", "core.py:710", f"{exc}")
        return 1
    if FAULT == "hang":
        log("INFO", "core.py:720", "waiting for workers ... (STANDIN_FAULT=hang)")
        while True:
            time.sleep(3600)
    try:
        server = ThreadingHTTPServer(("0.0.0.0", config["port"]), make_handler(config))
    except OSError as exc:
        log("ERROR", "api_server.py:3", f"cannot bind port {config['port']}: {exc}")
        return 1
    server.daemon_threads = True
    if FAULT == "crash-after-ready":
        threading.Timer(float(env("STANDIN_CRASH_AFTER_S", "1.0")), lambda: os._exit(3)).start()
    log("INFO", "api_server.py:4", f"Starting vLLM API server on http://0.0.0.0:{config['port']}")
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
