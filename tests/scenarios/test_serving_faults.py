"""Faults of the server at run time, through ``qualify check`` as a user runs it (issue "Reliability").

Each scenario runs the real CLI in its own process against a :mod:`tests.fault_server`
on 127.0.0.1 that answers like vLLM until it is told to fail: an HTTP 500, a body that is
not JSON, a request that never returns, the server dying, the counters resetting, the
counters missing, another client's traffic moving the counters during a request -- during
smoke and during the acceptance measurement. Each must end
with a report that names what happened, the verdict "not qualified", exit code 1 (the
server failed, not the harness), no traceback, and in bounded time: a request that never
returns times out, and a measurement against a server that stopped answering stops.

The CLI runs are started together (module fixture) so the module takes about as long as
its slowest run; the fast tests at the end exercise the same paths in-process.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from qualify import errors
from qualify.report.model import Run, read_json
from qualify.serving import client as serving
from qualify.serving import prompt_sets as ps
from qualify.serving.acceptance_stats import Bootstrap
from qualify.serving.counters import parse_counters
from qualify.serving.specdecode import AcceptanceThresholds, acceptance_evidence
from tests.fault_server import MODEL, FaultServer, fault_server, serving_profile
from tests.helpers import FIXTURE, REPO, TRACEBACK

#: The smoke level's requests time out after this; the acceptance level's after ACCEPTANCE_TIMEOUT_S.
SMOKE_TIMEOUT_S = 1.0
ACCEPTANCE_TIMEOUT_S = 2.0
#: The acceptance faults strike after this many prompts were measured (the prompt set has 20).
MID_RUN = 5
#: A guard against a hung test, not a speed claim: what a run did is read from its report and
#: from the requests the server saw, never from how long it took.
HANG_GUARD_S = 900.0


@dataclass
class Scenario:
    name: str
    levels: str
    fault: str | None = None
    fault_after: int = 0
    check: str | None = None  # the check that must fail or error
    words: tuple[str, ...] = ()  # each must appear in that check's message or findings
    generations: int | None = None  # generation requests the server must have seen (the measurement stopped)
    signal: int | None = None  # sent to the run once a request hangs
    timeouts: tuple[float, float] | None = None  # smoke's, acceptance's

    def __post_init__(self) -> None:
        # Only a hang is meant to time out; every other fault must be seen for what it is however
        # loaded the machine, so its requests get timeouts they never come near.
        if self.timeouts is None:
            self.timeouts = (SMOKE_TIMEOUT_S, ACCEPTANCE_TIMEOUT_S) if self.fault == "hang" else (60.0, 60.0)


SCENARIOS = [
    Scenario("healthy-acceptance", "acceptance"),
    Scenario("smoke-hang", "smoke", "hang", 0, "smoke.completion", (f"timed out after {SMOKE_TIMEOUT_S:g} s",)),
    Scenario("acceptance-http500", "acceptance", "http500", MID_RUN, "acceptance.draft_acceptance",
             ("HTTP 500", "EngineCore", f"{MID_RUN} prompt(s) measured")),
    Scenario("acceptance-malformed", "acceptance", "malformed", MID_RUN, "acceptance.draft_acceptance",
             ("malformed response", "not JSON")),
    Scenario("acceptance-hang", "acceptance", "hang", MID_RUN, "acceptance.draft_acceptance",
             (f"timed out after {ACCEPTANCE_TIMEOUT_S:g} s", "the measurement stopped there",
              f"{20 - MID_RUN - 1} further prompt(s) not asked"), generations=MID_RUN + 1),
    Scenario("acceptance-die", "acceptance", "die", MID_RUN, "acceptance.draft_acceptance",
             ("connection failed", "the measurement stopped there", f"{MID_RUN} prompt(s) measured"),
             generations=MID_RUN + 1),
    Scenario("acceptance-reset", "acceptance", "reset", MID_RUN, "acceptance.draft_acceptance",
             ("counters went backwards", "restarted")),
    Scenario("acceptance-no-counters", "acceptance", "no_counters", MID_RUN, "acceptance.draft_acceptance",
             ("/metrics has no vllm:spec_decode_num_drafts_total", "not speculating")),
    # Another client's 24-token request during each request after MID_RUN: the counters move by 10 drafts
    # and 50 accepted tokens where an answer of 32 tokens explains at most 31 drafts and 38 drafts + accepted.
    Scenario("acceptance-concurrent", "acceptance", "concurrent", MID_RUN, "acceptance.draft_acceptance",
             ("the counters moved by 10 drafts and 50 accepted tokens, more than an answer of 32 tokens can explain at "
              "proposal length 7 (drafts + accepted tokens 60, at most 38",
              "another client is using the server during the measurement; qualify against a server of its own",
              f"{MID_RUN} prompt(s) measured")),
    # A signal while a request hangs: the run ends at once. The request timeouts are far beyond
    # the hang guard, so only the signal can end these runs.
    Scenario("sigint-while-hanging", "acceptance", "hang", 2, signal=signal.SIGINT, timeouts=(3600, 3600)),
    Scenario("sigterm-while-hanging", "acceptance", "hang", 2, signal=signal.SIGTERM, timeouts=(3600, 3600)),
]


@dataclass
class Outcome:
    scenario: Scenario
    server: FaultServer
    report_dir: Path
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def run(self) -> Run:
        paths = sorted(self.report_dir.glob("*/report.json"))
        assert len(paths) == 1, (paths, self.stdout, self.stderr)
        return read_json(paths[0])  # validates against the schema and recomputes the verdict

    def text(self) -> str:
        return f"exit {self.returncode}\n{self.stdout}\n{self.stderr}"


def qualify_check(endpoint: str, profile: Path, report_dir: Path, levels: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "qualify.cli", "check", str(FIXTURE / "mxfp8"), "--levels", levels,
         "--endpoint", endpoint, "--profile", str(profile), "--report-dir", str(report_dir)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Outcome]]:
    """Every scenario's CLI run, all started at once (the module takes its slowest run's time), each against its
    own fault server."""
    root = tmp_path_factory.mktemp("faults")
    profiles = {t: serving_profile(root / f"serving-{i}.toml", smoke_timeout_s=t[0], request_timeout_s=t[1])
                for i, t in enumerate(sorted({s.timeouts for s in SCENARIOS}))}
    servers = [FaultServer(fault=s.fault, fault_after=s.fault_after).start() for s in SCENARIOS]
    out = {s.name: Outcome(s, srv, root / s.name) for s, srv in zip(SCENARIOS, servers, strict=True)}

    def one(o: Outcome) -> None:
        proc = qualify_check(o.server.endpoint, profiles[o.scenario.timeouts], o.report_dir, o.scenario.levels)
        try:
            if o.scenario.signal is not None:
                o.extra["reached_hang"] = o.server.hanging.wait(HANG_GUARD_S)
                time.sleep(0.3)  # the client is blocked reading the answer
                proc.send_signal(o.scenario.signal)
            o.stdout, o.stderr = proc.communicate(timeout=HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            o.stdout, o.stderr = proc.communicate()
        o.returncode = proc.returncode

    threads = [threading.Thread(target=one, args=(o,)) for o in out.values()]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        yield out
    finally:
        for srv in servers:
            srv.stop()


def check_text(run: Run, check_id: str) -> tuple[str, str]:
    for lvl in run.levels:
        for c in lvl.checks:
            if c.id == check_id:
                findings = [f.message for f in c.evidence.findings] if c.evidence else []
                return str(c.status), "\n".join([c.message, *findings])
    raise AssertionError(f"no check {check_id} in the report")


@pytest.mark.slow
def test_the_healthy_fault_server_qualifies(outcomes: dict[str, Outcome]) -> None:
    """The stand-in is realistic: healthy, it qualifies the acceptance level (so a fault is what fails it)."""
    o = outcomes["healthy-acceptance"]
    assert o.returncode == 0, o.text()
    run = o.run()
    assert str(run.verdict) == "qualified"
    status, text = check_text(run, "acceptance.draft_acceptance")
    assert status == "passed" and "acceptance rate 0.714" in text


FAULTS = [s for s in SCENARIOS if s.fault is not None and s.signal is None]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", FAULTS, ids=[s.name for s in FAULTS])
def test_a_server_fault_ends_not_qualified_and_says_what_happened(outcomes: dict[str, Outcome],
                                                                   scenario: Scenario) -> None:
    o = outcomes[scenario.name]
    assert o.returncode == 1, o.text()  # the server failed: "not qualified", not a harness error (2)
    assert TRACEBACK not in o.stderr and TRACEBACK not in o.stdout, o.text()
    run = o.run()
    assert str(run.verdict) == "not qualified"
    assert run.interrupted is None
    assert scenario.check is not None
    status, text = check_text(run, scenario.check)
    assert status in ("failed", "error"), (status, text)
    for words in scenario.words:
        assert words in text, (words, text)
    assert "verdict: not qualified" in o.stdout
    md = next(o.report_dir.glob("*/report.md")).read_text()
    assert "not qualified" in md
    if scenario.generations is not None:
        # The measurement stopped at the first request the server did not answer: it did not
        # wait out one timeout per remaining prompt against a server that was gone.
        assert o.server.generations == scenario.generations, o.server.requests


# -- signals during a serving phase ------------------------------------------------------------


SIGNALS = [s for s in SCENARIOS if s.signal is not None]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_signal_while_a_request_hangs_writes_an_interrupted_report(outcomes: dict[str, Outcome],
                                                                      scenario: Scenario) -> None:
    o = outcomes[scenario.name]
    assert o.extra["reached_hang"], "the run never reached the hanging request: " + o.text()
    assert o.returncode == 1, o.text()  # documented: an interrupted run is "not qualified" (exit 1)
    assert TRACEBACK not in o.stderr and TRACEBACK not in o.stdout, o.text()
    run = o.run()
    # Ended by the signal, not by the hour-long request timeout (which the hang guard never reaches).
    assert all("timed out" not in check.message for level in run.levels for check in level.checks), o.text()
    assert run.interrupted == ("SIGTERM" if scenario.signal == signal.SIGTERM else "KeyboardInterrupt")
    assert str(run.verdict) == "not qualified"
    assert "interrupted" in next(o.report_dir.glob("*/report.md")).read_text()


# -- the same paths in-process (fast) ----------------------------------------------------------


def prompt_set() -> ps.PromptSet:
    return ps.load_prompts(REPO / "qualify" / "prompt_sets" / "acceptance-v1" / "acceptance-v1.json")


@pytest.mark.parametrize(
    ("fault", "error", "words"),
    [
        ("http500", errors.ServingError, "HTTP 500"),
        ("malformed", errors.ServingError, "malformed response: not JSON"),
        ("hang", errors.ServerUnavailable, "timed out after 0.5 s"),
        ("die", errors.ServerUnavailable, "connection failed"),
    ],
)
def test_complete_names_the_fault(fault: str, error: type[Exception], words: str) -> None:
    # Only the hang is meant to time out; every other fault must be seen for what it is, however
    # loaded the machine, so its request gets a timeout it never comes near.
    timeout_s = 0.5 if fault == "hang" else 60.0
    with fault_server(fault=fault) as server:
        client = serving.make_client(server.endpoint)
        with pytest.raises(error) as info:
            serving.complete(client, MODEL, serving.SMOKE_COMPLETION, max_tokens=8, temperature=0.0,
                             timeout_s=timeout_s)
    assert words in str(info.value)
    assert str(info.value).startswith("prompt smoke-completion: ")
    if fault == "die":
        # The server is gone: the next request is refused, it does not wait.
        with pytest.raises(errors.ServerUnavailable, match="connection failed"):
            serving.fetch_metrics(server.endpoint, timeout_s=60.0)


def test_a_hung_metrics_endpoint_times_out() -> None:
    with fault_server() as server:
        # A server that accepts the connection but never answers is a timeout, not a wait forever.
        with socket.socket() as silent:
            silent.bind(("127.0.0.1", 0))
            silent.listen()
            url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
            with pytest.raises(errors.ServerUnavailable, match=r"timed out after 0.3 s"):
                serving.fetch_metrics(url, timeout_s=0.3)
        assert parse_counters(serving.fetch_metrics(server.endpoint), MODEL).drafts == 0


def test_a_response_of_another_shape_is_malformed_not_a_crash() -> None:
    import json
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            body = json.dumps({"id": "x", "object": "text_completion", "choices": [{"index": 0}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            body = b"<html>not the API</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        client = serving.make_client(f"http://127.0.0.1:{httpd.server_address[1]}/v1")
        c = serving.complete(client, MODEL, serving.SMOKE_COMPLETION, max_tokens=8, temperature=0.0, timeout_s=2)
        assert serving.completion_findings(c, 8)  # no tokens, no finish reason: findings, not a crash
        ev = serving.check_models(client, MODEL, {}, timeout_s=2)
        assert not ev.ok and "/v1/models failed: malformed /v1/models response" in ev.findings[0].message
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["hang", "die"])
def test_measurement_stops_at_a_server_that_stopped_answering(fault: str) -> None:
    ps = prompt_set()
    # The prompts before the fault are answered at once; the timeout only has to end the hang.
    timeout_s = 5.0 if fault == "hang" else 60.0
    with fault_server(fault=fault, fault_after=3) as server:
        client = serving.make_client(server.endpoint)
        run = serving.measure_acceptance(client, server.endpoint, MODEL, ps.prompts, categories=ps.categories,
                                         max_tokens=8, temperature=0.0, timeout_s=timeout_s)
    assert len(run.measurement.samples) == 3
    assert len(run.measurement.failures) == 1, run.measurement.failures
    assert f"{len(ps.prompts) - 4} further prompt(s) not asked" in run.measurement.failures[0]
    # One request past the last answered prompt, then nothing: no timeout waited out per remaining prompt.
    assert server.generations == 4


def test_greedy_outputs_stop_at_a_server_that_stopped_answering() -> None:
    ps = prompt_set()
    with fault_server(fault="die", fault_after=2) as server:
        out, failures = serving.greedy_outputs(serving.make_client(server.endpoint), MODEL, ps.prompts, max_tokens=8,
                                               timeout_s=60.0)
    assert len(out) == 2 and len(failures) == 1
    assert "connection failed" in failures[0] and "further prompt(s) not asked" in failures[0]


def test_http500_and_malformed_do_not_stop_the_measurement() -> None:
    """A server that answers, wrongly, is asked every prompt: each answer is a failure line."""
    prompts = prompt_set().prompts[:6]
    with fault_server(fault="http500", fault_after=3) as server:
        run = serving.measure_acceptance(serving.make_client(server.endpoint), server.endpoint, MODEL, prompts,
                                         categories=["chat"], max_tokens=8, temperature=0.0, timeout_s=2)
    assert len(run.measurement.samples) == 3
    assert [f.split(":")[0] for f in run.measurement.failures] == [f"prompt {p.id}" for p in prompts[3:]]
    assert all("HTTP 500" in f for f in run.measurement.failures)


def test_traffic_of_another_client_during_a_request_fails_that_prompt() -> None:
    """Counters that moved by more than the answer explains hold another client's tokens: a failure, not a sample."""
    prompts = prompt_set().prompts[:4]
    with fault_server(fault="concurrent", fault_after=2, concurrent_tokens=9) as server:
        run = serving.measure_acceptance(serving.make_client(server.endpoint), server.endpoint, MODEL, prompts,
                                         categories=["chat"], max_tokens=32, temperature=0.0, timeout_s=2)
    assert [s.prompt_id for s in run.measurement.samples] == [p.id for p in prompts[:2]]
    assert all(s.delta.drafts + s.delta.accepted_tokens == 36 for s in run.measurement.samples)  # 2 below 38
    # 9 more tokens (2 drafts, 10 accepted) are 12 more than the answer's 36: over 38 by 10.
    assert run.measurement.failures == [
        f"prompt {p.id}: the counters moved by 8 drafts and 40 accepted tokens, more than an answer of 32 tokens "
        "can explain at proposal length 7 (drafts + accepted tokens 48, at most 38 (the answer's tokens after the "
        "first, plus up to 7 accepted tokens cut at its end)): another client is using the server during the "
        "measurement; qualify against a server of its own" for p in prompts[2:]
    ]
    ev, _ = acceptance_evidence(run.measurement, AcceptanceThresholds(0.5, 2.0, min_requests=4),
                                   Bootstrap(resamples=50))
    assert not ev.ok and "another client is using the server" in ev.failure_text()


def test_throughput_records_an_http500_as_a_failed_request() -> None:
    with fault_server(fault="http500") as server:
        result = serving.measure_throughput(serving.make_client(server.endpoint), MODEL, prompt_set().prompts[:2],
                                            max_tokens=8, temperature=0.0, concurrency=2, timeout_s=2)
    assert result["requests"] == 2 and result["output_tokens"] == 0
    assert all("HTTP 500" in f for f in result["failed_requests"])
