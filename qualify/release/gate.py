"""The release gate: may *this* checkpoint ship on the strength of *this* report?

A report can be valid and say "qualified" and still not license a release: it may be
about other files, other conditions, or fewer levels than the release needs. The gate
refuses unless every one of these holds, and names each one that does not:

- the report validates against its schema and its stored verdict recomputes from its
  checks (:func:`qualify.report.model.read_json`), and the verdict is "qualified";
- the run was not interrupted and recorded no harness errors;
- the source folder was proven to be the pinned revision (``source.identity``); one trusted
  on ``--trust-local-source`` without proof is refused unless ``--allow-untrusted-source``;
- a revision proven by a hub's metadata was proven by a hub the release policy names
  (:mod:`qualify.release.hub_trust`): a mirror's or a local server's answer leaves it only claimed;
- the report was made under a profile this harness ships, with that profile's exact bytes
  (its sha256): an edited copy with fewer requirements cannot pass as it, and a profile of
  one's own (lenient floors, a wide margin) qualifies for development, never for a release.
  ``--profile NAME`` pins which shipped profile the release is qualified under;
- every required level is in the report and ``passed`` (failed, skipped, error,
  not-run or missing are refusals). The required levels are the shipped profile's
  ``levels.required``, plus any ``--require`` adds (it never drops one) -- never the
  run's own list, since ``qualify check --levels structure`` makes a "qualified" report
  of one level;
- where a required level rests on a runtime (load onwards), the run held that runtime to the target's
  pinned revision (a launcher revision variable, or a pinned snapshot with the hub offline:
  :mod:`qualify.report.target`); one that did not is refused unless ``--accept-unpinned-target``, and
  then the pass line carries a warning (:func:`target_warning`);
- no required level ran on a stand-in (the profile's ``stand_in_levels``: plumbing, it
  qualifies nothing) or rests on server logs the caller gave (``logs_given_by``: taken on
  the caller's word, not read from a server the run started);
- the checkpoint identity matches what is being released: with a directory, every
  file the report lists has the same size and sha256 there, and every load-relevant
  file there is in the report; with a revision, the report's checkpoint revision is it;
- each level holds exactly the checks this harness defines for it
  (:mod:`qualify.release.checklist`): a made-up, misplaced or missing check id is a refusal.

A report is a file anyone can edit, so for a release the gate takes a signed attestation
(:mod:`qualify.release.attestation`) instead and trusts only what its verified statement
says: :func:`attestation_refusals` applies the same policy to it, the subjects against
the directory (:func:`subject_refusals`), and the revision only where the run verified it
against the bytes. The report-only path (:func:`refusals`) is for ``--allow-unsigned``.

:func:`refusals` and :func:`attestation_refusals` are pure (record, facts in; reasons out);
:func:`describe_checkpoint` does the I/O of hashing a directory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from qualify.checkpoint.checksums import sha256_files
from qualify.checkpoint.files import FileEntry, is_never_loaded, list_checkpoint_files, storage_roots
from qualify.checkpoint.hub import DEFAULT_ENDPOINT
from qualify.errors import CheckpointError, UsageError
from qualify.release.attestation import (
    DRAFT,
    HARNESS,
    PROFILE,
    REPORT,
    RUNTIME_IMAGE,
    SOURCE,
    TARGET,
    Attested,
    logs_given_by,
)
from qualify.release.checklist import level_of_check
from qualify.release.hub_trust import attested_hub_proofs, hub_refusals, report_hub_proofs
from qualify.release.origin import harness_refusals, image_refusals
from qualify.report.model import LEVELS, Run, Status, Verdict
from qualify.report.target import RUNTIME_LEVELS, target_revision_record
from qualify.util.identifiers import is_commit


@dataclass(frozen=True)
class ShippedProfile:
    """A profile shipped with this harness, as it lies in the package: what a release may be qualified under."""

    name: str
    sha256: str
    required_levels: tuple[str, ...]
    stand_in_levels: tuple[str, ...] = ()  # run on a stand-in: plumbing, never qualification


@dataclass(frozen=True)
class Expected:
    """What the release pipeline says it is releasing, and what it requires."""

    required_levels: tuple[str, ...]
    checkpoint_files: tuple[FileEntry, ...] | None = None  # the directory's files, when --checkpoint is given
    revision: str | None = None
    # The shipped profile the release is qualified under (--profile, else the one the record names);
    # None when the record names no shipped profile, which is a refusal.
    profile: ShippedProfile | None = None
    allow_unpinned: bool = False  # accept a run whose runtime was launched from a moving tag or revision
    # Each level's check ids as this harness defines them (checklist.level_checks), and its version.
    defined_checks: Mapping[str, Sequence[str]] | None = None
    harness_version: str | None = None
    allow_untrusted_source: bool = False  # accept a run whose source folder was trusted without proof
    # The commit of this gate's own harness code: its checkout's, or --harness-commit where its build record
    # confirms it. A statement made by other code is read by this code's checks only if the commits agree;
    # None (with the reason in own_commit_unknown) refuses every statement.
    harness_commit: str | None = None
    own_commit_unknown: str = "this gate does not know the commit of its own code"
    committed_harness: bool = False  # require the run's harness code to have been as committed (a release)
    # The runtime image IDs the release policy allows (--release-policy); None: no policy applies, so no image
    # is required; empty: the policy pins none, which refuses every release.
    runtime_images: tuple[str, ...] | None = None
    # Accept a run whose runtime was not held to the target's pinned revision (--accept-unpinned-target).
    accept_unpinned_target: bool = False
    # The hub endpoints whose metadata may prove a revision (the release policy's hub_endpoints).
    hub_endpoints: tuple[str, ...] = (DEFAULT_ENDPOINT,)


#: The gate's flag that accepts a run whose target revision was not enforced; a pass it allows says so.
ACCEPT_UNPINNED_TARGET = "--accept-unpinned-target"


def target_refusals(enforced: bool, reason: object, expected: Expected) -> list[str]:
    """A run whose runtime was not held to the target's pinned revision, where a required level rests on that
    runtime: refused unless accepted explicitly. The revision it names is then only the profile's claim."""
    if enforced or expected.accept_unpinned_target or not set(expected.required_levels) & set(RUNTIME_LEVELS):
        return []
    return [f"the target revision was not enforced ({reason or 'no reason recorded'}): the runtime loaded whatever "
            "target its launcher resolved, so the target revision the run names is a claim, not what it ran; enforce "
            "it (a launcher revision variable the profile declares, or qualify run --target-snapshot), or pass "
            f"{ACCEPT_UNPINNED_TARGET} to accept that"]


def target_warning(enforced: bool, reason: object, expected: Expected) -> str | None:
    """The pass line's warning when an unenforced target revision was accepted; None when there is none to give."""
    if enforced or not expected.accept_unpinned_target or not set(expected.required_levels) & set(RUNTIME_LEVELS):
        return None
    return (f"WARNING: target revision not enforced ({reason or 'no reason recorded'}), accepted by "
            f"{ACCEPT_UNPINNED_TARGET}")


def report_target(run: Run) -> tuple[bool, object]:
    """(whether the report says the target revision was enforced, the reason it was not)."""
    record = target_revision_record(run.environment)
    return bool(record["enforced"]), record["reason"]


def attested_target(att: Attested) -> tuple[bool, object]:
    """(whether the verified statement says the target revision was enforced, the reason it was not)."""
    if att.target_enforced:
        return True, None
    return False, att.annotation(TARGET, "reason") or "the attestation does not say that it was enforced"


def is_load_relevant(rel: str) -> bool:
    """Whether a runtime may read the file: a model card added or edited after qualification must not block
    the release, but everything else (weights, configs, tokenizer files, code) is a refusal when unreported.
    The list of never-loaded files has one home, :mod:`qualify.checkpoint.files`."""
    return not is_never_loaded(rel)


def list_files(root: Path) -> list[str]:
    """The checkpoint's files as the report listed them: the very listing ``qualify check`` records."""
    return list_checkpoint_files(root)


def describe_checkpoint(root: Path) -> tuple[FileEntry, ...]:
    """Size and sha256 of every file in the directory about to be released."""
    root = Path(root)
    if not root.is_dir():
        raise UsageError(f"{root}: not a checkpoint directory")
    rels = list_files(root)
    roots = storage_roots(root)
    for rel in rels:
        if not (root / rel).is_file():
            # The release itself is broken, not the command line: a refusal, not a usage error.
            raise CheckpointError("a broken link or not a regular file; it cannot be hashed", file=rel)
        resolved = (root / rel).resolve()
        if not any(resolved.is_relative_to(r) for r in roots):
            # Whatever its name (a README too): the upload would carry another file's bytes.
            raise CheckpointError(f"resolves outside the checkpoint (to {resolved}); the release would upload "
                                  "another file's bytes", file=rel)
    # A file that cannot be read raises CheckpointError naming it: the gate cannot vouch for it.
    digests = sha256_files([root / r for r in rels], labels=rels)
    return tuple(FileEntry(r, digests[root / r], (root / r).stat().st_size) for r in rels)


def shipped_profile(run: Run) -> ShippedProfile | None:
    """The shipped profile the report names; None if it names no shipped one."""
    return shipped_profile_named(run.profile.get("name"))


def shipped_profile_named(name: object) -> ShippedProfile | None:
    """The shipped profile named ``name``; None if no shipped profile has that name."""
    from qualify.profile import list_profiles, load_profile

    if not isinstance(name, str) or name not in list_profiles():
        return None
    profile = load_profile(name)
    return ShippedProfile(profile.name, profile.sha256, profile.required_levels, profile.stand_in_levels)


def release_levels(profile: ShippedProfile | None, require: Sequence[str] = ()) -> tuple[str, ...]:
    """The levels a release requires: the shipped profile's required levels and those ``--require`` adds,
    in level order. ``--require`` never replaces the profile's: a release asks for more, never for less."""
    wanted = set(require) | set(profile.required_levels if profile is not None else ())
    return tuple(name for name in LEVELS if name in wanted)


def parse_require(text: str) -> tuple[str, ...]:
    levels = [s.strip() for s in text.split(",") if s.strip()]
    if not levels:
        raise UsageError("--require names no level; give a comma-separated list, e.g. structure,format")
    unknown = [lv for lv in levels if lv not in LEVELS]
    if unknown:
        raise UsageError(f"--require: unknown level(s) {', '.join(unknown)}; known levels: {', '.join(LEVELS)}")
    return tuple(dict.fromkeys(levels))


def check_revision_argument(revision: str) -> str:
    if not is_commit(revision):
        raise UsageError(
            f"--revision {revision!r} is not an immutable commit (40 lowercase hex); a branch or tag can move "
            "after the gate has passed"
        )
    return revision


def refusals(run: Run, expected: Expected) -> list[str]:
    """Every reason the report does not license this release; empty means it does."""
    reasons: list[str] = []
    # The command line refuses these as usage errors; the function refuses them too, so
    # no caller can get a pass by asking for nothing (no shipped profile is a refusal of its own).
    if not expected.required_levels and expected.profile is not None:
        reasons.append("no level is required, so the report cannot show that anything was qualified")
    if expected.checkpoint_files is None and expected.revision is None:
        reasons.append("no checkpoint identity (directory or revision) to compare the report with")
    if run.interrupted:
        reasons.append(f"the run was interrupted ({run.interrupted}) before it finished")
    for err in run.errors:
        reasons.append(f"the run recorded a harness error: {err}")
    runtime = run.environment.get("runtime") or {}
    if runtime.get("reproducible") is False and not expected.allow_unpinned:
        moving = "; ".join(str(u) for u in (runtime.get("plan") or {}).get("unpinned") or []) or "unpinned"
        reasons.append(f"the runtime was launched unpinned, so the run is not reproducible ({moving}); pin the "
                       "image digest and revisions, or pass --allow-unpinned to accept that")
    image = (runtime.get("image") or {}).get("id")
    reasons += image_refusals(image if isinstance(image, str) and image else None, expected)
    reasons += target_refusals(*report_target(run), expected)
    reasons.extend(source_refusals(run, allow_untrusted=expected.allow_untrusted_source))
    reasons += hub_refusals(report_hub_proofs(run, expected.revision), expected.hub_endpoints)

    if expected.harness_version is not None and run.harness_version != expected.harness_version:
        reasons.append(f"the report was made by qualify {run.harness_version}; this gate (qualify "
                       f"{expected.harness_version}) knows the checks of its own version only")
    if expected.defined_checks is not None:
        ids_by_level: dict[str, list[str]] = {}
        for result in run.levels:
            for check in result.checks:
                if check.level != result.name:
                    reasons.append(f"check {check.id} says level {check.level} but is listed under {result.name}")
                ids_by_level.setdefault(result.name, []).append(check.id)
        reasons += check_id_refusals(ids_by_level, expected.required_levels, expected.defined_checks,
                                     expected.harness_version or run.harness_version)

    by_name = {lvl.name: lvl for lvl in run.levels}
    stand_in = set(recorded_stand_in_levels(run)) | set(expected.profile.stand_in_levels if expected.profile else ())
    for name in expected.required_levels:
        lvl = by_name.get(name)
        if lvl is None:
            reasons.append(f"required level {name} is missing from the report")
            continue
        if lvl.status is not Status.PASSED:
            bad = [f"{c.id} {c.status}" for c in lvl.checks if c.status is not Status.PASSED]
            why = f" ({', '.join(bad)})" if bad else (f" ({lvl.reason})" if lvl.reason else " (no check ran)")
            reasons.append(f"required level {name} is {lvl.status}{why}")
        given = [flag for c in lvl.checks if c.evidence is not None for flag in logs_given_by(c.evidence.measured)]
        reasons += release_use_refusals(name, stand_in=name in stand_in, logs_given=given)
    if run.verdict is not Verdict.QUALIFIED and not (run.interrupted or run.errors):
        # A level the run required but the release does not still makes the report "not qualified".
        others = [f"{lvl.name} {lvl.status}" for lvl in run.required_levels
                  if lvl.status is not Status.PASSED and lvl.name not in expected.required_levels]
        if not run.required_levels:
            reasons.append("the report's verdict is not qualified: the run required no level")
        elif others:
            reasons.append(f"the report's verdict is not qualified: the run also required {', '.join(others)}")

    reasons += profile_refusals("report", run.profile.get("name"), run.profile.get("sha256"), expected)

    if expected.revision is not None:
        recorded = run.checkpoint.get("revision")
        if not recorded:
            reasons.append(f"the report records no checkpoint revision, so it cannot vouch for {expected.revision}")
        elif recorded != expected.revision:
            reasons.append(f"the report is about checkpoint revision {recorded}, not {expected.revision}")

    if expected.checkpoint_files is not None:
        reasons.extend(identity_refusals(run.checkpoint.get("files") or [], expected.checkpoint_files))
    if run.verdict is not Verdict.QUALIFIED and not reasons:
        # Unreachable by the rules above; kept so that no future rule can let a "not qualified" report through.
        reasons.append("the report's verdict is not qualified")
    return reasons


def profile_refusals(record: str, name: object, sha256: object, expected: Expected) -> list[str]:
    """The profile a record (``report`` or ``run``) was made under against the shipped one the release is under.

    Only a profile shipped with this harness, byte for byte, licenses a release: a profile of one's
    own (acceptance floors at 0, a paired margin of 90%) qualifies a checkpoint for development only.
    """
    shipped = expected.profile
    if shipped is None:
        return [f"the {record} was made under profile {name!r}, which this harness does not ship: a profile of "
                "one's own qualifies a checkpoint for development, never for a release; qualify it under a shipped "
                "profile"]
    if name != shipped.name:
        return [f"the {record} was made under profile {name!r}, not under {shipped.name}, the shipped profile this "
                "release is qualified under (--profile)"]
    out = []
    if sha256 != shipped.sha256:
        out.append(f"the {record} was made under profile {name} with sha256 {sha256 or '(none recorded)'}, but the "
                   f"shipped profile of that name has sha256 {shipped.sha256}: its conditions are not the ones this "
                   "release is qualified under")
    dropped = [level for level in shipped.required_levels if level not in expected.required_levels]
    if dropped:
        out.append(f"the release does not require {', '.join(dropped)}, which profile {shipped.name} requires: "
                   "--require adds levels to the profile's, it never drops one")
    return out


def release_use_refusals(level: str, *, stand_in: bool, logs_given: Sequence[str]) -> list[str]:
    """A required level whose result cannot count for a release, whatever its status: run on a stand-in,
    or resting on server logs the caller handed in rather than read from a server the run started."""
    out = []
    if stand_in:
        out.append(f"required level {level} ran on a stand-in (plumbing, it qualifies nothing): no runtime showed "
                   "that it loads or serves this checkpoint, so it cannot count for a release")
    if logs_given:
        out.append(f"required level {level} rests on logs the caller gave ({', '.join(dict.fromkeys(logs_given))}), "
                   "not read from a server this run started: taken on the caller's word, it cannot count for a "
                   "release")
    return out


def recorded_stand_in_levels(run: Run) -> list[str]:
    """The levels the report records as run on a stand-in (``profile.conditions.stand_in_levels``)."""
    found = (run.profile.get("conditions") or {}).get("stand_in_levels")
    return [str(x) for x in found] if isinstance(found, list) else []


def source_statuses(run: Run) -> set[str]:
    """The source identity statuses the report records: its ``source.identity`` and every source_identity check's."""
    found = set()
    ident = run.source.get("identity")
    if isinstance(ident, dict) and isinstance(ident.get("status"), str):
        found.add(ident["status"])
    for lvl in run.levels:
        for c in lvl.checks:
            status = c.evidence.measured.get("status") if c.evidence is not None else None
            if c.id.endswith(".source_identity") and isinstance(status, str):
                found.add(status)
    return found


def source_refusals(run: Run, *, allow_untrusted: bool) -> list[str]:
    """A source that no proof tied to its pin: refused, unless trusted explicitly and accepted explicitly."""
    statuses = source_statuses(run)
    out = []
    if "not verified" in statuses:
        out.append("the source identity was not verified: nothing shows the source folder was the pinned revision")
    if "trusted" in statuses and not allow_untrusted:
        out.append("the source folder was trusted on --trust-local-source without proof that it is the pinned "
                   "revision; prove it (profile digests, a hub cache snapshot or the hub), or pass "
                   "--allow-untrusted-source to accept that")
    return out


def stored_contradictions(data: dict, run: Run) -> list[str]:
    """Derived fields the report file stores (level statuses, qualified levels) that its checks do not give.

    ``read_json`` recomputes the verdict; a level status or qualified-level list edited by
    hand is just as much a sign that the file is not what the run wrote.
    """
    out = []
    derived = {lvl.name: str(lvl.status) for lvl in run.levels}
    for stored in data.get("levels", []):
        name = stored.get("name")
        if name in derived and stored.get("status") != derived[name]:
            out.append(f"the report's level {name} says {stored.get('status')} but its checks give {derived[name]}; "
                       "the report was altered or is corrupt")
    if list(data.get("qualified_levels", [])) != run.qualified_levels:
        out.append(f"the report's qualified levels {data.get('qualified_levels')} contradict its checks "
                   f"({run.qualified_levels}); the report was altered or is corrupt")
    return out


def identity_refusals(reported: Sequence[dict], actual: Sequence[FileEntry]) -> list[str]:
    """The report's ``checkpoint.files`` against the directory being released."""
    if not reported:
        return ["the report lists no checkpoint files, so it cannot vouch for any directory"]
    here = {f.path: f for f in actual}
    out = []
    seen = set()
    for rec in sorted(reported, key=lambda r: r["path"]):
        path = rec["path"]
        seen.add(path)
        got = here.get(path)
        if got is None:
            out.append(f"{path}: in the report but missing from the checkpoint directory")
        elif rec.get("sha256") is None:
            out.append(f"{path}: the report recorded no sha256 for it (hashing failed during the run)")
        elif rec["sha256"] != got.sha256 or rec["size"] != got.size:
            out.append(f"{path}: differs from the qualified file (size {rec['size']} -> {got.size}, "
                       f"sha256 {rec['sha256'][:12]}... -> {got.sha256[:12]}...)")
    for path in sorted(set(here) - seen):
        if is_load_relevant(path):
            out.append(f"{path}: in the checkpoint directory but not in the report (unqualified content)")
    return out


def check_id_refusals(ids_by_level: Mapping[str, Sequence[str]], required_levels: Sequence[str],
                      defined: Mapping[str, Sequence[str]], version: str) -> list[str]:
    """Check ids a report or statement holds against the ones this harness defines for each level.

    A level is what its checks are: an id the harness never had (made up), one listed in
    another level's place or twice, or a defined check of a required level that is absent,
    each means the record does not show that level was qualified.
    """
    out = []
    seen: set[str] = set()
    for level, ids in ids_by_level.items():
        for cid in ids:
            if cid in seen:
                out.append(f"check {cid} is listed more than once")
                continue
            seen.add(cid)
            if cid not in defined.get(level, ()):
                owner = next((lv for lv, known in defined.items() if cid in known), None)
                where = f"a check of level {owner}, listed under {level}" if owner else \
                    f"not a check qualify {version} defines (made up)"
                out.append(f"check {cid}: {where}")
    for level in required_levels:
        expected = defined.get(level, ())
        if not expected:
            out.append(f"required level {level}: qualify {version} defines no check for it")
            continue
        missing = [cid for cid in expected if cid not in ids_by_level.get(level, ())]
        if missing and ids_by_level.get(level):
            out.append(f"required level {level}: check(s) {', '.join(missing)} missing (qualify {version} defines "
                       f"{len(expected)} for it)")
    return out


def attestation_refusals(att: Attested, expected: Expected, *, version: str,
                         defined: Mapping[str, Sequence[str]]) -> list[str]:
    """Every reason a *verified* statement does not license this release; empty means it does.

    Pure: the signature was verified before (:func:`qualify.release.attestation.verify_envelope`);
    this is the release policy applied to what the statement says.
    """
    reasons = [f"the attestation is malformed: {p}" for p in att.problems]
    if not expected.required_levels and expected.profile is not None:
        reasons.append("no level is required, so the attestation cannot show that anything was qualified")
    if expected.checkpoint_files is None:
        reasons.append("no checkpoint directory to compare the attestation's subjects with")
    if att.harness_version != version:
        reasons.append(f"the attestation was made by qualify {att.harness_version}; this gate (qualify {version}) "
                       "knows the checks of its own version only")
    reasons += harness_refusals(att.harness_commit, att.annotation(HARNESS, "treeClean"), expected,
                                att.annotation(HARNESS, "treeProblems"))
    if att.result != "PASSED":
        reasons.append(f"the attested result is {att.result}: the run's verdict was not qualified")
    if att.annotation(REPORT, "interrupted"):
        reasons.append(f"the run was interrupted ({att.annotation(REPORT, 'interrupted')}) before it finished")
    if att.annotation(REPORT, "errors"):
        reasons.append(f"the run recorded {att.annotation(REPORT, 'errors')} harness error(s)")

    ids_by_level: dict[str, list[str]] = {}
    for cid in (*att.passed, *att.failed):
        level = level_of_check(cid)
        if level is None:
            reasons.append(f"check {cid}: not a check qualify {version} defines (made up)")
        else:
            ids_by_level.setdefault(level, []).append(cid)
    reasons += check_id_refusals(ids_by_level, expected.required_levels, defined, version)
    failed = set(att.failed)
    stand_in = set(expected.profile.stand_in_levels if expected.profile else ())
    for level in expected.required_levels:
        ids = ids_by_level.get(level)
        if not ids:
            reasons.append(f"required level {level} is missing from the attestation (no check of it ran)")
            continue
        bad = [cid for cid in ids if cid in failed]
        if bad:
            reasons.append(f"required level {level} did not pass: {', '.join(bad)} not passed")
        reasons += release_use_refusals(level, stand_in=level in stand_in or att.stand_in(level),
                                        logs_given=att.logs_given_by(level))

    reasons += profile_refusals("run", att.profile_name, att.digest(PROFILE), expected)
    identity = att.annotation(SOURCE, "identity")
    if identity == "not verified":
        reasons.append("the source identity was not verified: nothing shows the source folder was the pinned revision")
    elif identity == "trusted" and not expected.allow_untrusted_source:
        reasons.append("the source folder was trusted on --trust-local-source without proof that it is the pinned "
                       "revision; prove it (profile digests, a hub cache snapshot or the hub), or pass "
                       "--allow-untrusted-source to accept that")
    image = att.digest(RUNTIME_IMAGE)
    reasons += image_refusals(f"sha256:{image}" if image else None, expected)
    if att.annotation(RUNTIME_IMAGE, "reproducible") is False and not expected.allow_unpinned:
        reasons.append("the runtime was launched unpinned, so the run is not reproducible; pin the image digest and "
                       "revisions, or pass --allow-unpinned to accept that")
    reasons += target_refusals(*attested_target(att), expected)
    if att.target_enforced and att.annotation(TARGET, "method") == "pinned-snapshot" \
            and not isinstance(att.annotation(TARGET, "identity"), str):
        reasons.append("the attestation says a mounted target snapshot held the runtime to the target revision, but "
                       "not how its files were proven to be that revision (a folder's name proves nothing)")
    reasons += hub_refusals(attested_hub_proofs(att, expected.revision), expected.hub_endpoints)

    if expected.revision is not None:
        recorded = att.annotation(DRAFT, "revision")
        verified_by = att.annotation(DRAFT, "revisionVerifiedBy")
        if recorded != expected.revision:
            reasons.append(f"the attestation is about draft revision {recorded or '(none recorded)'}, "
                           f"not {expected.revision}")
        elif not verified_by:
            claimed = att.annotation(DRAFT, "revisionSource")
            reasons.append(f"revision {expected.revision} was only claimed ({claimed}): the run never compared it "
                           "with the bytes, so it cannot vouch for it")
    if expected.checkpoint_files is not None:
        reasons += subject_refusals(att.subjects, expected.checkpoint_files)
    return reasons


def subject_refusals(subjects: Mapping[str, str], actual: Sequence[FileEntry]) -> list[str]:
    """The signed subjects (path -> sha256) against the directory being released: missing, changed, extra."""
    if not subjects:
        return ["the attestation names no checkpoint file, so it cannot vouch for any directory"]
    here = {f.path: f for f in actual}
    out = []
    for path in sorted(subjects):
        got = here.get(path)
        if got is None:
            out.append(f"{path}: signed in the attestation but missing from the checkpoint directory")
        elif got.sha256 != subjects[path]:
            out.append(f"{path}: changed after signing (sha256 {subjects[path][:12]}... signed, "
                       f"{got.sha256[:12]}... in the directory)")
    for path in sorted(set(here) - set(subjects)):
        if is_load_relevant(path):
            out.append(f"{path}: in the checkpoint directory but not in the attestation (unqualified content)")
    return out
