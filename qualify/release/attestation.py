"""Signed qualification attestations: an in-toto Statement v1 in a DSSE envelope.

The job that ran the checks signs a statement about exactly which bytes it judged;
the release gate verifies the signature before it trusts a word of it.

- **Statement** (:func:`build_statement`, pure): ``subject`` is every checkpoint file the
  report lists, as in-toto ResourceDescriptors (name = the path relative to the checkpoint,
  digest = its sha256). The predicate is the in-toto test-result predicate
  (``https://in-toto.io/attestation/test-result/v0.1``): ``result`` is ``PASSED`` exactly
  when the report's verdict is "qualified", ``passedTests`` the ids of the checks that
  passed, ``failedTests`` the ids of every other check that ran (failed, error, skipped or
  not run: none of them is a pass). ``configuration`` holds one ResourceDescriptor per
  condition of the run, each under a fixed ``name``: ``qualify`` (the harness by its commit, its
  version, ``treeClean`` and, when the code that ran was not the commit's, ``treeProblems``
  naming each file), ``report.json`` (the report's sha256, run id, verdict, and each level's ``name``,
  ``required`` and ``status``, with ``standIn: true`` for a level the profile ran on a
  stand-in and ``logsGivenBy`` for one resting on a server log the caller gave: neither
  counts for a release), ``profile`` (its sha256 and name), ``draft`` (its revision and
  whether the run verified that revision against the bytes), ``source``, ``target`` (a ``gitCommit``
  digest only where the launch held the runtime to that revision, ``revisionEnforced`` and how; else
  no digest, ``revisionEnforced: false``, the revision as ``claimedRevision`` and the reason),
  ``runtime-image`` (the image ID the runtime ran), ``prompts/<name>`` (each prompt set's
  sha256) and, with ``--sign-model``,
  ``model-signature`` (the OpenSSF model-signing bundle and its root digest).
- **Envelope**: DSSE, payload type ``application/vnd.in-toto+json``, signed and verified by
  securesystemslib (:class:`~securesystemslib.dsse.Envelope`, ``CryptoSigner``,
  ``SSlibKey``) with an EC P-256 key (ECDSA over SHA-256). The signature's ``keyid`` is
  securesystemslib's default for the key (:func:`~qualify.release.signing.key_fingerprint`: the hex
  sha256 of its canonical JSON), the one identifier the run, the card and the gate print. The keys and
  the signing itself, the model signature's too, are :mod:`qualify.release.signing`'s.
- **File**: ``attestation.intoto.jsonl`` beside report.json, one envelope on one line (the
  in-toto/SLSA convention for a bundle of envelopes; the gate accepts exactly one).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qualify.checkpoint.hub import DEFAULT_ENDPOINT
from qualify.errors import AttestationError, HarnessError, JsonProblem
from qualify.release.signing import PAYLOAD_TYPE, SigningKey, sign_model, sign_statement, sslib_key
from qualify.report.target import target_revision_record
from qualify.util.atomic import atomic_write_text
from qualify.util.jsonio import located, parse_strict

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
ATTESTATION_NAME = "attestation.intoto.jsonl"
#: The OpenSSF model-signing bundle written beside the report with --sign-model.
MODEL_SIGNATURE_NAME = "model.sig"

#: ``configuration`` descriptor names (see the module docstring).
HARNESS = "qualify"
REPORT = "report.json"
PROFILE = "profile"
DRAFT = "draft"
SOURCE = "source"
TARGET = "target"
RUNTIME_IMAGE = "runtime-image"
PROMPTS_PREFIX = "prompts/"
#: The name (after PROMPTS_PREFIX) the chat template's digest is attested under.
CHAT_TEMPLATE = "chat-template"
MODEL_SIGNATURE = "model-signature"

#: How a run may have verified the draft's revision against the bytes (pipeline.Resolved).
VERIFIED_BY_CONTENT = "content of the local folder"
VERIFIED_BY_HUB = "hub download at that commit"
VERIFIED_BY_HUB_METADATA = "hub metadata at that commit"
#: The ways of verifying a draft revision that rest on what a hub answered (and so on which hub answered).
VERIFIED_BY_A_HUB = (VERIFIED_BY_HUB, VERIFIED_BY_HUB_METADATA)
#: The annotation, on the draft, source and target descriptors, naming the hub endpoint the run consulted
#: (normalized: no credentials); their URIs name it too. None: the run recorded none.
HUB_ENDPOINT = "hubEndpoint"
#: The report's ``environment`` key of that endpoint (run/pipeline.py writes it).
HUB_ENDPOINT_KEY = "hub_endpoint"


# ---------------------------------------------------------------- the statement (pure)

def _descriptor(name: str, *, digest: Mapping[str, Any] | None = None, uri: str | None = None,
                annotations: dict[str, Any] | None = None, media_type: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    if uri:
        out["uri"] = uri
    known = {k: v for k, v in (digest or {}).items() if v}
    if known:
        out["digest"] = known
    if media_type:
        out["mediaType"] = media_type
    if annotations:
        out["annotations"] = annotations
    return out


def _source_descriptor(source: dict[str, Any], hub: str | None) -> dict[str, Any]:
    """The source as the run proved it: a repository and commit only when ``source.identity`` verified them."""
    identity = source.get("identity")
    if not isinstance(identity, dict):
        # No check read the source (or the report predates the identity record): the pin is the profile's.
        return _descriptor(SOURCE, uri=_hub_uri(source.get("repo"), hub), digest=_git_commit(source.get("revision")),
                           annotations={"identity": "not read", **_hub_note(hub)})
    if identity.get("status") == "verified":
        return _descriptor(SOURCE, uri=_hub_uri(identity.get("repo"), hub),
                           digest=_git_commit(identity.get("revision")),
                           annotations={"identity": "verified", "method": identity.get("method"), **_hub_note(hub)})
    # Unproven: the repository it was meant to be, with no commit digest (nothing shows these are its bytes).
    return _descriptor(SOURCE, uri=_hub_uri(identity.get("claimed_repo") or source.get("repo"), hub)
                       or "urn:qualify:source",
                       annotations={"identity": identity.get("status"), "method": identity.get("method"),
                                    "claimedRevision": identity.get("claimed_revision"), **_hub_note(hub)})


def _target_descriptor(target: Mapping[str, Any], environment: Mapping[str, Any] | None,
                       hub: str | None) -> dict[str, Any]:
    """The target as the run held it: its commit as a digest only where the launch enforced that very revision
    (a launcher variable, or a pinned snapshot with the hub offline); otherwise the profile's revision is a claim,
    annotated with the reason it was not enforced, and no digest says it was pinned."""
    record = target_revision_record(environment)
    uri = _hub_uri(target.get("repo"), hub) or "urn:qualify:target"
    claimed = target.get("revision")
    if record["enforced"] and record["revision"] == claimed:
        notes: dict[str, Any] = {"revisionEnforced": True, "method": record["method"], **_hub_note(hub)}
        if record.get("variable"):
            notes["variable"] = record["variable"]
        snapshot = record.get("snapshot")
        if isinstance(snapshot, Mapping):
            notes["snapshotRefs"] = list(snapshot.get("refs") or [])
        identity = record.get("identity")
        if isinstance(identity, Mapping):
            # How the snapshot's files were proven to be the revision, and which hub's metadata proved it.
            notes.update(identity=identity.get("method"), identityHubEndpoint=identity.get("hub_endpoint"))
        return _descriptor(TARGET, uri=uri, digest=_git_commit(claimed), annotations=notes)
    reason = record["reason"] if not record["enforced"] else (
        f"the launch enforced revision {record['revision']}, not the profile's {claimed}")
    return _descriptor(TARGET, uri=uri, annotations={"revisionEnforced": False, "claimedRevision": claimed,
                                                     "reason": reason, **_hub_note(hub)})


def _harness_descriptor(version: Any, source: Any) -> dict[str, Any]:
    """The harness by the commit of its code: ``pkg:generic/qualify@<commit>`` (a purl, an absolute URI), its
    ``gitCommit`` digest, its version, and whether its code was as committed when it ran."""
    source = source if isinstance(source, dict) else {}
    commit = source.get("commit") if isinstance(source.get("commit"), str) else None
    notes: dict[str, Any] = {"version": version, "treeClean": source.get("clean")}
    if source.get("problems"):
        # The files that made the code that ran differ from the commit's, each with why (uncommitted, changed,
        # stale bytecode): what a release engineer fixes before running again.
        found = source["problems"]
        notes["treeProblems"] = [str(p) for p in found] if isinstance(found, list) else [str(found)]
    return _descriptor(HARNESS, uri=f"pkg:generic/qualify@{commit or version}", digest=_git_commit(commit),
                       annotations=notes)


def _hub_uri(repo: str | None, hub: str | None) -> str | None:
    return f"{hub or DEFAULT_ENDPOINT}/{repo}" if repo else None


def _hub_note(hub: str | None) -> dict[str, str]:
    # Left out, not null, when the run recorded no endpoint: the gate reads either as "no hub named".
    return {HUB_ENDPOINT: hub} if hub else {}


def run_hub_endpoint(report: Mapping[str, Any]) -> str | None:
    """The hub endpoint the run consulted (``environment.hub_endpoint``), or None when it recorded none."""
    found = (report.get("environment") or {}).get(HUB_ENDPOINT_KEY)
    return found if isinstance(found, str) and found else None


def _git_commit(revision: str | None) -> dict[str, str]:
    return {"gitCommit": revision} if revision else {}


def _prompt_sets(report: Mapping[str, Any]) -> dict[str, str]:
    """name -> sha256 of every prompt set a check recorded (acceptance, losslessness, throughput, paired),
    and of the chat template the paired level read (``chat-template``), when it could read one."""
    out: dict[str, str] = {}
    for lvl in report.get("levels", []):
        for check in lvl.get("checks", []):
            measured = (check.get("evidence") or {}).get("measured") or {}
            sets = measured.get("prompt_sets")
            idents = [measured.get("prompts"), *(sets if isinstance(sets, list) else [])]
            for ident in idents:
                if isinstance(ident, dict) and ident.get("name") and ident.get("sha256"):
                    out[str(ident["name"])] = str(ident["sha256"])
            template = measured.get("chat_template")
            if isinstance(template, dict) and isinstance(template.get("sha256"), str):
                out[CHAT_TEMPLATE] = template["sha256"]
    return out


def _image_digest(report: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    runtime = (report.get("environment") or {}).get("runtime") or {}
    image = runtime.get("image") or {}
    image_id = str(image.get("id") or "")
    digest = {"sha256": image_id.removeprefix("sha256:")} if image_id.startswith("sha256:") else {}
    notes: dict[str, Any] = {"reproducible": runtime.get("reproducible")}
    if image.get("ref"):
        notes["ref"] = image["ref"]
    if image.get("repo_digests"):
        notes["repoDigests"] = list(image["repo_digests"])
    return digest, notes


def logs_given_by(measured: Mapping[str, Any]) -> list[str]:
    """The flags that handed in a server log (``--server-log``, ``--source-server-log``) a check's evidence rests
    on, as its measured values record them (``logs_given_by``, at the top or in ``engine_settings``): a log taken
    on the caller's word, not read from a server the run started."""
    found: list[str] = []
    for holder in (measured, measured.get("engine_settings")):
        if isinstance(holder, Mapping):
            found += as_flags(holder.get("logs_given_by"))
    return list(dict.fromkeys(found))


def as_flags(value: Any) -> list[str]:
    """A recorded list of flags as strings; any other value that is set counts as one (fail closed)."""
    if isinstance(value, list):
        return [str(v) for v in value]
    return [str(value)] if value else []


def _level_annotation(level: Mapping[str, Any], stand_in: list[str]) -> dict[str, Any]:
    """One level as the report.json descriptor records it: ``standIn`` when the profile ran it on a stand-in,
    ``logsGivenBy`` when a check of it rests on a server log the caller gave; neither may count for a release."""
    out = {"name": level["name"], "required": level.get("required", True), "status": level.get("status")}
    if level["name"] in stand_in:
        out["standIn"] = True
    given = [flag for check in level.get("checks", [])
             for flag in logs_given_by((check.get("evidence") or {}).get("measured") or {})]
    if given:
        out["logsGivenBy"] = list(dict.fromkeys(given))
    return out


def build_statement(report: Mapping[str, Any], report_sha256: str,
                    model_signature: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The in-toto Statement for one run, from its report as written (``Run.to_dict()``) and its sha256.

    Args:
        report: report.json's content.
        report_sha256: the hex sha256 of report.json's bytes on disk.
        model_signature: ``{"file", "sha256", "root_digest"}`` of the model-signing bundle, if one was made.
    """
    checkpoint = report.get("checkpoint") or {}
    subjects = [{"name": f["path"], "digest": {"sha256": f["sha256"]}}
                for f in sorted(checkpoint.get("files") or [], key=lambda f: f["path"]) if f.get("sha256")]
    passed: list[str] = []
    failed: list[str] = []
    for lvl in report.get("levels", []):
        for check in lvl.get("checks", []):
            (passed if check.get("status") == "passed" else failed).append(check["id"])

    profile = report.get("profile") or {}
    conditions = profile.get("conditions") or {}
    stand_in = [str(x) for x in conditions.get("stand_in_levels") or []]
    source = report.get("source") or {}
    target = conditions.get("target") or {}
    harness = report.get("harness") or {}
    image_digest, image_notes = _image_digest(report)
    hub = run_hub_endpoint(report)
    unhashed = sorted(f["path"] for f in checkpoint.get("files") or [] if not f.get("sha256"))
    config = [
        _harness_descriptor(harness.get("version"), (report.get("environment") or {}).get("harness_source")),
        _descriptor(REPORT, digest={"sha256": report_sha256}, media_type="application/json",
                    annotations={"runId": report.get("run_id"), "verdict": report.get("verdict"),
                                 "interrupted": report.get("interrupted"), "errors": len(report.get("errors") or []),
                                 "levels": [_level_annotation(lv, stand_in) for lv in report.get("levels", [])]}),
        _descriptor(PROFILE, digest={"sha256": profile.get("sha256")}, annotations={"name": profile.get("name")}),
        _descriptor(DRAFT, uri=_hub_uri(checkpoint.get("repo"), hub), annotations={
            "revision": checkpoint.get("revision"), "revisionSource": checkpoint.get("revision_source"),
            "revisionVerifiedBy": checkpoint.get("revision_verified_by"),
            "revisionVerification": checkpoint.get("revision_verification"), "obtained": checkpoint.get("obtained"),
            "unhashedFiles": unhashed, **_hub_note(hub)}),
        _source_descriptor(source, hub),
        _target_descriptor(target, report.get("environment"), hub),
        _descriptor(RUNTIME_IMAGE, digest=image_digest, annotations=image_notes),
    ]
    config += [_descriptor(PROMPTS_PREFIX + name, digest={"sha256": sha}, media_type="application/json")
               for name, sha in sorted(_prompt_sets(report).items())]
    if model_signature is not None:
        # An absolute URI naming the evidence file; it lies beside the attestation as MODEL_SIGNATURE_NAME.
        config.append(_descriptor(MODEL_SIGNATURE, uri=f"urn:qualify:evidence:{model_signature['file']}",
                                  digest={"sha256": model_signature["sha256"]},
                                  annotations={"format": "OpenSSF model-signing v1.0",
                                               "rootDigest": {"sha256": model_signature["root_digest"]}}))
    # A ResourceDescriptor needs a uri or a digest: a condition the run did not meet (no runtime
    # launched, no target) is left out rather than described by nothing.
    config = [d for d in config if "uri" in d or "digest" in d]
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects,
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "result": "PASSED" if report.get("verdict") == "qualified" else "FAILED",
            "configuration": config,
            "passedTests": passed,
            "warnedTests": [],
            "failedTests": failed,
        },
    }


def write_attestation(report_dir: Path, key: SigningKey, *, checkpoint: Path | None = None,
                      sign_checkpoint: bool = False) -> Path:
    """Sign report_dir/report.json's run and write report_dir/attestation.intoto.jsonl atomically.

    The statement is built from report.json's bytes as they lie on disk, so its sha256 is that
    of the file a reader gets.

    Raises:
        HarnessError: report.json cannot be read, the model cannot be signed, or the file cannot be written.
    """
    report_path = Path(report_dir) / REPORT
    try:
        raw = report_path.read_bytes()
        report = parse_strict(raw.decode("utf-8"), 0)
    except (OSError, ValueError, JsonProblem) as exc:
        raise HarnessError(f"{report_path}: cannot read the report to sign it: {exc}") from None
    model_sig = None
    if sign_checkpoint:
        if checkpoint is None:
            raise HarnessError("--sign-model: the run has no local checkpoint folder to sign")
        model_sig = sign_model(Path(checkpoint), key, Path(report_dir) / MODEL_SIGNATURE_NAME)
    statement = build_statement(report, hashlib.sha256(raw).hexdigest(), model_sig)
    envelope = sign_statement(statement, key)
    out = Path(report_dir) / ATTESTATION_NAME
    atomic_write_text(out, json.dumps(envelope, sort_keys=True, separators=(",", ":")) + "\n")
    return out


# ---------------------------------------------------------------- verifying

def read_envelope(path: Path) -> dict[str, Any]:
    """The one DSSE envelope of an ``.intoto.jsonl`` (or ``.json``) file, unverified.

    Raises:
        AttestationError: unreadable, not JSON, more than one envelope, or not a DSSE envelope.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AttestationError(f"{path}: cannot read the attestation: {exc}") from None
    stripped = text.strip()
    lines = [ln for ln in stripped.splitlines() if ln.strip()]
    if not lines:
        raise AttestationError(f"{path}: the attestation file is empty")
    if len(lines) > 1:
        raise AttestationError(f"{path}: holds {len(lines)} lines; exactly one DSSE envelope is expected")
    try:
        # The one strict reader: a duplicate key is refused, never resolved by the last one winning.
        data = parse_strict(stripped, text.index(stripped[0]))
    except JsonProblem as exc:
        raise AttestationError(f"{path}: not a readable DSSE envelope: {exc}{located(exc)}") from None
    if not isinstance(data, dict) or not {"payload", "payloadType", "signatures"} <= set(data):
        raise AttestationError(f"{path}: not a DSSE envelope (payload, payloadType and signatures are required)")
    return data


def verify_envelope(envelope: Mapping[str, Any], public_key: Any) -> dict[str, Any]:
    """The statement of a DSSE envelope whose signature verifies with ``public_key``; nothing else is trusted.

    Raises:
        AttestationError: the payload type is not in-toto, the envelope is malformed, it is signed
            by another key, its signature does not verify (altered after signing), or the payload is
            not an in-toto Statement v1 with the test-result predicate.
    """
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError

    if envelope.get("payloadType") != PAYLOAD_TYPE:
        raise AttestationError(f"the envelope's payload type is {envelope.get('payloadType')!r}, not {PAYLOAD_TYPE}")
    try:
        parsed = Envelope.from_dict(json.loads(json.dumps(envelope)))  # from_dict edits its argument
    except Exception as exc:  # securesystemslib raises several kinds for a malformed envelope
        raise AttestationError(f"the envelope is malformed: {type(exc).__name__}: {exc}") from None
    if not parsed.signatures:
        raise AttestationError("the envelope carries no signature")
    key = sslib_key(public_key)
    try:
        parsed.verify([key], 1)
    except VerificationError:
        keyids = sorted(parsed.signatures)
        if key.keyid not in keyids:
            raise AttestationError(f"signed by another key ({', '.join(keyids)}), not by the verify key "
                                   f"({key.keyid})") from None
        raise AttestationError(f"the signature does not verify with the verify key ({key.keyid}): the attestation "
                               "was altered after it was signed, or forged") from None
    try:
        statement = parse_strict(parsed.payload.decode("utf-8"), 0)
    except (UnicodeDecodeError, JsonProblem) as exc:
        raise AttestationError(f"the signed payload is not a readable JSON statement: {exc}") from None
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        raise AttestationError(f"the signed payload is not an in-toto Statement v1 ({STATEMENT_TYPE})")
    if statement.get("predicateType") != PREDICATE_TYPE:
        raise AttestationError(f"the statement's predicate is {statement.get('predicateType')!r}, not {PREDICATE_TYPE}")
    return statement


def file_sha256(path: Path) -> str:
    """Hex sha256 of a small file (a report, an attestation) read whole."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ---------------------------------------------------------------- reading a verified statement (pure)

@dataclass(frozen=True)
class Attested:
    """What a verified statement says, in the gate's terms."""

    result: str
    subjects: dict[str, str]  # path -> sha256
    passed: tuple[str, ...]
    failed: tuple[str, ...]
    config: dict[str, dict[str, Any]]  # descriptor name -> descriptor
    problems: tuple[str, ...] = ()  # shapes the statement should not have

    def annotation(self, name: str, key: str) -> Any:
        return ((self.config.get(name) or {}).get("annotations") or {}).get(key)

    def digest(self, name: str, algorithm: str = "sha256") -> str | None:
        return ((self.config.get(name) or {}).get("digest") or {}).get(algorithm)

    def _level_records(self, level: str) -> list[dict[str, Any]]:
        """The report.json descriptor's records of ``level`` (its ``levels`` annotation)."""
        records = self.annotation(REPORT, "levels")
        if not isinstance(records, list):
            return []
        return [r for r in records if isinstance(r, dict) and r.get("name") == level]

    def stand_in(self, level: str) -> bool:
        """Whether the run recorded ``level`` as run on a stand-in (``standIn``): plumbing, never qualification."""
        return any(bool(r.get("standIn")) for r in self._level_records(level))

    def logs_given_by(self, level: str) -> list[str]:
        """The flags that handed in a server log ``level`` rests on (``logsGivenBy``), if any."""
        return list(dict.fromkeys(flag for r in self._level_records(level) for flag in as_flags(r.get("logsGivenBy"))))

    @property
    def target_enforced(self) -> bool:
        """Whether the statement says the runtime was held to the target's revision (absent: it was not)."""
        return self.annotation(TARGET, "revisionEnforced") is True and self.digest(TARGET, "gitCommit") is not None

    @property
    def harness_version(self) -> str | None:
        return self.annotation(HARNESS, "version")

    @property
    def harness_commit(self) -> str | None:
        """The commit of the harness code that ran (None: not run from a git checkout)."""
        return self.digest(HARNESS, "gitCommit")

    @property
    def profile_name(self) -> str | None:
        return self.annotation(PROFILE, "name")


def read_statement(statement: Mapping[str, Any]) -> Attested:
    """The verified statement as :class:`Attested`; what does not fit the format is listed in ``problems``."""
    problems: list[str] = []
    subjects: dict[str, str] = {}
    for i, sub in enumerate(statement.get("subject") or []):
        name = sub.get("name") if isinstance(sub, dict) else None
        sha = (sub.get("digest") or {}).get("sha256") if isinstance(sub, dict) else None
        if not isinstance(name, str) or not isinstance(sha, str):
            problems.append(f"subject {i} has no name or no sha256 digest")
        elif name in subjects:
            problems.append(f"subject {name!r} is listed twice")
        else:
            subjects[name] = sha
    pred = statement.get("predicate") or {}

    def ids(key: str) -> tuple[str, ...]:
        value = pred.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            problems.append(f"predicate.{key} is not a list of check ids")
            return ()
        return tuple(value)

    config: dict[str, dict[str, Any]] = {}
    for desc in pred.get("configuration") or []:
        if isinstance(desc, dict) and isinstance(desc.get("name"), str):
            if desc["name"] in config:
                problems.append(f"configuration {desc['name']!r} is listed twice")
            config[desc["name"]] = desc
    return Attested(result=str(pred.get("result")), subjects=subjects, passed=ids("passedTests"),
                    failed=ids("failedTests") + ids("warnedTests"), config=config, problems=tuple(problems))
