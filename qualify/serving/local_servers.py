"""The local vLLM servers a profile's ``[local_server]`` asks for, started early and always stopped.

On a machine without the profile's GPUs the serving levels (smoke, acceptance,
losslessness, throughput) run against vLLM's CPU build: the profile's target with its
draft as the speculator and, for losslessness, the target alone. A start takes one to
two minutes of mostly single-core work; it begins when the first serving check needs a
server (:meth:`endpoint`), so a run whose earlier levels failed starts none, and
:meth:`start` may begin it sooner in the background. Whatever ends the run, :meth:`stop`
stops every server process group.

The target is a local folder, so its identity is its content: its
:func:`~qualify.checkpoint.checksums.folder_revision` must be the profile's ``$.target.revision``.
The served draft is recorded (path, content revision, every file's sha256) in the
report, because on a CPU it is a stand-in for the checkpoint, not the checkpoint itself.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from qualify.checkpoint.checksums import content_revision, folder_digests
from qualify.errors import HarnessError
from qualify.profile import LocalServerSpec, Profile
from qualify.runtime import vllm_cpu_plugin as plugin
from qualify.runtime.companions import usable_cores
from qualify.runtime.log_evidence import read_log
from qualify.runtime.vllm_cpu import find_vllm_python
from qualify.serving.counters import PER_REQUEST_FLAG
from qualify.serving.vllm_server import VLLMServer, plan_for_profile, wait_all_ready
from qualify.util.ports import free_port, release_port


def folder_identity(root: Path) -> dict[str, Any]:
    """Every file's sha256 and the folder's content revision (what a reader needs to know what was served)."""
    digests = folder_digests(root)
    return {"path": str(root), "revision": content_revision(digests), "files": digests}


class LocalServing:
    """``start()`` in the background, ``endpoint()``/``reference_endpoint()`` when needed, ``stop()`` always."""

    def __init__(self, profile: Profile, log_dir: Path, *, target: Path | None = None,
                 checkpoint: Path | None = None, levels: Sequence[str] | None = None) -> None:
        spec = profile.local_server
        if spec is None:
            raise HarnessError(f"profile {profile.name} has no [local_server] table")
        self.profile = profile
        self.spec: LocalServerSpec = spec
        self.target = Path(target).resolve() if target is not None else spec.target
        # The speculator: the checkpoint under test itself where the profile says so (serve_checkpoint),
        # else the profile's draft folder (a stand-in for the checkpoint, and the report says so).
        self.checkpoint = Path(checkpoint).resolve() if checkpoint is not None else None
        self.draft: Path | None = self.checkpoint if spec.serve_checkpoint else spec.draft
        self.log_dir = Path(log_dir)
        self.levels = tuple(levels) if levels is not None else None  # None: whatever the profile serves
        self.servers: dict[str, VLLMServer] = {}
        self._ports: list[int] = []  # reserved for this run's servers by free_port, given back when they stop
        self.identity: dict[str, Any] = {}
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._stopped = False
        self._lock = threading.Lock()
        # One after another (the default, as a release run on one set of GPUs must): only the speculative server
        # starts with the run; the source draft's and the target alone start when their arm's turn comes.
        self.side_by_side = profile.arms_side_by_side

    # ---- preparing: fast checks a user can act on, before minutes of start-up
    def _prepare(self) -> list[VLLMServer]:
        if self.draft is None:
            raise HarnessError("[local_server] serve_checkpoint is set but the run has no checkpoint folder to serve")
        sources = ([("source draft", self.spec.source_draft)]
                   if self._serves_source and self.spec.source_draft is not None else [])
        for what, path in (("target", self.target), ("draft", self.draft), *sources):
            if not (path / "config.json").is_file():
                hint = f"run {self.spec.setup}" if self.spec.setup else "build it first"
                raise HarnessError(f"[local_server] {what} {path} is not a model folder (no config.json)", hint=hint)
        python = find_vllm_python()
        target_id = folder_identity(self.target)
        pinned = self.profile.target.revision if self.profile.target else None
        if pinned and target_id["revision"] != pinned:
            raise HarnessError(
                f"[local_server] target {self.target} has content revision {target_id['revision']}, not the profile's "
                f"$.target.revision {pinned}: it is not the pinned target",
                hint=f"rebuild it ({self.spec.setup})" if self.spec.setup else None,
            )
        self.identity = {"target": target_id, "draft": folder_identity(self.draft)}
        wanted: dict[str, Path | None] = {"speculative": self.draft}
        if self.spec.reference:
            wanted["reference"] = None
        if self._serves_source and self.spec.source_draft is not None:
            self.identity["source_draft"] = folder_identity(self.spec.source_draft)
            wanted["source"] = self.spec.source_draft
        cores = usable_cores()
        servers = []
        for i, (name, draft) in enumerate(wanted.items()):
            # The paired level reads each request's own acceptance from its response (see
            # qualify.serving.paired_measure): both drafts' servers report it.
            extra = PER_REQUEST_FLAG if draft is not None and self._serves_source else ()
            self._ports.append(free_port())
            plan = plan_for_profile(self.profile, python=python, model=self.target, draft=draft, port=self._ports[-1],
                                    dtype=self.spec.dtype, extra_args=extra,
                                    method=self.spec.method)
            if len(wanted) > 1 and cores:
                # Engines spread over the cores: by default vLLM binds every engine to the same one.
                core = cores[i % len(cores)]
                plan = dataclasses.replace(plan, env={**plan.env, "VLLM_CPU_OMP_THREADS_BIND": str(core)})
            server = VLLMServer(plan, self.log_dir / f"vllm-{name}.log", ready_timeout_s=self.spec.ready_timeout_s)
            servers.append(server)
            self.servers[name] = server
        return servers

    def start(self) -> None:
        """Check the inputs and start the servers; wait for them in the background.

        A failure here (no vLLM venv, a missing or unpinned model folder) does not raise:
        it is kept and raised by :meth:`endpoint`, so every serving check reports it.
        """
        with self._lock:
            try:
                servers = self._prepare()
                if not self.side_by_side:
                    servers = [self.servers["speculative"]]
                for server in servers:
                    server.start()
            except (HarnessError, OSError) as exc:
                self._failure = exc if isinstance(exc, HarnessError) else HarnessError(f"[local_server]: {exc}")
                for server in self.servers.values():
                    server.stop()
                return

        def wait() -> None:
            try:
                wait_all_ready(servers)
                for name, server in self.servers.items():
                    if server in servers:
                        _check_plugin(name, server)
            except BaseException as exc:  # handed to whoever waits
                self._failure = exc
                for server in servers:
                    server.stop()

        self._thread = threading.Thread(target=wait, name="qualify-local-serving", daemon=True)
        self._thread.start()

    def _wait(self) -> None:
        if self._thread is None and self._failure is None and not self._stopped:
            self.start()
        if self._thread is None:
            if isinstance(self._failure, HarnessError):
                raise self._failure
            raise HarnessError("the local vLLM servers were not started")
        self._thread.join()
        if self._stopped:
            raise HarnessError("the local vLLM servers were stopped before they were ready")
        if self._failure is not None:
            if isinstance(self._failure, HarnessError):
                raise self._failure
            raise HarnessError(f"the local vLLM servers did not start: {self._failure}")

    def endpoint(self) -> str:
        """The speculative server's endpoint, once ready (waits; HarnessError with its log tail if it failed)."""
        self._wait()
        return self.servers["speculative"].endpoint

    @property
    def _serves_source(self) -> bool:
        # The source draft's server is started only for a profile that compares the two drafts.
        return (self.spec.source_draft is not None and self.profile.paired is not None
                and (self.levels is None or "paired" in self.levels))

    def source_endpoint(self) -> str | None:
        """The source draft's server's endpoint, once ready; None when the profile serves no source draft."""
        if not self._serves_source:
            return None
        self._wait()
        return self.servers["source"].endpoint

    def reference_endpoint(self) -> str | None:
        if "reference" not in self.servers:
            return None
        self._wait()
        return self.servers["reference"].endpoint

    def serves(self, arm: str) -> bool:
        """Whether this run's local servers include arm ``source`` or ``reference`` (nothing is started)."""
        return self._serves_source if arm == "source" else bool(self.spec.reference) if arm == "reference" else False

    def arm_endpoint(self, arm: str) -> str:
        """Arm ``source`` or ``reference``'s endpoint once it serves; one after another, the others are stopped first.

        Raises:
            HarnessError: the arm is not served by this run, or its server did not start (with its log's tail).
        """
        self._wait()
        server = self.servers.get(arm)
        if server is None:
            raise HarnessError(f"the local servers include no {arm} server")
        if not self.side_by_side and server.process is None:
            for other in self.servers.values():
                if other is not server:
                    other.stop()
            server.start()
            wait_all_ready([server])
            _check_plugin(arm, server)
        return server.endpoint

    def stop_arm(self, arm: str) -> None:
        """Done with ``arm`` (``checkpoint`` is the speculative server): stopped, where arms run one after another."""
        server = self.servers.get("speculative" if arm == "checkpoint" else arm)
        if server is not None and not self.side_by_side:
            server.stop()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            for server in self.servers.values():
                server.stop()
            for port in self._ports:
                release_port(port)
        if self._thread is not None:
            self._thread.join(timeout=60)

    @property
    def used(self) -> bool:
        """Whether a start was attempted (then the report records what was served, or why not)."""
        return bool(self.servers) or self._failure is not None

    def summary(self) -> dict[str, Any]:
        """What the report's environment records: the plans, start times, logs, and what was served."""
        if self.spec.serve_checkpoint:
            note = ("the serving levels ran against local vLLM CPU servers started by the harness; the speculator is "
                    f"the checkpoint under test itself, served with vLLM's {self.spec.method} method")
        else:
            note = ("the serving levels ran against local vLLM CPU servers started by the harness; the served draft "
                    "is the profile's [local_server] draft, a CPU stand-in for the checkpoint")
        return {
            "error": str(self._failure) if self._failure is not None else None,
            "kind": self.spec.kind,
            "note": note,
            "method": self.spec.method,
            "draft_is_checkpoint": self.spec.serve_checkpoint,
            "exercised": self.spec.exercised,
            "plugin": {"changes": list(plugin.CHANGES), "vllm_version": plugin.PLUGIN_VLLM_VERSION},
            "target": self.identity.get("target"),
            "draft": self.identity.get("draft"),
            "source_draft": self.identity.get("source_draft"),
            "servers": {
                name: {"plan": s.plan.to_dict(), "ready_s": s.start_s, "log": str(s.log_path),
                       "exit_code": s.process.returncode if s.process is not None else None,
                       "plugin_active": plugin.active_in_worker(read_log(s.log_path))}
                for name, s in self.servers.items()
            },
        }

    def brief(self) -> dict[str, Any]:
        """The served target and draft in a few fields, for each serving check's evidence."""
        out: dict[str, Any] = {"kind": self.spec.kind}
        for what in ("target", "draft", "source_draft"):
            ident = self.identity.get(what) or {}
            if what != "source_draft" or ident:
                out[what] = {"path": ident.get("path"), "revision": ident.get("revision")}
        return out


def _check_plugin(name: str, server: VLLMServer) -> None:
    if not plugin.active_in_worker(read_log(server.log_path)):
        # Without it, DFlash acceptance on a CPU would silently not mean what it means on a GPU.
        raise HarnessError(
            f"the vLLM CPU plugin did not report itself active in the model worker of the {name} "
            f"server (no '{plugin.ACTIVE_LINE}' line from a Worker in {server.log_path})")


__all__ = ["LocalServing", "folder_identity"]
