"""Tests for qualify.checkpoint.identity: the pure decisions of source identity (pins, hub cache snapshots,
blob names, the hub's listing, the identity record), each with the words of its message, and what each proof
records about the hub and what it compared. The check that puts them together is tested in
tests/checks/test_source_identity.py."""

from __future__ import annotations

from pathlib import Path

from fixtures.corpus import PINNED_SOURCE
from qualify.checkpoint import identity as ident
from qualify.checkpoint.hub import HubFile

OTHER = "0123456789abcdef0123456789abcdef01234567"


# ----------------------------------------------------------------------------- pure decisions


def test_pin_findings_content_revision() -> None:
    digests = {"config.json": "1" * 64, "model.safetensors": "2" * 64}
    rev = ident.content_revision(digests)
    assert ident.pin_findings(digests, ident.SourcePins(content_revision=rev)) == []
    found = ident.pin_findings({**digests, "model.safetensors": "3" * 64}, ident.SourcePins(content_revision=rev))
    assert len(found) == 1 and found[0][1] is None
    assert f"the profile pins {rev}" in found[0][0] and "not the pinned source" in found[0][0]
    assert "(over 2 files)" in found[0][0]


def test_pin_findings_per_file() -> None:
    pins = ident.SourcePins(sha256={"config.json": "1" * 64, "model.safetensors": "2" * 64})
    assert ident.pin_findings({"config.json": "1" * 64, "model.safetensors": "2" * 64}, pins) == []
    found = ident.pin_findings({"config.json": "9" * 64, "extra.json": "4" * 64, ".hidden/x": "5" * 64}, pins)
    assert found == [
        (f"sha256 is {'9' * 64}, the profile pins {'1' * 64}", "config.json"),
        ("pinned by the profile but missing from the source folder", "model.safetensors"),
        ("in the source folder but not pinned by the profile: its content is unverified", ".hidden/x"),
        ("in the source folder but not pinned by the profile: its content is unverified", "extra.json"),
    ]


def test_snapshot_path_and_findings(tmp_path: Path) -> None:
    root = tmp_path / "models--org--name" / "snapshots" / PINNED_SOURCE
    snap = ident.snapshot_path(root)
    assert snap is not None and (snap.repo_folder, snap.commit) == ("models--org--name", PINNED_SOURCE)
    assert snap.repo_dir == tmp_path / "models--org--name"
    assert ident.snapshot_path(tmp_path / "source") is None
    assert ident.snapshot_path(tmp_path / "datasets--org--name" / "snapshots" / PINNED_SOURCE) is None
    assert ident.repo_folder_name("org/name") == "models--org--name"
    assert ident.snapshot_findings(snap, "org/name", PINNED_SOURCE) == []
    assert ident.snapshot_findings(snap, "org/other", OTHER) == [
        "the snapshot is of repository folder 'models--org--name', the profile's source org/other is kept in "
        "'models--org--other'",
        f"the snapshot is of commit '{PINNED_SOURCE}', not the pinned revision {OTHER}",
    ]
    assert ident.snapshot_findings(snap, None, None) == [
        "the profile names no source repository to compare the snapshot's with",
        "the profile pins no source revision to compare the snapshot's commit with",
    ]


def test_blob_findings() -> None:
    sha, sha1 = "a" * 64, "b" * 40
    assert ident.blob_findings("m", sha, sha, sha1) is None
    assert ident.blob_findings("c", sha1, sha, sha1) is None
    wrong = ident.blob_findings("m", "c" * 64, sha, sha1)
    assert wrong == (f"its blob is named {'c' * 64}, but its content's sha256 is {sha}: the cache entry is not the "
                     "file it names")
    wrong1 = ident.blob_findings("c", "d" * 40, sha, sha1)
    assert wrong1 is not None and "git blob sha1 is " + sha1 in wrong1 and "not the file it names" in wrong1
    assert "is not a content digest" in (ident.blob_findings("m", "model.safetensors", sha, sha1) or "")
    # The hub's digests are lower-case hex.
    assert "is not a content digest" in (ident.blob_findings("m", "A" * 64, sha, sha1) or "")


def test_hub_findings() -> None:
    local = {"model.safetensors": ("a" * 64, "b" * 40, 10), "config.json": ("c" * 64, "d" * 40, 5)}
    hub = {"model.safetensors": HubFile("model.safetensors", 10, "a" * 64, "e" * 40),
           "config.json": HubFile("config.json", 5, None, "d" * 40),
           "README.md": HubFile("README.md", 3, None, "f" * 40)}
    assert ident.hub_findings(local, hub, PINNED_SOURCE) == []
    bad = {"model.safetensors": HubFile("model.safetensors", 10, "9" * 64, None),
           "config.json": HubFile("config.json", 5, None, "8" * 40),
           "model-2.safetensors": HubFile("model-2.safetensors", 1, "7" * 64, None)}
    assert ident.hub_findings({**local, "extra.json": ("1" * 64, "2" * 40, 1)}, bad, PINNED_SOURCE) == [
        (f"git blob sha1 is {'d' * 40}, the hub's at {PINNED_SOURCE} is {'8' * 40}", "config.json"),
        (f"not in the hub's repository at {PINNED_SOURCE}", "extra.json"),
        (f"sha256 is {'a' * 64}, the hub's LFS sha256 at {PINNED_SOURCE} is {'9' * 64}", "model.safetensors"),
        (f"in the hub's repository at {PINNED_SOURCE} but missing from the source folder", "model-2.safetensors"),
    ]
    sized = {"model.safetensors": HubFile("model.safetensors", 11, "a" * 64, None),
             "config.json": HubFile("config.json", 5, None, None)}
    assert ident.hub_findings(local, sized, PINNED_SOURCE) == [
        (f"the hub gives no digest for it at {PINNED_SOURCE}", "config.json"),
        (f"size is 10, the hub's at {PINNED_SOURCE} is 11", "model.safetensors"),
    ]
    assert ident.hub_findings(local, {}, PINNED_SOURCE)[0] == (f"the hub lists no files at {PINNED_SOURCE}", None)


def test_identity_record_never_names_an_unproven_repository() -> None:
    ok = ident.identity_record(verified=True, trusted=False, method="hub", repo="o/n", revision=PINNED_SOURCE)
    assert (ok["status"], ok["repo"], ok["revision"], ok["method"]) == ("verified", "o/n", PINNED_SOURCE, "hub")
    trusted = ident.identity_record(verified=False, trusted=True, method=None, repo="o/n", revision=PINNED_SOURCE)
    assert (trusted["status"], trusted["repo"], trusted["method"]) == ("trusted", None, ident.TRUSTED)
    assert trusted["claimed_repo"] == "o/n"
    no = ident.identity_record(verified=False, trusted=False, method="hub", repo="o/n", revision=PINNED_SOURCE)
    assert (no["status"], no["repo"], no["revision"], no["method"]) == ("not verified", None, None, None)
    assert tuple(ok) == ident.IDENTITY_KEYS


def test_every_proof_says_whether_the_hub_was_consulted_and_what_was_compared(tmp_path: Path,
                                                                              monkeypatch) -> None:
    from fixtures.corpus import SNAPSHOT_PARENT, make_snapshot

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source = Path(__file__).resolve().parents[2] / "fixtures" / "dflash2-tiny" / "source"
    root = tmp_path / SNAPSHOT_PARENT / PINNED_SOURCE
    make_snapshot(source, root)
    unpinned = ident.prove_source(root, repo=None, revision=None, pins=ident.SourcePins())
    assert unpinned.method == ident.HUB_CACHE and not unpinned.verified  # no pin to compare the names with
    assert unpinned.measured["hub_consulted"] is False
    assert unpinned.hub_reason == "not asked: the snapshot's own layout refutes it"
    assert unpinned.reason.endswith("with its content's digest: they disagree")
    offline = ident.prove_source(root, repo="qualify-fixtures/dflash2-tiny", revision=PINNED_SOURCE,
                                 pins=ident.SourcePins())
    assert offline.method is None and offline.ok and not offline.verified
    from qualify.checkpoint.hub import hub_access

    assert offline.hub_reason == hub_access().reason and offline.hub_reason.endswith("the hub is not consulted")
    assert ident.SNAPSHOT_PROVES_NOTHING in offline.reason
    (tmp_path / "empty").mkdir()
    empty = ident.prove_source(tmp_path / "empty", repo="o/n", revision=PINNED_SOURCE, pins=ident.SourcePins())
    assert empty.hub_reason == "not asked: the source folder holds no files"
    assert empty.reason == "nothing was compared: the source folder holds no files"
