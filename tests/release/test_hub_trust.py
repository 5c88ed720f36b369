"""qualify.release.hub_trust: a revision a hub "verified" counts only where the hub is one the release policy names.

The records are built in memory (tests/run_builders.py for reports, qualify.release.attestation for statements);
the gate's own functions apply the rule, so what is tested is what a release meets.
"""

from __future__ import annotations

from qualify.profile import load_profile
from qualify.release.attestation import VERIFIED_BY_HUB, VERIFIED_BY_HUB_METADATA
from qualify.release.gate import Expected, FileEntry, refusals, shipped_profile_named
from qualify.release.hub_trust import by_a_hub, hub_refusals
from tests.run_builders import DRAFT_REVISION, FILES, SEED, defined_run

PUBLIC = "https://huggingface.co"
LOCAL_HUB = "http://127.0.0.1:8123"
TARGET_REV = "520de24eabf507659eaef7c70f14fd584527facc"
TAIL = (f"which the release policy does not name ({PUBLIC}): a mirror or a local server answers with whatever its "
        "operator wrote, so it is only claimed; run again with HF_ENDPOINT unset or set to a hub the policy names, or "
        "pin the digests in the profile")


def expected(**kw) -> Expected:
    kw.setdefault("required_levels", ("structure", "format", "reproduction"))
    kw.setdefault("checkpoint_files", tuple(FileEntry(f["path"], f["sha256"], f["size"]) for f in FILES))
    kw.setdefault("profile", shipped_profile_named(SEED))
    return Expected(**kw)


def hub_words(reasons: list[str]) -> list[str]:
    return [r for r in reasons if "which the release policy does not name" in r]


def test_which_methods_rest_on_a_hub():
    for method in (VERIFIED_BY_HUB, VERIFIED_BY_HUB_METADATA, "hub", "hub cache snapshot and hub"):
        assert by_a_hub(method), method
    for method in ("profile digests", "content of the local folder", "hub cache snapshot", None, 3):
        assert not by_a_hub(method), method


def test_only_an_endpoint_the_policy_names_proves_anything():
    proofs = [("the source x@y", PUBLIC), ("the draft", LOCAL_HUB), ("the target", None)]
    assert hub_refusals(proofs, (PUBLIC,)) == [f"the draft was verified by the hub at {LOCAL_HUB}, {TAIL}",
                                               f"the target was verified by a hub the run did not name, {TAIL}"]
    assert hub_refusals(proofs[:2], (PUBLIC, LOCAL_HUB)) == []
    # An endpoint recorded empty or as no string names no hub; every hub the policy names is listed.
    for junk in ("", 3):
        (reason,) = hub_refusals([("the draft", junk)], (PUBLIC,))
        assert reason.startswith("the draft was verified by a hub the run did not name, which")
    (reason,) = hub_refusals([("the draft", LOCAL_HUB)], (PUBLIC, "https://hub.example.org"))
    assert f"which the release policy does not name ({PUBLIC}, https://hub.example.org):" in reason


def test_a_report_whose_revisions_a_local_hub_verified_is_refused_naming_the_endpoint():
    run = defined_run()
    run.checkpoint["revision_verified_by"] = VERIFIED_BY_HUB_METADATA
    exp = expected(revision=DRAFT_REVISION)
    assert hub_words(refusals(run, exp)) == []  # the public hub proved draft, source and target
    run.environment["hub_endpoint"] = LOCAL_HUB
    run.environment["target_identity"]["hub_endpoint"] = LOCAL_HUB
    profile = load_profile(SEED)
    assert hub_words(refusals(run, exp)) == [
        f"draft revision {DRAFT_REVISION} was verified by the hub at {LOCAL_HUB}, {TAIL}",
        f"the source {profile.source_repo}@{profile.source_revision} was verified by the hub at {LOCAL_HUB}, {TAIL}",
        f"the mounted target snapshot at revision {TARGET_REV} was verified by the hub at {LOCAL_HUB}, {TAIL}",
    ]
    # A policy that names that hub accepts its answers.
    assert hub_words(refusals(run, expected(revision=DRAFT_REVISION, hub_endpoints=(PUBLIC, LOCAL_HUB)))) == []
    # The draft revision is held to it only where it is the revision released.
    assert not any(r.startswith("draft revision") for r in hub_words(refusals(run, expected())))


def test_a_proof_that_rests_on_no_hub_is_not_held_to_one_and_an_unnamed_hub_proves_nothing():
    run = defined_run()
    run.environment["hub_endpoint"] = LOCAL_HUB
    run.source["identity"]["method"] = "profile digests"
    run.environment["target_identity"].update(method="profile digests", hub_endpoint=None)
    assert hub_words(refusals(run, expected(revision=DRAFT_REVISION))) == []
    # A report that records no endpoint at all cannot show that a hub's proof was the policy's hub's.
    run = defined_run()
    del run.environment["hub_endpoint"]
    (reason,) = hub_words(refusals(run, expected()))
    assert reason.startswith("the source ") and "was verified by a hub the run did not name" in reason

