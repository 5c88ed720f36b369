"""Launch the profile's pinned runtime container, wait until it serves, and always tear it down.

The profile's ``[runtime]`` (image, env, GPUs, network, IPC, shm, endpoint) becomes a
:class:`LaunchPlan` (pure, :func:`build_plan`), which becomes exactly one Docker SDK
``containers.create`` call (:func:`create_kwargs`) equivalent to the model card's
``docker run`` -- and can be printed as that command (:func:`render_docker_run`) so a
person can reproduce the launch by hand.

Rules a release gate needs, each enforced here rather than left to callers:

- **Never pull.** ``containers.run`` pulls a missing image; the harness inspects the
  image first and launches it *by image ID*, so a tag that moves between the inspection
  and the start cannot change what runs. A missing image is a clear failure.
- **Pinned or said so.** The image is recorded by ID and repo digests; a profile digest
  that differs is a failure; an empty digest or ``DFLASH_MODEL_REVISION`` (a moving tag or
  branch) is refused unless the plan allows it, and then the evidence says "not reproducible".
- **No leaks.** Containers carry labels (harness, run id, owner process); a new launch
  first removes leftovers of owners that are dead; teardown removes every container of
  the run on success, failure, timeout, Ctrl-C and SIGTERM, and verifies none is left.
- **Fail fast.** The readiness wait checks the container's state on every poll, so a
  crash ends the wait at once with the exit code and the last log lines.
- **Talk to the right server.** With host networking a stale server on the port would
  answer the probes; the port must be free before the launch.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shlex
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from qualify.errors import (
    ContainerExited,
    DockerUnavailable,
    ImageDigestMismatch,
    ImageNotPresent,
    PortInUse,
    ReadinessTimeout,
    RuntimeFailure,
    UnpinnedLaunch,
    UsageError,
)
from qualify.profile import DEFAULT_STARTUP_TIMEOUT_S, Profile
from qualify.report.model import Evidence
from qualify.util.identifiers import is_commit, is_image_digest, new_run_id
from qualify.util.ports import in_use
from qualify.util.progress import WaitProgress
from qualify.util.redact import redact, redact_env

LABEL_HARNESS = "qualify.harness"
HARNESS = "qualify"
LABEL_RUN = "qualify.run-id"
LABEL_OWNER = "qualify.owner"
LABEL_PROFILE = "qualify.profile"
#: Where the runtime's huggingface_hub looks (HF_HOME's default for root); local drafts are mounted under it.
HF_CACHE_TARGET = "/root/.cache/huggingface/hub"
#: Readiness deadline when the profile states none: a 4-GPU load of a large target takes many minutes.
#: Environment variables passed through by name (``-e HF_TOKEN``): docker reads the value, nobody prints it.
TOKEN_VARS = ("HF_TOKEN",)
INSTALL_HINT = "run scripts/install-docker.sh (as root) to install and start a Docker engine"
_LOG_TAIL = 25


# -- the plan ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "read_only": self.read_only}


@dataclass(frozen=True)
class LaunchPlan:
    """Everything one launch needs, decided before any container exists. Immutable; JSON via :meth:`to_dict`."""

    profile: str
    run_id: str
    name: str
    image: str
    image_digest: str | None  # what the profile pins; None = a moving tag
    env: tuple[tuple[str, str], ...]  # in the profile's order
    passthrough_env: tuple[str, ...]  # names docker takes from the harness's environment (secrets)
    gpus: tuple[str, ...]
    network: str | None
    ipc: str | None
    shm_size: str | None
    endpoint: str
    host: str
    port: int
    served_model_name: str
    mounts: tuple[Mount, ...]
    labels: tuple[tuple[str, str], ...]
    startup_timeout_s: float
    draft_revision: str | None  # None = the launcher resolves a moving branch
    target_revision: str | None
    allow_unpinned: bool = False

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    @property
    def base_url(self) -> str:
        """scheme://host:port, where /health and /metrics live."""
        parts = urlsplit(self.endpoint)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def unpinned(self) -> list[str]:
        """What this plan leaves to a moving reference, in words; empty when the launch is reproducible."""
        out = []
        if self.image_digest is None:
            out.append(f"runtime image {self.image} (a tag; the profile pins no digest)")
        if self.draft_revision is None:
            out.append("draft (DFLASH_MODEL_REVISION empty: the launcher resolves the main branch)")
        if self.target_revision is None:
            out.append("target (the profile pins no target revision)")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile, "run_id": self.run_id, "name": self.name,
            "image": self.image, "image_digest": self.image_digest,
            "env": redact_env(self.env_dict), "passthrough_env": list(self.passthrough_env),
            "gpus": list(self.gpus), "network": self.network, "ipc": self.ipc, "shm_size": self.shm_size,
            "endpoint": self.endpoint, "served_model_name": self.served_model_name,
            "mounts": [m.to_dict() for m in self.mounts], "labels": dict(self.labels),
            "startup_timeout_s": self.startup_timeout_s,
            "draft_revision": self.draft_revision, "target_revision": self.target_revision,
            "allow_unpinned": self.allow_unpinned, "reproducible": not self.unpinned, "unpinned": self.unpinned,
        }


def owner_id(pid: int | None = None) -> str:
    """``host:pid:start-time`` of a process: a pid alone is reused, the pair is not."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_start_time(pid)}"


def _start_time(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "?"
    # Field 22 (starttime); the command name (field 2) may contain spaces and parentheses.
    return stat.rsplit(")", 1)[1].split()[19]


def owner_alive(owner: str) -> bool | None:
    """Whether the owning process still runs; None when it ran on another host (cannot tell)."""
    host, _, rest = owner.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return None
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, owned by someone else
    return _start_time(pid) == start


def build_plan(
    profile: Profile,
    *,
    run_id: str | None = None,
    draft_revision: str | None = None,
    checkpoint_dir: Path | None = None,
    hf_cache: Path | None = None,
    pass_hf_token: bool = False,
    allow_unpinned: bool = False,
    serving: bool = False,
    startup_timeout_s: float | None = None,
    image_digest: str | None = None,
) -> LaunchPlan:
    """The launch plan for ``profile``; pure apart from resolving mount paths.

    ``serving=True`` plans the *published* serving command (the profile's env without
    the qualification overrides), which is what the model card prints; otherwise the
    qualification launch (``Profile.launch_env``). ``checkpoint_dir`` is mounted
    read-only where the runtime's hub cache keeps ``DFLASH_MODEL`` at its revision, so the
    env stays exactly the profile's; ``hf_cache`` mounts a whole cache read-only instead.
    ``image_digest`` pins the image at run time where the profile states no digest (the
    seed's card gives none; a release engineer knows the one they qualify).
    """
    runtime = profile.runtime
    pinned_digest = runtime.image_digest
    if image_digest is not None:
        if not is_image_digest(image_digest):
            raise UsageError(f"image digest {image_digest!r} is not sha256:<64 lowercase hex>")
        if pinned_digest and image_digest != pinned_digest:
            raise UsageError(f"image digest {image_digest} contradicts profile {profile.name}'s "
                             f"$.runtime.image_digest {pinned_digest}")
        pinned_digest = image_digest
    run_id = run_id or new_run_id(profile.name)
    if serving:
        env = dict(runtime.env)
        if draft_revision is not None:
            env = {**env, "DFLASH_MODEL_REVISION": profile.launch_env(draft_revision=draft_revision)[
                "DFLASH_MODEL_REVISION"]}
    else:
        env = profile.launch_env(draft_revision=draft_revision)
    revision = env.get("DFLASH_MODEL_REVISION") or None
    if revision is not None and not is_commit(revision):
        raise UsageError(f"DFLASH_MODEL_REVISION {revision!r} is not an immutable commit (40 lowercase hex)")
    target_revision = profile.target.revision if profile.target else None

    mounts: list[Mount] = []
    if checkpoint_dir is not None and hf_cache is not None:
        raise UsageError("give either a local checkpoint directory or a Hugging Face cache to mount, not both "
                         "(the checkpoint is mounted inside the cache's path)")
    if checkpoint_dir is not None:
        if revision is None:
            raise UsageError("a local checkpoint is mounted at its revision's place in the hub cache: give the "
                             "draft revision (--draft-revision)")
        folder = "models--" + env["DFLASH_MODEL"].replace("/", "--")
        mounts.append(Mount(str(Path(checkpoint_dir).resolve()), f"{HF_CACHE_TARGET}/{folder}/snapshots/{revision}"))
    if hf_cache is not None:
        mounts.append(Mount(str(Path(hf_cache).resolve()), HF_CACHE_TARGET))

    passthrough: tuple[str, ...] = ()
    if pass_hf_token:
        if not any(os.environ.get(v) for v in TOKEN_VARS):
            raise UsageError("--pass-hf-token: HF_TOKEN is not set in this environment")
        passthrough = tuple(v for v in TOKEN_VARS if os.environ.get(v))

    endpoint = runtime.endpoint
    parts = urlsplit(endpoint)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    labels = (
        (LABEL_HARNESS, HARNESS),
        (LABEL_RUN, run_id),
        (LABEL_OWNER, owner_id()),
        (LABEL_PROFILE, profile.name),
    )
    timeout = startup_timeout_s or runtime.startup_timeout_s or DEFAULT_STARTUP_TIMEOUT_S
    return LaunchPlan(
        profile=profile.name,
        run_id=run_id,
        name=f"qualify-{run_id}"[:128],
        image=runtime.image,
        image_digest=pinned_digest,
        env=tuple(env.items()),
        passthrough_env=passthrough,
        gpus=runtime.gpus,
        network=runtime.network,
        ipc=runtime.ipc,
        shm_size=runtime.shm_size,
        endpoint=endpoint,
        host=parts.hostname or "127.0.0.1",
        port=port,
        served_model_name=runtime.served_model_name,
        mounts=tuple(mounts),
        labels=labels,
        startup_timeout_s=float(timeout),
        draft_revision=revision,
        target_revision=target_revision,
        allow_unpinned=allow_unpinned,
    )


def create_kwargs(plan: LaunchPlan, *, image_ref: str | None = None, with_gpus: bool = True) -> dict[str, Any]:
    """The keyword arguments of the one ``client.containers.create`` call for ``plan``.

    ``image_ref`` is what to launch (the inspected image ID; the tag by default).
    ``with_gpus=False`` drops only the device requests, for starting on a machine without
    GPUs; everything else is the plan's. The result carries secret values: never print it.
    """
    from docker.types import DeviceRequest
    from docker.types import Mount as DockerMount

    environment = [f"{k}={v}" for k, v in plan.env]
    environment += [f"{name}={os.environ[name]}" for name in plan.passthrough_env if name in os.environ]
    kwargs: dict[str, Any] = {
        "image": image_ref or plan.image,
        "name": plan.name,
        "environment": environment,
        "labels": dict(plan.labels),
        "detach": True,
        # Removed by the harness, not by the engine: a crashed container's exit code and logs are evidence.
        "auto_remove": False,
    }
    if plan.network:
        kwargs["network_mode"] = plan.network
    if plan.ipc:
        kwargs["ipc_mode"] = plan.ipc
    if plan.shm_size:
        kwargs["shm_size"] = plan.shm_size
    if plan.mounts:
        kwargs["mounts"] = [DockerMount(m.target, m.source, type="bind", read_only=m.read_only) for m in plan.mounts]
    if with_gpus and plan.gpus:
        kwargs["device_requests"] = [DeviceRequest(device_ids=list(plan.gpus), capabilities=[["gpu"]])]
    return kwargs


def render_docker_run(plan: LaunchPlan) -> str:
    """``plan`` as a ``docker run`` command in the model card's layout, secrets never included.

    Token variables are written as ``-e HF_TOKEN`` (docker copies the caller's value), so
    the printed line reproduces the launch without containing the secret.
    """
    lines = ["docker run --rm"]
    if plan.gpus:
        lines.append("--gpus " + shlex.quote(f'"device={",".join(plan.gpus)}"'))
    if plan.network:
        lines.append(f"--network {shlex.quote(plan.network)}")
    if plan.ipc:
        lines.append(f"--ipc {shlex.quote(plan.ipc)}")
    if plan.shm_size:
        lines.append(f"--shm-size {shlex.quote(plan.shm_size)}")
    for m in plan.mounts:
        lines.append("-v " + shlex.quote(f"{m.source}:{m.target}" + (":ro" if m.read_only else "")))
    for key, value in redact_env(plan.env_dict).items():
        lines.append("-e " + shlex.quote(f"{key}={value}"))
    for name in plan.passthrough_env:
        lines.append(f"-e {name}")
    lines.append(shlex.quote(plan.image))
    return redact(" \\\n".join(lines))


# -- the engine -------------------------------------------------------------------------


def docker_client(timeout: float = 120) -> Any:
    """A Docker SDK client whose engine answers, or :class:`DockerUnavailable` naming the fix."""
    import docker

    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        client = docker.from_env(timeout=int(timeout))
        client.ping()
    except docker.errors.DockerException as exc:
        raise DockerUnavailable(f"no Docker engine answers at {where}: {exc}", hint=INSTALL_HINT) from None
    return client


@dataclass(frozen=True)
class ImageIdentity:
    ref: str
    id: str
    repo_tags: tuple[str, ...]
    repo_digests: tuple[str, ...]

    @property
    def digests(self) -> set[str]:
        """Every digest this image is known by: its ID and its registry manifest digests."""
        return {self.id} | {d.rsplit("@", 1)[1] for d in self.repo_digests if "@" in d}

    def to_dict(self) -> dict[str, Any]:
        return {"ref": self.ref, "id": self.id, "repo_tags": list(self.repo_tags),
                "repo_digests": list(self.repo_digests)}


def inspect_image(client: Any, ref: str) -> ImageIdentity:
    """The local image ``ref`` names; :class:`ImageNotPresent` if there is none. Never pulls."""
    import docker.errors

    try:
        image = client.images.get(ref)
    except docker.errors.ImageNotFound:
        raise ImageNotPresent(
            f"runtime image {ref} is not present in the local Docker engine, and the harness never pulls",
            hint=f"load or pull it yourself, pinned by digest (docker pull {ref.split(':')[0]}@sha256:...)",
        ) from None
    attrs = image.attrs
    return ImageIdentity(ref, attrs["Id"], tuple(attrs.get("RepoTags") or ()), tuple(attrs.get("RepoDigests") or ()))


def check_image(identity: ImageIdentity, plan: LaunchPlan) -> Evidence:
    """The local image is the profile's pinned one (or, explicitly allowed, an unpinned tag: not reproducible)."""
    ev = Evidence(f"runtime image {plan.image} is present locally and is the pinned digest")
    ev.measured.update(identity.to_dict())
    ev.expected.update(image=plan.image, image_digest=plan.image_digest)
    if plan.image_digest is None:
        if plan.allow_unpinned:
            ev.summary = (f"runtime image {plan.image} is present locally as {identity.id}; the profile pins no "
                          "digest (allowed): not reproducible")
            ev.measured["reproducible"] = False
        else:
            ev.add(f"the profile pins no digest for {plan.image}: a tag can move, so the runtime is not pinned "
                   f"(the local image is {identity.id}; set $.runtime.image_digest, or pass --allow-unpinned)")
    elif plan.image_digest not in identity.digests:
        ev.add(f"the local {plan.image} is {identity.id} (repo digests: {', '.join(identity.repo_digests) or 'none'}),"
               f" not the profile's {plan.image_digest}")
    return ev


def check_pinning(plan: LaunchPlan) -> Evidence:
    """The draft and target are named at immutable commits (or, explicitly allowed, not: not reproducible)."""
    ev = Evidence("draft and target are pinned to immutable commits")
    ev.measured.update(draft_revision=plan.draft_revision, target_revision=plan.target_revision,
                       allow_unpinned=plan.allow_unpinned)
    # The published env has no target revision variable: the launcher loads MODEL as it resolves it.
    ev.measured["target_revision_enforced_by_env"] = False
    moving = [u for u in plan.unpinned if not u.startswith("runtime image")]
    for what, rev in (("draft", plan.draft_revision), ("target", plan.target_revision)):
        if rev is not None and not is_commit(rev):
            ev.add(f"{what} revision {rev!r} is not a 40-hex commit")
    if moving and plan.allow_unpinned:
        ev.summary = "not reproducible: unpinned (allowed): " + "; ".join(moving)
        ev.measured["reproducible"] = False
    else:
        for item in moving:
            ev.add(f"not pinned: {item}; a release verdict needs an immutable commit (or --allow-unpinned, and the "
                   "report then says not reproducible)")
    return ev


def ensure_port_free(host: str, port: int) -> None:
    """Raise :class:`PortInUse` when something accepts connections on host:port already."""
    if in_use(host, port):
        raise PortInUse(f"{host}:{port} is already in use: with host networking the readiness probes would talk "
                        "to that server, not to the runtime under test", hint="stop it, or use another PORT")


def run_containers(client: Any, run_id: str) -> list[Any]:
    return client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={run_id}"})


def cleanup_leftovers(client: Any) -> list[str]:
    """Remove harness containers whose owning process is dead (a run killed with SIGKILL); their names."""
    removed = []
    for c in client.containers.list(all=True, filters={"label": f"{LABEL_HARNESS}={HARNESS}"}):
        owner = (c.labels or {}).get(LABEL_OWNER, "")
        if owner_alive(owner) is False:
            with contextlib.suppress(Exception):  # removed meanwhile by its own run's teardown
                c.remove(force=True)
                removed.append(c.name)
    return removed


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


# -- the running container --------------------------------------------------------------


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
        """The container's whole log so far (stdout and stderr), redacted."""
        raw = self.container.logs(stdout=True, stderr=True)
        return redact(raw.decode("utf-8", "replace"))

    def log_tail(self, n: int = _LOG_TAIL) -> list[str]:
        try:
            return self.logs_text().splitlines()[-n:]
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

    def wait_ready(self, timeout_s: float | None = None, poll_s: float = 0.25) -> Readiness:
        """Poll /health then /v1/models until the served name is listed; fail at once if the container stops."""
        assert self.started_at is not None, "start() first"
        timeout = self.plan.startup_timeout_s if timeout_s is None else timeout_s
        with WaitProgress(f"the runtime container {self.plan.name}", timeout) as progress:
            return self._poll_ready(timeout, poll_s, progress.tick)

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
                code = state.get("ExitCode")
                oom = " (killed: out of memory)" if state.get("OOMKilled") else ""
                raise ContainerExited(
                    f"the runtime container exited with code {code}{oom} before it was ready "
                    f"({time.monotonic() - self.started_at:.1f} s after start)",
                    exit_code=code, log_tail=self.log_tail())
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
                        self.readiness = Readiness(health_s, time.monotonic() - self.started_at, models, polls)
                        return self.readiness
                    last = f"/v1/models lists {models}, not {self.plan.served_model_name!r}"
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
            tick(last)
            time.sleep(max(0.0, min(poll_s, deadline - time.monotonic())))

    # ---- stop
    def stop(self) -> Teardown:
        """Remove every container of this run and verify none is left. Idempotent; never raises."""
        if self.teardown is not None:
            return self.teardown
        t0 = time.monotonic()
        record = Teardown()
        with _uninterruptible():
            if self.container is not None:
                with contextlib.suppress(Exception):
                    state = self.state()
                    record.status, record.exit_code = state.get("Status"), state.get("ExitCode")
            try:
                for c in run_containers(self.client, self.plan.run_id):
                    try:
                        c.remove(force=True)
                        record.removed.append(c.name)
                    except Exception as exc:
                        record.errors.append(f"removing {c.name}: {exc}")
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


# -- evidence ---------------------------------------------------------------------------


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


def failure_evidence(summary: str, exc: RuntimeFailure) -> Evidence:
    """A failed check's evidence from a runtime failure, with the container's last log lines."""
    ev = Evidence(summary)
    ev.add(str(exc))
    if exc.log_tail:
        ev.measured["log_tail"] = exc.log_tail
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

