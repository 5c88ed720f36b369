"""The load level's runtime's companion servers: the same image, launcher and settings, another draft.

The serving levels talk to the container the load level launched, so what they qualify is
what that runtime loaded. Two comparisons need a second server, and each is derived from
that container's launch plan, so it differs from it only where it must (pure, no I/O):

- ``reference``: the target alone (the launcher's ``SPECULATOR=none``), the losslessness
  reference and the speedup's baseline;
- ``source``: the source draft the checkpoint was converted from, mounted where the
  launcher finds ``DFLASH_MODEL`` at ``DFLASH_MODEL_REVISION`` instead of the checkpoint,
  the paired level's other arm (every other variable is the checkpoint's container's).

Each has a port of its own (host network) and the run's labels, so the run's teardown
removes it with the load level's container.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from qualify.errors import UsageError
from qualify.runtime.plan import HF_CACHE_TARGET, LaunchPlan, Mount, on_port

#: The arms of a run, in the order they are served one after another: the checkpoint under test (the
#: load level's own container), the source draft it was converted from, the target alone.
CHECKPOINT = "checkpoint"
REFERENCE = "reference"
SOURCE = "source"
#: The checkpoint and the target alone as users run them: the published environment, without the
#: qualification overrides (the speedup's measured-only arms).
CHECKPOINT_PUBLISHED = "checkpoint-published"
REFERENCE_PUBLISHED = "reference-published"
ROLES = (REFERENCE, SOURCE, CHECKPOINT_PUBLISHED, REFERENCE_PUBLISHED)
ARMS = (CHECKPOINT, SOURCE, REFERENCE, CHECKPOINT_PUBLISHED, REFERENCE_PUBLISHED)
#: The launcher's value of SPECULATOR for a server without a speculator (runtimes/vllm-cpu/launch.py).
NO_SPECULATOR = "none"
#: vLLM CPU's core binding of an engine's OpenMP threads; unset, every engine binds the same cores.
CORE_BIND_VAR = "VLLM_CPU_OMP_THREADS_BIND"
#: Variables that only concern a speculator, dropped from the reference's environment.
_DRAFT_VARS = ("DFLASH_MODEL", "DFLASH_MODEL_REVISION", "NUM_SPECULATIVE_TOKENS", "DFLASH_KV_CACHE_DTYPE",
               "DFLASH_ATTENTION_BACKEND", "PER_REQUEST_SPEC_DECODE_METRICS")


@dataclass(frozen=True)
class SourceDraft:
    """The source draft's folder and where the launcher finds it: ``repo`` at ``revision`` in the hub cache.

    ``path`` None: nothing is mounted, and the launcher fetches ``repo`` at ``revision`` itself.
    """

    path: Path | None
    repo: str
    revision: str


def hub_snapshot(repo: str, revision: str) -> str:
    """Where the runtime's hub cache keeps ``repo`` at ``revision``."""
    return f"{HF_CACHE_TARGET}/models--{repo.replace('/', '--')}/snapshots/{revision}"


def checkpoint_mount(plan: LaunchPlan) -> str | None:
    """Where ``plan`` mounts its draft (the launcher's ``DFLASH_MODEL`` at the draft revision); None without one."""
    env = plan.env_dict
    if not env.get("DFLASH_MODEL") or not plan.draft_revision:
        return None
    return hub_snapshot(env["DFLASH_MODEL"], plan.draft_revision)


def companion_plan(plan: LaunchPlan, role: str, *, port: int, source: SourceDraft | None = None,
                   published: Mapping[str, str | None] | None = None) -> LaunchPlan:
    """The launch plan of ``role``'s server, derived from the load level's ``plan``.

    Args:
        plan: the load level's launch plan (the checkpoint's container).
        role: one of :data:`ROLES`.
        port: the companion's own port (all share the host's network).
        source: the source draft to mount, for ``source``.
        published: for the published arms, each qualification override's published value (None: the
            published command does not set it).

    Raises:
        UsageError: an unknown role, or ``source`` without a source draft.
    """
    if role not in ROLES:
        raise UsageError(f"unknown companion server {role!r} (known: {', '.join(ROLES)})")
    plan = on_port(plan, port)
    env = dict(plan.env)
    checkpoint_at = checkpoint_mount(plan)
    mounts = [m for m in plan.mounts if m.target != checkpoint_at]
    if role in (CHECKPOINT_PUBLISHED, REFERENCE_PUBLISHED):
        if published is None:
            raise UsageError(f"the {role} server needs the published values of the qualification overrides")
        env = {k: v for k, v in env.items() if k not in published}
        env.update({k: v for k, v in published.items() if v is not None})
    if role in (REFERENCE, REFERENCE_PUBLISHED):
        env = {k: v for k, v in env.items() if k not in _DRAFT_VARS}
        env["SPECULATOR"] = NO_SPECULATOR
        draft_revision = plan.draft_revision
    elif role == CHECKPOINT_PUBLISHED:
        mounts = list(plan.mounts)  # the checkpoint stays mounted: this arm serves it too
        draft_revision = plan.draft_revision
    else:
        if source is None:
            raise UsageError("the source draft's server needs the source draft's folder (--source)")
        env["DFLASH_MODEL"], env["DFLASH_MODEL_REVISION"] = source.repo, source.revision
        if source.path is not None:
            mounts.append(Mount(str(Path(source.path).resolve()), hub_snapshot(source.repo, source.revision)))
        draft_revision = source.revision
    return dataclasses.replace(plan, name=f"{plan.name}-{role}"[:128], env=tuple(env.items()), mounts=tuple(mounts),
                               draft_revision=draft_revision)


def bind_core(plan: LaunchPlan, core: int) -> LaunchPlan:
    """``plan`` with its engine's threads bound to ``core`` (engines of one run spread over the cores)."""
    env = dict(plan.env)
    env[CORE_BIND_VAR] = str(core)
    return dataclasses.replace(plan, env=tuple(env.items()))


def usable_cores() -> tuple[int, ...]:
    """The cores this process may run on, in order; empty where the platform cannot tell."""
    return tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else ()


def core_of(index: int, cores: Sequence[int]) -> int | None:
    """The core of the ``index``-th engine of a run (round robin over ``cores``; None when none is known)."""
    return cores[index % len(cores)] if cores else None


__all__ = [
    "ARMS",
    "CHECKPOINT",
    "CHECKPOINT_PUBLISHED",
    "CORE_BIND_VAR",
    "NO_SPECULATOR",
    "REFERENCE",
    "REFERENCE_PUBLISHED",
    "ROLES",
    "SOURCE",
    "SourceDraft",
    "bind_core",
    "checkpoint_mount",
    "companion_plan",
    "core_of",
    "hub_snapshot",
    "usable_cores",
]
