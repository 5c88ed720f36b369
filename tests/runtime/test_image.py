"""Tests for qualify.runtime.image: the runtime image's identity against the profile's digest, and
the pinning of image, draft and target that makes a launch reproducible."""

from __future__ import annotations

from dataclasses import replace

from qualify.profile import Profile, load_profile
from qualify.runtime import image as images
from qualify.runtime import plan as plans
from tests.docker_support import CANDIDATE
from tests.profile.support import SEED_IMAGE


def test_pinning_is_refused_or_declared_not_reproducible(seed: Profile) -> None:
    unpinned = plans.build_plan(seed)
    ev = images.check_pinning(unpinned)
    assert not ev.ok
    assert "not pinned: draft (DFLASH_MODEL_REVISION empty: the launcher resolves the main branch)" in ev.failure_text()
    assert "--allow-unpinned" in ev.failure_text()
    allowed = images.check_pinning(plans.build_plan(seed, allow_unpinned=True))
    assert allowed.ok and allowed.summary.startswith("not reproducible") and allowed.measured["reproducible"] is False
    assert images.check_pinning(plans.build_plan(seed, draft_revision=CANDIDATE)).ok


def test_image_identity_against_the_profile_digest(seed: Profile) -> None:
    image_id, manifest = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    identity = images.ImageIdentity(SEED_IMAGE, image_id, (SEED_IMAGE,), (f"voipmonitor/vllm@{manifest}",))
    plan = plans.build_plan(seed, draft_revision=CANDIDATE)
    ev = images.check_image(identity, plan)
    assert not ev.ok and "the profile pins no digest" in ev.failure_text()
    allowed = images.check_image(identity, replace(plan, allow_unpinned=True))
    assert allowed.ok and "not reproducible" in allowed.summary
    assert images.check_image(identity, replace(plan, image_digest=image_id)).ok
    assert images.check_image(identity, replace(plan, image_digest=manifest)).ok  # the registry digest pins it too
    wrong = images.check_image(identity, replace(plan, image_digest="sha256:" + "3" * 64))
    assert not wrong.ok and f"is {image_id}" in wrong.failure_text() and "not the profile's sha256:333" in \
        wrong.failure_text()


def test_the_stand_in_image_is_refused_unless_the_profile_declares_it(seed: Profile) -> None:
    from qualify.runtime.standin import LABEL_SOURCE

    image_id = "sha256:" + "1" * 64
    # The harness's stand-in (any variant carries its source label), pinned by ID under a profile that
    # does not say it is a stand-in: its printed load evidence would otherwise qualify loading.
    standin = images.ImageIdentity("qualify-standin:latest", image_id, ("qualify-standin:latest",), (),
                                   ((LABEL_SOURCE, "c" * 64),))
    plan = replace(plans.build_plan(seed, draft_revision=CANDIDATE), image_digest=image_id)
    assert plan.build is None
    ev = images.check_image(standin, plan)
    assert not ev.ok
    assert ev.failure_text().count("is the harness's stand-in") == 1 and \
        'does not declare $.runtime.build = "standin"' in ev.failure_text()
    assert images.check_image(standin, replace(plan, build="standin")).ok
    # An image built on the stand-in's base (the vLLM CPU runtime) carries only the base's label: not refused.
    based = replace(standin, labels=(("qualify.runtime.standin.rootfs-sha256", "d" * 64),))
    assert images.check_image(based, plan).ok
    assert plans.build_plan(load_profile("fixture"), draft_revision=CANDIDATE).build == "standin"

