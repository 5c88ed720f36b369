"""The running runtime container: launched from a plan, waited for until it serves, always torn down.

The plan (:mod:`qualify.runtime.plan`), the image's identity (:mod:`qualify.runtime.image`), the
engine and the leftovers of dead runs (:mod:`qualify.runtime.engine`) and the ownership labels
(:mod:`qualify.runtime.labels`) live apart; this module is the container's lifecycle and the
evidence it leaves. Rules a release gate needs, each enforced here rather than left to callers:

- **Never pull.** The image is inspected first and launched *by image ID*, so a tag that
  moves between the inspection and the start cannot change what runs.
- **No leaks.** A new launch first removes leftovers of owners that are dead; teardown removes
  every container of the run on success, failure, timeout, Ctrl-C and SIGTERM, and verifies
  none is left.
- **Fail fast.** The readiness wait checks the container's state on every poll, so a crash
  ends the wait at once with the exit code and the last log lines.
- **Talk to the right server.** With host networking a stale server on the port would answer
  the probes; the port must be free before the launch.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import re
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qualify.core import Evidence
from qualify.errors import (
    ContainerExited,
    ContainerKilled,
    ImageDigestMismatch,
    PortInUse,
    ReadinessTimeout,
    RuntimeFailure,
    ServesAnotherModel,
    UnpinnedLaunch,
)
from qualify.runtime.engine import cleanup_leftovers, run_containers
from qualify.runtime.image import ImageIdentity, check_image, check_pinning, inspect_image
from qualify.runtime.labels import LABEL_RUN
from qualify.runtime.plan import LaunchPlan, create_kwargs, on_port
from qualify.util.ports import free_port, in_use, namespace_listens, release_port
from qualify.util.progress import WaitProgress
from qualify.util.redact import redact, redact_env

_LOG_TAIL = 25
#: Removals of a run's containers before a refusal is reported, and the pause between them.
REMOVE_ATTEMPTS = 3
REMOVE_RETRY_S = 2.0
#: A line where a runtime states its own error: an exception's "SomeError: ..." line, pydantic's
#: "Value error, ...", or a log line at ERROR level.
_ERROR_LINE = re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b:|\bValue error, |\bERROR\b")
#: The lines among those that state an exception itself, which say more than a bare ERROR-level line.
_EXCEPTION_LINE = re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b:|\bValue error, ")
#: Lines that only point elsewhere ("See root cause above"): the cause is an earlier line.
_POINTER_LINE = re.compile(r"(?i)see root cause above|^\s*Traceback \(most recent call last\)")


def ensure_port_free(host: str, port: int) -> None:
    """Raise :class:`PortInUse` when something accepts connections on host:port already."""
    if in_use(host, port):
        raise PortInUse(f"{host}:{port} is already in use: with host networking the readiness probes would talk "
                        "to that server, not to the runtime under test", port=port, hint="stop it, or use another PORT")


# Containers of this process, removed at interpreter exit if a teardown never ran (a last net, not the plan).
_LIVE: dict[str, Any] = {}


@atexit.register
def _remove_live() -> None:
    for run_id, client in list(_LIVE.items()):
        with contextlib.suppress(Exception):  # at exit there is no one left to tell
            for c in run_containers(client, run_id):
                c.remove(force=True)


@contextlib.contextmanager
def terminate_on_signals(signals: Sequence[signal.Signals] = (signal.SIGTERM, signal.SIGHUP)) -> Iterator[None]:
    """Turn SIGTERM/SIGHUP into KeyboardInterrupt while a container lives, so teardown runs.

    A handler installed before (the runner's records which signal ended the run) is called
    first; it may raise itself. Outside the main thread nothing can be installed.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}

    def handler(signum: int, frame: Any) -> None:
        prev = previous.get(signum)
        if callable(prev):
            prev(signum, frame)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for s in signals:
        previous[s] = signal.signal(s, handler)
    try:
        yield
    finally:
        for number, prev_handler in previous.items():
            signal.signal(number, prev_handler)


@contextlib.contextmanager
def _uninterruptible() -> Iterator[None]:
    # A second Ctrl-C during teardown must not leave the container behind.
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, prev in saved.items():
            signal.signal(s, prev)


@dataclass
class Readiness:
    health_s: float  # seconds from start until /health answered 200
    ready_s: float  # ... until /v1/models listed the served name
    models: list[str]
    polls: int

    def to_dict(self) -> dict[str, Any]:
        return {"health_s": round(self.health_s, 3), "ready_s": round(self.ready_s, 3), "models": self.models,
                "polls": self.polls}


@dataclass
class Teardown:
    removed: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)  # containers of the run still there after removal
    errors: list[str] = field(default_factory=list)
    exit_code: int | None = None
    status: str | None = None
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.left and not self.errors

    def to_dict(self) -> dict[str, Any]:
        return {"removed": self.removed, "left": self.left, "errors": self.errors, "exit_code": self.exit_code,
                "status_before_removal": self.status, "duration_s": round(self.duration_s, 3)}


class RuntimeContainer:
    """One launch of a plan: start, wait, read logs, stop. Use :func:`launched` for the guarded form."""

    def __init__(self, client: Any, plan: LaunchPlan, *, log_path: Path | None = None, with_gpus: bool = True):
        self.client = client
        self.plan = plan
        self.log_path = log_path
        self.with_gpus = with_gpus
        self.container: Any = None
        self.identity: ImageIdentity | None = None
        self.leftovers_removed: list[str] = []
        self.started_at: float | None = None
        self.readiness: Readiness | None = None
        self.teardown: Teardown | None = None
        # Set once the harness itself stops the container: a signal then is its own, not the machine's.
        self.stopping = False
        self._log_thread: threading.Thread | None = None

    # ---- start
    def preflight(self) -> ImageIdentity:
        """Everything that must hold before a container exists; raises the first :class:`RuntimeFailure`."""
        pinning = check_pinning(self.plan)
        if not pinning.ok:
            raise UnpinnedLaunch("; ".join(f.message for f in pinning.findings))
        self.leftovers_removed = cleanup_leftovers(self.client)
        identity = inspect_image(self.client, self.plan.image)
        image = check_image(identity, self.plan)
        if not image.ok:
            cls = ImageDigestMismatch if self.plan.image_digest else UnpinnedLaunch
            raise cls("; ".join(f.message for f in image.findings))
        ensure_port_free(self.plan.host, self.plan.port)
        return identity

    def start(self) -> None:
        self.identity = self.preflight()
        _LIVE[self.plan.run_id] = self.client
        import docker.errors

        kwargs = create_kwargs(self.plan, image_ref=self.identity.id, with_gpus=self.with_gpus)
        try:
            self.container = self.client.containers.create(**kwargs)
            self.container.start()
        except docker.errors.APIError as exc:
            # E.g. GPU device requests on a host without the NVIDIA runtime, or a mount source that is gone.
            raise RuntimeFailure(f"the Docker engine refused to {'start' if self.container else 'create'} "
                                 f"{self.plan.name}: {exc.explanation or exc}") from None
        self.started_at = time.monotonic()
        if self.log_path is not None:
            self._log_thread = threading.Thread(target=self._pump_logs, name="qualify-logs", daemon=True)
            self._log_thread.start()

    def _pump_logs(self) -> None:
        assert self.log_path is not None
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a", encoding="utf-8") as out:
            pending = b""
            try:
                for chunk in self.container.logs(stream=True, follow=True, stdout=True, stderr=True):
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        out.write(redact(line.decode("utf-8", "replace")) + "\n")
                    out.flush()
            except Exception:  # the container was removed under the stream: the log simply ends
                pass
            if pending:
                out.write(redact(pending.decode("utf-8", "replace")) + "\n")

    # ---- observe
    def state(self) -> dict[str, Any]:
        self.container.reload()
        return dict(self.container.attrs.get("State") or {})

    def logs_text(self) -> str:
        """The container's whole log so far (stdout and stderr), redacted.

        Once the container is removed (an arm stopped before the next one starts), its log is
        the copy written while it ran.
        """
        if self.teardown is not None and self.log_path is not None and self.log_path.is_file():
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        raw = self.container.logs(stdout=True, stderr=True)
        return redact(raw.decode("utf-8", "replace"))

    def log_tail(self, n: int = _LOG_TAIL) -> list[str]:
        try:
            return tail_with_cause(self.logs_text().splitlines(), n)
        except Exception as exc:
            return [f"(logs unavailable: {exc})"]

    def inspect(self) -> dict[str, Any]:
        """The engine's view of the container's launch settings (what was actually created)."""
        self.container.reload()
        attrs = self.container.attrs
        host, config = attrs.get("HostConfig") or {}, attrs.get("Config") or {}
        env = dict(item.partition("=")[::2] for item in config.get("Env") or [])
        return {
            "id": attrs.get("Id"),
            "name": attrs.get("Name", "").lstrip("/"),
            "image": attrs.get("Image"),
            "device_requests": host.get("DeviceRequests"),
            "network_mode": host.get("NetworkMode"),
            "ipc_mode": host.get("IpcMode"),
            "shm_size": host.get("ShmSize"),
            "mounts": [{"source": m.get("Source"), "target": m.get("Destination"), "read_only": not m.get("RW")}
                       for m in attrs.get("Mounts") or []],
            "env": redact_env(env),
            "labels": config.get("Labels") or {},
        }

    def wait_ready(self, timeout_s: float | None = None, poll_s: float = 0.25, *, quiet: bool = False) -> Readiness:
        """Poll /health then /v1/models until the served name is listed; fail at once if the container stops.

        ``quiet`` shows no progress (a wait in the background, beside one that does).
        """
        assert self.started_at is not None, "start() first"
        timeout = self.plan.startup_timeout_s if timeout_s is None else timeout_s
        if quiet:
            return self._poll_ready(timeout, poll_s, lambda _state: None)
        with WaitProgress(f"the runtime container {self.plan.name}", timeout) as progress:
            return self._poll_ready(timeout, poll_s, progress.tick)

    def _check_answering_server_is_ours(self, state: dict[str, Any]) -> None:
        """On the host's network, the server that answered must listen from inside this container.

        Another run's server that took the port after the launch preflight answers the same probes;
        its answers must never count as this runtime's readiness (its /proc tells whose socket it is).
        """
        pid = state.get("Pid")
        if self.plan.network != "host" or not isinstance(pid, int) or pid <= 0:
            return
        if namespace_listens(pid, self.plan.port) is False:
            raise RuntimeFailure(
                f"{self.plan.host}:{self.plan.port} answers as {self.plan.served_model_name!r}, but no process of "
                f"container {self.plan.name} listens on it: another server holds the port (another run's?); "
                "refusing to take its answers for this runtime's", log_tail=self.log_tail())

    def _poll_ready(self, timeout: float, poll_s: float, tick: Callable[[str], None]) -> Readiness:
        assert self.started_at is not None
        deadline = self.started_at + timeout
        health_s: float | None = None
        last = "no probe yet"
        polls = 0
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy: it is localhost
        while True:
            polls += 1
            try:
                state = self.state()
            except Exception as exc:  # removed behind the harness's back (docker rm -f, engine restart)
                raise ContainerExited(f"the runtime container is gone: {exc}", exit_code=None) from None
            if state.get("Status") != "running":
                raise self.exit_error(state, "before it was ready")
            now = time.monotonic()
            if now > deadline:
                raise ReadinessTimeout(
                    f"the runtime did not serve {self.plan.served_model_name!r} at {self.plan.endpoint} within "
                    f"{timeout:.0f} s (the container is still running; last probe: {last})",
                    log_tail=self.log_tail())
            try:
                if health_s is None:
                    with opener.open(self.plan.base_url + "/health", timeout=2) as r:
                        if r.status == 200:
                            health_s = time.monotonic() - self.started_at
                        last = f"/health answered {r.status}"
                if health_s is not None:
                    with opener.open(self.plan.endpoint.rstrip("/") + "/models", timeout=5) as r:
                        body = json.loads(r.read() or b"{}")
                    models = [str(m.get("id")) for m in body.get("data") or [] if isinstance(m, dict)]
                    if self.plan.served_model_name in models:
                        self._check_answering_server_is_ours(state)
                        self.readiness = Readiness(health_s, time.monotonic() - self.started_at, models, polls)
                        return self.readiness
                    last = f"/v1/models lists {models}, not {self.plan.served_model_name!r}"
                    if models:
                        raise ServesAnotherModel(
                            f"the runtime at {self.plan.endpoint} answers, but {last} (a served name is set when the "
                            "server starts: check SERVED_MODEL_NAME, or whether another server holds the port)",
                            log_tail=self.log_tail())
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
            tick(last)
            time.sleep(max(0.0, min(poll_s, deadline - time.monotonic())))

    def exit_error(self, state: dict[str, Any], when: str) -> ContainerExited | ContainerKilled | PortInUse:
        """Why the container stopped, as the error of whoever stopped it.

        The machine's doing is a harness fault, never the checkpoint's: the engine killed it for memory
        (``State.OOMKilled``), a signal the harness did not send ended it (exit code 128 + SIGKILL,
        SIGTERM, SIGINT, SIGHUP or SIGQUIT while no teardown of the harness was under way), or the
        server could not bind its port (another process took it). Any other exit is the runtime's
        own: :class:`ContainerExited`.
        """
        code = state.get("ExitCode")
        after = f"{time.monotonic() - self.started_at:.1f} s after start" if self.started_at is not None else ""
        tail = self.log_tail()
        if state.get("OOMKilled"):
            return ContainerKilled(
                f"the runtime container {self.plan.name} was killed for memory (the engine's State.OOMKilled, "
                f"exit code {code}) {when} ({after}): the machine ran out of memory, which says nothing about the "
                "checkpoint", log_tail=tail, hint="free memory (other runs, other containers) and run again")
        signum = killed_by(code)
        if signum is not None and not self.stopping:
            return ContainerKilled(
                f"the runtime container {self.plan.name} was ended by {signum.name} (exit code {code}) {when} "
                f"({after}), a signal the harness did not send: something outside the run stopped it",
                log_tail=tail, hint="see who stops containers on this machine (another run's cleanup, the OOM "
                "killer, an operator) and run again")
        if self.plan.network == "host" and bind_failed(self.logs_or_empty()):
            return PortInUse(
                f"the runtime container {self.plan.name} could not bind {self.plan.host}:{self.plan.port} "
                f"(\"Address already in use\" in its log) and exited with code {code} {when}: another process took "
                "the port", port=self.plan.port)
        return ContainerExited(f"the runtime container exited with code {code} {when} ({after})", exit_code=code,
                               log_tail=tail)

    def killed(self) -> ContainerKilled | None:
        """What ended this container when the machine did (for memory, or a signal the harness did not send);
        None while it runs, once the harness itself stops it, or when the engine cannot say."""
        if self.container is None or self.stopping:
            return None
        try:
            state = self.state()
        except Exception:  # the engine lost it: not evidence of a kill
            return None
        if state.get("Status") in ("running", "created", "restarting"):
            return None
        exc = self.exit_error(state, "while the run used it")
        return exc if isinstance(exc, ContainerKilled) else None

    def logs_or_empty(self) -> str:
        try:
            return self.logs_text()
        except Exception:  # the engine lost the container: no log to read
            return ""

    # ---- stop
    def stop(self) -> Teardown:
        """Remove every container of this run and verify none is left. Idempotent; never raises."""
        if self.teardown is not None:
            return self.teardown
        self.stopping = True
        t0 = time.monotonic()
        record = Teardown()
        with _uninterruptible():
            if self.container is not None:
                with contextlib.suppress(Exception):
                    state = self.state()
                    record.status, record.exit_code = state.get("Status"), state.get("ExitCode")
            try:
                failed: dict[str, str] = {}
                # The engine can refuse a removal for a moment (a process of the container not yet reaped:
                # "could not kill running container"); a removal still refused after the retries is reported.
                for attempt in range(REMOVE_ATTEMPTS):
                    failed = {}
                    for c in run_containers(self.client, self.plan.run_id):
                        try:
                            c.remove(force=True)
                            if c.name not in record.removed:
                                record.removed.append(c.name)
                        except Exception as exc:
                            failed[c.name] = f"removing {c.name}: {exc}"
                    if not failed:
                        break
                    if attempt + 1 < REMOVE_ATTEMPTS:
                        time.sleep(REMOVE_RETRY_S)
                record.errors.extend(failed.values())
                record.left = [c.name for c in run_containers(self.client, self.plan.run_id)]
            except Exception as exc:
                record.errors.append(f"listing the run's containers: {exc}")
            if self._log_thread is not None:
                self._log_thread.join(timeout=10)
            if record.ok:
                _LIVE.pop(self.plan.run_id, None)
        record.duration_s = time.monotonic() - t0
        self.teardown = record
        return record


def wait_relaunching(runtime: RuntimeContainer, *, quiet: bool = False,
                     on_relaunch: Callable[[RuntimeContainer, RuntimeContainer], None] = lambda old, new: None,
                     ) -> RuntimeContainer:
    """Wait until ``runtime`` serves; one that died of a bind error is relaunched once, on a newly reserved port.

    ``on_relaunch(old, new)`` is told before the new container starts. Returns the container that serves.

    Raises:
        PortInUse: the relaunched container could not bind its port either (both ports named): a harness fault.
        RuntimeFailure: it did not start or become ready for another reason.
    """
    poll_s = 1.0 if quiet else 0.25
    try:
        runtime.wait_ready(poll_s=poll_s, quiet=quiet)
        return runtime
    except PortInUse as exc:
        lost = exc
    runtime.stop()
    release_port(runtime.plan.port)
    again = RuntimeContainer(runtime.client, on_port(runtime.plan, free_port(runtime.plan.host)),
                             log_path=runtime.log_path, with_gpus=runtime.with_gpus)
    on_relaunch(runtime, again)
    again.start()
    try:
        again.wait_ready(poll_s=poll_s, quiet=quiet)
    except PortInUse as exc:
        raise PortInUse(f"{exc}; it had been relaunched once after port {lost.port} was taken the same way",
                        port=exc.port, hint="see what takes ports on this machine outside the kernel's ephemeral "
                        "range") from None
    return again


@contextlib.contextmanager
def launched(client: Any, plan: LaunchPlan, *, log_path: Path | None = None,
             with_gpus: bool = True) -> Iterator[RuntimeContainer]:
    """Start ``plan``'s container and remove it however the block ends (return, error, Ctrl-C, SIGTERM)."""
    runtime = RuntimeContainer(client, plan, log_path=log_path, with_gpus=with_gpus)
    with terminate_on_signals():
        try:
            runtime.start()
            yield runtime
        finally:
            runtime.stop()


def check_started(runtime: RuntimeContainer) -> Evidence:
    """The engine created the container exactly as planned (image ID, GPUs, network, IPC, shm, env, mounts)."""
    from docker.utils import parse_bytes

    plan = runtime.plan
    ev = Evidence(f"container {plan.name} runs {plan.image} as planned")
    seen = runtime.inspect()
    ev.measured.update(container=seen, leftovers_removed=runtime.leftovers_removed,
                       image=runtime.identity.to_dict() if runtime.identity else None)
    ev.expected.update(plan=plan.to_dict())
    if runtime.identity is not None and seen["image"] != runtime.identity.id:
        ev.add(f"the container runs image {seen['image']}, not the inspected {runtime.identity.id}")
    if plan.gpus:
        got = [(r.get("DeviceIDs"), r.get("Capabilities")) for r in seen["device_requests"] or []]
        if not runtime.with_gpus:
            ev.add(f"started without the GPU device requests the profile needs ({','.join(plan.gpus)})")
        elif got != [(list(plan.gpus), [["gpu"]])]:
            ev.add(f"device requests {got} differ from the plan's GPUs {list(plan.gpus)}")
    for key, want in (("network_mode", plan.network), ("ipc_mode", plan.ipc)):
        if want and seen[key] != want:
            ev.add(f"{key} is {seen[key]!r}, the plan says {want!r}")
    if plan.shm_size and seen["shm_size"] != parse_bytes(plan.shm_size):
        ev.add(f"shm size is {seen['shm_size']} bytes, the plan says {plan.shm_size}")
    raw_env = dict(item.partition("=")[::2] for item in runtime.container.attrs["Config"].get("Env") or [])
    for key, value in plan.env:
        if raw_env.get(key) != value:
            ev.add(f"env {key} is {redact(str(raw_env.get(key)))!r} in the container, the plan says {redact(value)!r}")
    for name in plan.passthrough_env:
        if not raw_env.get(name):
            ev.add(f"env {name} was to be passed through but is empty in the container")
    mounts = {(m["source"], m["target"], m["read_only"]) for m in seen["mounts"]}
    for m in plan.mounts:
        if (m.source, m.target, m.read_only) not in mounts:
            ev.add(f"mount {m.source} -> {m.target} ({'ro' if m.read_only else 'rw'}) is missing")
    if seen["labels"].get(LABEL_RUN) != plan.run_id:
        ev.add("the container does not carry the run's label (teardown could not find it)")
    return ev


#: Signals that come from outside a process (a kill, a stop, a hang-up): a runtime never sends them to itself
#: for a bad checkpoint. SIGSEGV, SIGABRT, SIGBUS and SIGFPE are the process's own faults and stay its exit.
EXTERNAL_SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
#: How a server says its port was taken (Python's errno 98 text, uvicorn's and vLLM's wording).
_BIND_FAILED = re.compile(r"Address already in use|\[Errno 98\]|EADDRINUSE")


def killed_by(exit_code: object) -> signal.Signals | None:
    """The outside signal a container's exit code says ended it (128 + the signal's number), else None."""
    if not isinstance(exit_code, int) or isinstance(exit_code, bool):
        return None
    for s in EXTERNAL_SIGNALS:
        if exit_code == 128 + s.value:
            return s
    return None


def bind_failed(log: str) -> bool:
    """Whether a runtime's log says it could not bind its port."""
    return bool(_BIND_FAILED.search(log))


def tail_with_cause(lines: Sequence[str], n: int = _LOG_TAIL) -> list[str]:
    """The last ``n`` lines, led by the runtime's last stated cause when the tail only points to one.

    vLLM's engine dies with "Engine core initialization failed. See root cause above" and a
    traceback of the front end, which can push the cause (the engine core's own exception)
    out of any fixed-size tail; a finding that quotes only the pointer tells a reader nothing.
    """
    tail = list(lines[-n:])
    if any(_is_cause(line) for line in tail):
        return tail
    earlier = [line for line in lines[:-n] if _is_cause(line)]
    return [earlier[-1], *tail] if earlier else tail


def _is_cause(line: str) -> bool:
    return bool(_EXCEPTION_LINE.search(line)) and not _POINTER_LINE.search(line)


def runtime_error_line(lines: Sequence[str]) -> str | None:
    """The runtime's own last error in ``lines`` (the log's tail): an exception that is a cause, else any
    other ERROR line that is no pointer to one, else the pointer."""
    errors = [line.strip() for line in lines if _ERROR_LINE.search(line)]
    causes = [line for line in errors if _is_cause(line)]
    others = [line for line in errors if not _POINTER_LINE.search(line)]
    chosen = causes or others or errors
    return redact(chosen[-1])[:300] if chosen else None


def failure_evidence(summary: str, exc: RuntimeFailure) -> Evidence:
    """A failed check's evidence from a runtime failure, with the container's last log lines.

    Where the tail holds the runtime's own error (vLLM's exception, say), the finding quotes it,
    so a reader sees why the runtime refused the checkpoint without opening the log.
    """
    ev = Evidence(summary)
    tail = [redact(line) for line in exc.log_tail]
    said = runtime_error_line(tail) if tail else None
    ev.add(redact(f"{exc}; the runtime's last error: {said}" if said else str(exc)))
    if tail:
        ev.measured["log_tail"] = tail
    if isinstance(exc, ContainerExited):
        ev.measured["exit_code"] = exc.exit_code
    return ev


def check_teardown(record: Teardown, run_id: str) -> Evidence:
    ev = Evidence(f"every container of run {run_id} was removed")
    ev.measured.update(record.to_dict())
    for err in record.errors:
        ev.add(err)
    if record.left:
        ev.add(f"left behind: {', '.join(record.left)}")
    if not record.removed and not record.errors:
        ev.add("no container of this run was found to remove (was it ever started?)")
    return ev
