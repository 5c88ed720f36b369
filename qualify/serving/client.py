"""Requests to an OpenAI-compatible vLLM endpoint: completions, chat, /metrics, /version, all bounded in time.

Requests go through the ``openai`` client (no retries: a retried request would move the
counters twice and hide a flaky server); ``/metrics`` and ``/version`` live at the
server's root, beside ``/v1``, and are fetched with urllib. Every call has a timeout.
What is measured comes back as plain data; the counters are read by :mod:`qualify.serving.counters`,
the figures are :mod:`qualify.serving.acceptance_stats`'s and the gate :mod:`qualify.serving.specdecode`'s.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from qualify import errors
from qualify.core import Evidence
from qualify.errors import ServerUnavailable, ServingError, UsageError
from qualify.serving.acceptance_stats import quantile
from qualify.serving.counters import CounterSnapshot, counter_delta, parse_counters, unexplained_by_request
from qualify.serving.prompt_sets import Prompt
from qualify.serving.specdecode import AcceptanceMeasurement, RequestSample
from qualify.util.redact import API_KEY_ENV, redact, url_credentials

DEFAULT_TIMEOUT_S = 120.0
#: A counter read after a request is repeated until two reads agree: vLLM records a step's
#: statistics just after it hands the step's tokens to the request, so the last step of a
#: request can reach /metrics a moment after the response.
SETTLE_INTERVAL_S = 0.05
SETTLE_DEADLINE_S = 10.0


def describe_request_error(exc: BaseException, timeout_s: float | None) -> ServingError:
    """An ``openai`` client exception (or a body that is not JSON) as a :class:`ServingError` saying what happened."""
    from openai import APIConnectionError, APIStatusError, APITimeoutError

    if isinstance(exc, APITimeoutError):
        after = f" after {timeout_s:g} s" if timeout_s is not None else ""
        return ServerUnavailable(f"timed out{after}: the server did not answer")
    if isinstance(exc, APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        detail = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
        return ServerUnavailable(f"connection failed ({detail}): the server is down or closed the connection")
    if isinstance(exc, APIStatusError):
        body = exc.response.text if exc.response is not None else ""
        return ServingError(f"HTTP {exc.status_code}: {body[:300] or exc.message}")
    if isinstance(exc, ValueError):  # json.JSONDecodeError: the body is not JSON
        return ServingError(f"malformed response: not JSON ({exc})")
    return ServingError(f"{type(exc).__name__}: {exc}")


# -- endpoint ----------------------------------------------------------------------------------


def server_root(endpoint: str) -> str:
    """``http://host:port/v1`` -> ``http://host:port``: where /metrics and /version are.

    Raises:
        UsageError: not an http(s) API root, or a URL that carries a credential (which would be
            sent in every request line and land in logs and reports): the key goes in
            :data:`~qualify.util.redact.API_KEY_ENV` instead. Messages show the URL redacted.
    """
    shown = repr(redact(endpoint))
    try:
        parts = urlsplit(endpoint)
    except ValueError as exc:
        raise UsageError(f"endpoint {shown}: {exc}") from None
    refuse_credentials(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"endpoint {shown} is not an http(s) URL (expected http://HOST:PORT/v1)")
    try:
        parts.port  # noqa: B018 -- urlsplit checks the port only when it is asked for
    except ValueError as exc:
        raise UsageError(f"endpoint {shown}: {exc}") from None
    if parts.query or parts.fragment:
        raise UsageError(f"endpoint {shown} has a query or fragment; give the API root, e.g. http://HOST:PORT/v1")
    path = parts.path.rstrip("/")
    path = path.removesuffix("/v1")
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def check_endpoint(endpoint: str | None, flag: str = "--endpoint") -> None:
    """A :class:`UsageError` naming ``flag`` unless ``endpoint`` (when given) is an API root URL."""
    if endpoint is None:
        return
    try:
        server_root(endpoint)
    except UsageError as exc:
        raise UsageError(f"{flag}: {exc}") from None


def make_client(endpoint: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Any:
    """An ``openai.OpenAI`` client for the endpoint: every request bounded, never retried.

    Raises:
        UsageError: the URL carries a credential (from a profile, say); it would be sent in every request.
    """
    from openai import OpenAI

    refuse_credentials(endpoint)

    # vLLM accepts any key unless started with --api-key; the client insists on one. A real key
    # comes from the environment only, and goes in the Authorization header, never the URL.
    api_key = os.environ.get(API_KEY_ENV) or "EMPTY"
    return OpenAI(base_url=endpoint.rstrip("/"), api_key=api_key, timeout=timeout_s, max_retries=0)


def refuse_credentials(url: str) -> None:
    """A :class:`UsageError` (the URL redacted) when ``url`` carries a credential; credentials never go in a URL."""
    found = url_credentials(url)
    if found:
        raise UsageError(f"endpoint {redact(url)!r} carries a credential in its URL ({', '.join(found)}); the harness "
                         f"never sends credentials in a URL: give the API key in the environment variable "
                         f"{API_KEY_ENV}")


def fetch_text(url: str, timeout_s: float = 30.0) -> str:
    refuse_credentials(url)
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        raise ServingError(f"GET {url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        # A timeout while connecting comes wrapped in URLError, one while reading bare; a
        # server that died mid-answer is a reset, a refused connection, or an incomplete read.
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError):
            raise ServerUnavailable(f"GET {url}: timed out after {timeout_s:g} s: the server did not answer") from None
        raise ServerUnavailable(f"GET {url}: connection failed ({type(reason).__name__}: {reason}): the server is "
                                "down or closed the connection") from None
    except UnicodeDecodeError as exc:
        raise ServingError(f"GET {url}: not UTF-8 text: {exc}") from None


def fetch_metrics(endpoint: str, timeout_s: float = 30.0) -> str:
    return fetch_text(server_root(endpoint) + "/metrics", timeout_s)


def fetch_version(endpoint: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """vLLM's ``/version`` (``{"version": "0.32.0"}``); a server without one is recorded as such."""
    url = server_root(endpoint) + "/version"
    try:
        data = json.loads(fetch_text(url, timeout_s))
    except ValueError:
        raise ServingError(f"GET {url}: not JSON") from None
    if not isinstance(data, dict):
        raise ServingError(f"GET {url}: expected a JSON object, got {type(data).__name__}")
    return data


def read_counters(endpoint: str, model_name: str | None, timeout_s: float = 30.0) -> CounterSnapshot:
    return parse_counters(fetch_metrics(endpoint, timeout_s), model_name)


def settled_counters(
    endpoint: str, model_name: str | None, *, interval_s: float = SETTLE_INTERVAL_S,
    deadline_s: float = SETTLE_DEADLINE_S, timeout_s: float = 30.0,
) -> CounterSnapshot:
    """The counters once two reads ``interval_s`` apart agree (bounded by ``deadline_s``)."""
    stop = time.monotonic() + deadline_s
    last = read_counters(endpoint, model_name, timeout_s)
    while True:
        time.sleep(interval_s)
        now = read_counters(endpoint, model_name, timeout_s)
        if now == last:
            return now
        if time.monotonic() > stop:
            raise errors.CounterError(f"the counters were still moving {deadline_s:.0f} s after the request ended: "
                                  "another client is using the server, so per-request deltas cannot be measured")
        last = now


def list_models(client: Any, timeout_s: float | None = None) -> list[str]:
    """The model ids /v1/models lists; :class:`ServingError` if the request fails or the answer is not a list."""
    from openai import OpenAIError

    try:
        page = client.models.list(**({"timeout": timeout_s} if timeout_s is not None else {}))
        return sorted(str(m.id) for m in page.data)
    except (OpenAIError, ValueError) as exc:
        raise describe_request_error(exc, timeout_s) from None
    except (AttributeError, TypeError) as exc:
        raise ServingError(f"malformed /v1/models response: {exc}") from None


# -- requests ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Completion:
    prompt_id: str
    text: str
    token_ids: tuple[int, ...] | None  # vLLM's return_token_ids; None if the server did not return them
    completion_tokens: int | None
    finish_reason: str | None
    elapsed_s: float
    # vLLM's per-request ``metrics.speculative_decoding`` (servers started with
    # --per-request-spec-decode-metrics); None when the response carries none.
    spec_decoding: Any = None
    # The prompt as the server tokenized it (vLLM's return_token_ids; chat: the rendered template),
    # so that a divergence can be looked up after exactly these tokens; None when not returned.
    prompt_token_ids: tuple[int, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"prompt": self.prompt_id, "completion_tokens": self.completion_tokens,
                "finish_reason": self.finish_reason, "token_ids": list(self.token_ids or ()), "text": self.text}


def _extra(obj: Any, name: str) -> Any:
    value = getattr(obj, name, None)
    if value is None:
        value = (getattr(obj, "model_extra", None) or {}).get(name)
    return value


def complete(
    client: Any, model: str, prompt: Prompt, *, max_tokens: int, temperature: float, timeout_s: float,
    seed: int | None = None,
) -> Completion:
    """One request, chat or plain completion as the prompt says, returning its token ids too."""
    from openai import OpenAIError

    common: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "temperature": temperature,
                              "timeout": timeout_s, "extra_body": {"return_token_ids": True}}
    if seed is not None:
        common["seed"] = seed
    started = time.perf_counter()
    try:
        if prompt.kind == "chat":
            response = client.chat.completions.create(messages=list(prompt.messages or ()), **common)
        else:
            response = client.completions.create(prompt=prompt.prompt, **common)
    except (OpenAIError, ValueError) as exc:  # ValueError: a body that is not JSON
        err = describe_request_error(exc, timeout_s)
        raise type(err)(f"prompt {prompt.id}: {err}") from None
    elapsed = time.perf_counter() - started
    # The client builds its objects leniently: a JSON body of another shape (or a body that is
    # not JSON at all, returned as text) shows up only when it is read.
    try:
        if not response.choices:
            raise ServingError(f"prompt {prompt.id}: the response has no choices")
        choice = response.choices[0]
        text = (choice.message.content if prompt.kind == "chat" else choice.text) or ""
        ids = _extra(choice, "token_ids")
        # vLLM puts a completion's prompt ids on the choice, a chat completion's on the response.
        prompt_ids = _extra(choice, "prompt_token_ids")
        if prompt_ids is None:
            prompt_ids = _extra(response, "prompt_token_ids")
        usage = getattr(response, "usage", None)
        metrics = _extra(response, "metrics")
        key = "speculative_decoding"
        spec = metrics.get(key) if isinstance(metrics, dict) else _extra(metrics, key)
        return Completion(
            prompt_id=prompt.id,
            text=text,
            token_ids=tuple(int(i) for i in ids) if ids is not None else None,
            completion_tokens=getattr(usage, "completion_tokens", None),
            finish_reason=choice.finish_reason,
            elapsed_s=elapsed,
            spec_decoding=spec,
            prompt_token_ids=tuple(int(i) for i in prompt_ids) if prompt_ids is not None else None,
        )
    except (AttributeError, TypeError, ValueError, IndexError) as exc:
        raise ServingError(f"prompt {prompt.id}: malformed response ({type(exc).__name__}: {exc})") from None


def completion_findings(c: Completion, max_tokens: int) -> list[str]:
    """What a smoke request must show: exactly max_tokens tokens, cut by the length limit."""
    out = []
    if c.completion_tokens != max_tokens:
        out.append(f"prompt {c.prompt_id}: {c.completion_tokens} completion tokens, expected {max_tokens}")
    if c.token_ids is not None and len(c.token_ids) != max_tokens:
        out.append(f"prompt {c.prompt_id}: {len(c.token_ids)} token ids returned, expected {max_tokens}")
    if c.finish_reason != "length":
        out.append(f"prompt {c.prompt_id}: finish_reason {c.finish_reason!r}, expected 'length'")
    return out


@dataclass
class MeasuredRun:
    """Per-prompt acceptance samples, and each prompt's completion."""

    measurement: AcceptanceMeasurement
    completions: dict[str, Completion] = field(default_factory=dict)


def measure_acceptance(
    client: Any, endpoint: str, model: str, prompts: Sequence[Prompt], *, categories: Sequence[str],
    max_tokens: int, temperature: float, timeout_s: float, seed: int | None = None,
) -> MeasuredRun:
    """Each prompt alone, counters read (settled) before and after it: one delta per prompt.

    A prompt whose request or counters fail is a failure line, never a silent omission;
    an endpoint whose counters are missing fails every prompt the same way, so the first
    such error ends the measurement. A delta larger than the answer can explain
    (:class:`qualify.serving.counters.RequestBound`) holds another client's tokens: a failure line too,
    never a sample, since its figures would be the two clients' mixed.
    """
    run = MeasuredRun(AcceptanceMeasurement(expected_categories=tuple(categories)))
    for i, p in enumerate(prompts):
        try:
            before = settled_counters(endpoint, model, timeout_s=timeout_s)
            c = complete(client, model, p, max_tokens=max_tokens, temperature=temperature, timeout_s=timeout_s,
                         seed=seed)
            after = settled_counters(endpoint, model, timeout_s=timeout_s)
            delta = counter_delta(before, after)
        except errors.CounterError as exc:
            run.measurement.failures.append(f"prompt {p.id}: {exc}")
            if isinstance(exc, errors.CountersMissing):  # every further prompt would fail the same way
                break
            continue
        except ServerUnavailable as exc:
            # Each further prompt would wait out its own timeout against a server that is gone.
            run.measurement.failures.append(_stopped(exc, p, prompts[i + 1:]))
            break
        except ServingError as exc:
            run.measurement.failures.append(str(exc))
            continue
        run.completions[p.id] = c
        # settled_counters only sees traffic that goes on after the request; traffic during it shows here.
        excess = unexplained_by_request(delta, c.completion_tokens, len(after.accepted_per_pos))
        if excess is not None:
            run.measurement.failures.append(f"prompt {p.id}: {excess}")
            continue
        run.measurement.samples.append(
            RequestSample(p.id, p.category, delta, c.completion_tokens, c.finish_reason)
        )
    return run


def greedy_outputs(
    client: Any, model: str, prompts: Sequence[Prompt], *, max_tokens: int, timeout_s: float,
) -> tuple[dict[str, Completion], list[str]]:
    """Temperature-0 outputs of every prompt, and a line for each prompt that failed."""
    out: dict[str, Completion] = {}
    failures = []
    for i, p in enumerate(prompts):
        try:
            out[p.id] = complete(client, model, p, max_tokens=max_tokens, temperature=0.0, timeout_s=timeout_s)
        except ServerUnavailable as exc:
            failures.append(_stopped(exc, p, prompts[i + 1:]))
            break
        except ServingError as exc:
            failures.append(str(exc))
    return out, failures


def _stopped(exc: ServingError, at: Prompt, rest: Sequence[Prompt]) -> str:
    """The failure line of a measurement that ended because the server stopped answering."""
    text = str(exc)
    if not text.startswith(f"prompt {at.id}:"):
        text = f"prompt {at.id}: {text}"
    if rest:
        text += f"; the measurement stopped there: {len(rest)} further prompt(s) not asked"
    return text


# -- smoke -------------------------------------------------------------------------------------

#: The smoke level's requests: one plain completion and one chat completion.
SMOKE_COMPLETION = Prompt("smoke-completion", "smoke", "completion", prompt="The morning market opens at six. Farmers")
SMOKE_CHAT = Prompt("smoke-chat", "smoke", "chat",
                    messages=({"role": "user", "content": "What does the baker on the corner sell?"},))


def check_models(client: Any, served_model: str, server_info: dict[str, Any], *,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> Evidence:
    """/v1/models lists the served model name."""
    ev = Evidence(f"/v1/models does not list {served_model!r}")
    ev.measured["server"] = server_info
    try:
        models = list_models(client, timeout_s)
    except ServingError as exc:
        ev.add(f"/v1/models failed: {exc}")
        return ev
    ev.measured["models"] = models
    ev.expected["model"] = served_model
    if served_model not in models:
        ev.add(f"/v1/models lists {models}, not the served model name {served_model!r}")
    else:
        ev.summary = f"/v1/models lists {served_model!r}"
    return ev


def check_request(client: Any, model: str, prompt: Prompt, *, max_tokens: int, temperature: float,
                  timeout_s: float) -> Evidence:
    """One request returns exactly ``max_tokens`` tokens, ended by the length limit."""
    what = f"a {max_tokens}-token {prompt.kind} request at temperature {temperature:g}"
    ev = Evidence(f"{what} did not return {max_tokens} tokens ended by the length limit")
    ev.expected.update(completion_tokens=max_tokens, finish_reason="length")
    try:
        c = complete(client, model, prompt, max_tokens=max_tokens, temperature=temperature, timeout_s=timeout_s)
    except ServingError as exc:
        ev.add(str(exc))
        return ev
    ev.measured.update(c.to_dict(), elapsed_s=c.elapsed_s)
    for finding in completion_findings(c, max_tokens):
        ev.add(finding)
    if ev.ok:
        ev.summary = f"{what} returned {max_tokens} tokens, finish_reason 'length'"
    return ev


def check_speculating(client: Any, endpoint: str, model: str, prompt: Prompt, *, max_tokens: int,
                      temperature: float, timeout_s: float) -> Evidence:
    """The speculative-decoding counters moved during one request: drafts and draft tokens > 0."""
    ev = Evidence(f"the server did not draft tokens for a {max_tokens}-token request")
    ev.expected.update(drafts="> 0", draft_tokens="> 0")
    try:
        before = settled_counters(endpoint, model, timeout_s=timeout_s)
        c = complete(client, model, prompt, max_tokens=max_tokens, temperature=temperature, timeout_s=timeout_s)
        after = settled_counters(endpoint, model, timeout_s=timeout_s)
        delta = counter_delta(before, after)
    except (errors.CounterError, ServingError) as exc:
        ev.add(str(exc))
        return ev
    ev.measured.update(before=before.to_dict(), after=after.to_dict(), delta=delta.to_dict(),
                       completion_tokens=c.completion_tokens)
    if delta.drafts <= 0 or delta.draft_tokens <= 0:
        ev.add(f"the counters did not move during the request (drafts +{delta.drafts}, draft tokens "
               f"+{delta.draft_tokens}): the server answered without speculating")
    else:
        ev.summary = (f"the request moved the counters: {delta.drafts} drafts, {delta.draft_tokens} draft tokens, "
                      f"{delta.accepted_tokens} accepted")
    return ev


# -- throughput --------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamedRequest:
    prompt_id: str
    ok: bool
    error: str | None
    output_tokens: int
    ttft_s: float | None  # time to the first content
    itl_s: float | None  # mean time between output tokens after the first
    latency_s: float


def stream_one(
    client: Any, model: str, prompt: Prompt, *, max_tokens: int, temperature: float, timeout_s: float,
    clock: Callable[[], float] = time.perf_counter,
) -> StreamedRequest:
    """One streamed request: when the first content arrived, when the last did, how many tokens."""
    from openai import OpenAIError

    common: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "temperature": temperature,
                              "timeout": timeout_s, "stream": True, "stream_options": {"include_usage": True}}
    started = clock()
    first = last = None
    tokens = 0
    try:
        if prompt.kind == "chat":
            stream = client.chat.completions.create(messages=list(prompt.messages or ()), **common)
        else:
            stream = client.completions.create(prompt=prompt.prompt, **common)
        for chunk in stream:
            if chunk.choices:
                choice = chunk.choices[0]
                piece = choice.delta.content if prompt.kind == "chat" else choice.text
                if piece:
                    last = clock()
                    first = first if first is not None else last
            usage = getattr(chunk, "usage", None)
            if usage is not None and usage.completion_tokens is not None:
                tokens = int(usage.completion_tokens)
    except (OpenAIError, ValueError) as exc:  # ValueError: an event that is not JSON
        return StreamedRequest(prompt.id, False, str(describe_request_error(exc, timeout_s)), 0, None, None,
                               clock() - started)
    ttft = first - started if first is not None else None
    # With speculation one chunk may carry several tokens: the inter-token latency is the
    # decode time spread over the tokens after the first, not the gap between chunks.
    itl = (last - first) / (tokens - 1) if first is not None and last is not None and tokens > 1 else None
    return StreamedRequest(prompt.id, tokens > 0, None if tokens > 0 else "no output tokens", tokens, ttft, itl,
                           clock() - started)


def _summary(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {"mean": statistics.fmean(ordered), "p50": quantile(ordered, 0.5), "p90": quantile(ordered, 0.9),
            "min": ordered[0], "max": ordered[-1]}


def measure_throughput(
    client: Any, model: str, prompts: Sequence[Prompt], *, max_tokens: int, temperature: float, concurrency: int,
    timeout_s: float, rounds: int = 1,
) -> dict[str, Any]:
    """``rounds`` passes over the prompts with ``concurrency`` requests in flight; figures as measured."""
    if concurrency < 1:
        raise UsageError(f"concurrency must be >= 1, not {concurrency}")
    work = [p for _ in range(rounds) for p in prompts]
    lock = threading.Lock()
    results: list[StreamedRequest] = []

    def one(p: Prompt) -> None:
        r = stream_one(client, model, p, max_tokens=max_tokens, temperature=temperature, timeout_s=timeout_s)
        with lock:
            results.append(r)

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(one, work))
    wall = time.perf_counter() - started
    ok = [r for r in results if r.ok]
    tokens = sum(r.output_tokens for r in ok)
    return {
        "requests": len(results),
        "failed_requests": [f"prompt {r.prompt_id}: {r.error}" for r in results if not r.ok],
        "concurrency": concurrency,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "wall_s": wall,
        "output_tokens": tokens,
        "output_tokens_per_s": tokens / wall if wall > 0 else math.nan,
        "ttft_s": _summary([r.ttft_s for r in ok if r.ttft_s is not None]),
        "itl_s": _summary([r.itl_s for r in ok if r.itl_s is not None]),
        "latency_s": _summary([r.latency_s for r in ok]),
    }
