"""The runtime image's identity: inspected (never pulled), recorded by ID and repo digests, and
compared with the digest the profile pins; a moving reference is refused unless allowed, and
then said to be not reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from qualify.core import Evidence
from qualify.errors import ImageNotPresent
from qualify.runtime.plan import LaunchPlan
from qualify.runtime.standin import LABEL_SOURCE as STANDIN_LABEL
from qualify.util.identifiers import is_commit


@dataclass(frozen=True)
class ImageIdentity:
    ref: str
    id: str
    repo_tags: tuple[str, ...]
    repo_digests: tuple[str, ...]
    labels: tuple[tuple[str, str], ...] = ()

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
    labels = tuple(sorted(((attrs.get("Config") or {}).get("Labels") or {}).items()))
    return ImageIdentity(ref, attrs["Id"], tuple(attrs.get("RepoTags") or ()), tuple(attrs.get("RepoDigests") or ()),
                         labels)


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
    if STANDIN_LABEL in dict(identity.labels) and plan.build != "standin":
        # The stand-in prints load evidence from a description of the mounted folder: whatever names it,
        # it loads nothing, and only a profile that says so (whose levels on it qualify nothing) may run it.
        ev.add(f"the image {plan.image} ({identity.id}) is the harness's stand-in (label {STANDIN_LABEL}), which "
               "prints load evidence without loading anything, but the profile does not declare "
               "$.runtime.build = \"standin\": a level run on it would show nothing about the checkpoint")
    return ev


def check_pinning(plan: LaunchPlan) -> Evidence:
    """The draft and target are named at immutable commits (or, explicitly allowed, not: not reproducible)."""
    ev = Evidence("draft and target are pinned to immutable commits")
    ev.measured.update(draft_revision=plan.draft_revision, target_revision=plan.target_revision,
                       allow_unpinned=plan.allow_unpinned)
    # Whether the launch holds the runtime to the target's revision (a launcher variable, a pinned snapshot) or
    # not: recorded, never failed here (a run may still qualify for development); the release gate refuses it.
    ev.measured["target_revision_enforcement"] = plan.target_pin.to_dict()
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
