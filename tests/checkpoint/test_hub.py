"""Tests for qualify.checkpoint.hub: the real huggingface_hub client over real HTTP, against tests/hub_standin.py."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from qualify import errors
from qualify.checkpoint import hub
from qualify.errors import UsageError
from qualify.util.redact import MASK, RedactingFilter
from tests.hub_standin import StandinHub, StandinRepo, go_online

REPO = "local-inference-lab/GLM-5.3-Flash-DFlash2-MXFP8"
PINNED = "1111111111111111111111111111111111111111"
MOVED = "2222222222222222222222222222222222222222"
GONE = "3333333333333333333333333333333333333333"
TOKEN = "hf_QualifyHubTestTokenDoNotLeak987654321"

FILES_A = {
    "model.safetensors": b"\x08\x00\x00\x00\x00\x00\x00\x00{}      " + bytes(range(256)) * 8,
    "config.json": b'{"architectures": ["DFlash2DraftModel"]}\n',
    "hf_quant_config.json": b'{"quantization": {"quant_algo": "MXFP8"}}\n',
}
FILES_B = {**FILES_A, "model.safetensors": FILES_A["model.safetensors"][:-1] + b"\x01"}


def expected(files: dict[str, bytes]) -> dict[str, tuple[str, int]]:
    return {p: (hashlib.sha256(d).hexdigest(), len(d)) for p, d in files.items()}


@pytest.fixture(autouse=True)
def quiet_and_online(monkeypatch: pytest.MonkeyPatch) -> None:
    go_online(monkeypatch)


@pytest.fixture
def stand_in() -> Iterator[StandinHub]:
    repo = StandinRepo(REPO, {PINNED: dict(FILES_A), MOVED: dict(FILES_B)}, branches={"main": MOVED})
    with StandinHub([repo]).serving() as served:
        yield served


def fetch(served: StandinHub, revision: str, files: dict[str, tuple[str, int]], cache: Path):
    return hub.fetch_and_check(REPO, revision, files, what="draft", endpoint=served.url, cache_dir=cache,
                               allow_patterns=sorted(files))


def test_pinned_revision_online(stand_in: StandinHub, tmp_path: Path) -> None:
    ev, rev = fetch(stand_in, PINNED, expected(FILES_A), tmp_path)
    assert ev.ok, ev.failure_text()
    assert rev is not None and rev.commit == PINNED and rev.access.mode == "online"
    assert ev.measured["access"]["mode"] == "online" and "(online)" in ev.summary
    assert rev.files["model.safetensors"].sha256 == expected(FILES_A)["model.safetensors"][0]
    assert rev.files["config.json"].sha256 is None and rev.files["config.json"].blob_id  # stored in git, not LFS
    assert rev.local_path == tmp_path / f"models--{REPO.replace('/', '--')}" / "snapshots" / PINNED
    # The hub was asked for the files metadata itself, then the client fetched every file at the commit.
    gets = stand_in.paths("GET")
    assert gets[0] == f"/api/models/{REPO}/revision/{PINNED}?blobs=true"
    assert all(f"/{REPO}/resolve/{PINNED}/{p}" in gets for p in FILES_A)


def test_a_branch_that_moved_past_the_pin(stand_in: StandinHub, tmp_path: Path) -> None:
    access = hub.hub_access(endpoint=stand_in.url)
    assert hub.branch_head(REPO, "main", access=access) == MOVED
    ev, rev = fetch(stand_in, PINNED, expected(FILES_A), tmp_path)  # the pin still gets the pinned bytes
    assert ev.ok and rev is not None and rev.commit == PINNED
    moved, _ = fetch(stand_in, MOVED, expected(FILES_A), tmp_path / "other")  # main's files are not the manifest's
    text = moved.failure_text()
    assert "model.safetensors: the hub's LFS sha256" in text and "differs from the manifest's" in text
    with pytest.raises(UsageError, match="not an immutable commit"):
        hub.resolve(REPO, "main", access=access)
    branch, _ = fetch(stand_in, "main", expected(FILES_A), tmp_path)
    assert not branch.ok and "not an immutable commit" in branch.failure_text()


def test_a_revision_that_was_force_pushed_away(stand_in: StandinHub, tmp_path: Path) -> None:
    ev, rev = fetch(stand_in, GONE, expected(FILES_A), tmp_path)
    assert rev is None
    assert f"revision {GONE} does not exist on {stand_in.url}" in ev.failure_text()


def test_a_missing_file(stand_in: StandinHub, tmp_path: Path) -> None:
    files = {**expected(FILES_A), "model-00002-of-00002.safetensors": ("0" * 64, 10)}
    ev, _ = fetch(stand_in, PINNED, files, tmp_path)
    messages = [str(f) for f in ev.findings]
    assert f"model-00002-of-00002.safetensors: missing on the hub at {PINNED}" in messages
    assert any(m.startswith("model-00002-of-00002.safetensors: missing from the local snapshot") for m in messages)
    assert len(messages) == 2


def test_a_checksum_that_differs(tmp_path: Path) -> None:
    claimed = "f" * 64
    repo = StandinRepo(REPO, {PINNED: dict(FILES_A)}, advertise={(PINNED, "model.safetensors"): claimed})
    with StandinHub([repo]).serving() as served:
        ev, _ = fetch(served, PINNED, expected(FILES_A), tmp_path)
    assert [str(f) for f in ev.findings] == [
        f"model.safetensors: the hub's LFS sha256 {claimed} differs from the manifest's "
        f"{expected(FILES_A)['model.safetensors'][0]}"]


def test_bytes_that_differ_from_what_the_hub_advertises(tmp_path: Path) -> None:
    # Same length, so the client's own size check passes; only re-hashing the download catches it.
    corrupt = FILES_A["model.safetensors"][:-1] + b"\x00"
    assert corrupt != FILES_A["model.safetensors"]
    repo = StandinRepo(REPO, {PINNED: dict(FILES_A)}, serve_bytes={(PINNED, "model.safetensors"): corrupt})
    with StandinHub([repo]).serving() as served:
        ev, _ = fetch(served, PINNED, expected(FILES_A), tmp_path)
    assert [f.file for f in ev.findings] == ["model.safetensors"]
    assert "local sha256" in ev.findings[0].message


def test_a_load_relevant_file_the_manifest_does_not_list(tmp_path: Path) -> None:
    repo = StandinRepo(REPO, {PINNED: {**FILES_A, "generation_config.json": b"{}"}})
    with StandinHub([repo]).serving() as served:
        ev, _ = fetch(served, PINNED, expected(FILES_A), tmp_path)
    assert [str(f) for f in ev.findings] == [
        "generation_config.json: on the hub but not in the manifest (it would be loaded unchecked)"]


def test_no_quiet_fallback_to_the_cache(tmp_path: Path) -> None:
    from huggingface_hub import snapshot_download

    repo = StandinRepo(REPO, {PINNED: dict(FILES_A)})
    with StandinHub([repo]).serving() as served:
        assert fetch(served, PINNED, expected(FILES_A), tmp_path)[0].ok  # fills the cache
        url = served.url
    # The hub is gone. The client itself quietly answers from the cache ...
    assert Path(snapshot_download(REPO, revision=PINNED, cache_dir=tmp_path, endpoint=url)).is_dir()
    # ... the harness does not: online means the hub answered.
    ev, rev = fetch_at(url, tmp_path)
    assert rev is None and not ev.ok
    assert "could not be reached" in ev.failure_text() and "not falling back to the cache silently" in \
        ev.failure_text()


def fetch_at(url: str, cache: Path):
    return hub.fetch_and_check(REPO, PINNED, expected(FILES_A), what="draft", endpoint=url, cache_dir=cache)


def test_offline_is_cache_only_and_says_so(stand_in: StandinHub, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    assert fetch(stand_in, PINNED, expected(FILES_A), tmp_path)[0].ok
    before = len(stand_in.requests)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ev, rev = fetch(stand_in, PINNED, expected(FILES_A), tmp_path)
    assert ev.ok, ev.failure_text()
    assert rev is not None and rev.access.mode == "cache-only" and rev.files == {}
    assert ev.measured["access"]["mode"] == "cache-only" and ev.measured["hub_consulted"] is False
    assert "cache-only, the hub's checksums were not consulted" in ev.summary
    assert len(stand_in.requests) == before, "cache-only must not reach the hub"
    # A cache entry that was tampered with is caught by re-hashing, even offline.
    blob = (rev.local_path / "config.json").resolve()
    blob.write_bytes(b'{"architectures": ["Other"]}\n')
    tampered, _ = fetch(stand_in, PINNED, expected(FILES_A), tmp_path)
    assert "config.json: local size" in tampered.failure_text() or "config.json: local sha256" in \
        tampered.failure_text()


def test_offline_with_nothing_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ev, rev = fetch_at("http://127.0.0.1:9", tmp_path)
    assert rev is None and "is not (completely) in the local cache" in ev.failure_text()


def test_offline_as_read_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    # huggingface_hub read HF_HUB_OFFLINE=1 when it was imported; the variable is gone now.
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    access = hub.hub_access(endpoint="http://127.0.0.1:9")
    assert access.mode == "cache-only" and access.offline_at_import and not access.offline_env
    assert "reads it once, at import" in access.reason
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    later = hub.hub_access(endpoint="http://127.0.0.1:9")
    assert later.mode == "cache-only" and later.offline_env and not later.offline_at_import
    with pytest.raises(errors.HubError, match="cannot ask the hub"):
        hub.resolve(REPO, PINNED, access=later)


def test_the_token_is_used_but_never_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str],
                                              caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    # The client's debug log prints response headers, which here quote the token back: only the redacting
    # filter on the handler (what the harness installs on its log handlers) keeps it out of the log.
    caplog.set_level(logging.DEBUG)
    caplog.handler.addFilter(RedactingFilter())
    repo = StandinRepo(REPO, {PINNED: dict(FILES_A)})
    # A hub (or proxy) that quotes the Authorization header back in its errors.
    with StandinHub([repo], echo_auth_in_errors=True).serving() as served:
        good, rev = fetch(served, PINNED, expected(FILES_A), tmp_path)
        bad, _ = fetch(served, GONE, expected(FILES_A), tmp_path)
        unknown, _ = hub.fetch_and_check("someone/else", PINNED, expected(FILES_A), what="draft",
                                         endpoint=served.url, cache_dir=tmp_path)
        assert all(r.authorized for r in served.requests), "the token must be used"
    assert good.ok and rev is not None and rev.access.token_present
    out = capsys.readouterr()
    texts = [json.dumps(e.to_dict()) for e in (good, bad, unknown)] + [out.out, out.err, caplog.text]
    for text in texts:
        assert TOKEN not in text
    assert f"Bearer {MASK}" in caplog.text  # the echoed header reached the log, masked
    assert not unknown.ok and "repository not found" in unknown.failure_text()


# ------------------------------------------------------------------ which hub answered


@pytest.mark.parametrize(("given", "named"), [
    ("https://huggingface.co", hub.DEFAULT_ENDPOINT),
    ("https://HuggingFace.co:443/", hub.DEFAULT_ENDPOINT),
    (f"https://user:{TOKEN}@mirror.example.org/hf/?token={TOKEN}#x", "https://mirror.example.org/hf"),
    ("http://127.0.0.1:8080//", "http://127.0.0.1:8080"),
    ("http://[::1]:9000", "http://[::1]:9000"),
])
def test_an_endpoint_is_recorded_in_one_spelling_without_credentials(given: str, named: str) -> None:
    assert hub.normalize_endpoint(given) == named
    assert TOKEN not in hub.normalize_endpoint(given)


@pytest.mark.parametrize("bad", ["huggingface.co", "ftp://huggingface.co", "https://", "http://host:notaport"])
def test_an_endpoint_that_is_not_an_http_url_is_a_usage_error_naming_it(bad: str) -> None:
    with pytest.raises(UsageError, match="HF_ENDPOINT"):
        hub.normalize_endpoint(bad)


def test_the_run_endpoint_follows_hf_endpoint_and_defaults_to_the_public_hub(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", "https://huggingface.co")
    assert hub.run_endpoint() == hub.DEFAULT_ENDPOINT
    monkeypatch.setenv("HF_ENDPOINT", f"http://{TOKEN}@127.0.0.1:5555/")
    assert hub.run_endpoint() == "http://127.0.0.1:5555"
    monkeypatch.setenv("HF_ENDPOINT", "not a url")
    with pytest.raises(UsageError, match="HF_ENDPOINT"):
        hub.hub_access()


def test_the_access_record_names_the_local_hub_that_answered_and_no_credentials(
        stand_in: StandinHub, monkeypatch: pytest.MonkeyPatch) -> None:
    # The client is given the endpoint as configured (user-info and all); the record and messages never are.
    host = stand_in.url.split("://", 1)[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://{TOKEN}@{host}/")
    access = hub.hub_access()
    rev = hub.resolve(REPO, PINNED, access=access)
    assert rev.commit == PINNED
    assert access.to_dict()["endpoint"] == stand_in.url.rstrip("/") == access.name
    assert TOKEN not in json.dumps(access.to_dict()) and TOKEN not in access.reason
    with pytest.raises(errors.HubError) as caught:
        hub.resolve(REPO, GONE, access=access)
    assert access.name in str(caught.value) and TOKEN not in str(caught.value)
