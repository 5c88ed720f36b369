"""qualify.release.origin: the gate's own commit, a statement's harness commit and cleanliness, the profile and
policy as the commit holds them, and the runtime image the release policy pins (pure)."""

from __future__ import annotations

from qualify.release.gate import Expected, shipped_profile_named
from qualify.release.origin import harness_refusals, image_refusals, origin_refusals, own_commit
from qualify.run.pipeline import CHECKPOINT_LEVELS
from tests.run_builders import SEED

SEED_LEVELS = ("structure", "format", "reproduction", "load", "smoke", "acceptance", "paired", "losslessness")


def expected(**kw) -> Expected:
    kw.setdefault("required_levels", SEED_LEVELS)
    kw.setdefault("profile", shipped_profile_named(SEED))
    return Expected(**kw)


HERE = "c" * 40


def test_the_gate_knows_its_commit_from_its_checkout_or_from_a_confirmed_build_record():
    assert own_commit(None, HERE, None) == (HERE, "")
    assert own_commit(HERE, HERE, "9" * 40) == (HERE, "")  # the checkout answers; a record is not asked
    assert own_commit("d" * 40, HERE, None) == (
        None, f"--harness-commit {'d' * 40} is not the commit this gate's checkout is at ({HERE})")
    # Installed without .git: only a --harness-commit its build record names.
    assert own_commit(HERE, None, HERE) == (HERE, "")
    assert own_commit(None, None, HERE) == (
        None, "this gate runs from no git checkout, so it does not know the commit of its own code (its package "
              f"records commit {HERE}; confirm it with --harness-commit)")
    assert own_commit(None, None, None) == (
        None, "this gate runs from no git checkout, so it does not know the commit of its own code")
    assert own_commit(HERE, None, None) == (
        None, f"this gate runs from no git checkout and its package records no build commit, so --harness-commit "
              f"{HERE} cannot be confirmed")
    assert own_commit(HERE, None, "e" * 40) == (
        None, f"--harness-commit {HERE} is not the commit this gate's package was built from ({'e' * 40})")


def test_a_statement_must_name_the_gates_own_commit_and_a_release_committed_code():
    mine = expected(harness_commit=HERE)
    assert harness_refusals(HERE, True, mine) == []
    assert harness_refusals(HERE, False, mine) == []  # development: recorded, not refused
    assert harness_refusals(None, None, mine) == [
        "the attestation names no harness commit, so nothing says which code judged the checkpoint: run the release "
        "from a git checkout of the harness at a commit"]
    assert harness_refusals("1" * 40, True, mine) == [
        f"the attestation was made by the harness at commit {'1' * 40}; this gate runs commit {HERE} and knows the "
        f"checks of its own code only (gate with the harness at {'1' * 40})"]
    blind = expected(harness_commit=None, own_commit_unknown="it cannot tell")
    assert harness_refusals(HERE, True, blind) == [
        f"the attestation was made by the harness at commit {HERE}, but it cannot tell: run the gate from a checkout "
        "of that commit, or pass --harness-commit COMMIT to a gate built from it"]
    release = expected(harness_commit=HERE, committed_harness=True)
    assert harness_refusals(HERE, True, release) == []
    assert harness_refusals(HERE, False, release, ["conftest.py: changed", "x.py: untracked"]) == [
        f"the harness code that ran was not the code of commit {HERE} (conftest.py: changed; x.py: untracked): a "
        "release is qualified only by committed code; commit or remove those files (and stale bytecode) and run again"]
    assert harness_refusals(HERE, False, release) == [
        f"the harness code that ran was not the code of commit {HERE}: a release is qualified only by committed "
        "code; commit or remove those files (and stale bytecode) and run again"]
    assert harness_refusals(HERE, None, release) == [
        "the harness code that ran was not said to be as committed: a release is qualified only by committed code; "
        "commit or remove those files (and stale bytecode) and run again"]
    assert harness_refusals(HERE, "yes", release)  # only True is clean


def test_a_profile_or_policy_counts_only_as_the_commit_holds_it():
    path = "qualify/profiles/fixture.toml"
    assert origin_refusals("shipped profile", path, "a" * 64, "a" * 64, HERE) == []
    assert origin_refusals("shipped profile", path, "a" * 64, None, HERE) == [
        f"the shipped profile {path} is not in the harness's commit {HERE} (an untracked or added file): only a "
        "committed one counts; commit it through review, or remove it"]
    assert origin_refusals("release policy", path, "a" * 64, "b" * 64, HERE) == [
        f"the release policy {path} differs from its bytes at the harness's commit {HERE} (sha256 {'a' * 12}... "
        f"here, {'b' * 12}... committed): an edited copy counts for nothing; restore it (git checkout {HERE} -- "
        f"{path}) or commit the change through review"]
    assert origin_refusals("release policy", None, "a" * 64, "a" * 64, HERE) == [
        f"the release policy lies outside the harness ({'a' * 12}...): only the files of commit {HERE} count"]
    assert origin_refusals("shipped profile", path, "a" * 64, "a" * 64, None) == [
        "the shipped profile cannot be checked against the harness's commit, which this gate does not know"]


def test_a_release_run_must_have_run_on_an_image_the_policy_pins():
    mine, other = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    assert image_refusals(mine, expected(runtime_images=(mine,))) == []
    assert image_refusals(other, expected(runtime_images=(mine,))) == [
        f"the run ran on runtime image {other}, not on one the release policy allows ({mine})"]
    assert image_refusals(None, expected(runtime_images=(mine, other))) == [
        f"the run records no runtime image, so nothing shows it ran on one the release policy allows ({mine}, "
        f"{other})"]
    assert image_refusals(mine, expected(runtime_images=())) == [
        "the release policy pins no runtime image (its runtime_images is empty): a release engineer must pin the "
        f"image ID releases run on; this run ran on {mine}"]
    assert image_refusals(other, expected()) == []  # no policy applies
    # A release of the checkpoint levels alone ran on no runtime: no image to hold to the policy.
    assert image_refusals(None, expected(runtime_images=(), required_levels=CHECKPOINT_LEVELS)) == []
    assert image_refusals(None, expected(runtime_images=(), required_levels=(*CHECKPOINT_LEVELS, "load")))
