"""The launch plan: the profile's ``[runtime]`` as one frozen :class:`LaunchPlan` (pure,
:func:`build_plan`), the one Docker SDK ``containers.create`` call it becomes
(:func:`create_kwargs`), and the same launch as the model card's ``docker run`` line
(:func:`render_docker_run`), so a person can reproduce it by hand.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from qualify.errors import UsageError
from qualify.profile import DEFAULT_STARTUP_TIMEOUT_S, Profile
from qualify.runtime.labels import HARNESS, LABEL_HARNESS, LABEL_OWNER, LABEL_PROFILE, LABEL_RUN, owner_id
from qualify.util.identifiers import is_commit, is_image_digest, new_run_id
from qualify.util.records import record_dict
from qualify.util.redact import redact, redact_env

#: Where the runtime's huggingface_hub looks (HF_HOME's default for root); local drafts are mounted under it.
HF_CACHE_TARGET = "/root/.cache/huggingface/hub"
#: Environment variables passed through by name (``-e HF_TOKEN``): docker reads the value, nobody prints it.
TOKEN_VARS = ("HF_TOKEN",)
#: Where a pinned target snapshot's hub-cache repository folder is mounted (``--target-snapshot``).
TARGET_SNAPSHOT_ROOT = "/opt/qualify/target"
#: How a launch holds the runtime to ``[target].revision`` (:class:`TargetPin`'s ``method``).
BY_LAUNCHER_ENV = "launcher-env"
BY_SNAPSHOT = "pinned-snapshot"


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = True

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self)


@dataclass(frozen=True)
class TargetSnapshot:
    """A hub-cache snapshot of the target, verified to be ``[target].revision`` by its folder and mounted whole.

    Attributes:
        path: the snapshot folder (``.../models--OWNER--NAME/snapshots/<revision>``).
        repo_dir: its repository folder, mounted read-only (the snapshot's files link into its ``blobs``).
        mounted_at: where ``repo_dir`` is mounted in the container.
        model_path: where ``MODEL`` points inside the container (the snapshot there).
        refs: the repository's refs that name this revision (``main`` ...), as the cache records them.
        files: how many files the snapshot holds.
    """

    path: str
    repo_dir: str
    mounted_at: str
    model_path: str
    refs: tuple[str, ...]
    files: int

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self)


@dataclass(frozen=True)
class TargetPin:
    """Whether a launch holds the runtime to ``[target].revision``, and how, or why it does not.

    Enforced by the launcher's revision variable (:data:`BY_LAUNCHER_ENV`: the profile declares
    ``$.runtime.target_revision_env`` and the plan sets it) or by a pinned snapshot mounted with the hub
    offline (:data:`BY_SNAPSHOT`); otherwise the target's revision is only a claim of the profile.
    """

    revision: str | None
    enforced: bool
    method: str | None = None
    variable: str | None = None
    snapshot: TargetSnapshot | None = None
    reason: str | None = None  # why it is not enforced

    def to_dict(self) -> dict[str, Any]:
        return {"revision": self.revision, "enforced": self.enforced, "method": self.method,
                "variable": self.variable, "snapshot": self.snapshot.to_dict() if self.snapshot else None,
                "reason": self.reason}


#: A plan built without :func:`build_plan` has decided nothing about its target: not enforced (fail closed).
UNDECIDED = TargetPin(None, False, reason="the launch plan did not decide how the target's revision is held")


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
    #: ``$.runtime.build``: the image this repository builds for the profile ("standin", "vllm-cpu"), or None.
    build: str | None = None
    target_pin: TargetPin = UNDECIDED

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
            "target_revision_enforcement": self.target_pin.to_dict(),
        }


def on_port(plan: LaunchPlan, port: int) -> LaunchPlan:
    """``plan`` serving on ``port``: its ``PORT`` and its endpoint move together (the same host, path and scheme)."""
    env = dict(plan.env)
    env["PORT"] = str(port)
    scheme, _, rest = plan.endpoint.partition("://")
    path = rest.partition("/")[2]
    return dataclasses.replace(plan, env=tuple(env.items()), endpoint=f"{scheme}://{plan.host}:{port}/{path}",
                               port=port)


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
    target_snapshot: Path | None = None,
) -> LaunchPlan:
    """The launch plan for ``profile``; pure apart from resolving mount paths.

    ``serving=True`` plans the *published* serving command (the profile's env without
    the qualification overrides), which is what the model card prints; otherwise the
    qualification launch (``Profile.launch_env``). ``checkpoint_dir`` is mounted
    read-only where the runtime's hub cache keeps ``DFLASH_MODEL`` at its revision, so the
    env stays exactly the profile's; ``hf_cache`` mounts a whole cache read-only instead.
    ``image_digest`` pins the image at run time where the profile states no digest (the
    seed's card gives none; a release engineer knows the one they qualify).
    ``target_snapshot`` is a hub-cache snapshot folder of the target at ``[target].revision``
    (:func:`check_target_snapshot`): its repository folder is mounted read-only, ``MODEL`` points at
    the snapshot and ``HF_HUB_OFFLINE=1``, so the runtime can load no other revision. Where the
    profile declares ``$.runtime.target_revision_env``, that variable is set to ``[target].revision``.
    The plan's ``target_pin`` says which of the two holds the target, or why neither does.

    Raises:
        UsageError: a digest or revision that is not immutable or contradicts the profile, contradicting
            mounts, or a target snapshot that is not the pinned revision (named with what it is).
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
        env = profile.with_target_revision(dict(runtime.env))
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
    snapshot = None
    if target_snapshot is not None:
        if profile.target is None or target_revision is None:
            raise UsageError(f"--target-snapshot: profile {profile.name} pins no target revision ([target].revision) "
                             "for the snapshot to be at")
        snapshot = check_target_snapshot(Path(target_snapshot), profile.target.repo or "", target_revision)
        mounts.append(Mount(snapshot.repo_dir, snapshot.mounted_at))
        # The hub offline: nothing the launcher resolves can fetch another revision in its place.
        env = {**env, "MODEL": snapshot.model_path, "HF_HUB_OFFLINE": "1"}

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
        build=runtime.build,
        target_pin=target_pin(profile, env, snapshot),
    )


def target_pin(profile: Profile, env: dict[str, str], snapshot: TargetSnapshot | None) -> TargetPin:
    """How the launch environment ``env`` (and the mounted ``snapshot``, if any) holds the runtime to
    ``[target].revision``, or why it does not: pure, read from what the launch will actually pass."""
    revision = profile.target.revision if profile.target else None
    if profile.target is None:
        return TargetPin(None, False, reason=f"profile {profile.name} names no target ([target])")
    if revision is None:
        return TargetPin(None, False, reason=f"profile {profile.name} pins no target revision ([target].revision)")
    var = profile.runtime.target_revision_env
    by_env = var if var is not None and env.get(var) == revision else None
    if snapshot is not None and env.get("MODEL") == snapshot.model_path and env.get("HF_HUB_OFFLINE") == "1":
        return TargetPin(revision, True, BY_SNAPSHOT, variable=by_env, snapshot=snapshot)
    if by_env is not None:
        return TargetPin(revision, True, BY_LAUNCHER_ENV, variable=by_env)
    return TargetPin(revision, False, reason=(
        f"the launcher takes no target revision variable (profile {profile.name} declares no "
        "$.runtime.target_revision_env) and no pinned snapshot was mounted (--target-snapshot): the runtime loads "
        f"{env.get('MODEL')} at whatever revision its launcher resolves"))


def check_target_snapshot(path: Path, repo: str, revision: str) -> TargetSnapshot:
    """``path`` as a hub-cache snapshot of ``repo`` at exactly ``revision``, or a usage error saying what it is.

    huggingface_hub names a snapshot folder by the commit it downloaded
    (``<cache>/models--OWNER--NAME/snapshots/<commit>``) and links its files into the repository's
    ``blobs``; the whole repository folder is mounted so that those links resolve. Every file must
    resolve inside that folder (a dangling link would make the runtime fail or fetch).

    Raises:
        UsageError: not a folder; not laid out as a snapshot of ``repo``; at another revision; empty; a
            file that does not resolve inside the repository folder.
    """
    flag = "--target-snapshot"
    if not path.is_dir():
        raise UsageError(f"{flag} {path}: not a folder (give the hub-cache snapshot folder "
                         f"models--{repo.replace('/', '--')}/snapshots/{revision})")
    snap = path.resolve()
    folder = "models--" + repo.replace("/", "--")
    if snap.parent.name != "snapshots" or snap.parent.parent.name != folder:
        raise UsageError(f"{flag} {path}: not a hub-cache snapshot of {repo} (expected .../{folder}/snapshots/"
                         f"{revision}); a folder of another layout names no revision, so it cannot pin the target")
    if snap.name != revision:
        raise UsageError(f"{flag} {path}: a snapshot of {repo} at revision {snap.name}, not at [target].revision "
                         f"{revision}; the run would load another target than the one it attests")
    repo_dir = snap.parent.parent
    files = [p for p in sorted(snap.rglob("*")) if not p.is_dir()]
    if not files:
        raise UsageError(f"{flag} {path}: the snapshot holds no file")
    for file in files:
        rel = file.relative_to(snap)
        if not file.exists():
            raise UsageError(f"{flag} {path}: {rel} is a dangling link (its blob is missing from {repo_dir})")
        if not file.resolve().is_relative_to(repo_dir):
            raise UsageError(f"{flag} {path}: {rel} resolves outside {repo_dir} (to {file.resolve()}), which is all "
                             "the runtime is given")
    refs = []
    refs_dir = repo_dir / "refs"
    if refs_dir.is_dir():
        for ref in sorted(p for p in refs_dir.rglob("*") if p.is_file()):
            try:
                named = ref.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError):
                continue  # a ref is a record, not the proof: the folder's name is what names the revision
            if named == revision:
                refs.append(str(ref.relative_to(refs_dir)))
    mounted = f"{TARGET_SNAPSHOT_ROOT}/{folder}"
    return TargetSnapshot(str(snap), str(repo_dir), mounted, f"{mounted}/snapshots/{revision}", tuple(refs),
                          len(files))


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
