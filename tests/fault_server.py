"""A fault-injecting stand-in of vLLM's OpenAI-compatible server, for the harness's own tests.

It serves what :mod:`qualify.serving.client` asks of a vLLM endpoint -- ``/v1/models``,
``/v1/completions``, ``/v1/chat/completions`` (with vLLM's ``token_ids``), ``/version``,
``/health`` and ``/metrics`` with the speculative-decoding counters
(:data:`qualify.serving.counters.COUNTERS`) -- from a real HTTP server on 127.0.0.1, in a thread.
Healthy, it qualifies: every request drafts ``proposal`` tokens per step and the target
accepts the first ``accepted`` of them, so the figures clear the fixture profile's gate.

It can be switched into a fault once ``fault_after`` generation requests (completions and
chat completions) have been answered normally, so the smoke level passes and the fault
strikes during acceptance:

- ``http500``: generation requests get an HTTP 500 with vLLM's error body;
- ``malformed``: generation requests get HTTP 200 with a truncated JSON body;
- ``hang``: generation requests never return (they wait ``hang_s``, far beyond any timeout);
  ``/metrics`` still answers, as a wedged engine's API server does;
- ``die``: the server stops: the request in flight is cut off without an answer, the
  listening socket is closed, every later connection is refused;
- ``reset``: the counters restart from zero (a server restart) at the next generation request;
- ``no_counters``: ``/metrics`` serves no speculative-decoding counters;
- ``concurrent``: another client's request of ``concurrent_tokens`` tokens is generated while each
  generation request is answered, so the counters move by more than the answer explains.

``fault_after=0`` makes the fault strike from the first generation request (smoke).

Greedy outputs are the ids ``100, 101, ...`` after a prompt of ``PROMPT_TOKENS`` ids (returned as
vLLM's ``prompt_token_ids``); ``diverge=(position, token)`` puts ``token`` at ``position`` instead, so two
servers' outputs diverge there. A completion whose prompt is token ids is answered as vLLM answers a
log-probability lookup (``logprobs``, ``logprob_token_ids``, ``return_tokens_as_token_ids``): the token this
server would generate next, and the log-probabilities ``lookup_logprobs`` gives of it and of the tokens
asked for by id (a token it does not list is left out of the answer, as a token outside the top ones is).
"""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from qualify.serving.counters import ACCEPTED_PER_POS, ACCEPTED_TOKENS, DRAFT_TOKENS, DRAFTS

REPO = Path(__file__).resolve().parent.parent
MODEL = "dflash2-tiny-target"
FAULTS = ("http500", "malformed", "hang", "die", "reset", "no_counters", "concurrent")
GENERATION_PATHS = ("/v1/completions", "/v1/chat/completions")
PROMPT_TOKENS = 7


class FaultServer:
    """The server and its state; use :func:`fault_server` to run one."""

    def __init__(self, *, fault: str | None = None, fault_after: int = 0, model: str = MODEL, proposal: int = 7,
                 accepted: int = 5, hang_s: float = 3600.0, concurrent_tokens: int = 24,
                 per_request: bool = False, misreport: int = 0, diverge: tuple[int, int] | None = None,
                 lookup_logprobs: dict[int, float] | None = None) -> None:
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; one of {FAULTS}")
        if not 0 <= accepted <= proposal:
            raise ValueError("accepted must be within 0..proposal")
        self.fault = fault
        self.fault_after = fault_after
        self.model = model
        self.proposal = proposal
        self.accepted = accepted
        self.hang_s = hang_s
        self.concurrent_tokens = concurrent_tokens
        # vLLM's --per-request-spec-decode-metrics: each answer carries its own counts; ``misreport``
        # makes that many of its steps claim one accepted token fewer than the counters counted.
        self.per_request = per_request
        self.misreport = misreport
        self.diverge = diverge
        self.lookup_logprobs = dict(lookup_logprobs or {})
        self.lookups: list[dict[str, Any]] = []  # the body of every log-probability lookup, in order
        self.lock = threading.Lock()
        self.generations = 0  # generation requests received
        self.requests: list[str] = []  # "METHOD path" of every request, in order
        self.hanging = threading.Event()  # set once a request hangs (a test may then signal the harness)
        self.release = threading.Event()  # set at shutdown: hanging requests end
        self.dead = threading.Event()
        self._reset_done = False
        self.drafts = self.draft_tokens = self.accepted_tokens = 0
        self.per_pos = [0] * proposal
        self.httpd = _QuietServer(("127.0.0.1", 0), _handler(self))
        self.port = int(self.httpd.server_address[1])
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="fault-server", daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FaultServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        if not self.dead.is_set():
            self.dead.set()
            self.httpd.shutdown()
            self.httpd.server_close()
        self._thread.join(timeout=5)

    def _die(self) -> None:
        """Stop listening (later connections are refused); the caller cuts off its own request."""
        self.dead.set()
        threading.Thread(target=lambda: (self.httpd.shutdown(), self.httpd.server_close()), daemon=True).start()

    def output(self, n: int) -> list[int]:
        """The greedy output's first ``n`` token ids."""
        ids = list(range(100, 100 + n))
        if self.diverge is not None and self.diverge[0] < n:
            ids[self.diverge[0]] = self.diverge[1]
        return ids

    def lookup(self, body: dict[str, Any]) -> dict[str, Any]:
        """vLLM's answer to one token after a prompt of ids, with log-probabilities (completions API)."""
        prompt = [int(i) for i in body["prompt"]]
        chosen = self.output(len(prompt) - PROMPT_TOKENS + 1)[-1]
        name = (lambda t: f"token_id:{t}") if body.get("return_tokens_as_token_ids") else str
        wanted = [chosen, *body.get("logprob_token_ids", ())]
        top = {name(t): self.lookup_logprobs[t] for t in wanted if t in self.lookup_logprobs}
        logprobs = {"text_offset": [0], "token_logprobs": [self.lookup_logprobs.get(chosen)],
                    "tokens": [name(chosen)], "top_logprobs": [top]}
        return {"index": 0, "finish_reason": "length", "text": "tok", "logprobs": logprobs}

    # -- what a generation request does to the counters
    def faulty(self) -> bool:
        """Whether the fault applies to the generation request being counted (call with the lock held)."""
        return self.fault is not None and self.generations > self.fault_after

    def generate(self, max_tokens: int) -> int:
        """As vLLM v1 counts: the first token from the prefill without a draft, then steps of ``accepted + 1``
        tokens (the accepted drafts and the target's own) until max_tokens, the last step's extra ones cut.
        Returns the steps counted."""
        produced = 1
        steps = 0
        while produced < max_tokens:
            steps += 1
            self.drafts += 1
            self.draft_tokens += self.proposal
            self.accepted_tokens += self.accepted
            for i in range(self.accepted):
                self.per_pos[i] += 1
            produced += self.accepted + 1
        return steps

    def request_metrics(self, steps: int) -> dict[str, Any]:
        """The answer's ``metrics.speculative_decoding``, in vLLM 0.32's shape."""
        hist = [0] * (self.proposal + 1)
        wrong = min(self.misreport, steps) if self.accepted else 0
        hist[self.accepted] = steps - wrong
        if wrong:
            hist[self.accepted - 1] += wrong
        accepted = self.accepted * steps - wrong
        return {"mean_acceptance_length": 1 + accepted / steps if steps else 1.0,
                "draft_acceptance_rate": accepted / (steps * self.proposal) if steps else 0.0,
                "acceptance_histogram": hist, "num_spec_steps": steps, "num_accepted_draft_tokens": accepted,
                "num_draft_tokens": steps * self.proposal, "num_spec_tokens": self.proposal,
                "per_step_accepted": None, "per_step_drafted": None}

    def metrics(self) -> str:
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f'vllm:num_requests_running{{engine="0",model_name="{self.model}"}} 0.0',
        ]
        if self.fault == "no_counters" and self.generations > self.fault_after:
            return "\n".join(lines) + "\n"
        label = f'engine="0",model_name="{self.model}"'
        for name, value in ((DRAFTS, self.drafts), (DRAFT_TOKENS, self.draft_tokens),
                            (ACCEPTED_TOKENS, self.accepted_tokens)):
            lines += [f"# HELP {name} {name}.", f"# TYPE {name} counter", f"{name}{{{label}}} {float(value)}",
                      f"{name.removesuffix('_total')}_created{{{label}}} 1.7e9"]
        name = ACCEPTED_PER_POS
        lines += [f"# HELP {name} Accepted tokens per draft position.", f"# TYPE {name} counter"]
        lines += [f'{name}{{{label},position="{i}"}} {float(v)}' for i, v in enumerate(self.per_pos)]
        return "\n".join(lines) + "\n"


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (its timeout fired) leaves a broken pipe behind: expected here.
        pass


class QuietJSONHandler(BaseHTTPRequestHandler):
    """A test server's request handler: no access log, and ``_send`` for a whole body with its length."""

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, code: int, body: str, ctype: str = "application/json") -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _handler(state: FaultServer) -> type[BaseHTTPRequestHandler]:
    class Handler(QuietJSONHandler):
        protocol_version = "HTTP/1.1"

        def _cut_off(self) -> None:
            """End the connection without an answer, as a process that died does."""
            self.close_connection = True
            with suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

        def do_GET(self) -> None:
            with state.lock:
                state.requests.append(f"GET {self.path}")
                metrics = state.metrics()
            if self.path == "/metrics":
                self._send(200, metrics, "text/plain; version=0.0.4; charset=utf-8")
            elif self.path == "/version":
                self._send(200, json.dumps({"version": "0.32.0-fault-server"}))
            elif self.path == "/health":
                self._send(200, "")
            elif self.path == "/v1/models":
                self._send(200, json.dumps({"object": "list", "data": [
                    {"id": state.model, "object": "model", "created": 0, "owned_by": "vllm"}]}))
            else:
                self._send(404, json.dumps({"error": {"message": f"no route {self.path}"}}))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path not in GENERATION_PATHS:
                self._send(404, json.dumps({"error": {"message": f"no route {self.path}"}}))
                return
            with state.lock:
                state.requests.append(f"POST {self.path}")
                state.generations += 1
                fault = state.fault if state.faulty() else None
                if fault == "reset" and not state._reset_done:
                    state._reset_done = True
                    state.drafts = state.draft_tokens = state.accepted_tokens = 0
                    state.per_pos = [0] * state.proposal
                if fault == "die":
                    state._die()
            if fault == "die":
                self._cut_off()
                return
            if fault == "hang":
                state.hanging.set()
                state.release.wait(state.hang_s)
                self._cut_off()
                return
            if fault == "http500":
                self._send(500, json.dumps({"object": "error", "message": "EngineCore encountered an issue",
                                            "type": "InternalServerError", "param": None, "code": 500}))
                return
            n = int(body.get("max_tokens") or 16)
            with state.lock:
                steps = state.generate(n)
                if fault == "concurrent":
                    state.generate(state.concurrent_tokens)
            ids = state.output(n)
            prompt_ids = list(range(1, PROMPT_TOKENS + 1))
            usage = {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": n, "total_tokens": PROMPT_TOKENS + n}
            top: dict[str, Any] = {}
            if self.path == "/v1/chat/completions":
                choice = {"index": 0, "finish_reason": "length", "token_ids": ids,
                          "message": {"role": "assistant", "content": "tok " * n}}
                obj = "chat.completion"
                top["prompt_token_ids"] = prompt_ids
            elif isinstance(body.get("prompt"), list):
                with state.lock:
                    state.lookups.append(body)
                choice = state.lookup(body)
                obj = "text_completion"
            else:
                choice = {"index": 0, "finish_reason": "length", "token_ids": ids, "text": "tok " * n,
                          "prompt_token_ids": prompt_ids}
                obj = "text_completion"
            answer = {"id": f"cmpl-{state.generations}", "object": obj, "created": 0,
                      "model": state.model, "choices": [choice], "usage": usage, **top}
            if state.per_request:
                with state.lock:
                    answer["metrics"] = {"speculative_decoding": state.request_metrics(steps)}
            text = json.dumps(answer)
            if fault == "malformed":
                text = text[: len(text) // 2]  # cut mid-object: not JSON
            self._send(200, text)

    return Handler


@contextmanager
def fault_server(**kwargs: Any) -> Iterator[FaultServer]:
    """A running :class:`FaultServer`, stopped (and its hanging requests released) on exit."""
    server = FaultServer(**kwargs).start()
    try:
        yield server
    finally:
        server.stop()


def serving_profile(path: Path, *, request_timeout_s: float = 5.0, smoke_timeout_s: float | None = None,
                    endpoint: str | None = None) -> Path:
    """A copy of the shipped fixture profile for runs against a server the test started (``--profile PATH``).

    The copy names the prompt set by absolute path (the shipped one is relative to the profile's
    folder), bounds every request by ``request_timeout_s`` (``[acceptance]``) and ``smoke_timeout_s``
    (``[smoke]``), has no ``[local_server]`` (the server is the test's), requires the checkpoint
    levels only and measures only throughput and speedup (so the serving levels given with ``--levels``
    run without a launched runtime and count for the verdict),
    and optionally serves at ``endpoint`` (its port is the launch env's ``PORT``).
    """
    text = (REPO / "qualify" / "profiles" / "fixture.toml").read_text()
    prompts = REPO / "qualify" / "prompt_sets" / "acceptance-v1" / "acceptance-v1.json"
    text = re.sub(r'(?m)^prompts = ".*"$', lambda _: f"prompts = {json.dumps(str(prompts))}", text)
    text = re.sub(r"(?m)^request_timeout_s = .*$", f"request_timeout_s = {request_timeout_s}", text)
    text = re.sub(r"(?ms)^\[local_server\]\n.*?(?=^\[)", "", text)
    text = re.sub(r"(?m)^required = \[.*\]$", 'required = ["structure", "format", "reproduction"]', text)
    # Only throughput and speedup are measured: a serving level asked with --levels counts for the verdict,
    # answered by the test's own server (no [local_server] here, so it is no stand-in of the profile's).
    text = re.sub(r"(?m)^measured = \[.*\]$", 'measured = ["throughput", "speedup"]', text)
    if smoke_timeout_s is not None:
        text = text.replace("[smoke]\n", f"[smoke]\nrequest_timeout_s = {smoke_timeout_s}\n", 1)
    if endpoint is not None:
        port = re.search(r":(\d+)/", endpoint)
        text = re.sub(r'(?m)^endpoint = ".*"$', lambda _: f"endpoint = {json.dumps(endpoint)}", text)
        if port:
            text = re.sub(r'(?m)^PORT = ".*"$', f'PORT = "{port.group(1)}"', text)
    Path(path).write_text(text)
    return Path(path)
