"""A release publishes its evidence beside the weights, in one commit, and a user downstream verifies it.

The hub is the stand-in (tests/hub_standin.py) spoken to by the real huggingface_hub client: the
release is published with ``qualify publish``, a model card is written as a second commit, and the
repository is downloaded as a user downloads it (a cache snapshot, its files links into blobs).
Then the two commands of the README's "Verify a release" run on it as written.

Publish publishes only what the gate accepts: each release case of the corpus (fixtures/corpus.py,
``RELEASE_CASES``) is refused before the upload, uploading nothing, or on the commit as downloaded; a
second release deletes the first one's files.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from fixtures.corpus import BEFORE_UPLOAD, RELEASE_CASES, ReleaseCase
from qualify.checkpoint import files
from qualify.cli import main
from qualify.release import attestation as a
from qualify.release import publish as p
from tests.helpers import FIXTURE, TRACEBACK, run_qualify, write_key
from tests.hub_standin import StandinHub, StandinRepo, go_online

REPO_ID = "org/dflash2-tiny-mxfp8"
TOKEN = "hf_" + "Q" * 34  # what a user access token looks like; never to be printed
INITIAL = "0" * 40
EVIDENCE_NAMES = ("attestation.intoto.jsonl", "model.sig", "report.json", "report.md")
MODEL_SIGNING = Path(sys.executable).parent / "model_signing"

# huggingface_hub's own LFS upload hands httpx a file as data=, which httpx deprecates; nothing of ours.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>' to upload raw bytes:DeprecationWarning")


def release_repo() -> StandinRepo:
    """A repository as the hub creates it: one commit with .gitattributes, on main."""
    return StandinRepo(REPO_ID, {INITIAL: {".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"}},
                       branches={"main": INITIAL})


@pytest.fixture
def cli(capsys):
    def call(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        assert TRACEBACK not in out + err
        return code, out, err

    return call


@pytest.fixture
def hub_env(monkeypatch):
    go_online(monkeypatch)
    monkeypatch.setenv("HF_TOKEN", TOKEN)

    def serving(hub: StandinHub):
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        return hub

    return serving


@dataclass(frozen=True)
class SignedRun:
    """A run of ``qualify check`` signed with a key (the attestation and the model signature), and that key."""

    checkpoint: Path
    run_dir: Path
    pub: Path
    priv: Path

    def publish(self, checkpoint: Path | None = None, run_dir: Path | None = None) -> list[str]:
        """``qualify publish``'s arguments for this run (or another folder in place of one of its own), but --repo."""
        return ["publish", "--checkpoint", str(checkpoint or self.checkpoint), "--run-dir",
                str(run_dir or self.run_dir), "--verify-key", str(self.pub), "--profile", "fixture"]


def signed_check(checkpoint: Path, reports: Path, priv: Path) -> tuple[int, Path]:
    """(qualify check's exit code, the run folder) of a signed run of the fixture profile on ``checkpoint``."""
    proc = run_qualify("check", "--profile", "fixture", str(checkpoint), "--source", str(FIXTURE / "source"),
                       "--sign-key", str(priv), "--sign-model", "--report-dir", str(reports))
    (run_dir,) = reports.glob("*/")
    assert (run_dir / a.ATTESTATION_NAME).is_file(), proc.stdout + proc.stderr
    return proc.returncode, run_dir


@pytest.fixture(scope="module")
def signed(tmp_path_factory) -> SignedRun:
    """The fixture checkpoint, qualified and signed once for the module (the tests copy what they change)."""
    folder = tmp_path_factory.mktemp("signed")
    priv, pub = write_key(folder, "release")
    code, run_dir = signed_check(FIXTURE / "mxfp8", folder / "reports", priv)
    assert code == 0
    return SignedRun(FIXTURE / "mxfp8", run_dir, pub, priv)


def fake_run(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True)
    for name in names:
        (folder / name).write_text(f"{name}\n")
    return folder


# ---------------------------------------------------------------- what a release holds

def test_the_evidence_published_is_the_evidence_never_loaded_by_exact_path():
    assert tuple(path for _, path in p.EVIDENCE) == tuple(f"qualification/{n}" for n in EVIDENCE_NAMES)
    assert {path for _, path in p.EVIDENCE} == set(files.EVIDENCE_PATHS)
    assert EVIDENCE_NAMES[:3] == (a.ATTESTATION_NAME, a.MODEL_SIGNATURE_NAME, a.REPORT)
    for path in files.EVIDENCE_PATHS:
        assert files.is_never_loaded(path), path
    # Exact paths, never the folder nor the names elsewhere: weights or a config there stay load-relevant.
    for rel in ("qualification/model.safetensors", "qualification/config.json", "report.json", "model.sig",
                "qualification/sub/report.json", "x/qualification/report.json", "Qualification/report.json"):
        assert not files.is_never_loaded(rel), rel


def test_release_files_are_the_checkpoint_and_the_evidence_under_qualification(tmp_path):
    run_dir = fake_run(tmp_path / "run", *EVIDENCE_NAMES)
    uploads = p.release_files(FIXTURE / "mxfp8", run_dir)
    assert [u.path_in_repo for u in uploads] == [
        "config.json", "conversion_manifest.json", "hf_quant_config.json", "model.safetensors",
        *(f"qualification/{n}" for n in EVIDENCE_NAMES)]
    assert uploads[-1].local == run_dir / "report.md"


@pytest.mark.parametrize("missing", EVIDENCE_NAMES)
def test_a_missing_evidence_file_is_refused_and_nothing_is_uploaded(missing, tmp_path, hub_env, cli):
    run_dir = fake_run(tmp_path / "run", *(n for n in EVIDENCE_NAMES if n != missing))
    repo = release_repo()
    _, pub = write_key(tmp_path, "release")
    with StandinHub([repo]).serving() as hub:
        hub_env(hub)
        code, out, err = cli("publish", "--checkpoint", str(FIXTURE / "mxfp8"), "--run-dir", str(run_dir),
                             "--verify-key", str(pub), "--repo", REPO_ID)
    assert code == 1, out + err
    assert out.splitlines() == [
        f"refused: the run folder {run_dir} lacks {missing}: a release publishes all of attestation.intoto.jsonl, "
        "model.sig, report.json, report.md (qualify run/check --sign-key ... --sign-model writes them); nothing was "
        "uploaded"]
    assert hub.requests == [] and repo.branches == {"main": INITIAL}


def test_a_checkpoint_holding_evidence_paths_or_a_broken_link_is_refused(tmp_path, hub_env, cli):
    run_dir = fake_run(tmp_path / "run", *EVIDENCE_NAMES)
    ckpt = tmp_path / "ckpt"
    shutil.copytree(FIXTURE / "mxfp8", ckpt)
    (ckpt / "qualification").mkdir()
    (ckpt / "qualification" / "report.json").write_text("{}")
    (ckpt / "tokenizer.json").symlink_to(tmp_path / "gone")
    _, pub = write_key(tmp_path, "release")
    with StandinHub([release_repo()]).serving() as hub:
        hub_env(hub)
        code, out, _ = cli("publish", "--checkpoint", str(ckpt), "--run-dir", str(run_dir), "--verify-key", str(pub),
                           "--repo", REPO_ID)
    assert code == 1
    assert out.splitlines() == [
        "refused: the checkpoint already holds qualification/report.json, where the run's evidence is published; not "
        "regular files, which cannot be uploaded: tokenizer.json; nothing was uploaded"]
    assert hub.requests == []


@pytest.mark.parametrize("repo", ["noslash", "a/b/c", "../etc", "org/..", "org/na me", "org/-x", "org/x-", "org/x..y",
                                  "or--g/x", "org/x;rm -rf", "org/" + "x" * 97, "/x", "org/", "org/\x1b[2J"])
def test_a_repository_id_that_is_not_owner_slash_name_is_a_usage_error(repo, tmp_path, cli):
    code, out, err = cli("publish", "--checkpoint", str(FIXTURE / "mxfp8"), "--run-dir", str(tmp_path),
                         "--verify-key", str(tmp_path / "pub.pem"), "--repo", repo)
    assert code == 2 and out == ""
    assert "not a hub repository id (owner/name" in err and "\x1b" not in err


@pytest.mark.parametrize("repo", ["org/dflash2-tiny-mxfp8", "A1/b.c_d-e", "o/n", "org/" + "x" * 96])
def test_a_repository_id_of_safe_characters_is_accepted(repo):
    assert p.check_repo_id(repo) == repo


@pytest.mark.parametrize("branch", ["../main", "-x", "a..b", "a b", "main.lock", "/main", "main/", "a\nb", ""])
def test_a_branch_that_is_not_a_safe_name_is_a_usage_error(branch, tmp_path, cli):
    code, _, err = cli("publish", "--checkpoint", str(FIXTURE / "mxfp8"), "--run-dir", str(tmp_path), "--repo",
                       REPO_ID, f"--revision={branch}", "--verify-key", str(tmp_path / "pub.pem"))
    assert code == 2 and "not a branch name" in err


def test_folders_or_a_key_that_do_not_exist_are_usage_errors(tmp_path, capsys):
    key = ("--verify-key", str(tmp_path / "pub.pem"))
    assert main(["publish", "--checkpoint", str(tmp_path / "none"), "--run-dir", str(tmp_path), "--repo", REPO_ID,
                 *key]) == 2
    assert capsys.readouterr().err == f"qualify: error: {tmp_path / 'none'}: not a checkpoint directory\n"
    assert main(["publish", "--checkpoint", str(FIXTURE / "mxfp8"), "--run-dir", str(tmp_path / "none"), "--repo",
                 REPO_ID, *key]) == 2
    assert capsys.readouterr().err == f"qualify: error: {tmp_path / 'none'}: not a run directory\n"
    assert main(["publish", "--checkpoint", str(FIXTURE / "mxfp8"), "--run-dir", str(tmp_path), "--repo", REPO_ID,
                 *key]) == 2
    assert capsys.readouterr().err == f"qualify: error: {tmp_path / 'pub.pem'}: no such verify key file\n"


@pytest.mark.slow
def test_a_hub_that_refuses_is_a_hub_error_without_the_token(signed, hub_env, cli):
    # No such repository, on a hub that quotes the Authorization header back: the token must not show.
    with StandinHub([release_repo()], echo_auth_in_errors=True).serving() as hub:
        hub_env(hub)
        code, out, err = cli(*signed.publish(), "--repo", "org/no-such-repo")
        # The gate passed; the hub's refusal is the environment's, not a usage error.
        assert code == 3 and out.startswith("qualified: ") and "published:" not in out
        assert err.startswith(f"qualify: harness error: org/no-such-repo@main: the hub at {hub.url} did not take the "
                              "release (RepositoryNotFoundError")
        assert "the repository and the branch must exist" in err
        assert TOKEN not in out + err
        # A token without write access: refused by the hub, named as such.
        with StandinHub([release_repo()], write_token="hf_" + "W" * 34).serving() as other:
            hub_env(other)
            code, _, err = cli(*signed.publish(), "--repo", REPO_ID)
        assert code == 3 and "401" in err and TOKEN not in err


def test_offline_publishing_is_refused_before_anything_is_gated(tmp_path, monkeypatch, cli):
    run_dir = fake_run(tmp_path / "run", *EVIDENCE_NAMES)
    _, pub = write_key(tmp_path, "release")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, err = cli("publish", "--checkpoint", str(FIXTURE / "mxfp8"), "--run-dir", str(run_dir),
                         "--verify-key", str(pub), "--repo", REPO_ID)
    assert code == 3 and f"{REPO_ID}: cannot publish: HF_HUB_OFFLINE was set" in err
    assert out == ""


# ---------------------------------------------------------------- published, carded, downloaded, verified

def verify_downstream(snapshot: Path, pub: Path, cli) -> tuple[tuple[int, str], tuple[int, str]]:
    """The README's two commands, as a user runs them on the downloaded snapshot."""
    gate = cli("gate", "--attestation", str(snapshot / "qualification" / "attestation.intoto.jsonl"),
               "--verify-key", str(pub), "--checkpoint", str(snapshot), "--profile", "fixture")
    tool = subprocess.run([str(MODEL_SIGNING), "verify", "key", "--signature",
                           str(snapshot / "qualification" / "model.sig"), "--public_key", str(pub),
                           "--allow_symlinks", str(snapshot)], capture_output=True, text=True, timeout=120)
    return (gate[0], gate[1] + gate[2]), (tool.returncode, tool.stdout + tool.stderr)


@pytest.mark.slow
def test_a_published_release_with_its_card_verifies_downstream_and_a_changed_weight_does_not(tmp_path, hub_env,
                                                                                              cli):
    from huggingface_hub import HfApi, snapshot_download

    priv, pub = write_key(tmp_path, "release")
    proc = run_qualify("check", "--profile", "fixture", str(FIXTURE / "mxfp8"), "--source", str(FIXTURE / "source"),
                       "--sign-key", str(priv), "--sign-model", "--report-dir", str(tmp_path / "reports"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = (tmp_path / "reports").glob("*/")
    repo = release_repo()
    with StandinHub([repo], write_token=TOKEN).serving() as hub:
        hub_env(hub)
        code, out, err = cli("publish", "--checkpoint", str(FIXTURE / "mxfp8"), "--run-dir", str(run_dir),
                             "--verify-key", str(pub), "--profile", "fixture", "--repo", REPO_ID)
        assert code == 0, out + err
        released = repo.branches["main"]
        assert re.fullmatch(r"[0-9a-f]{40}", released) and released != INITIAL
        # The gate on the folders, the commit, the gate on the commit as downloaded, the verdict on it.
        lines = out.splitlines()
        assert len(lines) == 4, out
        assert lines[0].startswith("qualified: structure, format, reproduction passed in run ")
        assert lines[1] == (f"published: {REPO_ID}@main commit {released} (8 files, the evidence under "
                            f"qualification/): {hub.url}/{REPO_ID}/commit/{released}")
        assert lines[2].startswith("qualified: ") and f"snapshots/{released}" in lines[2]
        assert lines[3] == (f"verified: {REPO_ID} commit {released}, downloaded at that commit into a fresh folder, "
                            "passes the gate")
        assert TOKEN not in out + err
        # One commit, every write authorized; the weights by LFS, the evidence beside them.
        writes = [(r.method, r.path.split("?")[0]) for r in hub.requests]
        assert [w for w in writes if w[1].startswith("/api/") and w[0] == "POST"] == [
            ("POST", f"/api/models/{REPO_ID}/preupload/main"), ("POST", f"/api/models/{REPO_ID}/commit/main")]
        assert all(r.authorized for r in hub.requests if not r.path.startswith("/lfs-upload/"))
        assert sorted(repo.commits[released]) == [
            ".gitattributes", "config.json", "conversion_manifest.json", "hf_quant_config.json", "model.safetensors",
            *(f"qualification/{n}" for n in EVIDENCE_NAMES)]
        for name in EVIDENCE_NAMES:
            assert repo.commits[released][f"qualification/{name}"] == (run_dir / name).read_bytes()
        assert repo.commits[released]["model.safetensors"] == (FIXTURE / "mxfp8" / "model.safetensors").read_bytes()

        # The release flow writes the model card after signing: the card's validation section, a second commit.
        code, card, _ = cli("card", str(run_dir / "report.json"), "--verify-key", str(pub))
        assert code == 0 and "## Validation status" in card
        api = HfApi(endpoint=hub.url, token=TOKEN)
        api.upload_file(path_or_fileobj=f"# dflash2-tiny MXFP8\n\n{card}".encode(), path_in_repo="README.md",
                        repo_id=REPO_ID, commit_message="Model card")
        carded = repo.branches["main"]
        assert carded != released and "README.md" in repo.commits[carded]

        # A user downloads the release at its commit (a cache snapshot: links into blobs) and verifies it.
        snapshot = Path(snapshot_download(REPO_ID, revision=carded, cache_dir=str(tmp_path / "cache"),
                                          endpoint=hub.url, token=False))
        assert (snapshot / "README.md").is_symlink() and (snapshot / "qualification" / "model.sig").is_symlink()
        (gate_code, gate_out), (tool_code, tool_out) = verify_downstream(snapshot, pub, cli)
        assert gate_code == 0, gate_out
        assert gate_out.startswith("qualified: structure, format, reproduction passed in run ")
        assert f"4 files in {snapshot} are the ones signed" in gate_out
        assert (tool_code, tool_out.strip()) == (0, "Verification succeeded")

        # Someone pushes changed weights (one byte) to the release repository: both commands refuse them.
        weights = bytearray((FIXTURE / "mxfp8" / "model.safetensors").read_bytes())
        weights[-1] ^= 0x01
        api.upload_file(path_or_fileobj=bytes(weights), path_in_repo="model.safetensors", repo_id=REPO_ID,
                        commit_message="Update weights")
        tampered = Path(snapshot_download(REPO_ID, revision=repo.branches["main"], cache_dir=str(tmp_path / "cache"),
                                          endpoint=hub.url, token=False))
    (gate_code, gate_out), (tool_code, tool_out) = verify_downstream(tampered, pub, cli)
    assert gate_code == 1 and "model.safetensors" in gate_out and "qualified:" not in gate_out
    assert tool_code == 1 and "Verification failed" in tool_out
    assert re.search(r"Hash mismatch for \\*'model\.safetensors", tool_out), tool_out  # (its message is a repr)
    assert gate_out.startswith("refused: model.safetensors: changed after signing (sha256 "), gate_out
    # The snapshot verified before is untouched: its weights are the signed ones still.
    assert verify_downstream(snapshot, pub, cli)[0][0] == 0


# ---------------------------------------------------------------- publish publishes only what the gate accepts

def test_a_release_deletes_every_file_of_the_previous_one_it_does_not_hold_but_the_hubs_own():
    uploads = (p.Upload("config.json", Path("c")), p.Upload("model.safetensors", Path("m")))
    existing = [".gitattributes", "config.json", "model-00001-of-00002.safetensors", "model.safetensors",
                "sub/x.safetensors", "README.md"]
    assert p.stale_files(existing, uploads) == ("README.md", "model-00001-of-00002.safetensors",
                                                "sub/x.safetensors")
    assert p.stale_files([".gitattributes", "config.json"], uploads) == ()


def test_the_gate_is_given_the_options_qualify_gate_takes():
    from qualify.cli import build_parser

    args = build_parser().parse_args([
        "publish", "--checkpoint", "ck", "--run-dir", "run", "--verify-key", "k.pem", "--repo", REPO_ID,
        "--release-policy", "--draft-revision", "a" * 40, "--require", "load", "--accept-unpinned-target"])
    from qualify.commands.publish import gate_argv

    assert gate_argv(args, Path("ck"), Path("run")) == [
        "--attestation", "run/attestation.intoto.jsonl", "--verify-key", "k.pem", "--checkpoint", "ck",
        "--require", "load", "--revision", "a" * 40, "--release-policy", "--accept-unpinned-target", "--",
        "run/report.json"]


def test_a_gate_option_the_gate_refuses_is_its_usage_error_and_nothing_is_uploaded(tmp_path, hub_env, cli):
    run_dir = fake_run(tmp_path / "run", *EVIDENCE_NAMES)
    _, pub = write_key(tmp_path, "release")
    with StandinHub([release_repo()]).serving() as hub:
        hub_env(hub)
        code, out, err = cli("publish", "--checkpoint", str(FIXTURE / "mxfp8"), "--run-dir", str(run_dir),
                             "--verify-key", str(pub), "--repo", REPO_ID, "--profile", "no-such-profile")
    assert code == 2 and out == ""
    assert "--profile 'no-such-profile': not a profile this harness ships" in err
    assert hub.requests == []


@pytest.mark.slow
@pytest.mark.parametrize("case", RELEASE_CASES, ids=lambda c: c.name)
def test_publish_refuses_each_release_case_of_the_corpus(case: ReleaseCase, signed, tmp_path, hub_env, cli):
    ckpt, run_dir = tmp_path / "ckpt", tmp_path / "run"
    shutil.copytree(signed.checkpoint, ckpt)
    if case.qualify_tampered:
        case.tamper(ckpt, run_dir)
        code, made = signed_check(ckpt, tmp_path / "reports", signed.priv)  # signed whatever the verdict
        assert code == 1
        shutil.copytree(made, run_dir)
    else:
        shutil.copytree(signed.run_dir, run_dir)
        # The gate passed on these very folders; then they changed.
        assert cli("gate", "--attestation", str(run_dir / a.ATTESTATION_NAME), "--verify-key", str(signed.pub),
                   "--checkpoint", str(ckpt), "--profile", "fixture")[0] == 0
        case.tamper(ckpt, run_dir)
    repo = release_repo()
    repo.damage_on_commit.update(case.damage_on_commit)
    with StandinHub([repo], write_token=TOKEN).serving() as hub:
        hub_env(hub)
        args = signed.publish(ckpt, run_dir)
        del args[args.index("--profile"):]
        code, out, err = cli(*args, *case.gate_args, "--repo", REPO_ID)
    assert code == 1, out + err
    lines = out.splitlines()
    assert TOKEN not in out + err
    if case.refused == BEFORE_UPLOAD:
        refusals = lines[:-1]
        assert lines[-1] == (f"refused: the gate refused the release of {ckpt} with the run {run_dir} (above); "
                             "nothing was uploaded")
        assert hub.requests == [] and repo.branches == {"main": INITIAL}
    else:
        released = repo.branches["main"]
        assert released != INITIAL
        assert lines[0].startswith("qualified: ")
        assert lines[1].startswith(f"published: {REPO_ID}@main commit {released}")
        refusals = lines[2:-1]
        assert lines[-1] == (f"refused: PUBLISHED BUT NOT VERIFIED: {REPO_ID}@main commit {released}, downloaded at "
                             "that commit into a fresh folder, is refused by the gate (above): the branch holds a "
                             "release its users' gate refuses; publish again or revert the commit")
    assert refusals and all(line.startswith("refused: ") for line in refusals), out
    for words in case.words:
        assert any(words in line for line in refusals), (words, out)


PREVIOUS = {
    ".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n",
    "config.json": b"{}\n",
    "model-00001-of-00002.safetensors": b"old shard 1",
    "model-00002-of-00002.safetensors": b"old shard 2",
    "model.safetensors.index.json": b"{}\n",
    "README.md": b"# the previous release\n",
    "qualification/report.json": b"{}\n",
}


@pytest.mark.slow
def test_a_second_release_replaces_the_first_in_one_commit_and_leaves_no_stale_weights(signed, tmp_path, hub_env,
                                                                                       cli):
    from huggingface_hub import snapshot_download

    previous = "1" * 40
    repo = StandinRepo(REPO_ID, {INITIAL: {".gitattributes": PREVIOUS[".gitattributes"]}, previous: dict(PREVIOUS)},
                       branches={"main": previous})
    with StandinHub([repo], write_token=TOKEN).serving() as hub:
        hub_env(hub)
        code, out, err = cli(*signed.publish(), "--repo", REPO_ID)
        assert code == 0, out + err
        released = repo.branches["main"]
        assert len(repo.commits) == 3  # one commit on top of the previous release
        assert sorted(repo.commits[released]) == [
            ".gitattributes", "config.json", "conversion_manifest.json", "hf_quant_config.json", "model.safetensors",
            *(f"qualification/{n}" for n in EVIDENCE_NAMES)]
        stale = "README.md, model-00001-of-00002.safetensors, model-00002-of-00002.safetensors, " \
                "model.safetensors.index.json"
        assert f"deleted 4 file(s) of the previous release: {stale}): " in out.splitlines()[1]
        assert out.splitlines()[-1].startswith(f"verified: {REPO_ID} commit {released}")
        # What a user downloads at that commit is the release and nothing else (vLLM loads every top-level shard).
        snapshot = Path(snapshot_download(REPO_ID, revision=released, cache_dir=str(tmp_path / "cache"),
                                          endpoint=hub.url, token=False))
        assert not list(snapshot.glob("model-*.safetensors"))
    assert TOKEN not in out + err


@pytest.mark.slow
def test_a_branch_that_moves_while_publishing_is_not_committed_over(signed, hub_env, cli, monkeypatch):
    from huggingface_hub import HfApi

    repo = release_repo()
    real = HfApi.model_info

    def moved_after_listing(self, *args, **kwargs):
        info = real(self, *args, **kwargs)
        repo.commits["2" * 40] = dict(PREVIOUS)  # another push lands between the listing and the commit
        repo.branches["main"] = "2" * 40
        return info

    monkeypatch.setattr(HfApi, "model_info", moved_after_listing)
    with StandinHub([repo], write_token=TOKEN).serving() as hub:
        hub_env(hub)
        code, out, err = cli(*signed.publish(), "--repo", REPO_ID)
    assert code == 3 and "published:" not in out
    assert f"{REPO_ID}@main: the hub at {hub.url} did not take the release (" in err
    assert repo.branches["main"] == "2" * 40 and len(repo.commits) == 2
