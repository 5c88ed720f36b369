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


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = True

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self)


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
        build=runtime.build,
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
