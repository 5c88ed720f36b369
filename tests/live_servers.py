"""The real vLLM CPU servers of a test session: each launch started once and shared by every test that needs it.

A live test asks the session's pool (the ``live_servers`` fixture, tests/conftest.py) for servers by
what they serve -- a :class:`Launch`: the serving fixture's target under a profile's launch limits,
a draft folder as its speculator (or none), vLLM's speculative method, the dtype -- and gets a
:class:`LiveServer`, a view of a running, ready server. The same launch asked for again, by the same
module or another, is the same server; servers asked for together start together, each engine on
the least busy core (a start is mostly single-core imports: four started together on two cores are
ready in about 1.5 times one start, two in the time of one). At most :data:`MAX_LIVE` pooled servers
run at once: a request that needs more stops the least recently used ones it does not ask for. Every
server is stopped at the end of the session, whatever happens.

Why sharing cannot move a verdict:

- every serving measurement reads the speculative-decoding counters as deltas around each of its own
  requests, settled before and after (:func:`qualify.serving.client.measure_acceptance`,
  :func:`~qualify.serving.client.check_speculating`, :mod:`qualify.serving.paired_measure`), and the
  paired level reads each request's own figures from its response; the smoke level's log evidence
  counts only lines written after its mark. What earlier tests sent to a server is not in them.
- a server is handed out only if its process still runs, still holds its port and still lists its
  model; one that died or stopped answering (a test that broke it) is stopped and replaced by a fresh
  start with a log of its own, never handed out again.
- a start that failed is not retried: every test that asks for that launch fails with the same reason.

A test that needs a fresh server, or a broken one, starts its own (tests/fault_server.py, the run's
own ``[local_server]``). Only tests marked ``slow`` and ``serving`` may use the pool (enforced at
collection in tests/conftest.py), so ``make test-fast`` never starts a server.
"""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from qualify.errors import HarnessError
from qualify.profile import load_profile
from qualify.runtime.companions import usable_cores
from qualify.runtime.vllm_cpu import SETUP_SCRIPT, find_vllm_python
from qualify.serving.counters import PER_REQUEST_FLAG
from qualify.serving.vllm_server import ServerPlan, VLLMServer, plan_for_profile, start_together
from qualify.util.ports import free_port, session_listens

#: Pooled servers running at once, at most (each holds about 1.3 GB; CI has 2 cores and 23 GB, shared).
MAX_LIVE = 4
READY_TIMEOUT_S = 900
#: How long a pooled server may take to list its model when it is handed out again.
PROBE_TIMEOUT_S = 10.0
#: vLLM's CPU core binding for the engine's OpenMP threads (by default every engine takes the same core).
BIND = "VLLM_CPU_OMP_THREADS_BIND"


@dataclass(frozen=True)
class Launch:
    """A server a test needs: the serving fixture's target served under ``profile``'s launch limits.

    ``draft`` is the speculator's folder (None: the target alone). ``per_request`` starts a
    speculating server with vLLM's per-request metrics (:data:`~qualify.serving.counters.PER_REQUEST_FLAG`),
    as a run's local servers are started when they serve the paired level, which reads them; the
    other levels read counter deltas, which the flag leaves as they are. It is on by default, so
    that a module measuring acceptance and one measuring the paired level share one server.
    """

    profile: str
    draft: Path | None
    method: str = "draft_model"
    dtype: str = "float32"
    per_request: bool = True


@dataclass(frozen=True)
class LiveServer:
    """A pooled server as a test sees it (no way to stop it: the pool owns it)."""

    endpoint: str
    log_path: Path
    plan: ServerPlan
    start_s: float


def _key(plan: ServerPlan) -> str:
    """What makes two launches the same server: everything in the plan but its port and core binding."""
    bare = dataclasses.replace(plan, port=0, env={k: v for k, v in plan.env.items() if k != BIND})
    return json.dumps(bare.to_dict(), sort_keys=True)


def lists_model(server: VLLMServer, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the server's process runs, holds its port, and /v1/models lists its served model."""
    proc = server.process
    if proc is None or proc.poll() is not None:
        return False
    if session_listens(proc.pid, server.plan.port) is False:
        return False
    try:
        with urllib.request.urlopen(f"{server.endpoint}/models", timeout=timeout_s) as response:
            data = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return any(m.get("id") == server.plan.served_model_name for m in data.get("data", []))


def _stop_all(servers: list[VLLMServer]) -> None:
    """Stop the servers side by side: each waits up to its grace period for vLLM to shut down."""
    if servers:
        with ThreadPoolExecutor(len(servers)) as ex:
            list(ex.map(VLLMServer.stop, servers))


class LiveServers:
    """The session's pool: :meth:`get` starts what is missing and hands out views; :meth:`close` stops all."""

    def __init__(self, log_dir: Path, *, max_live: int = MAX_LIVE, target: Path | None = None) -> None:
        self.log_dir = Path(log_dir)
        self.max_live = max_live
        self.target = target  # None: the serving fixture's target, built on the first request
        self._servers: dict[str, VLLMServer] = {}
        self._cores: dict[str, int] = {}
        self._last_used: dict[str, float] = {}
        self._failed: dict[str, str] = {}
        #: Every start (name, ready seconds, why) and every hand-out, for the session's summary line.
        self.starts: list[dict[str, Any]] = []
        self.handed_out = 0

    def get(self, wanted: Mapping[str, Launch]) -> dict[str, LiveServer]:
        """The servers ``wanted`` names, started together where missing, ready.

        Fails the asking test (pytest.fail) when vLLM's venv is missing or a server does not start.
        """
        try:
            python = find_vllm_python()
        except HarnessError as exc:
            pytest.fail(f"{exc}. The live serving tests need vLLM's CPU build: run {SETUP_SCRIPT} first "
                        "(CI runs it before the tests).", pytrace=False)
        if self.target is None:
            from fixtures.serving import build

            self.target = build().target
        target = self.target
        plans = {name: self._plan(launch, python, target) for name, launch in wanted.items()}
        keys = {name: _key(plan) for name, plan in plans.items()}
        for name, key in keys.items():
            if key in self._failed:
                pytest.fail(f"the vLLM server for {name} failed to start earlier in this session (with the servers "
                            f"started together with it): {self._failed[key]}", pytrace=False)
        for key in set(keys.values()) & set(self._servers):
            if not lists_model(self._servers[key]):
                # Broken since it was last handed out: never handed out again.
                self._servers.pop(key).stop()
        missing = {key: name for name, key in keys.items() if key not in self._servers}
        self._evict(keep=set(keys.values()), room=len(missing))
        self._start({key: plans[name] for key, name in missing.items()}, missing)
        now = time.monotonic()
        out = {}
        for name, key in keys.items():
            server = self._servers[key]
            self._last_used[key] = now
            out[name] = LiveServer(server.endpoint, server.log_path, server.plan, server.start_s or 0.0)
        self.handed_out += len(out)
        return out

    def _plan(self, launch: Launch, python: Path, target: Path) -> ServerPlan:
        extra = PER_REQUEST_FLAG if launch.per_request and launch.draft is not None else ()
        return plan_for_profile(load_profile(launch.profile), python=python, model=target, draft=launch.draft,
                                port=0, dtype=launch.dtype, extra_args=extra, method=launch.method)

    def _evict(self, *, keep: set[str], room: int) -> None:
        idle = sorted((k for k in self._servers if k not in keep), key=lambda k: self._last_used.get(k, 0.0))
        gone = []
        while idle and len(self._servers) + room > self.max_live:
            gone.append(self._servers.pop(idle.pop(0)))
        _stop_all(gone)

    def _start(self, plans: dict[str, ServerPlan], names: dict[str, str]) -> None:
        if not plans:
            return
        cores = usable_cores() or (0,)
        busy = {c: 0 for c in cores}
        for key in self._servers:
            if self._cores.get(key) in busy:
                busy[self._cores[key]] += 1
        new: dict[str, VLLMServer] = {}
        for key, plan in plans.items():
            core = min(cores, key=lambda c: busy[c])
            busy[core] += 1
            self._cores[key] = core
            plan = dataclasses.replace(plan, port=free_port(), env={**plan.env, BIND: str(core)})
            log = self.log_dir / f"{len(self.starts) + len(new):02d}-{names[key]}.log"
            new[key] = VLLMServer(plan, log, ready_timeout_s=READY_TIMEOUT_S)
        try:
            start_together(list(new.values()))
        except HarnessError as exc:
            for key in new:
                self._failed[key] = str(exc)
            pytest.fail(f"a vLLM server did not start: {exc}", pytrace=False)
        for key, server in new.items():
            self._servers[key] = server
            self.starts.append({"name": names[key], "ready_s": round(server.start_s or 0.0, 1),
                                "together": len(new), "log": str(server.log_path)})

    def close(self) -> None:
        """Stop every server (idempotent)."""
        servers = list(self._servers.values())
        self._servers.clear()
        _stop_all(servers)

    def summary(self) -> str:
        """One line for the end of the session: how many servers started, how many times one was handed out."""
        starts = ", ".join(f"{s['name']} {s['ready_s']:.0f} s" for s in self.starts)
        return f"live vLLM servers: {len(self.starts)} started ({starts}); handed out {self.handed_out} times"
