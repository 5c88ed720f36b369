"""The load level's one launch of the runtime, step by step, each step returning its evidence.

The load level's checks (``qualify/run/checks/load.py``) are thin: each asks this object for one
step -- GPU preflight, image pinned, revisions pinned, draft identity, container
started, ready, load evidence, teardown -- and records the :class:`Evidence`. Steps are
computed once and cached, so the order checks run in cannot change what they see, and
the container is only started when every preflight step passed: a run on the wrong
GPUs or an unpinned image is refused before anything loads.

Where the serving levels need a reference server (the target alone) or the source draft's
server, they are derived from the same image and plan (:mod:`qualify.runtime.companions`).
By default (``$.orchestration.arms = "sequential"``) each arm runs alone: the checkpoint's
container is stopped before the source draft's starts, and that one before the target
alone -- what a release run on one set of GPUs must do, so the CPU rehearsal takes the same
path. A profile whose hardware holds every arm at once may say ``side-by-side``: the
companions then start once the container serves and load while the first levels run. The
run's teardown removes whatever is left.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from qualify import errors
from qualify.core import Evidence
from qualify.errors import QualifyError
from qualify.profile import Profile
from qualify.runtime import companions as comp
from qualify.runtime import container as c
from qualify.runtime import engine, labels
from qualify.runtime import image as images
from qualify.runtime import plan as plans
from qualify.runtime.gpu import GpuInventory, check_gpus, query_gpus
from qualify.runtime.log_evidence import check_log_evidence
from qualify.util.ports import free_port, release_port
from qualify.util.progress import WaitProgress

SERVER_LOG = "server.log"


def build_image(profile: Profile) -> tuple[str | None, dict[str, Any]]:
    """The image ID of a profile whose image is built here (``$.runtime.build``), and what the build did."""
    from qualify.runtime import standin, vllm_cpu_image

    builders = {"standin": (standin.ensure_image, "runtimes/standin"),
                "vllm-cpu": (vllm_cpu_image.ensure_image, "runtimes/vllm-cpu")}
    ensure, context = builders[profile.image_build or "standin"]
    try:
        report = ensure(engine.docker_client())
    except QualifyError as exc:
        return None, {"error": str(exc)}
    return report.image_id, {"image": report.image, "image_id": report.image_id, "built": report.built,
                             "timings_s": report.timings_s,
                             "pinned": f"to the image ID built from this repository's {context}"}


def runtime_mounts(profile: Profile) -> tuple[plans.Mount, ...]:
    """What the profile's runtime mounts besides the draft: the vLLM CPU image's venv, Python and target."""
    if profile.image_build != "vllm-cpu":
        return ()
    from qualify.runtime import vllm_cpu_image
    from qualify.runtime.vllm_cpu import vllm_venv

    return vllm_cpu_image.mounts(profile, vllm_venv())


class RuntimeSession:
    def __init__(
        self,
        profile: Profile,
        *,
        run_id: str,
        log_dir: Path | None = None,
        draft_revision: str | None = None,
        checkpoint_dir: Path | None = None,
        hf_cache: Path | None = None,
        allow_unpinned: bool = False,
        pass_hf_token: bool = False,
        startup_timeout_s: float | None = None,
        image_digest: str | None = None,
        target_snapshot: Path | None = None,
        companions: dict[str, comp.SourceDraft | None] | None = None,
        cores: tuple[int, ...] = (),
        client_factory: Callable[[], Any] = engine.docker_client,
        gpu_query: Callable[[], GpuInventory] = query_gpus,
        launcher_preflight: bool = False,
    ) -> None:
        self.profile = profile
        # The run's own containers check the image's launcher first (qualify.runtime.preflight); a session made
        # for a test of its steps alone does not.
        self.launcher_preflight = launcher_preflight
        self.preflight_record: dict[str, Any] | None = None
        self.run_id = run_id
        self.log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix=f"qualify-{run_id}-"))
        self.checkpoint_dir = checkpoint_dir
        self.hf_cache = hf_cache
        # Built now: a bad revision or contradicting mounts are usage errors, before any check passes.
        self.plan = plans.build_plan(profile, run_id=run_id, draft_revision=draft_revision,
                                 checkpoint_dir=checkpoint_dir if hf_cache is None else None, hf_cache=hf_cache,
                                 allow_unpinned=allow_unpinned, pass_hf_token=pass_hf_token,
                                 startup_timeout_s=startup_timeout_s, image_digest=image_digest,
                                 target_snapshot=target_snapshot)
        if self.plan.network == "host":
            # A port of this run's own (the kernel's free choice, checked again at launch): two runs on one
            # machine never talk to each other's server, and the profile's port is no shared resource.
            self.plan = plans.on_port(self.plan, free_port(self.plan.host))
        extra = runtime_mounts(profile)
        if extra:
            self.plan = dataclasses.replace(self.plan, mounts=self.plan.mounts + extra)
        # role -> the source draft it mounts (None for the reference).
        self.companion_roles: dict[str, comp.SourceDraft | None] = dict(companions or {})
        rt = profile.runtime
        # What the published command sets for each variable the qualification launch overrides (None: nothing).
        self.published: dict[str, str | None] = {k: rt.env.get(k) for k in rt.qualification_overrides}
        for role in self.companion_roles:
            comp.companion_plan(self.plan, role, port=1, source=self.companion_roles[role],  # refused now, not later
                                published=self.published)
        self.side_by_side = profile.arms_side_by_side
        # Engines that run at once spread over the cores (by default each binds the same ones); one alone takes all.
        self._cores = tuple(cores) if self.side_by_side and len(self.companion_roles) > 0 else ()
        first = comp.core_of(0, self._cores)
        if first is not None:
            self.plan = comp.bind_core(self.plan, first)
        self.companions: dict[str, c.RuntimeContainer] = {}
        self.companion_errors: dict[str, str] = {}
        self._companion_ready: dict[str, str] = {}
        self._companion_waits: dict[str, threading.Thread] = {}
        self._companion_failures: dict[str, errors.RuntimeFailure] = {}
        self._companion_faults: dict[str, errors.HarnessError] = {}
        self._client_factory = client_factory
        self._gpu_query = gpu_query
        self._client: Any = None
        self._steps: dict[str, Evidence] = {}
        # A step the harness or the machine broke: raised again on every later ask, never recomputed (a relaunch
        # or a second wait would change what the checks that already ran saw).
        self._faults: dict[str, errors.HarnessError] = {}
        # Each relaunch after a port was taken between the choice and the bind: the port lost and the one used.
        self.relaunches: list[dict[str, Any]] = []
        self.runtime: c.RuntimeContainer | None = None
        self._signals = contextlib.ExitStack()
        # Each arm's container as it came and went (wall clock): the report shows when two ever overlapped.
        self.timeline: list[dict[str, Any]] = []
        self._current: str | None = None

    @property
    def log_path(self) -> Path:
        return self.log_dir / SERVER_LOG

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._client_factory()
        return self._client

    def _once(self, step: str, compute: Callable[[], Evidence]) -> Evidence:
        if step in self._faults:
            raise self._faults[step]
        if step not in self._steps:
            try:
                self._steps[step] = compute()
            except errors.HarnessError as exc:
                self._faults[step] = exc
                raise
        return self._steps[step]

    def _wait_relaunching(self, role: str, runtime: c.RuntimeContainer, *, quiet: bool) -> c.RuntimeContainer:
        """Wait until ``role``'s container serves, relaunched once on another port after a bind error."""
        if role != comp.CHECKPOINT and self.side_by_side:  # a relaunch's stop would remove the arms serving now
            runtime.wait_ready(poll_s=1.0, quiet=quiet)
            return runtime

        def swap(old: c.RuntimeContainer, new: c.RuntimeContainer) -> None:
            self._arm_stopped(role)
            self.relaunches.append({"container": old.plan.name, "port_lost": old.plan.port, "port": new.plan.port})
            if role == comp.CHECKPOINT:
                self.runtime, self.plan = new, new.plan
            else:
                self.companions[role] = new
            self._arm_started(role, new)

        return c.wait_relaunching(runtime, quiet=quiet, on_relaunch=swap)

    # ---- preflight
    def gpu_preflight(self) -> Evidence:
        return self._once("gpu", lambda: check_gpus(self._gpu_query() if self.plan.gpus else GpuInventory(),
                                                    self.profile))

    def image(self) -> Evidence:
        def compute() -> Evidence:
            try:
                identity = images.inspect_image(self.client, self.plan.image)
            except errors.ImageNotPresent as exc:
                return c.failure_evidence(f"runtime image {self.plan.image} is present locally and pinned", exc)
            return images.check_image(identity, self.plan)

        return self._once("image", compute)

    def pinning(self) -> Evidence:
        return self._once("pinning", lambda: images.check_pinning(self.plan))

    def draft_identity(self, expected: dict[str, tuple[str, int]], check_local: Callable[[Path], Evidence]) -> Evidence:
        """The draft the container loads is the manifest's: the mounted directory, or the hub/cache revision."""
        def compute() -> Evidence:
            if self.hf_cache is None and self.checkpoint_dir is not None:
                ev = check_local(self.checkpoint_dir)
                ev.summary = f"the mounted draft {self.checkpoint_dir} is the manifest's: {ev.summary}"
                ev.measured["mounted_at"] = [m.target for m in self.plan.mounts]
                return ev
            from qualify.checkpoint.hub import fetch_and_check

            env = self.plan.env_dict
            ev, _ = fetch_and_check(env["DFLASH_MODEL"], self.plan.draft_revision or "", expected, what="draft",
                                    cache_dir=self.hf_cache, allow_patterns=sorted(expected))
            return ev

        return self._once("draft", compute)

    # ---- the container
    def start(self) -> Evidence:
        def compute() -> Evidence:
            blockers = [name for name, ev in (("load.gpu_preflight", self.gpu_preflight()),
                                              ("load.image_pinned", self.image()),
                                              ("load.revisions_pinned", self.pinning())) if not ev.ok]
            if blockers:
                ev = Evidence(f"container {self.plan.name} started")
                ev.add(f"not started: {', '.join(blockers)} failed; nothing is launched on unverified conditions")
                return ev
            self._signals.enter_context(c.terminate_on_signals())
            if self.launcher_preflight:
                self._check_launcher()
            self.runtime = c.RuntimeContainer(self.client, self.plan, log_path=self.log_path)
            self._arm_started(comp.CHECKPOINT, self.runtime)
            try:
                self.runtime.start()
            except errors.RuntimeFailure as exc:
                return c.failure_evidence(f"container {self.plan.name} started", exc)
            ev = c.check_started(self.runtime)
            ev.measured["server_log"] = str(self.log_path)
            return ev

        return self._once("start", compute)

    def _check_launcher(self) -> None:
        """Each arm of the run launched through the stand-in and compared with what it means, before the first
        container serves (:mod:`qualify.runtime.preflight`; about 1.5 s an arm on the CPU image).

        Raises:
            LaunchMismatch: a launch does not ask vLLM for what its arm means, or never reaches vLLM (exit 3).
        """
        from qualify.runtime import preflight

        if self.profile.image_build == "standin":
            return  # the stand-in image prints load evidence without vLLM: there is no launcher of vLLM to check
        arms = {comp.CHECKPOINT: self.plan}
        try:
            for index, role in enumerate(self.companion_roles, start=1):
                arms[role] = self.arm_plan(role, index)
            # An arm that fetches a model (no snapshot of it mounted) is one a run may launch: left out, said why.
            skipped = {role: why for role, plan in arms.items() if (why := preflight.unmounted(plan)) is not None}
            checked = {role: plan for role, plan in arms.items() if role not in skipped}
            report = (preflight.run_preflight(self.client, checked,
                                              images.inspect_image(self.client, self.plan.image).id,
                                              not_applied=preflight.not_applied(self.profile.image_build))
                      if checked else None)
        finally:
            for role, plan in arms.items():
                if role != comp.CHECKPOINT:
                    release_port(plan.port)
        self.preflight_record = {**(report.to_dict() if report is not None else {"ok": None, "arms": []}),
                                 "skipped": skipped}
        if report is not None:
            preflight.raise_on_findings(report)

    def _arm_started(self, role: str, runtime: c.RuntimeContainer) -> None:
        self._current = role
        self.timeline.append({"arm": role, "container": runtime.plan.name, "started": _now(), "stopped": None})

    def _arm_stopped(self, role: str) -> None:
        for entry in self.timeline:
            if entry["arm"] == role and entry["stopped"] is None:
                entry["stopped"] = _now()
        if self._current == role:
            self._current = None

    def arm_plan(self, role: str, index: int) -> plans.LaunchPlan:
        """The launch plan of arm ``role``, the run's ``index``-th engine: the checkpoint's own plan, or its
        companion's derived from it. The one derivation both the run and ``qualify preflight`` launch."""
        if role == comp.CHECKPOINT:
            return self.plan
        plan = comp.companion_plan(self.plan, role, port=free_port(self.plan.host), source=self.companion_roles[role],
                                   published=self.published)
        core = comp.core_of(index, self._cores)
        return comp.bind_core(plan, core) if core is not None else plan

    def _start_companion(self, role: str, index: int) -> c.RuntimeContainer | None:
        """Start ``role``'s container; None (the failure kept for its checks) when it cannot start."""
        plan = self.arm_plan(role, index)
        runtime = c.RuntimeContainer(self.client, plan, log_path=self.log_dir / f"server-{role}.log")
        self.companions[role] = runtime
        self._arm_started(role, runtime)
        try:
            runtime.start()
        except errors.RuntimeFailure as exc:
            self.companion_errors[role] = str(exc)
            self._arm_stopped(role)
            return None
        return runtime

    def _start_companions(self) -> None:
        """Start each companion now (they load while the first serving checks run); a failure is kept for its checks."""
        for i, role in enumerate(self.companion_roles, start=1):
            runtime = self._start_companion(role, i)
            if runtime is None:
                continue
            # Waited for in the background, so its readiness time is when it served, not when a check asked.
            waiter = threading.Thread(target=self._await_companion, args=(role, runtime), daemon=True,
                                      name=f"qualify-{role}-ready")
            self._companion_waits[role] = waiter
            waiter.start()

    def _await_companion(self, role: str, runtime: c.RuntimeContainer, *, quiet: bool = True) -> None:
        try:
            self._wait_relaunching(role, runtime, quiet=quiet)
        except errors.RuntimeFailure as exc:
            self._companion_failures[role] = exc
        except errors.HarnessError as exc:  # killed from outside, its port taken twice: no verdict on it
            self._companion_faults[role] = exc
        except Exception as exc:  # the engine's client failing under the wait: the companion is not usable
            self._companion_failures[role] = errors.RuntimeFailure(f"waiting for {runtime.plan.name} failed: {exc}")

    def arm_endpoint(self, role: str) -> str:
        """The endpoint of arm ``role`` (``checkpoint``, ``source``, ``reference``) once it serves.

        One after another (the default): the arm serving now is stopped first, then ``role``'s
        container is started and waited for; the checkpoint's container, once stopped, is not
        started again. Side by side: the companion started with the container.

        Raises:
            RuntimeNotStarted: the arm cannot serve (the reason, and its runtime's last error).
        """
        if role == comp.CHECKPOINT:
            if self.runtime is None or self.runtime.container is None:
                raise errors.RuntimeNotStarted(f"the load level's container {self.plan.name} was not started")
            if self.runtime.teardown is not None:
                raise errors.RuntimeNotStarted(f"the checkpoint's container {self.plan.name} was stopped for the "
                                               "next arm; an arm runs once")
            return self.plan.endpoint
        if self.side_by_side or role in self._companion_ready or role in self.companion_errors:
            return self.companion_endpoint(role)
        if role not in self.companion_roles:
            raise errors.RuntimeNotStarted(f"no {role} server: this run asked for none")
        if self.runtime is None or self.runtime.container is None:
            raise errors.RuntimeNotStarted(f"no {role} server: the load level's container {self.plan.name} was not "
                                           "started")
        if self._current is not None:
            self.stop_arm(self._current)
        runtime = self._start_companion(role, len(self.companions) + 1)
        if runtime is not None:
            self._await_companion(role, runtime, quiet=False)
        return self.companion_endpoint(role)

    def stop_arm(self, role: str) -> c.Teardown | None:
        """Stop arm ``role``'s container (one after another: before the next arm starts). None if it never ran.

        A container of the run left behind is recorded, and the run's teardown check reports it.
        """
        runtime = self.runtime if role == comp.CHECKPOINT else self.companions.get(role)
        if runtime is None or runtime.container is None:
            return None
        record = runtime.stop()
        self._arm_stopped(role)
        if not record.ok:
            self.companion_errors.setdefault(role, f"its teardown left {', '.join(record.left + record.errors)}")
        return record

    def companion_endpoint(self, role: str) -> str:
        """The endpoint of ``role``'s server once it serves (waits for it).

        Raises:
            RuntimeNotStarted: it was not asked for, the container never started, or it failed
                to start or to become ready (the reason and its runtime's last error).
        """
        if role in self._companion_ready:
            return self._companion_ready[role]
        if role in self.companion_errors:
            raise errors.RuntimeNotStarted(f"the {role} server did not start: {self.companion_errors[role]}")
        runtime = self.companions.get(role)
        if runtime is None:
            why = ("this run asked for none" if role not in self.companion_roles
                   else f"the load level's container {self.plan.name} was not started")
            raise errors.RuntimeNotStarted(f"no {role} server: {why}")
        waiter = self._companion_waits.get(role)
        if waiter is not None:
            with WaitProgress(f"the {role} server {runtime.plan.name}", runtime.plan.startup_timeout_s) as progress:
                while waiter.is_alive():
                    waiter.join(timeout=1.0)
                    progress.tick("starting")
        fault = self._companion_faults.get(role)
        if fault is not None:
            raise fault
        runtime = self.companions[role]  # relaunched after a bind error, maybe
        exc = self._companion_failures.get(role)
        if exc is not None:
            said = c.runtime_error_line(exc.log_tail) if exc.log_tail else None
            self.companion_errors[role] = f"{exc}; the runtime's last error: {said}" if said else str(exc)
            raise errors.RuntimeNotStarted(f"the {role} server did not start: {self.companion_errors[role]}",
                                           log_tail=exc.log_tail) from None
        if runtime.readiness is None:  # never waited for: nothing says it serves
            raise errors.RuntimeNotStarted(f"the {role} server {runtime.plan.name} was not seen ready")
        if self.profile.image_build == "vllm-cpu":
            from qualify.runtime import vllm_cpu_plugin

            if not vllm_cpu_plugin.active_in_worker(runtime.logs_text()):
                # Without it, DFlash on a CPU would silently not mean what it means on a GPU.
                self.companion_errors[role] = (f"the vLLM CPU plugin did not report itself active in the model "
                                               f"worker of {runtime.plan.name} (no '{vllm_cpu_plugin.ACTIVE_LINE}' "
                                               "line from a Worker)")
                raise errors.RuntimeNotStarted(f"the {role} server is not usable: {self.companion_errors[role]}")
        self._companion_ready[role] = runtime.plan.endpoint
        return runtime.plan.endpoint

    def killed(self) -> errors.ContainerKilled | None:
        """The first of the run's containers the machine ended (for memory, or by a signal the harness did not send)."""
        return next((k for rt in (self.runtime, *self.companions.values()) if rt is not None and (k := rt.killed())),
                    None)

    def served_by(self) -> dict[str, Any]:
        """The running container (name, ID, image ID) and the draft it mounts, for the serving levels' evidence."""
        rt = self.runtime
        env = self.plan.env_dict
        draft_at = comp.checkpoint_mount(self.plan)
        mounted = next((m.source for m in self.plan.mounts if m.target == draft_at), None)
        return {
            "container": self.plan.name,
            "container_id": rt.container.id if rt is not None and rt.container is not None else None,
            "image": self.plan.image,
            "image_id": rt.identity.id if rt is not None and rt.identity is not None else None,
            "checkpoint": {"repo": env.get("DFLASH_MODEL"), "revision": self.plan.draft_revision,
                           "mounted_from": mounted, "mounted_at": draft_at},
            "note": "the load level's container: the serving levels talk to the server it launched",
        }

    def server_logs(self) -> dict[str, Callable[[], str]]:
        """Readers of the log of each server this session started: ``runtime`` and each companion's role."""
        out: dict[str, Callable[[], str]] = {}
        if self.runtime is not None and self.runtime.container is not None:
            out["runtime"] = self.runtime.logs_text
        for role, runtime in self.companions.items():
            if runtime.container is not None:
                out[role] = runtime.logs_text
        return out

    def ready(self) -> Evidence:
        def compute() -> Evidence:
            assert self.runtime is not None and self.runtime.container is not None
            def summary() -> str:  # the endpoint moves with a relaunch
                return f"{self.plan.endpoint} serves {self.plan.served_model_name!r} within " \
                       f"{self.plan.startup_timeout_s:.0f} s"
            try:
                self.runtime = self._wait_relaunching(comp.CHECKPOINT, self.runtime, quiet=False)
            except errors.RuntimeFailure as exc:
                return c.failure_evidence(summary(), exc)
            readiness = self.runtime.readiness
            assert readiness is not None
            ev = Evidence(summary() + f" (ready after {readiness.ready_s:.1f} s)")
            ev.measured.update(readiness.to_dict())
            if self.relaunches:
                ev.measured["relaunched"] = list(self.relaunches)
            if self.side_by_side:
                # Started once the container serves, while the first serving levels run: measured on 2 shared
                # cores, three vLLM CPU engines starting at once took 290 s, one then two about half that.
                self._start_companions()
            if self.companions:
                ev.measured["companions"] = {role: rc.plan.name for role, rc in self.companions.items()}
            ev.expected.update(served_model_name=self.plan.served_model_name,
                               startup_timeout_s=self.plan.startup_timeout_s)
            return ev

        return self._once("ready", compute)

    def draft_folder(self) -> Path | None:
        """The folder of the draft the runtime loads: the mounted pinned copy, or its revision's hub cache snapshot."""
        if self.hf_cache is None:
            return self.checkpoint_dir
        repo, revision = self.plan.env_dict.get("DFLASH_MODEL"), self.plan.draft_revision
        if not repo or not revision:
            return None
        return self.hf_cache / ("models--" + repo.replace("/", "--")) / "snapshots" / revision

    def load_evidence(self, settle_s: float = 2.0) -> Evidence:
        def compute() -> Evidence:
            assert self.runtime is not None
            # The engine copies the container's stdout to its log asynchronously: a line printed just before
            # the server answered may land a moment later. Re-read for a short while before calling it missing.
            deadline = time.monotonic() + settle_s
            while True:
                ev = check_log_evidence(self.runtime.logs_text(), self.profile, "load", log_name=SERVER_LOG,
                                        draft_folder=self.draft_folder())
                if ev.ok or time.monotonic() >= deadline:
                    break
                time.sleep(0.25)
            ev.measured["server_log"] = str(self.log_path)
            return ev

        return self._once("evidence", compute)

    # ---- teardown
    def close(self) -> c.Teardown | None:
        """Remove the run's containers (idempotent). None when nothing was ever started."""
        try:
            if self.runtime is None:
                return None
            first = self.runtime.stop()  # every container of the run: the companions too
            records = [first] + [runtime.stop() for runtime in self.companions.values()]
            if self._current is not None:
                self._arm_stopped(self._current)
            if len(records) == 1:
                return first
            # Arms stopped one after another each left their own record: the run's is all of them.
            return c.Teardown(removed=[n for r in records for n in r.removed],
                              left=sorted({n for r in records for n in r.left}),
                              errors=[e for r in records for e in r.errors],
                              exit_code=first.exit_code, status=first.status,
                              duration_s=sum(r.duration_s for r in records))
        finally:
            self._signals.close()
            for plan in (self.plan, *(rt.plan for rt in self.companions.values())):
                release_port(plan.port)

    def teardown(self) -> Evidence:
        """The teardown's evidence; ``measured["started"]`` is False (and nothing is judged) when no container
        was ever started: there was nothing to tear down, which says nothing about the checkpoint."""
        record = self.close()
        if record is None:
            ev = Evidence(f"no container of run {self.run_id} is left")
            ev.measured["started"] = False
            return ev
        return c.check_teardown(record, self.run_id)

    def teardown_armed(self) -> Evidence:
        """For a teardown deferred to the session's end: the container is findable by its run label now.

        The session fixture removes it later; a container left then is a harness error of
        the run, which makes its verdict "not qualified".
        """
        ev = Evidence(f"teardown of run {self.run_id} is deferred to the end of the session (a later level uses the "
                      "server); its container is found by the run label")
        ev.measured["deferred"] = True
        if self.runtime is None or self.runtime.container is None:
            ev.measured["started"] = False
            return ev
        names = sorted(x.name for x in engine.run_containers(self.client, self.run_id))
        ev.measured["containers"] = names
        started = [rc.plan.name for rc in self.companions.values() if rc.container is not None]
        wanted = sorted([self.plan.name, *started])
        if names != wanted:
            ev.add(f"the run label {labels.LABEL_RUN}={self.run_id} finds {names or 'nothing'}, not "
                   f"{', '.join(wanted)}")
        return ev

    def summary(self) -> dict[str, Any]:
        """What the report's environment records about the runtime (JSON-ready, redacted)."""
        rt = self.runtime
        return {
            "plan": self.plan.to_dict(),
            "docker_run": plans.render_docker_run(self.plan),
            "reproducible": not self.plan.unpinned,
            "image": rt.identity.to_dict() if rt and rt.identity else None,
            "readiness": rt.readiness.to_dict() if rt and rt.readiness else None,
            "teardown": rt.teardown.to_dict() if rt and rt.teardown else None,
            "server_log": str(self.log_path),
            "companions": {role: _companion_summary(rt, self.companion_errors.get(role))
                           for role, rt in self.companions.items()},
            "arms": {"mode": "side-by-side" if self.side_by_side else "sequential", "timeline": self.timeline},
            "relaunched": self.relaunches,
            "launcher_preflight": self.preflight_record,
        }


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")


def _companion_summary(rt: c.RuntimeContainer, error: str | None) -> dict[str, Any]:
    return {"plan": rt.plan.to_dict(), "docker_run": plans.render_docker_run(rt.plan),
            "container_id": rt.container.id if rt.container is not None else None,
            "image": rt.identity.to_dict() if rt.identity else None,
            "readiness": rt.readiness.to_dict() if rt.readiness else None,
            "server_log": str(rt.log_path), "error": error}
