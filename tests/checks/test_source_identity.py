"""Tests for qualify.checks.source_identity: each proof of the source's identity (profile digests, a hub
cache snapshot, the hub), each refusal, and the words of each message. The pure decisions it is built
on are tested in tests/checkpoint/test_identity.py."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.corpus import PINNED_SOURCE, SNAPSHOT_PARENT, SOURCE_REPO, make_snapshot
from qualify.checkpoint import identity as ident
from qualify.checkpoint.checksums import folder_digests, folder_revision
from qualify.checks.source_identity import check_source_identity
from qualify.errors import CheckpointError
from tests.checkpoint.test_identity import OTHER
from tests.hub_standin import StandinHub, StandinRepo, git_blob_sha1, go_online

FIXTURE_SOURCE = Path(__file__).resolve().parents[2] / "fixtures" / "dflash2-tiny" / "source"


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
    for words in ("source identity not verified", "pins no digests", "not a hub cache snapshot",
                  "HF_HUB_OFFLINE", "--trust-local-source"):
        assert words in text, words
    assert ev.measured["hub"]["consulted"] is False


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


def test_a_hub_cache_snapshot_proves_the_source(tmp_path: Path) -> None:
    ev = verify(snapshot(tmp_path))
    assert ev.ok, ev.failure_text()
    assert ev.measured["method"] == ident.HUB_CACHE and ev.measured["files_linked"] == 2
    assert ev.measured["snapshot_commit"] == PINNED_SOURCE


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
    # A snapshot whose blobs are consistent but whose files are not the commit's: only the hub can tell.
    other = tmp_path / "other"
    shutil.copytree(FIXTURE_SOURCE, other)
    (other / "tokenizer.json").write_text("{}")
    root = tmp_path / "second" / SNAPSHOT_PARENT / PINNED_SOURCE
    make_snapshot(other, root)
    ev = verify(root, hub_endpoint=hub.url)
    assert messages(ev) == [f"tokenizer.json: not in the hub's repository at {PINNED_SOURCE}"]


def test_an_unreachable_hub_leaves_the_snapshot_proof_and_says_so(online: None, tmp_path: Path) -> None:
    ev = verify(snapshot(tmp_path), hub_endpoint="http://127.0.0.1:9")
    assert ev.ok and ev.measured["method"] == ident.HUB_CACHE
    assert ev.measured["hub"]["consulted"] is False and "could not be reached" in ev.measured["hub"]["reason"]


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
