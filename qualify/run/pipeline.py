"""One qualification run from inputs to verdict: what ``qualify run`` and ``make qualify`` do.

In order: resolve the draft and its source (local folders, or the hub at the pinned
commits), lay out the levels, prepare the runtimes the levels need (the profile's
locally built image, the local vLLM servers of ``[local_server]``), run the suites
level by level, tear everything down and write the report.
Whatever fails on the way is recorded in the report, which is always written; a step
that cannot even begin is a harness error of the run, so its verdict is "not qualified".
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qualify import errors
from qualify.checkpoint.checksums import content_revision, folder_revision, sha256_files
from qualify.checkpoint.pinned import PinnedFolder
from qualify.core import LEVELS
from qualify.errors import HarnessError, UsageError
from qualify.profile import Profile
from qualify.release.attestation import HUB_ENDPOINT_KEY, VERIFIED_BY_CONTENT, VERIFIED_BY_HUB_METADATA
from qualify.release.signing import SigningKey
from qualify.report.model import Run
from qualify.report.target import TARGET_IDENTITY_KEY
from qualify.run.context import GivenServers, LaunchOptions, RunContext
from qualify.run.pinning import PINNED_KEY, pinned_copy, record_pinned
from qualify.util.escape import escape_terminal

if TYPE_CHECKING:
    from qualify.checkpoint.target_identity import TargetProof

CHECKPOINT_LEVELS = ("structure", "format", "reproduction")
#: The JUnit XML pytest writes into the run folder, beside report.json.
JUNIT_NAME = "junit.xml"
SERVING_LEVELS = LEVELS[LEVELS.index("smoke"):]
#: How long a local folder's --draft-revision check waits for the hub's metadata: the answer is
#: optional (without it the revision is recorded as only claimed), so a firewalled hub must not stall a run.
HUB_REVISION_TIMEOUT_S = 30.0


@dataclass
class RunOptions:
    """What a run was asked to do; the CLI fills it from its arguments."""

    profile: Profile
    levels: Sequence[str]
    report_dir: Path
    checkpoint: Path | None = None  # a local draft folder; None = the hub at the draft revision
    source: Path | None = None  # a local source folder; None = the hub at the profile's source revision
    fetch_source: bool = True  # False (qualify check): no --source means the source checks are skipped
    target: Path | None = None  # a local target folder for [local_server]; None = the profile's
    draft_revision: str | None = None
    image_digest: str | None = None
    allow_unpinned: bool = False
    trust_local_source: bool = False  # a --source whose identity no proof establishes may be used (recorded)
    hf_cache: Path | None = None  # a hub cache: downloads land there, and the runtime mounts it
    target_snapshot: Path | None = None  # the target's hub-cache snapshot at [target].revision, mounted (pinned)
    endpoint: str | None = None
    reference_endpoint: str | None = None
    source_endpoint: str | None = None
    #: The logs of servers given by endpoint (the smoke level's evidence, the paired level's engine settings).
    server_log: Path | None = None
    source_server_log: Path | None = None
    junit_xml: Path | None = None
    command: Sequence[str] = ()
    sign_key: SigningKey | None = None  # sign the run: attestation.intoto.jsonl beside report.json
    sign_model: bool = False  # also sign the checkpoint folder in the OpenSSF model-signing format


@dataclass
class Resolved:
    """One input of the run: where its files are and which immutable revision they are."""

    path: Path | None
    repo: str | None
    revision: str | None
    revision_source: str  # "--draft-revision", "profile", "content of the local folder", "hub", ...
    obtained: str  # "local folder" or "hub"
    errors: list[str] = field(default_factory=list)
    hub: dict[str, Any] | None = None
    # How the revision was checked against the bytes (VERIFIED_BY_*), or None: a revision only claimed.
    revision_verified_by: str | None = None
    revision_verification: str | None = None  # what was compared, or why the revision could not be verified

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": str(self.path) if self.path else None, "repo": self.repo,
                               "revision": self.revision, "revision_source": self.revision_source,
                               "revision_verified_by": self.revision_verified_by,
                               "revision_verification": self.revision_verification, "obtained": self.obtained}
        if self.hub is not None:
            out["hub"] = self.hub
        return out


def _fetch(repo: str, revision: str, what: str, cache_dir: Path | None) -> Resolved:
    from qualify.checkpoint import hub

    access = hub.hub_access(cache_dir=cache_dir)
    try:
        path = hub.download(repo, revision, access=access, cache_dir=cache_dir)
    except (errors.HubError, UsageError) as exc:
        return Resolved(None, repo, revision, "hub", "hub", errors=[f"{what} {repo}@{revision}: {exc}"],
                        hub=access.to_dict())
    # Not verified yet: a download may be answered from a cache anyone could have laid out. The pinned bytes
    # are compared with the hub's metadata of the commit once they are pinned (verify_fetched).
    return Resolved(path, repo, revision, "hub", "hub", hub=access.to_dict(),
                    revision_verification="only claimed: not yet compared with the hub's metadata")


def verify_fetched(draft: Resolved, pinned: PinnedFolder, cache_dir: Path | None) -> None:
    """Whether a draft fetched from the hub is, as pinned, the files the hub's metadata names at its commit."""
    if draft.revision is None:
        return
    draft.revision_verified_by, draft.revision_verification = verify_revision_by_hub(
        draft.repo, draft.revision, pinned.copy, cache_dir=cache_dir, digests=pinned.digests)


def verify_revision_by_hub(repo: str | None, revision: str, folder: Path, *, cache_dir: Path | None = None,
                           digests: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """Whether the hub's metadata of ``repo`` at ``revision`` names exactly the files of ``folder``.

    Every file of the folder must be on the hub at that commit with the same LFS sha256 (or, for a
    file stored in git, the same git blob id), and every file of the commit that a runtime may load
    must be in the folder. Returns (:data:`VERIFIED_BY_HUB_METADATA` or None, what was found).
    Offline, or with the hub unreachable, the revision stays unverified: it is never assumed.
    """
    from qualify.checkpoint import hub
    from qualify.checkpoint.files import is_never_loaded, list_checkpoint_files

    if not repo:
        return None, "only claimed: the profile names no hub repository to compare it with"
    access = hub.hub_access(cache_dir=cache_dir)
    if access.mode != hub.ONLINE:
        return None, f"only claimed: not compared with the hub ({access.reason})"
    try:
        rev = hub.resolve(repo, revision, access=access, timeout=HUB_REVISION_TIMEOUT_S)
    except (hub.HubError, UsageError) as exc:
        return None, f"only claimed: the hub's metadata could not be read ({exc})"
    if digests is None:
        rels = [r for r in list_checkpoint_files(folder) if (folder / r).is_file()]
        hashed = sha256_files([folder / r for r in rels], labels=rels, progress=False)
        digests = {r: hashed[folder / r] for r in rels}
    rels = sorted(digests)
    problems = []
    for rel in rels:
        remote = rev.files.get(rel)
        if remote is None:
            problems.append(f"{rel} is not in the commit")
        elif remote.sha256 is not None and remote.sha256 != digests[rel]:
            problems.append(f"{rel} differs from the commit's (LFS sha256)")
        elif remote.sha256 is None and remote.blob_id != hub.git_blob_sha1(folder / rel):
            problems.append(f"{rel} differs from the commit's (git blob id)")
    for rel in sorted(set(rev.files) - set(rels)):
        if not is_never_loaded(rel):
            problems.append(f"{rel} of the commit is missing from the folder")
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        return None, f"only claimed: the folder is not {repo}@{revision} on {access.name}: {shown}"
    return VERIFIED_BY_HUB_METADATA, f"every file equals the hub's metadata of {repo}@{revision} on {access.name}"


def prove_target_snapshot(snapshot: Path, profile: Profile) -> TargetProof:
    """The mounted target snapshot's files against ``[target.sha256]`` or the hub's metadata at ``[target].revision``,
    hashed once with the run's progress display; one line says what was found and how long hashing took."""
    from qualify.checkpoint.target_identity import prove_target

    assert profile.target is not None and profile.target.revision is not None  # checked with the snapshot
    proof = prove_target(snapshot, repo=profile.target.repo or "", revision=profile.target.revision,
                         pins=profile.target_sha256, timeout=HUB_REVISION_TIMEOUT_S)
    verdict = (f"proven by {proof.method}" + (f" ({proof.hub_endpoint})" if proof.hub_endpoint else "")
               if proof.verified else "NOT proven, so its revision is only claimed")
    print(escape_terminal(f"target snapshot {profile.target.repo}@{profile.target.revision}: {verdict}; "
                          f"{proof.files} files, {proof.bytes / 1e9:.2f} GB hashed in {proof.hash_seconds:.1f} s"))
    return proof


def resolve_checkpoint(opts: RunOptions, pinned: PinnedFolder | None = None) -> Resolved:
    """The draft: a local folder (its revision given, pinned, or its content's) or the hub at its commit.

    Args:
        opts: the run's options.
        pinned: the local folder as the run pinned it (:func:`qualify.checkpoint.pinned.pin_folder`): its
            revision is computed from, and compared with, those bytes; None hashes the folder here.
    """
    profile = opts.profile
    repo = profile.checkpoint.repo
    profile_revision = profile.checkpoint.revision
    if opts.draft_revision is not None:
        profile.launch_env(draft_revision=opts.draft_revision)  # a malformed or contradicting one: usage error
    revision, source = ((opts.draft_revision, "--draft-revision") if opts.draft_revision
                        else (profile_revision, "profile"))
    if opts.checkpoint is not None:
        if not opts.checkpoint.is_dir():
            raise UsageError(f"{opts.checkpoint}: not a checkpoint directory")
        # A folder with no hub history is identified by what it holds: any change of a byte changes it.
        content = content_revision(pinned.digests) if pinned is not None else folder_revision(opts.checkpoint)
        if revision is None:
            revision, source = content, "content of the local folder"
        # A revision given for a local folder is only a claim unless it is the folder's content revision or
        # the hub's metadata at that commit names exactly these bytes.
        verified: str | None
        if revision == content:
            verified, why = VERIFIED_BY_CONTENT, "the local folder's content revision, computed from its bytes"
        else:
            verified, why = verify_revision_by_hub(
                repo, revision, pinned.copy if pinned is not None else opts.checkpoint, cache_dir=opts.hf_cache,
                digests=pinned.digests if pinned is not None else None)
        return Resolved(opts.checkpoint, repo, revision, source, "local folder", revision_verified_by=verified,
                        revision_verification=why)
    if revision is None:
        raise UsageError(f"profile {profile.name} pins no draft revision: give --draft-revision COMMIT (the release "
                         "candidate's immutable commit) or --checkpoint DIR")
    if repo is None:  # the schema requires $.checkpoint.repo; said here for the type checker too
        raise UsageError(f"profile {profile.name} names no draft repository ($.checkpoint.repo)")
    return _fetch(repo, revision, "draft", opts.hf_cache)


def resolve_source(opts: RunOptions) -> Resolved:
    profile = opts.profile
    repo, revision = profile.source_repo, profile.source_revision
    if opts.source is not None:
        if not opts.source.is_dir():
            raise UsageError(f"{opts.source}: not a source checkpoint directory")
        # The profile's pin is what the folder must be, not what it is: the structure level's
        # source_identity check proves it (or not), and the report's source.identity says which.
        return Resolved(opts.source, repo, revision, "profile (to be proven by source identity)", "local folder")
    if (not opts.fetch_source or not any(lv in CHECKPOINT_LEVELS for lv in opts.levels) or repo is None
            or revision is None):
        return Resolved(None, repo, revision, "profile", "not needed")
    return _fetch(repo, revision, "source", opts.hf_cache)


def run_context(opts: RunOptions, run_dir: Path, draft: Resolved, source: Resolved) -> RunContext:
    """What the suites are asked to do, typed, from the run's options and its resolved inputs."""
    launches = "load" in opts.levels or (opts.profile.serves_from_runtime and opts.endpoint is None
                                         and any(lv in SERVING_LEVELS for lv in opts.levels))
    # Built by the load level itself, when it starts: a run whose checkpoint levels fail builds nothing.
    build = (opts.image_digest is None and launches and opts.profile.image_build is not None
             and not opts.profile.runtime.image_digest)
    return RunContext(
        profile=opts.profile, checkpoint=draft.path, source=source.path, trust_local_source=opts.trust_local_source,
        servers=GivenServers(endpoint=opts.endpoint, reference_endpoint=opts.reference_endpoint,
                             source_endpoint=opts.source_endpoint, server_log=opts.server_log,
                             source_server_log=opts.source_server_log),
        launch=LaunchOptions(draft_revision=draft.revision, image_digest=opts.image_digest, build_image=build,
                             allow_unpinned=opts.allow_unpinned, hf_cache=opts.hf_cache, log_dir=run_dir,
                             target_snapshot=opts.target_snapshot),
    )


def run_qualification(opts: RunOptions) -> tuple[Run, Path, int]:
    """Run every asked level in order; returns the run, its folder and pytest's exit code.

    With ``opts.sign_key``, the run is signed once its report is written, whatever the verdict:
    attestation.intoto.jsonl (and model.sig with ``opts.sign_model``) beside report.json.

    Raises:
        HarnessError: the report was written but could not be signed (the run has no attestation).
    """
    from qualify.release.attestation import write_attestation

    with contextlib.ExitStack() as stack:
        run, run_dir, code, pinned = _run_levels(opts, stack)
        if opts.sign_key is not None:
            if run.checkpoint.get(PINNED_KEY, {}).get("changed"):
                # The bytes the checks read are not the folder's any more: there is nothing true to sign.
                print("not signed: the checkpoint changed during the run (see the report's errors)")
            else:
                # The model signature covers the bytes the run checked: its pinned copy, laid out as the folder.
                signed = pinned.copy if pinned is not None else None
                write_attestation(run_dir, opts.sign_key, checkpoint=signed, sign_checkpoint=opts.sign_model)
    return run, run_dir, code


def _run_levels(opts: RunOptions, stack: contextlib.ExitStack) -> tuple[Run, Path, int, PinnedFolder | None]:
    """The levels of one run; the draft's pinned copy lives as long as ``stack``."""
    from qualify.run.runner import claim_run_dir, finish_run, new_run, run_suites
    from qualify.serving.client import check_endpoint
    from qualify.serving.local_servers import LocalServing

    # A malformed URL is the caller's mistake: refused before any input is fetched or level run.
    check_endpoint(opts.endpoint)
    check_endpoint(opts.reference_endpoint, "--reference-endpoint")
    check_endpoint(opts.source_endpoint, "--source-endpoint")
    for flag, log in (("--server-log", opts.server_log), ("--source-server-log", opts.source_server_log)):
        if log is not None and not log.is_file():
            raise UsageError(f"{flag} {log}: no such file (the log of the server given by endpoint)")
    profile = opts.profile
    from qualify.checkpoint.hub import run_endpoint

    # Which hub this run's proofs ask (a malformed HF_ENDPOINT is refused here): a revision the report calls
    # verified by the hub's metadata is only as good as the hub that answered.
    hub_endpoint = run_endpoint()
    target_proof = None
    if opts.target_snapshot is not None:
        # A snapshot that is not the pinned target is refused before any level runs, not when the load level starts.
        from qualify.runtime.plan import check_target_snapshot

        if profile.target is None or profile.target.revision is None:
            raise UsageError(f"--target-snapshot: profile {profile.name} pins no target revision ([target].revision) "
                             "for the snapshot to be at")
        check_target_snapshot(opts.target_snapshot, profile.target.repo or "", profile.target.revision)
        target_proof = prove_target_snapshot(opts.target_snapshot, profile)
    if opts.target is not None and profile.serves_from_runtime:
        # Its runtime containers mount [local_server].target where MODEL_REVISION names it: another folder
        # would be served under the pinned revision's name.
        raise UsageError(f"--target is for local vLLM servers; profile {profile.name} serves from its runtime "
                         "containers, which mount [local_server].target at the pinned $.runtime.env.MODEL_REVISION")
    # A local folder is pinned before anything reads it; a hub download once it is in the cache.
    pinned = None
    if opts.checkpoint is not None and opts.checkpoint.is_dir():
        pinned = stack.enter_context(pinned_copy(opts.checkpoint))
    draft = resolve_checkpoint(opts, pinned)
    if pinned is None and draft.path is not None:
        pinned = stack.enter_context(pinned_copy(draft.path))
        verify_fetched(draft, pinned, opts.hf_cache)
    source = resolve_source(opts)
    run = new_run(profile, draft.path, source.path, opts.levels, command=opts.command)
    run.environment[HUB_ENDPOINT_KEY] = hub_endpoint
    if target_proof is not None:
        run.environment[TARGET_IDENTITY_KEY] = target_proof.to_dict()
    run.checkpoint.update(draft.record())
    if pinned is not None:
        record_pinned(run, pinned)
    run.source.update(source.record())
    run_dir = claim_run_dir(opts.report_dir, run)
    run.errors.extend(draft.errors + source.errors)
    if run.errors:
        # Without the files there is nothing to check: say so in a report rather than fail every check.
        for lvl in run.levels:
            lvl.reason = "not run: the inputs could not be obtained (see errors)"
        finish_run(run, run_dir)
        return run, run_dir, 1, pinned

    local: LocalServing | None = None
    if (profile.local_server is not None and not profile.serves_from_runtime and opts.endpoint is None
            and any(lv in SERVING_LEVELS for lv in opts.levels)):
        # Started by the first serving check that needs it: none when an earlier level failed. A missing
        # vLLM venv or model folder is then reported by every serving check. (A profile that serves from its
        # runtime starts its servers with the load level's container: qualify/run/fixtures/runtime.py.)
        local = LocalServing(profile, run_dir, target=opts.target,
                             checkpoint=pinned.copy if pinned is not None else draft.path, levels=opts.levels)

    def before_finish(r: Run) -> None:
        if local is not None:
            local.stop()
            if local.used:
                r.environment["local_server"] = local.summary()

    try:
        # pytest writes JUnit into the run folder; deliver_junit copies it where it was asked for once the
        # report is written, so a path that cannot be written never costs the report.
        code = run_suites(run, run_context(opts, run_dir, draft, source), report_dir=run_dir,
                          junit_xml=run_dir / JUNIT_NAME if opts.junit_xml else None, local_serving=local,
                          before_finish=before_finish, pinned=pinned)
    finally:
        if local is not None:
            with contextlib.suppress(Exception):
                local.stop()
    if run.finished_at is None:  # the suites never reached their end (e.g. pytest refused its arguments)
        run.errors.append("the qualification suites did not run to their end")
        finish_run(run, run_dir)
    return run, run_dir, code, pinned


def deliver_junit(run_dir: Path, dest: Path) -> None:
    """Copy the run folder's JUnit XML to ``dest`` atomically: the whole file there, or none at all.

    Raises:
        HarnessError: naming ``dest`` and why it cannot be written (a full disk, a folder that cannot
            be created, a path that is a directory), or saying that pytest wrote no XML.
    """
    from qualify.util.atomic import atomic_write_bytes

    src = Path(run_dir) / JUNIT_NAME
    try:
        data = src.read_bytes()
    except OSError as exc:
        raise HarnessError(f"{src}: the suites wrote no JUnit XML ({exc.strerror or exc})") from None
    try:
        atomic_write_bytes(Path(dest), data)
    except HarnessError as exc:
        raise HarnessError(f"--junit-xml {exc}; the report was written, and its JUnit XML is {src}") from None


__all__ = ["JUNIT_NAME", "Resolved", "RunOptions", "deliver_junit", "resolve_checkpoint", "resolve_source",
           "run_qualification"]
