"""``qualify preflight``'s inputs: the arms a profile's run serves and the launch plan of each, as the run makes them.

The arms are those the run's jobs name (:func:`qualify.run.arm_jobs.arm_jobs` over the profile's run levels,
the checkpoint's always first); each arm's plan comes from one
:class:`~qualify.runtime.session.RuntimeSession` built with the run's own arguments
(:meth:`~qualify.runtime.session.RuntimeSession.arm_plan`), so the preflight launches what the run would.
The launches themselves and the comparison are :mod:`qualify.runtime.preflight`'s.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qualify.errors import LaunchMismatch, RuntimeFailure, UsageError
from qualify.profile import Profile
from qualify.run.arm_jobs import arm_jobs
from qualify.runtime import companions as comp
from qualify.runtime import engine, preflight
from qualify.runtime import image as images
from qualify.runtime.plan import LaunchPlan
from qualify.runtime.session import RuntimeSession, build_image
from qualify.util.identifiers import new_run_id
from qualify.util.ports import release_port


@dataclass(frozen=True)
class PreflightOptions:
    """What ``qualify preflight`` was asked: the run's launch arguments, and which arms to launch."""

    profile: Profile
    checkpoint: Path | None = None
    source: Path | None = None
    target_snapshot: Path | None = None
    draft_revision: str | None = None
    image_digest: str | None = None
    allow_unpinned: bool = False
    arms: tuple[str, ...] = ()  # empty: every arm of the run
    timeout_s: float = preflight.DEFAULT_TIMEOUT_S
    with_gpus: bool = False


def run_arms(profile: Profile) -> list[str]:
    """The arms the profile's run serves, in the order it serves them (the checkpoint's first)."""
    named = {job.arm for job in arm_jobs(profile, profile.run_levels)}
    spec = profile.local_server
    if spec is not None and not spec.reference:
        named -= {comp.REFERENCE, comp.REFERENCE_PUBLISHED}
    return [arm for arm in comp.ARMS if arm == comp.CHECKPOINT or arm in named]


def source_draft(profile: Profile, source: Path | None) -> comp.SourceDraft | None:
    """The source arm's draft as the run mounts it: the folder at its content revision, else the hub's pinned one."""
    spec = profile.local_server
    folder = source or (spec.source_draft if spec is not None else None)
    if folder is not None and Path(folder).is_dir():
        from qualify.checkpoint.checksums import folder_revision

        return comp.SourceDraft(Path(folder).resolve(), profile.source_repo or "qualify/source-draft",
                                folder_revision(folder))
    if profile.source_repo and profile.source.revision:
        return comp.SourceDraft(None, profile.source_repo, profile.source.revision)
    return None


def draft_revision(opts: PreflightOptions) -> str | None:
    """The revision the checkpoint is launched at: the one given, the profile's, else a local folder's content."""
    if opts.draft_revision:
        return opts.draft_revision
    if opts.profile.checkpoint.revision:
        return opts.profile.checkpoint.revision
    if opts.checkpoint is not None:
        from qualify.checkpoint.checksums import folder_revision

        return folder_revision(opts.checkpoint)
    return None


def arm_plans(opts: PreflightOptions, *, image_digest: str | None) -> dict[str, LaunchPlan]:
    """Each chosen arm's launch plan, from one session built as the run builds it.

    Raises:
        UsageError: an arm the run does not serve, a checkpoint or source folder that is not one, a
            source arm without a source draft, or a launch the plan refuses (a bad revision, a target
            snapshot at another revision).
    """
    profile = opts.profile
    arms = run_arms(profile)
    wanted = list(opts.arms) or arms
    unknown = [a for a in wanted if a not in arms]
    if unknown:
        raise UsageError(f"--arm {', '.join(unknown)}: profile {profile.name}'s run serves {', '.join(arms)}")
    for path, what in ((opts.checkpoint, "--checkpoint"), (opts.source, "--source")):
        if path is not None and not path.is_dir():
            raise UsageError(f"{what} {path}: not a folder")
    roles: dict[str, comp.SourceDraft | None] = {}
    for arm in wanted:
        if arm == comp.SOURCE:
            roles[arm] = source_draft(profile, opts.source)
            if roles[arm] is None:
                raise UsageError(f"the source arm needs the source draft: --source DIR (profile {profile.name} "
                                 "names no [source] revision to find it by)")
        elif arm != comp.CHECKPOINT:
            roles[arm] = None
    session = RuntimeSession(
        profile, run_id=new_run_id(f"preflight-{profile.name}"),
        log_dir=Path(tempfile.mkdtemp(prefix="qualify-preflight-")), draft_revision=draft_revision(opts),
        checkpoint_dir=opts.checkpoint.resolve() if opts.checkpoint is not None else None,
        allow_unpinned=opts.allow_unpinned, image_digest=image_digest, target_snapshot=opts.target_snapshot,
        companions=roles, cores=comp.usable_cores() if profile.image_build == "vllm-cpu" else ())
    release_port(session.plan.port)  # nothing serves: the port is only compared
    out: dict[str, LaunchPlan] = {}
    for index, arm in enumerate(wanted):
        out[arm] = session.arm_plan(arm, index)
        release_port(out[arm].port)
    return out


def run(opts: PreflightOptions, *,
        client_factory: Callable[[], Any] = engine.docker_client) -> preflight.PreflightReport:
    """Build (or inspect) the pinned image, then launch each arm through the stand-in and compare.

    Raises:
        UsageError: see :func:`arm_plans`.
        LaunchMismatch: the image could not be built, is not present or is not the pinned one, or no vLLM
            package was found in it.
        HarnessError: no Docker engine.
    """
    profile = opts.profile
    digest = opts.image_digest
    if profile.image_build and digest is None:
        digest, build = build_image(profile)
        if digest is None:
            raise LaunchMismatch(f"the runtime image of profile {profile.name} could not be built: {build['error']}")
    plans = arm_plans(opts, image_digest=digest)
    client = client_factory()
    first = next(iter(plans.values()))
    try:
        identity = images.inspect_image(client, first.image)
    except RuntimeFailure as exc:
        raise LaunchMismatch(str(exc)) from None
    pinned = images.check_image(identity, first)
    if not pinned.ok:
        raise LaunchMismatch("; ".join(f.message for f in pinned.findings))
    return preflight.run_preflight(client, plans, identity.id, timeout_s=opts.timeout_s, with_gpus=opts.with_gpus,
                                   not_applied=preflight.not_applied(profile.image_build))


__all__ = ["PreflightOptions", "arm_plans", "draft_revision", "run", "run_arms", "source_draft"]
