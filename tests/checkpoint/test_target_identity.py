"""Tests for qualify.checkpoint.target_identity: a mounted target snapshot is proven like the source.

Snapshots are laid out as huggingface_hub lays them out (``models--ORG--NAME/snapshots/<commit>``, links into
``blobs/``); the hub is tests/hub_standin.py on 127.0.0.1, asked by the real huggingface_hub client.
"""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from qualify.checkpoint.identity import HUB, PROFILE_DIGESTS
from qualify.checkpoint.target_identity import MAX_FINDINGS, pinned_findings, prove_target
from tests.hub_standin import StandinHub, StandinRepo, go_online

REPO = "local-inference-lab/GLM-5.3-Flash-NVFP4"
REVISION = "520de24eabf507659eaef7c70f14fd584527facc"
TARGET = {
    "config.json": b'{"architectures": ["Glm4MoeForCausalLM"]}\n',
    "model-00001-of-00002.safetensors": b"\x08\x00\x00\x00\x00\x00\x00\x00{}      " + bytes(range(256)) * 64,
    "model-00002-of-00002.safetensors": b"\x08\x00\x00\x00\x00\x00\x00\x00{}      " + bytes(255 - i for i in
                                                                                          range(256)) * 64,
    "model.safetensors.index.json": b'{"weight_map": {}}\n',
    "tokenizer.json": b'{"model": {}}\n',
}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def snapshot(root: Path, files: dict[str, bytes], revision: str = REVISION) -> Path:
    """A hub-cache snapshot of ``files`` at ``revision``: each file a link to its blob, named by its sha256."""
    repo_dir = root / ("models--" + REPO.replace("/", "--"))
    snap = repo_dir / "snapshots" / revision
    (repo_dir / "blobs").mkdir(parents=True, exist_ok=True)
    snap.mkdir(parents=True)
    for rel, data in files.items():
        blob = repo_dir / "blobs" / sha(data)
        blob.write_bytes(data)
        (snap / rel).parent.mkdir(parents=True, exist_ok=True)
        (snap / rel).symlink_to(blob)
    return snap


@pytest.fixture(autouse=True)
def online(monkeypatch: pytest.MonkeyPatch) -> None:
    go_online(monkeypatch)


@pytest.fixture
def hub() -> Iterator[StandinHub]:
    with StandinHub([StandinRepo(REPO, {REVISION: dict(TARGET)}, branches={"main": REVISION})]).serving() as served:
        yield served


def test_the_true_snapshot_is_proven_by_the_hub_that_answered_and_the_hashing_is_timed(tmp_path: Path,
                                                                                      hub: StandinHub) -> None:
    proof = prove_target(snapshot(tmp_path, TARGET), repo=REPO, revision=REVISION, pins={}, endpoint=hub.url)
    assert proof.verified and proof.method == HUB, proof.findings
    assert proof.hub_endpoint == hub.url  # the local hub is named as what answered, for the gate to judge
    assert proof.files == len(TARGET) and proof.bytes == sum(len(d) for d in TARGET.values())
    assert proof.hash_seconds >= 0 and proof.to_dict()["hash_seconds"] == proof.hash_seconds
    assert proof.reason.endswith(": they agree") and hub.url in proof.reason


def test_one_made_up_config_under_the_pinned_commits_name_is_refuted_by_the_hub(tmp_path: Path,
                                                                               hub: StandinHub) -> None:
    made_up = {"config.json": b'{"architectures": ["TinyLlama"]}\n'}
    proof = prove_target(snapshot(tmp_path, made_up), repo=REPO, revision=REVISION, pins={}, endpoint=hub.url)
    assert not proof.verified and proof.method == HUB
    text = " | ".join(proof.findings)
    assert f"config.json: size is 33, the hub's at {REVISION} is 42" in text
    for rel in ("model-00001-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json"):
        assert f"{rel}: in the hub's repository at {REVISION} but missing from the target snapshot" in text


def test_a_weight_file_with_other_bytes_is_named(tmp_path: Path, hub: StandinHub) -> None:
    other = {**TARGET, "model-00002-of-00002.safetensors": TARGET["model-00002-of-00002.safetensors"][:-1] + b"\x01"}
    proof = prove_target(snapshot(tmp_path, other), repo=REPO, revision=REVISION, pins={}, endpoint=hub.url)
    assert not proof.verified
    assert any(f.startswith("model-00002-of-00002.safetensors: sha256 is") for f in proof.findings), proof.findings


def test_a_config_of_the_same_size_is_compared_by_its_git_blob_id(tmp_path: Path, hub: StandinHub) -> None:
    other = {**TARGET, "config.json": TARGET["config.json"].replace(b"Glm4", b"Glm5")}
    proof = prove_target(snapshot(tmp_path, other), repo=REPO, revision=REVISION, pins={}, endpoint=hub.url)
    assert not proof.verified
    assert [f for f in proof.findings if f.startswith("config.json: git blob sha1 is")], proof.findings


def test_a_revision_the_hub_does_not_have_refutes_it(tmp_path: Path, hub: StandinHub) -> None:
    gone = "9" * 40
    proof = prove_target(snapshot(tmp_path, TARGET, gone), repo=REPO, revision=gone, pins={}, endpoint=hub.url)
    assert not proof.verified and proof.method == HUB
    assert "does not exist on" in proof.findings[0]


def test_the_profile_s_pinned_digests_decide_and_the_hub_is_not_asked(tmp_path: Path, hub: StandinHub) -> None:
    pins = {rel: sha(data) for rel, data in TARGET.items()}
    proof = prove_target(snapshot(tmp_path, TARGET), repo=REPO, revision=REVISION, pins=pins, endpoint=hub.url)
    assert proof.verified and proof.method == PROFILE_DIGESTS and proof.hub_endpoint is None
    assert hub.requests == []
    made_up = prove_target(snapshot(tmp_path / "other", {"config.json": b"{}"}), repo=REPO, revision=REVISION,
                           pins=pins, endpoint=hub.url)
    assert not made_up.verified
    assert "config.json: sha256 is" in made_up.findings[0]
    assert any("tokenizer.json: pinned by the profile ([target.sha256]) but missing" in f for f in made_up.findings)


def test_pinned_findings_name_an_extra_file() -> None:
    assert pinned_findings({"a.json": "1" * 64, "b.py": "2" * 64}, {"a.json": "1" * 64}) == [
        "b.py: in the target snapshot but not pinned by the profile ([target.sha256]): it would be loaded unverified"]
    assert pinned_findings({"a.json": "1" * 64}, {"a.json": "1" * 64}) == []


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_offline_or_an_unreachable_hub_leaves_the_revision_only_claimed(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    snap = snapshot(tmp_path, TARGET)
    unreachable = prove_target(snap, repo=REPO, revision=REVISION, pins={},
                               endpoint=f"http://127.0.0.1:{_closed_port()}", timeout=5)
    assert not unreachable.verified and unreachable.method is None and unreachable.findings == ()
    assert unreachable.reason.startswith("only claimed:") and "gave no answer" in unreachable.reason
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = prove_target(snap, repo=REPO, revision=REVISION, pins={})
    assert not offline.verified and offline.method is None
    assert "only claimed" in offline.reason and "HF_HUB_OFFLINE" in offline.reason


def test_an_empty_snapshot_proves_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "snap"
    empty.mkdir()
    proof = prove_target(empty, repo=REPO, revision=REVISION, pins={"config.json": "1" * 64})
    assert not proof.verified and proof.findings == ("the target snapshot holds no file",)


def test_findings_are_capped_and_say_how_many_more(tmp_path: Path) -> None:
    files = {f"shard-{i:03d}.json": b"{}" for i in range(MAX_FINDINGS + 5)}
    proof = prove_target(snapshot(tmp_path, files), repo=REPO, revision=REVISION, pins={"config.json": "1" * 64})
    assert len(proof.findings) == MAX_FINDINGS + 1 and proof.findings[-1] == "and 6 more"
