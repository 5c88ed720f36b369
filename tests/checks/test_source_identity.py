"""Tests for qualify.checks.source_identity: each proof of the source's identity (profile digests, the hub,
a hub cache snapshot compared with either), a snapshot that proves nothing by itself, each refusal, and the
words of each message. The pure decisions it is built on are tested in tests/checkpoint/test_identity.py."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.corpus import PINNED_SOURCE, SNAPSHOT_PARENT, SOURCE_REPO, make_snapshot
from qualify.checkpoint import identity as ident
from qualify.checkpoint.checksums import folder_digests, folder_revision
from qualify.checks.source_identity import HOW_TO_PROVE, check_source_identity
from qualify.core import Status
from qualify.errors import CheckpointError
from qualify.release.gate import source_refusals
from qualify.report.model import Check, LevelResult, Run
from tests.checkpoint.test_identity import OTHER
from tests.hub_standin import StandinHub, StandinRepo, git_blob_sha1, go_online

FIXTURE_SOURCE = Path(__file__).resolve().parents[2] / "fixtures" / "dflash2-tiny" / "source"


def offline_reason() -> str:
    """Why the hub is not consulted now: its words depend on whether huggingface_hub was imported offline."""
    from qualify.checkpoint.hub import hub_access

    return hub_access().reason


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    # No test here reaches a real hub; the ones that need a hub start the stand-in and go online.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture
def online(monkeypatch: pytest.MonkeyPatch) -> None:
    go_online(monkeypatch)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    dest = tmp_path / "source"
    shutil.copytree(FIXTURE_SOURCE, dest)
    return dest


NO_PINS = ident.SourcePins()


def verify(root: Path, pins: ident.SourcePins = NO_PINS, **kwargs) -> object:
    kwargs.setdefault("repo", SOURCE_REPO)
    kwargs.setdefault("revision", PINNED_SOURCE)
    return check_source_identity(root, pins=pins, **kwargs)


def messages(ev) -> list[str]:
    return [str(f) for f in ev.findings]


# ----------------------------------------------------------------------------- profile digests


def test_the_fixture_source_is_proven_by_its_pinned_content_revision(source: Path) -> None:
    ev = verify(source, ident.SourcePins(content_revision=PINNED_SOURCE))
    assert ev.ok, ev.failure_text()
    assert ev.measured["status"] == "verified" and ev.measured["method"] == ident.PROFILE_DIGESTS
    assert (ev.measured["repo"], ev.measured["revision"]) == (SOURCE_REPO, PINNED_SOURCE)
    assert ev.measured["content_revision"] == PINNED_SOURCE and "(verified by profile digests)" in ev.summary


def test_a_changed_source_is_refuted_by_the_pins_and_trust_does_not_help(source: Path) -> None:
    (source / "config.json").write_text((source / "config.json").read_text().replace("2047", "2046"))
    for trust in (False, True):
        ev = verify(source, ident.SourcePins(content_revision=PINNED_SOURCE), trust=trust)
        assert not ev.ok and ev.measured["status"] == "not verified" and ev.measured["repo"] is None
        assert ev.summary.startswith("source identity not verified: the profile digests refute")
        assert f"the profile pins {PINNED_SOURCE}" in messages(ev)[0]


def test_download_metadata_does_not_change_the_content_revision(source: Path) -> None:
    # `hf download --local-dir` leaves .cache/huggingface/ beside the files; a release leaves it out too.
    meta = source / ".cache" / "huggingface" / "download"
    meta.mkdir(parents=True)
    (meta / "model.safetensors.metadata").write_text(f"{PINNED_SOURCE}\n{'a' * 64}\n0\n")
    assert verify(source, ident.SourcePins(content_revision=PINNED_SOURCE)).ok
    (source / ".cache" / "other").write_text("x")  # anything else in the folder is part of it
    assert not verify(source, ident.SourcePins(content_revision=PINNED_SOURCE)).ok


def test_a_source_folder_holding_a_fifo_cannot_be_hashed(source: Path) -> None:
    os.mkfifo(source / "pipe")
    with pytest.raises(CheckpointError, match="not a regular file"):
        verify(source, ident.SourcePins(content_revision=PINNED_SOURCE))


def test_per_file_pins(source: Path) -> None:
    digests = folder_digests(source)
    assert verify(source, ident.SourcePins(sha256=digests)).ok
    (source / "tokenizer.json").write_text("{}")
    ev = verify(source, ident.SourcePins(sha256=digests))
    assert messages(ev) == ["tokenizer.json: in the source folder but not pinned by the profile: its content is "
                            "unverified"]


# ----------------------------------------------------------------------------- nothing to prove it


def test_no_proof_is_not_verified_and_says_how_to_prove_it(source: Path) -> None:
    ev = verify(source)
    assert not ev.ok and ev.measured["status"] == "not verified"
    text = messages(ev)[0]
    assert text == ("source identity not verified: the profile pins no digests for it, it is not a hub cache "
                    "snapshot, and no file was compared with the hub's metadata, which was not consulted "
                    f"({offline_reason()}); {HOW_TO_PROVE}")
    assert ev.measured["hub"]["consulted"] is False and ev.measured["hub_consulted"] is False


def test_trust_lets_an_unproven_source_through_and_says_so(source: Path) -> None:
    ev = verify(source, trust=True)
    assert ev.ok
    assert ev.summary.startswith("source identity not verified: trusted on --trust-local-source")
    assert ev.measured["status"] == "trusted" and ev.measured["repo"] is None
    assert ev.measured["claimed_repo"] == SOURCE_REPO


def test_an_empty_folder_is_never_proven(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    for trust in (False, True):
        ev = verify(tmp_path / "empty", ident.SourcePins(content_revision=PINNED_SOURCE), trust=trust)
        assert messages(ev) == ["the source folder holds no files"] and ev.measured["status"] == "not verified"


# ----------------------------------------------------------------------------- hub cache snapshots


def snapshot(tmp_path: Path, commit: str = PINNED_SOURCE, **kwargs) -> Path:
    root = tmp_path / SNAPSHOT_PARENT / commit
    make_snapshot(FIXTURE_SOURCE, root, **kwargs)
    return root


def test_a_hub_cache_snapshot_alone_proves_nothing(tmp_path: Path) -> None:
    # The genuine bytes, laid out exactly as huggingface_hub lays them out: still only names.
    ev = verify(snapshot(tmp_path))
    assert not ev.ok and ev.measured["status"] == "not verified" and ev.measured["method"] is None
    assert ev.measured["repo"] is None and ev.measured["files_linked"] == 2
    assert ev.measured["snapshot_commit"] == PINNED_SOURCE
    (text,) = messages(ev)
    assert text == (
        "source identity not verified: the hub cache snapshot's folder names say "
        f"models--qualify-fixtures--dflash2-tiny at commit {PINNED_SOURCE}, and every file links into its "
        "repository's blobs/ under its own content's digest, but its folder names and its blobs' names are chosen by "
        "whoever wrote the cache and prove nothing about which commit the files are; the profile pins no digests for "
        f"the source, and no file was compared with the hub's metadata, which was not consulted ({offline_reason()}); "
        f"{HOW_TO_PROVE}")
    assert "a hub cache snapshot is no proof by itself" in text


def hand_built(tmp_path: Path, flip: str = "model.safetensors") -> Path:
    """Other bytes under the pinned commit's name, each blob honestly named by its own content's digest."""
    other = tmp_path / "other-model"
    shutil.copytree(FIXTURE_SOURCE, other)
    raw = bytearray((other / flip).read_bytes())
    raw[-1] ^= 1
    (other / flip).write_bytes(bytes(raw))
    root = tmp_path / "built" / SNAPSHOT_PARENT / PINNED_SOURCE
    make_snapshot(other, root)
    return root


def test_a_hand_built_snapshot_under_the_pinned_commit_is_not_verified(tmp_path: Path) -> None:
    root = hand_built(tmp_path)
    refused = verify(root)
    assert not refused.ok and refused.measured["status"] == "not verified"
    assert messages(refused)[0].startswith("source identity not verified: the hub cache snapshot's folder names say")
    assert "prove nothing about which commit the files are" in messages(refused)[0]
    # Trusted on request, it is recorded as trusted: never verified, and the gate refuses it.
    ev = verify(root, trust=True)
    assert ev.ok and ev.measured["status"] == "trusted" and ev.measured["method"] == ident.TRUSTED
    assert ev.measured["repo"] is None and ev.measured["revision"] is None
    assert ev.summary.startswith("source identity not verified: trusted on --trust-local-source (the hub cache "
                                 "snapshot's folder names say")
    assert ev.measured["reason"] in ev.summary and ev.measured["hub_consulted"] is False
    for record, status, allowed in ((refused, Status.FAILED, False), (ev, Status.PASSED, True)):
        check = Check("structure.source_identity", "structure", "source_identity", status, record.summary, record)
        run = Run(run_id="r", harness_version="0", started_at="2026-01-01T00:00:00Z",
                  source={"identity": {k: record.measured[k] for k in ident.IDENTITY_KEYS}},
                  levels=[LevelResult("structure", checks=[check])])
        assert source_refusals(run, allow_untrusted=False), record.measured["status"]
        assert (source_refusals(run, allow_untrusted=True) == []) is allowed


@pytest.mark.slow
def test_cli_a_hand_built_snapshot_is_not_verified_and_the_gate_refuses_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`qualify check` of a checkpoint converted from other bytes laid out as a snapshot of the pinned commit."""
    from fixtures.corpus import CASES, build, profile_for
    from qualify.cli import main

    case = next(c for c in CASES if c.name == "snapshot_hand_built_pinned_commit")
    ckpt, src = build(case, tmp_path / "case")
    profile = profile_for(case, tmp_path / "case")
    base = ["check", str(ckpt), "--source", str(src), "--profile", str(profile), "--levels", "structure"]
    assert main([*base, "--report-dir", str(tmp_path / "no")]) == 1
    assert main([*base, "--trust-local-source", "--report-dir", str(tmp_path / "r")]) == 0
    (report,) = (tmp_path / "r").glob("*/report.json")
    data = json.loads(report.read_text())
    assert data["source"]["identity"]["status"] == "trusted" and data["source"]["identity"]["repo"] is None
    check = next(c for lvl in data["levels"] for c in lvl["checks"] if c["id"] == "structure.source_identity")
    assert check["evidence"]["measured"]["hub_consulted"] is False
    assert "prove nothing about which commit" in check["evidence"]["measured"]["reason"]
    refusal = "refused: the source folder was trusted on --trust-local-source without proof that it is the pinned"
    for allow, refused in (((), True), (("--allow-untrusted-source",), False)):
        capsys.readouterr()
        code = main(["gate", str(report), "--checkpoint", str(ckpt), "--require", "structure", "--allow-unsigned",
                     *allow])
        out = capsys.readouterr().out
        assert (refusal in out) is refused, out
        assert code == 1  # refused for the source, or for this profile copy's other conditions: never qualified


def test_per_file_pins_prove_a_snapshot_and_refute_a_hand_built_one(tmp_path: Path) -> None:
    pins = ident.SourcePins(sha256=folder_digests(FIXTURE_SOURCE))
    ev = verify(snapshot(tmp_path), pins)
    assert ev.ok and ev.measured["status"] == "verified" and ev.measured["method"] == ident.PROFILE_DIGESTS
    assert ev.summary.endswith("(verified by profile digests)")
    assert ev.measured["reason"] == "every file's sha256 was compared with the profile's pinned per-file sha256"
    assert ev.measured["hub_consulted"] is False
    assert ev.measured["hub"]["reason"] == "not asked: the profile pins digests for the source, and they decide"
    root = hand_built(tmp_path)
    bad = verify(root, pins, trust=True)  # a refuted identity is never trusted
    assert not bad.ok and bad.measured["status"] == "not verified"
    assert messages(bad) == [f"model.safetensors: sha256 is {folder_digests(root)['model.safetensors']}, the profile "
                             f"pins {pins.sha256['model.safetensors']}"]
    assert bad.measured["reason"].endswith(": they differ")


def test_a_snapshot_reached_through_a_link_is_judged_where_it_is(tmp_path: Path) -> None:
    link = tmp_path / "src-link"
    os.symlink(snapshot(tmp_path), link)
    assert not verify(link).ok  # the link's own folder is no snapshot: no proof


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"commit": OTHER}, [f"the snapshot is of commit '{OTHER}', not the pinned revision {PINNED_SOURCE}"]),
    ({"blob_names": {"config.json": "f" * 40}}, ["config.json: its blob is named " + "f" * 40]),
    ({"blob_names": {"model.safetensors": "0" * 64}}, ["model.safetensors: its blob is named " + "0" * 64]),
    ({"blob_names": {"config.json": "config"}}, ["config.json: its blob name 'config' is not a content digest"]),
    ({"plain": ("model.safetensors",)}, ["model.safetensors: a plain file, not a link into the repository's blobs"]),
])
def test_a_snapshot_that_does_not_prove_the_source(tmp_path: Path, kwargs: dict, words: list[str]) -> None:
    ev = verify(snapshot(tmp_path, **kwargs), trust=True)  # a refuted identity is never trusted
    assert not ev.ok and ev.measured["status"] == "not verified"
    assert ev.summary.startswith("source identity not verified: the hub cache snapshot refute")
    for w in words:
        assert any(m.startswith(w) for m in messages(ev)), (w, messages(ev))


def test_a_snapshot_of_another_repository(tmp_path: Path) -> None:
    root = tmp_path / "hub" / "models--other--repo" / "snapshots" / PINNED_SOURCE
    make_snapshot(FIXTURE_SOURCE, root)
    assert messages(verify(root)) == [
        f"the snapshot is of repository folder 'models--other--repo', the profile's source {SOURCE_REPO} is kept in "
        "'models--qualify-fixtures--dflash2-tiny'"]


def test_a_snapshot_link_out_of_its_blobs(tmp_path: Path) -> None:
    root = snapshot(tmp_path)
    (root / "config.json").unlink()
    os.symlink(FIXTURE_SOURCE / "config.json", root / "config.json")
    assert messages(verify(root))[0].startswith("config.json: links to ")
    assert "outside the repository's blobs folder" in messages(verify(root))[0]
    (root / "config.json").unlink()
    os.symlink(root.parent.parent / "blobs" / "gone", root / "config.json")
    assert messages(verify(root))[0].startswith("config.json: its link cannot be followed")


# ----------------------------------------------------------------------------- the hub


@pytest.fixture
def hub(online: None) -> Iterator[StandinHub]:
    files = {p.name: p.read_bytes() for p in FIXTURE_SOURCE.iterdir()}
    changed = {**files, "config.json": files["config.json"].replace(b"2047", b"2046")}
    repo = StandinRepo(SOURCE_REPO, {PINNED_SOURCE: files, OTHER: changed}, branches={"main": OTHER})
    with StandinHub([repo]).serving() as served:
        yield served


def test_the_hub_proves_a_plain_folder(hub: StandinHub, source: Path) -> None:
    ev = verify(source, hub_endpoint=hub.url)
    assert ev.ok, ev.failure_text()
    assert ev.measured["method"] == ident.HUB and ev.measured["hub"]["commit"] == PINNED_SOURCE
    assert f"/api/models/{SOURCE_REPO}/revision/{PINNED_SOURCE}?blobs=true" in hub.paths("GET")


def test_the_hub_refutes_another_folder(hub: StandinHub, source: Path) -> None:
    (source / "config.json").write_text((source / "config.json").read_text().replace("2047", "2046"))
    data = (source / "config.json").read_bytes()
    ev = verify(source, hub_endpoint=hub.url, trust=True)
    assert not ev.ok and ev.measured["status"] == "not verified"
    assert messages(ev) == [f"config.json: git blob sha1 is {git_blob_sha1(data)}, the hub's at {PINNED_SOURCE} is "
                            f"{git_blob_sha1((FIXTURE_SOURCE / 'config.json').read_bytes())}"]


def test_the_hub_refutes_rescaled_weights(hub: StandinHub, source: Path) -> None:
    raw = bytearray((source / "model.safetensors").read_bytes())
    raw[-1] ^= 1
    (source / "model.safetensors").write_bytes(bytes(raw))
    ev = verify(source, hub_endpoint=hub.url)
    genuine = hashlib.sha256((FIXTURE_SOURCE / "model.safetensors").read_bytes()).hexdigest()
    assert messages(ev) == [f"model.safetensors: sha256 is {hashlib.sha256(raw).hexdigest()}, the hub's LFS sha256 at "
                            f"{PINNED_SOURCE} is {genuine}"]


def test_a_revision_the_hub_does_not_have_refutes(hub: StandinHub, source: Path) -> None:
    ev = verify(source, hub_endpoint=hub.url, revision="9" * 40, trust=True)
    assert not ev.ok and "does not exist" in messages(ev)[0]
    other = verify(source, hub_endpoint=hub.url, repo="other/repo", trust=True)
    assert not other.ok and "repository not found" in messages(other)[0]


def test_a_snapshot_is_checked_against_the_hub_when_it_answers(hub: StandinHub, tmp_path: Path) -> None:
    ok = verify(snapshot(tmp_path), hub_endpoint=hub.url)
    assert ok.ok and ok.measured["method"] == f"{ident.HUB_CACHE} and {ident.HUB}"
    assert ok.measured["status"] == "verified" and ok.measured["hub_consulted"] is True
    assert ok.measured["reason"].endswith(
        f"every file's sha256 (LFS) or git blob id was compared with the hub's metadata of {SOURCE_REPO} at "
        f"{PINNED_SOURCE}, and every load-relevant file it lists was looked for in the folder: they agree")
    # A snapshot whose blobs are consistent but whose files are not the commit's: only the hub can tell.
    other = tmp_path / "other"
    shutil.copytree(FIXTURE_SOURCE, other)
    (other / "tokenizer.json").write_text("{}")
    root = tmp_path / "second" / SNAPSHOT_PARENT / PINNED_SOURCE
    make_snapshot(other, root)
    ev = verify(root, hub_endpoint=hub.url)
    assert messages(ev) == [f"tokenizer.json: not in the hub's repository at {PINNED_SOURCE}"]


def test_a_hand_built_snapshot_one_byte_off_is_refuted_by_the_hub(hub: StandinHub, tmp_path: Path) -> None:
    root = hand_built(tmp_path)
    ev = verify(root, hub_endpoint=hub.url, trust=True)  # a refuted identity is never trusted
    assert not ev.ok and ev.measured["status"] == "not verified" and ev.measured["repo"] is None
    assert ev.summary.startswith("source identity not verified: the hub cache snapshot and hub refute")
    flipped = hashlib.sha256((root / "model.safetensors").read_bytes()).hexdigest()
    genuine = hashlib.sha256((FIXTURE_SOURCE / "model.safetensors").read_bytes()).hexdigest()
    assert messages(ev) == [f"model.safetensors: sha256 is {flipped}, the hub's LFS sha256 at {PINNED_SOURCE} is "
                            f"{genuine}"]
    assert ev.measured["hub_consulted"] is True and ev.measured["reason"].endswith(": they differ")
    config = verify(hand_built(tmp_path / "c", flip="config.json"), hub_endpoint=hub.url)
    assert [f.file for f in config.findings] == ["config.json"]
    assert "git blob sha1 is " in messages(config)[0]


def test_an_unreachable_hub_leaves_a_snapshot_unproven_and_says_so(online: None, tmp_path: Path) -> None:
    ev = verify(snapshot(tmp_path), hub_endpoint="http://127.0.0.1:9")
    assert not ev.ok and ev.measured["status"] == "not verified" and ev.measured["method"] is None
    assert ev.measured["hub_consulted"] is False and ev.measured["hub"]["consulted"] is False
    assert "could not be reached" in ev.measured["hub"]["reason"]
    assert "which was not consulted (" + ev.measured["hub"]["reason"] in messages(ev)[0]
    trusted = verify(snapshot(tmp_path / "t"), hub_endpoint="http://127.0.0.1:9", trust=True)
    assert trusted.ok and trusted.measured["status"] == "trusted"


def test_offline_the_evidence_says_the_hub_was_not_consulted(hub: StandinHub, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the stand-in is up, and would prove it: it is never asked
    ev = verify(snapshot(tmp_path), hub_endpoint=hub.url)
    assert not ev.ok and ev.measured["status"] == "not verified"
    assert ev.measured["hub_consulted"] is False
    assert ev.measured["hub"]["reason"] == offline_reason()
    assert offline_reason().endswith("the hub is not consulted")
    assert ev.measured["hub"]["access"]["mode"] == "cache-only"
    assert f"no file was compared with the hub's metadata, which was not consulted ({offline_reason()})" in (
        messages(ev)[0])
    plain = verify(FIXTURE_SOURCE, hub_endpoint=hub.url)
    assert plain.measured["hub_consulted"] is False and "pins no digests for it" in messages(plain)[0]
    assert hub.paths("GET") == []


def test_folder_revision_is_what_the_profile_pins() -> None:
    assert folder_revision(FIXTURE_SOURCE) == PINNED_SOURCE


# ----------------------------------------------------------------------------- more refusals, each named


def test_every_bad_file_of_a_snapshot_is_named(tmp_path: Path) -> None:
    root = snapshot(tmp_path, plain=("config.json", "model.safetensors"))
    assert [f.file for f in verify(root).findings] == ["config.json", "model.safetensors"]
    other = snapshot(tmp_path / "b", blob_names={"config.json": "e" * 40, "model.safetensors": "f" * 64})
    assert [f.file for f in verify(other).findings] == ["config.json", "model.safetensors"]


def test_a_blob_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    root = snapshot(tmp_path)
    blob = (root / "config.json").resolve()
    blob.unlink()
    os.mkfifo(blob)  # a blob that would block a reader forever
    ev = verify(root)
    assert messages(ev) == ["config.json: cannot read: not a regular file"]
    assert ev.measured["status"] == "not verified"


def test_the_figures_of_each_proof_are_recorded(tmp_path: Path, source: Path) -> None:
    pins = ident.SourcePins(content_revision=PINNED_SOURCE)
    ev = verify(source, pins)
    assert ev.measured["files_compared"] == 2 and ev.expected["content_revision"] == PINNED_SOURCE
    assert ev.expected["repo"] == SOURCE_REPO and ev.expected["revision"] == PINNED_SOURCE
    assert "sha256" not in ev.expected
    by_file = verify(source, ident.SourcePins(sha256=folder_digests(source)))
    assert by_file.expected["sha256"] == folder_digests(source) and "content_revision" not in by_file.expected
    root = snapshot(tmp_path)
    (root.parent.parent / "refs" / "main").write_text(PINNED_SOURCE + "\n")
    assert verify(root).measured["refs"] == {"main": PINNED_SOURCE}
    assert ev.summary == (f"the source folder is proven to be {SOURCE_REPO} at {PINNED_SOURCE} (verified by profile "
                          "digests)")


def test_the_hub_s_answer_is_recorded(hub: StandinHub, source: Path) -> None:
    ev = verify(source, hub_endpoint=hub.url)
    recorded = ev.measured["hub"]
    assert (recorded["consulted"], recorded["commit"], recorded["files"]) == (True, PINNED_SOURCE, 2)
    assert recorded["access"]["mode"] == "online"
    refused = verify(source, hub_endpoint=hub.url, revision="9" * 40, trust=True)
    assert refused.measured["status"] == "not verified" and refused.measured["hub"]["consulted"] is True
    assert refused.summary.startswith("source identity not verified: the hub refute")
    malformed = verify(source, hub_endpoint=hub.url, revision="main", trust=True)
    assert malformed.measured["status"] == "not verified" and "not an immutable commit" in messages(malformed)[0]


def test_a_snapshot_the_hub_does_not_know_is_refuted(hub: StandinHub, tmp_path: Path) -> None:
    root = tmp_path / "hub" / "models--qualify-fixtures--dflash2-tiny" / "snapshots" / OTHER
    make_snapshot(FIXTURE_SOURCE, root)
    ev = verify(root, hub_endpoint=hub.url, revision=OTHER)  # the stand-in hub has OTHER, with another config
    assert ev.measured["method"] is None and ev.measured["status"] == "not verified"
    assert ev.summary.startswith("source identity not verified: the hub cache snapshot and hub refute")
    assert [f.file for f in ev.findings] == ["config.json"]
