"""Structure checks at the library level: each claim the manifest makes can be caught lying."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
import torch
from safetensors.torch import save_file

from qualify.checkpoint import files
from qualify.checkpoint import manifest as m
from qualify.checkpoint.safetensors_io import Checkpoint
from qualify.checks import structure
from qualify.errors import CheckpointError, ManifestError
from qualify.profile import load_profile


def edit_manifest(ckpt, fn):
    path = ckpt / m.MANIFEST_NAME
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


def messages(ev):
    return " | ".join(str(f) for f in ev.findings)


def test_good_fixture_passes_every_structure_check(fixture_copy):
    ckpt, src = fixture_copy
    man = m.load_manifest(ckpt)
    prof = load_profile("fixture")
    with Checkpoint.open(ckpt) as c, Checkpoint.open(src) as s:
        for ev in (
            structure.check_schema(ckpt),
            structure.check_source_pinned(man.raw, prof.source_revision),
            structure.check_paths(man.raw, ckpt),
            structure.check_file_list(man, ckpt),
            structure.check_checksums(man.output_files, ckpt, what="output"),
            structure.check_checksums(man.source_files, src, what="source"),
            structure.check_output_coverage(man, c),
            structure.check_source_coverage(man, s),
            structure.check_statistics(man, c, s, rtol=1e-6, atol=1e-12),
        ):
            assert ev.ok, ev.failure_text()


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("../x.json", "'..'"),
        ("/etc/passwd", "absolute"),
        ("a/./b", "not normalised"),
        ("C:/x", "not a POSIX relative path"),
        (" model.safetensors", "whitespace"),
    ],
)
def test_unsafe_paths_are_named(fixture_copy, path, words):
    ckpt, _ = fixture_copy
    edit_manifest(ckpt, lambda d: d["output"]["files"][0].update(path=path))
    ev = structure.check_paths(m.read_manifest_json(ckpt), ckpt)
    assert not ev.ok and words in messages(ev) and path.strip() in messages(ev)


def test_a_symlink_out_of_the_checkpoint_is_caught(fixture_copy, tmp_path):
    ckpt, _ = fixture_copy
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    os.symlink(outside, ckpt / "extra.json")
    edit_manifest(ckpt, lambda d: d["output"]["files"].append({"path": "extra.json", "sha256": "0" * 64, "size": 2}))
    ev = structure.check_paths(m.read_manifest_json(ckpt), ckpt)
    assert "resolves outside the checkpoint" in messages(ev)


def _as_hub_snapshot(ckpt, cache, repo="models--org--draft"):
    """The checkpoint laid out as the hub's cache keeps it: snapshot symlinks into the repo's blobs."""
    blobs = cache / repo / "blobs"
    snap = cache / repo / "snapshots" / ("1" * 40)
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    for f in sorted(ckpt.iterdir()):
        # The hub names an LFS file's blob by its sha256, any other file's by its git blob id.
        data = f.read_bytes()
        name = (hashlib.sha256(data).hexdigest() if f.suffix == ".safetensors"
                else hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest())
        blob = blobs / name
        f.replace(blob)
        os.symlink(os.path.relpath(blob, snap), snap / f.name)
    return snap


def test_a_hub_cache_snapshot_links_into_its_own_blobs_only(fixture_copy, tmp_path):
    ckpt, _ = fixture_copy
    snap = _as_hub_snapshot(ckpt, tmp_path / "cache")
    ev = structure.check_paths(m.read_manifest_json(snap), snap)
    assert ev.ok, ev.failure_text()
    # Another repo's blobs, or a file anywhere else, is still outside the release.
    other = tmp_path / "cache" / "models--org--other" / "blobs"
    other.mkdir(parents=True)
    target = snap / "config.json"
    (other / "cfg").write_bytes(target.read_bytes())
    target.unlink()
    os.symlink(other / "cfg", target)
    assert "output path 'config.json' resolves outside the checkpoint" in messages(
        structure.check_paths(m.read_manifest_json(snap), snap))


def test_a_folder_named_like_a_snapshot_outside_a_hub_cache_gets_no_blobs(tmp_path):
    plain = tmp_path / "work" / "snapshots" / "x"
    assert files.storage_roots(plain) == (plain.resolve(),)
    snap = tmp_path / "models--a--b" / "snapshots" / "c"
    assert files.storage_roots(snap) == (snap.resolve(), (tmp_path / "models--a--b" / "blobs").resolve())


def test_a_file_listed_twice(fixture_copy):
    ckpt, _ = fixture_copy
    edit_manifest(ckpt, lambda d: d["output"]["files"].append(dict(d["output"]["files"][0])))
    assert "listed 2 times" in messages(structure.check_paths(m.read_manifest_json(ckpt), ckpt))


def test_an_unlisted_config_file_is_unverified(fixture_copy):
    ckpt, _ = fixture_copy
    (ckpt / "generation_config.json").write_text("{}")
    (ckpt / "README.md").write_text("notes")  # does not affect loading: allowed unlisted
    ev = structure.check_file_list(m.load_manifest(ckpt), ckpt)
    assert [f.file for f in ev.findings] == ["generation_config.json"]


def test_size_and_checksum_mismatch(fixture_copy):
    ckpt, _ = fixture_copy
    with open(ckpt / "config.json", "a") as fh:
        fh.write(" ")
    ev = structure.check_checksums(m.load_manifest(ckpt).output_files, ckpt, what="output")
    text = messages(ev)
    assert "config.json: size is" in text and "config.json: sha256 is" in text


@pytest.mark.parametrize(("revision", "words"), [("main", "'main'"), ("", "empty"), ("v1.0", "'v1.0'")])
def test_mutable_revisions_are_refused(fixture_copy, revision, words):
    ckpt, _ = fixture_copy
    edit_manifest(ckpt, lambda d: d["source"].update(revision=revision))
    ev = structure.check_source_pinned(m.read_manifest_json(ckpt), None)
    assert words in messages(ev) and "40-hex" in messages(ev)


def test_a_revision_other_than_the_profiles(fixture_copy):
    ckpt, _ = fixture_copy
    ev = structure.check_source_pinned(m.read_manifest_json(ckpt), "a" * 40)
    assert "is not the revision the profile qualifies" in messages(ev)


def test_schema_violations_are_listed_with_their_path(fixture_copy):
    ckpt, _ = fixture_copy
    edit_manifest(ckpt, lambda d: d["tensors"][0].update(action="rounded"))
    ev = structure.check_schema(ckpt)
    assert "$.tensors[0].action" in messages(ev)
    with pytest.raises(ManifestError, match="fails its schema"):
        m.load_manifest(ckpt)


def test_duplicate_keys_and_missing_manifest(fixture_copy):
    ckpt, _ = fixture_copy
    path = ckpt / m.MANIFEST_NAME
    text = path.read_text()
    path.write_text(text.replace('"format_version": 1,', '"format_version": 1, "format_version": 1,', 1))
    with pytest.raises(ManifestError, match="duplicate key 'format_version'"):
        m.load_manifest(ckpt)
    # A repeated key deep inside is located by its JSON path, and a cut-off file by line, column and byte.
    compact = json.dumps(json.loads(text))
    assert compact.count('"source": {') == 1
    path.write_text(compact.replace('"source": {', '"source": {"repo": "a/c", ', 1))
    with pytest.raises(ManifestError, match=r"duplicate key 'repo' at source$"):
        m.load_manifest(ckpt)
    path.write_text(text[:40])
    with pytest.raises(ManifestError, match=r"not valid JSON: .* at line \d+ column \d+ \(byte \d+ of the file\)"):
        m.load_manifest(ckpt)
    path.unlink()
    with pytest.raises(ManifestError, match=r"conversion_manifest\.json: file is missing"):
        m.load_manifest(ckpt)


def test_a_tensor_accounted_twice_and_a_phantom_source_tensor(fixture_copy):
    ckpt, src = fixture_copy

    def twice(d):
        d["tensors"].append(dict(d["tensors"][-1]))
        d["tensors"].append(dict(d["tensors"][-1], source_name="ghost.weight"))

    edit_manifest(ckpt, twice)
    with Checkpoint.open(src) as s:
        text = messages(structure.check_source_coverage(m.load_manifest(ckpt), s))
    assert "accounted for 2 times" in text
    assert "ghost.weight" in text and "source does not have" in text


def test_a_source_tensor_the_manifest_forgot(fixture_copy):
    ckpt, src = fixture_copy
    edit_manifest(ckpt, lambda d: d.update(tensors=[t for t in d["tensors"] if t["source_name"] != "norm.weight"]))
    with Checkpoint.open(src) as s:
        ev = structure.check_source_coverage(m.load_manifest(ckpt), s)
    assert "norm.weight" in messages(ev) and "not accounted for" in messages(ev)


def test_statistics_that_were_made_up(fixture_copy):
    ckpt, src = fixture_copy

    def fudge(d):
        for t in d["tensors"]:
            if t["action"] == "quantized":
                t["statistics"]["mse"] *= 0.5  # a producer that claims half the error it has
                break

    edit_manifest(ckpt, fudge)
    with Checkpoint.open(ckpt) as c, Checkpoint.open(src) as s:
        ev = structure.check_statistics(m.load_manifest(ckpt), c, s, rtol=1e-6, atol=1e-12)
    assert len(ev.findings) == 1 and "mse: claimed" in messages(ev)
    assert ev.findings[0].tensor == "fc.weight"  # the first quantized tensor


def test_statistics_with_nothing_quantized_are_not_a_pass(fixture_copy):
    ckpt, src = fixture_copy
    edit_manifest(ckpt, lambda d: d.update(tensors=[t for t in d["tensors"] if t["action"] != "quantized"]))
    with Checkpoint.open(ckpt) as c, Checkpoint.open(src) as s:
        ev = structure.check_statistics(m.load_manifest(ckpt), c, s, rtol=1e-6, atol=1e-12)
    assert found(ev) == [(M, None, "the manifest marks no tensor as quantized: there is nothing to verify")]


# --------------------------------------------------------------------------- exact evidence
# Each case pins every finding (file, tensor, message) and the measured figures: a check that
# drops the findings after the first, names the wrong file or miscounts is caught (these cases
# come from mutation testing, see docs/development.md, Mutation testing).

M = m.MANIFEST_NAME


def found(ev):
    return [(f.file, f.tensor, f.message) for f in ev.findings]


def test_a_manifest_that_is_not_an_object(fixture_copy):
    ckpt, _ = fixture_copy
    (ckpt / M).write_text("[1, 2]")
    with pytest.raises(ManifestError) as err:
        m.read_manifest_json(ckpt)
    assert (err.value.file, err.value.detail) == (M, "the manifest must be a JSON object")
    (ckpt / M).write_text("{")
    with pytest.raises(ManifestError) as err:
        m.read_manifest_json(ckpt)
    assert err.value.file == M


@pytest.mark.parametrize("broken", [3, 4, 5])
def test_schema_failure_shows_the_first_three_violations(fixture_copy, broken):
    from qualify.schemas import schema_errors

    ckpt, _ = fixture_copy

    def damage(d):
        files = d["output"]["files"] + d["source"]["files"]
        for f in files[:broken]:
            f["size"] = "large"

    edit_manifest(ckpt, damage)
    errors = schema_errors(m.read_manifest_json(ckpt), "manifest")
    assert len(errors) == broken
    with pytest.raises(ManifestError) as err:
        m.load_manifest(ckpt)
    more = f" (and {broken - 3} more)" if broken > 3 else ""
    assert err.value.file == M
    assert err.value.detail == "fails its schema: " + "; ".join(errors[:3]) + more


def test_the_model_of_a_manifest(fixture_copy):
    ckpt, _ = fixture_copy

    def strip(d):
        quantized = next(e for e in d["tensors"] if e["action"] == "quantized")
        quantized["outputs"][0].pop("role", None)
        quantized.pop("reason", None)
        d["tensors"][1]["reason"] = "a codebook"

    edit_manifest(ckpt, strip)
    man = m.load_manifest(ckpt)
    raw = m.read_manifest_json(ckpt)
    assert man.path == ckpt / M
    assert (man.source_repo, man.source_revision) == (raw["source"]["repo"], raw["source"]["revision"])
    first = next(t for t in man.tensors if t.action == "quantized")
    assert first.outputs[0].role == "tensor" and first.outputs[1].role == "scale"
    assert first.reason == "" and man.tensors[1].reason == "a codebook"
    assert first.weight_output is first.outputs[0] and first.scale_output is first.outputs[1]
    assert man.tensors[1].scale_output is None
    assert man.scale_recipe == raw["quantization"]["scale_recipe"]
    assert len(man.quantized) == 19


def test_check_schema_counts_and_locates(fixture_copy):
    ckpt, _ = fixture_copy
    assert structure.check_schema(ckpt).measured == {"format_version": 1, "schema_violations": 0}
    edit_manifest(ckpt, lambda d: (d["tensors"][1].update(action="rounded"), d["tensors"][2].update(action="x")))
    ev = structure.check_schema(ckpt)
    assert found(ev) == [
        (M, None, "schema: $.tensors[1].action: 'rounded' is not one of ['quantized', 'kept', 'excluded']"),
        (M, None, "schema: $.tensors[2].action: 'x' is not one of ['quantized', 'kept', 'excluded']"),
    ]
    assert ev.measured == {"format_version": 1, "schema_violations": 2}
    assert ev.summary == "conversion_manifest.json validates against manifest schema v1"


def test_check_source_pinned_exact(fixture_copy):
    ckpt, _ = fixture_copy
    raw = m.read_manifest_json(ckpt)
    revision, repo = raw["source"]["revision"], raw["source"]["repo"]
    ok = structure.check_source_pinned(raw, revision)
    assert ok.ok and ok.measured == {"repo": repo, "revision": revision} and ok.expected == {"revision": revision}
    assert ok.summary == "the source checkpoint is pinned to an immutable 40-hex commit"
    unpinned = structure.check_source_pinned(raw, None)
    assert unpinned.ok and unpinned.expected == {}
    moving = "the conversion cannot be reproduced; record the 40-hex commit the conversion read"
    assert found(structure.check_source_pinned({"source": {"revision": ""}}, None)) == [
        (M, None, f"source revision is empty: a branch, tag or empty revision moves, so {moving}")]
    assert found(structure.check_source_pinned({"source": "main"}, None)) == [
        (M, None, f"source revision is empty: a branch, tag or empty revision moves, so {moving}")]
    assert found(structure.check_source_pinned({"source": {"revision": "main"}}, "a" * 40)) == [
        (M, None, f"source revision 'main': a branch, tag or empty revision moves, so {moving}".replace(
            "revision 'main':", "revision is 'main':")),
        (M, None, f"source revision 'main' is not the revision the profile qualifies ({'a' * 40})"),
    ]


def test_check_paths_exact(fixture_copy):
    ckpt, _ = fixture_copy
    os.symlink("loop.json", ckpt / "loop.json")

    def damage(d):
        files = d["output"]["files"]
        files.append(dict(files[0]))  # config.json twice
        files.append("not an entry")
        files.append({"sha256": "0" * 64, "size": 1})
        files.append({"path": "../up.json", "sha256": "0" * 64, "size": 1})
        files.append({"path": "loop.json", "sha256": "0" * 64, "size": 1})
        files.append({"path": "./after.json", "sha256": "0" * 64, "size": 1})  # still checked after the loop
        d["source"]["files"].append({"path": "/abs.json", "sha256": "0" * 64, "size": 1})

    edit_manifest(ckpt, damage)
    ev = structure.check_paths(m.read_manifest_json(ckpt), ckpt)
    msgs = found(ev)
    assert msgs[:5] == [
        (M, None, "output file 'config.json' is listed 2 times"),
        (M, None, "output file entry has no path"),
        (M, None, "output file entry has no path"),
        (M, None, "output path '../up.json' contains '..' and would leave the checkpoint directory"),
        (M, None, msgs[4][2]),
    ]
    assert msgs[4][2].startswith("output path 'loop.json' cannot be resolved: ")
    assert msgs[5:] == [
        (M, None, "output path './after.json' is not normalised (empty or '.' components)"),
        (M, None, "source path '/abs.json' is absolute; manifest paths are relative to the checkpoint root")]
    # Three output files, the duplicate, '../up.json', 'loop.json', './after.json'; two source files, '/abs.json'.
    assert ev.measured == {"paths_checked": 10, "blobs_verified": 0, "hard_linked": 0, "files_in_folder": 5}
    assert ev.summary == ("manifest paths are relative, unique and stay inside the checkpoint, and so does every "
                          "file in the folder (none of them hard-linked)")


def test_check_paths_outside_and_empty(fixture_copy, tmp_path):
    ckpt, _ = fixture_copy
    (tmp_path / "outside.json").write_text("{}")
    os.symlink(tmp_path / "outside.json", ckpt / "extra.json")
    edit_manifest(ckpt, lambda d: d["output"]["files"].append({"path": "extra.json", "sha256": "0" * 64, "size": 2}))
    ev = structure.check_paths(m.read_manifest_json(ckpt), ckpt)
    assert found(ev) == [("extra.json", None, f"output path 'extra.json' resolves outside the checkpoint "
                                              f"(to {(tmp_path / 'outside.json').resolve()})")]
    outside = (tmp_path / "outside.json").resolve()
    for raw in ({}, {"output": [], "source": {"files": "none"}}, {"output": {"files": []}, "source": {}}):
        empty = structure.check_paths(raw, ckpt)
        # The folder itself is still looked at: the link ships whatever the manifest says.
        assert found(empty) == [(M, None, "the manifest lists no files"),
                                ("extra.json", None, f"resolves outside the checkpoint (to {outside}); it would "
                                 "ship another file's bytes")]
        assert empty.measured["paths_checked"] == 0
    (ckpt / "extra.json").unlink()
    one = structure.check_paths({"source": {"files": [{"path": "a.json"}]}}, ckpt)
    assert one.ok and one.measured == {"paths_checked": 1, "blobs_verified": 0, "hard_linked": 0,
                                       "files_in_folder": 4}


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("", "is empty or has surrounding whitespace"),
        ("a.json ", "is empty or has surrounding whitespace"),
        ("a\\b.json", "is not a POSIX relative path"),
        ("c:/x.json", "is not a POSIX relative path"),
        ("Z:x.json", "is not a POSIX relative path"),
        ("/x.json", "is absolute; manifest paths are relative to the checkpoint root"),
        ("a/../../x.json", "contains '..' and would leave the checkpoint directory"),
        ("a//x.json", "is not normalised (empty or '.' components)"),
        ("./x.json", "is not normalised (empty or '.' components)"),
        ("a/x.json", None),
        ("1:y.json", None),
    ],
)
def test_path_problems(path, problem):
    assert structure._path_problem(path) == problem


def test_list_checkpoint_files_skips_only_what_an_upload_skips(tmp_path):
    for rel in (".git/HEAD", "x/.git/y", ".cache/huggingface/x.json", ".cache/x.json", "sub/.hidden/y.json",
                ".top.json", "a.json", "sub/b.json", "sub/c/d.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}")
    assert m.list_checkpoint_files(tmp_path) == [".cache/x.json", ".top.json", "a.json", "sub/.hidden/y.json",
                                                 "sub/b.json", "sub/c/d.json"]


def test_check_file_list_exact(fixture_copy):
    ckpt, _ = fixture_copy
    (ckpt / "extra.json").write_text("{}")
    (ckpt / "notes.txt").write_text("notes")

    def damage(d):
        d["output"]["files"].append({"path": "gone.safetensors", "sha256": "0" * 64, "size": 1})
        d["output"]["files"].append({"path": M, "sha256": "0" * 64, "size": 1})

    edit_manifest(ckpt, damage)
    ev = structure.check_file_list(m.load_manifest(ckpt), ckpt)
    unlisted = ("present in the checkpoint but not listed in the manifest: it would ship unverified (only README, "
                "images and licence texts may be unlisted)")
    assert found(ev) == [
        ("gone.safetensors", None, "listed in the manifest but missing from the checkpoint"),
        ("extra.json", None, unlisted),
        ("notes.txt", None, unlisted),
        (M, None, "the manifest lists itself; its own checksum cannot be inside it"),
    ]
    # Listed: three files, gone.safetensors and the manifest; present: four files, extra.json, notes.txt.
    assert ev.measured == {"files_listed": 5, "files_present": 6, "files_unlisted_never_loaded": 0, "code_files": 0}
    assert ev.summary == ("every file in the checkpoint is listed in the manifest (or is one no runtime loads: "
                          "README, images, licence), no file is code or a pickle, and every listed file exists")


def test_check_checksums_exact(fixture_copy):
    ckpt, src = fixture_copy
    man = m.load_manifest(ckpt)
    (ckpt / "config.json").write_text((ckpt / "config.json").read_text() + " ")
    (ckpt / "extra.json").write_text("{}")
    files = (
        m.FileEntry("../x.json", "0" * 64, 1),
        m.FileEntry("gone.json", "0" * 64, 1),
        *man.output_files,
    )
    ev = structure.check_checksums(files, ckpt, what="output", complete=True)
    size = (ckpt / "config.json").stat().st_size
    config = next(f for f in man.output_files if f.path == "config.json")
    got = __import__("hashlib").sha256((ckpt / "config.json").read_bytes()).hexdigest()
    assert found(ev) == [
        ("extra.json", None, "output file is not listed in the manifest: its content is unverified"),
        (M, None, "not hashed: unsafe path '../x.json'"),
        ("gone.json", None, "output file is missing"),
        ("config.json", None, f"size is {size} bytes, the manifest says {config.size}"),
        ("config.json", None, f"sha256 is {got}, the manifest says {config.sha256}"),
    ]
    total = sum((ckpt / f.path).stat().st_size for f in man.output_files)
    assert ev.measured == {"files_hashed": 3, "bytes_hashed": total}
    assert ev.summary == "output files match the manifest's sha256 and size"
    # Without `complete` an unlisted file is not this check's business; the manifest itself never is.
    assert [f.file for f in structure.check_checksums(files, ckpt, what="output").findings] == [
        M, "gone.json", "config.json", "config.json"]
    source = structure.check_checksums(man.source_files, src, what="source", complete=True)
    assert source.ok and source.measured["files_hashed"] == 2
    assert found(structure.check_checksums((), src, what="source")) == [(M, None, "the manifest lists no source files")]


def test_check_checksums_names_an_unreadable_file(fixture_copy, monkeypatch):
    ckpt, _ = fixture_copy
    seen = {}

    def refuse(paths, labels):
        seen["labels"] = labels
        raise CheckpointError("cannot read: permission denied", file=labels[-1])

    monkeypatch.setattr(structure, "sha256_files", refuse)
    man = m.load_manifest(ckpt)
    ev = structure.check_checksums(man.output_files, ckpt, what="output")
    assert seen["labels"] == [f.path for f in man.output_files]
    assert found(ev) == [("model.safetensors", None, "cannot read: permission denied")]
    assert ev.measured == {}


def _entry(name, action, dtype, shape, outputs, statistics=None):
    return {"source_name": name, "action": action, "source_dtype": dtype, "source_shape": list(shape),
            "outputs": [{"name": n, "dtype": d, "shape": list(s)} for n, d, s in outputs],
            **({"statistics": statistics} if statistics else {})}


def test_check_output_coverage_exact(fixture_copy):
    ckpt, _ = fixture_copy
    q = "layers.0.self_attn.q_proj.weight"

    def damage(d):
        t = d["tensors"]
        t[:] = [e for e in t if e["source_name"] != "norm.weight"]  # norm.weight: unnamed
        for e in t:
            if e["source_name"] == "hidden_norm.weight":
                e["outputs"][0]["dtype"] = "F32"  # claimed in another dtype, and not copied unchanged
            if e["source_name"] == "layers.0.input_layernorm.weight":
                e["outputs"][0]["shape"] = [255]
        t.append(_entry("ghost.weight", "kept", "BF16", [4], [("ghost.weight", "BF16", [4])]))
        t.append(_entry("other.weight", "kept", "BF16", [4], [(q, "BF16", [4])]))  # claims q_proj again

    edit_manifest(ckpt, damage)
    with Checkpoint.open(ckpt) as c:
        ev = structure.check_output_coverage(m.load_manifest(ckpt), c)
    copied = "tensor must be copied unchanged, but the manifest maps it to"
    assert found(ev) == [
        (M, "hidden_norm.weight", f"kept {copied} 'hidden_norm.weight' F32 [256]"),
        (M, "layers.0.input_layernorm.weight", f"kept {copied} 'layers.0.input_layernorm.weight' BF16 [255]"),
        (M, q, "output tensor is claimed by two manifest entries (again by 'other.weight')"),
        (M, "other.weight", f"kept {copied} '{q}' BF16 [4]"),
        (M, "ghost.weight", "named by the manifest but missing from the checkpoint"),
        ("model.safetensors", "norm.weight", "present in the checkpoint but not named by the manifest"),
        ("model.safetensors", "hidden_norm.weight", "is BF16 [256], the manifest says F32 [256]"),
        ("model.safetensors", "layers.0.input_layernorm.weight", "is BF16 [256], the manifest says BF16 [255]"),
        ("model.safetensors", q, "is F8_E4M3 [256, 256], the manifest says BF16 [4]"),
    ]
    assert ev.measured == {"manifest_outputs": 56, "checkpoint_tensors": 56}
    assert ev.summary == ("every tensor in the checkpoint is named by the manifest, and every named tensor exists "
                          "as claimed")


def _tensor_entry(name, action, dtype, shape, *outputs):
    return m.TensorEntry(name, action, dtype, tuple(shape), tuple(m.OutputTensor(n, d, tuple(s), "tensor")
                                                             for n, d, s in outputs), None, "")


@pytest.mark.parametrize(
    ("entry", "messages"),
    [
        (_tensor_entry("a.weight", "quantized", "BF16", [4, 32], ("b.weight", "F8_E4M3", [4, 32])),
         ["quantized output is named 'b.weight', expected the source name",
          "quantized tensor needs a scale output named 'a.weight_scale'"]),
        (_tensor_entry("c.weight", "quantized", "BF16", [4, 32], ("c.weight", "F8_E4M3", [32, 4]),
                       ("c.weight.scale", "U8", [4, 1])),
         ["quantized tensor needs a scale output named 'c.weight_scale'",
          "quantized shape [32, 4] differs from the source shape [4, 32]"]),
        (_tensor_entry("d.weight", "quantized", "BF16", [4, 32], ("d.weight", "F8_E4M3", [4, 32]),
                       ("d.weight_scale", "U8", [4, 1])), []),
        (_tensor_entry("e", "excluded", "BF16", [4], ("e", "BF16", [4])), []),
        (_tensor_entry("e", "excluded", "BF16", [4], ("f", "BF16", [4])),
         ["excluded tensor must be copied unchanged, but the manifest maps it to 'f' BF16 [4]"]),
        (_tensor_entry("e", "kept", "BF16", [4], ("e", "F16", [4])),
         ["kept tensor must be copied unchanged, but the manifest maps it to 'e' F16 [4]"]),
        (_tensor_entry("e", "kept", "BF16", [4], ("e", "BF16", [2, 2])),
         ["kept tensor must be copied unchanged, but the manifest maps it to 'e' BF16 [2, 2]"]),
    ],
)
def test_each_entry_maps_to_what_its_action_produces(entry, messages):
    from qualify.core import Evidence

    ev = Evidence("entry")
    structure._check_entry_shape(entry, ev)
    assert found(ev) == [(M, entry.source_name, msg) for msg in messages]


def test_check_output_coverage_of_an_empty_checkpoint(fixture_copy, tmp_path):
    from dataclasses import replace

    from tests.helpers import write_checkpoint

    ckpt, _ = fixture_copy
    empty = write_checkpoint(tmp_path / "empty", {})
    with Checkpoint.open(empty) as c:
        ev = structure.check_output_coverage(replace(m.load_manifest(ckpt), tensors=()), c)
    assert found(ev) == [(None, None, "the checkpoint has no tensors")]
    assert ev.measured == {"manifest_outputs": 0, "checkpoint_tensors": 0}


def test_check_source_coverage_exact(fixture_copy, tmp_path):
    ckpt, src = fixture_copy

    def damage(d):
        t = d["tensors"]
        t[:] = [e for e in t if e["source_name"] != "norm.weight"]
        for e in t:
            if e["source_name"] == "hidden_norm.weight":
                e["source_dtype"] = "F32"
            if e["source_name"] == "layers.0.input_layernorm.weight":
                e["source_shape"] = [255]
        t.append(dict(t[0]))
        t.append(_entry("ghost.weight", "kept", "BF16", [4], [("ghost.weight", "BF16", [4])]))

    edit_manifest(ckpt, damage)
    with Checkpoint.open(src) as s:
        ev = structure.check_source_coverage(m.load_manifest(ckpt), s)
    first = "candidate_selector.hidden_projection.weight"
    assert found(ev) == [
        (M, first, "accounted for 2 times"),
        ("model.safetensors", "norm.weight", "source tensor is not accounted for by the manifest (dropped silently?)"),
        (M, "ghost.weight", "the manifest names a source tensor that the source does not have"),
        ("model.safetensors", "hidden_norm.weight", "source is BF16 [256], the manifest says F32 [256]"),
        ("model.safetensors", "layers.0.input_layernorm.weight", "source is BF16 [256], the manifest says BF16 [255]"),
    ]
    assert ev.measured == {"source_tensors": 37, "quantized": 19, "kept": 16, "excluded": 3}
    assert ev.summary == "every source tensor is quantized, kept or excluded exactly once"
    from dataclasses import replace

    from tests.helpers import write_checkpoint

    with Checkpoint.open(write_checkpoint(tmp_path / "empty", {})) as s:
        empty = structure.check_source_coverage(replace(m.load_manifest(ckpt), tensors=()), s)
    assert found(empty) == [(None, None, "the source checkpoint has no tensors")]
    assert empty.measured == {"source_tensors": 0, "quantized": 0, "kept": 0, "excluded": 0}


def test_check_statistics_exact(fixture_copy, tmp_path):
    ckpt, src = fixture_copy
    q = "layers.0.self_attn.q_proj.weight"

    def damage(d):
        for e in d["tensors"]:
            if e["source_name"] == q:
                e["statistics"]["mse"] *= 0.5
                e["statistics"]["sse"] *= 0.5
        d["aggregate"]["max_abs_error"] = 1.0
        d["aggregate"]["sse"] = 1.0
        d["tensors"].insert(0, _entry("ghost.weight", "quantized", "BF16", [4, 32],
                                      [("ghost.weight", "F8_E4M3", [4, 32]), ("ghost.weight_scale", "U8", [4, 1])],
                                      statistics=next(e for e in d["tensors"] if "statistics" in e)["statistics"]))

    edit_manifest(ckpt, damage)
    with Checkpoint.open(ckpt) as c, Checkpoint.open(src) as s:
        ev = structure.check_statistics(m.load_manifest(ckpt), c, s, rtol=1e-6, atol=1e-12)
    assert [(f.file, f.tensor) for f in ev.findings] == [(None, "ghost.weight"), (M, q)]
    assert ev.findings[0].message == "cannot recompute: weight, scale or source tensor is missing"
    assert ev.findings[1].message.startswith("statistics differ from the tensors: ")
    assert [part.split(":")[0] for part in ev.findings[1].message.split(": ", 1)[1].split("; ")] == ["sse", "mse"]
    # One tensor could not be recomputed: no aggregate is claimed to agree or disagree.
    assert ev.measured == {"tensors_recomputed": 19}
    assert ev.expected == {"rtol": 1e-6, "atol": 1e-12}
    assert ev.summary == ("per-weight and aggregate quantization statistics recomputed from the tensors agree with "
                          "the manifest (rtol 1e-06, atol 1e-12)")
    edit_manifest(ckpt, lambda d: d["tensors"].pop(0))
    with Checkpoint.open(ckpt) as c, Checkpoint.open(src) as s:
        ev = structure.check_statistics(m.load_manifest(ckpt), c, s, rtol=1e-6, atol=1e-12)
    assert [(f.file, f.tensor) for f in ev.findings] == [(M, q), (M, None)]
    assert ev.findings[1].message.startswith("aggregate statistics differ from the tensors: ")
    parts = ev.findings[1].message.split(": ", 1)[1].split("; ")
    assert sorted(p.split(":")[0] for p in parts) == ["max_abs_error", "sse"]
    assert ev.measured["tensors_recomputed"] == 19 and ev.measured["aggregate"]["tensors"] == 19


def test_check_statistics_of_tensors_that_are_not_mxfp8(fixture_copy, monkeypatch):
    ckpt, src = fixture_copy
    calls = []

    def broken(entry, checkpoint, source, recipe):
        calls.append(recipe)
        if entry.source_name == "fc.weight":
            raise ValueError("shape mismatch")
        if entry.source_name == "layers.0.mlp.up_proj.weight":
            raise CheckpointError("has non-finite values", file="source/model.safetensors")
        return real(entry, checkpoint, source, recipe)

    real = structure.recompute_statistics
    monkeypatch.setattr(structure, "recompute_statistics", broken)
    man = m.load_manifest(ckpt)
    with Checkpoint.open(ckpt) as c, Checkpoint.open(src) as s:
        ev = structure.check_statistics(man, c, s, rtol=1e-6, atol=1e-12)
    assert set(calls) == {man.scale_recipe}
    assert found(ev) == [
        ("model.safetensors", "fc.weight", "cannot recompute statistics: shape mismatch"),
        ("source/model.safetensors", "layers.0.mlp.up_proj.weight", "has non-finite values"),
    ]
    assert ev.measured == {"tensors_recomputed": 17}


def test_check_source_pinned_repository(fixture_copy):
    ckpt, _ = fixture_copy
    raw = m.read_manifest_json(ckpt)
    revision, repo = raw["source"]["revision"], raw["source"]["repo"]
    ok = structure.check_source_pinned(raw, revision, repo)
    assert ok.ok and ok.expected == {"repo": repo, "revision": revision}
    other = {"source": {"repo": "other-org/dflash2-tiny", "revision": revision}}
    assert found(structure.check_source_pinned(other, revision, repo)) == [
        (M, None, f"source repository is 'other-org/dflash2-tiny', not the repository the profile qualifies ({repo})")]
    # Names compare exactly: a repository in other letters is not taken on trust.
    upper = {"source": {"repo": repo.upper(), "revision": revision}}
    assert not structure.check_source_pinned(upper, revision, repo).ok
    assert found(structure.check_source_pinned({"source": {"revision": revision}}, revision, repo)) == [
        (M, None, f"source repository is missing, not the repository the profile qualifies ({repo})")]


@pytest.mark.parametrize("byte", [0x02, 0x80, 0xFF])
def test_a_bool_tensor_with_a_byte_other_than_0_or_1_fails_naming_tensor_and_offset(tmp_path, byte):
    root = tmp_path / "c"
    root.mkdir()
    save_file({"a.weight": torch.ones(4, dtype=torch.bfloat16), "mask": torch.tensor([True, False, True, True])},
              str(root / "model.safetensors"))
    with Checkpoint.open(root) as ckpt:
        assert structure.check_container(ckpt).ok
        start = ckpt.files["model.safetensors"].data_offset + ckpt.info("mask").start
    raw = bytearray((root / "model.safetensors").read_bytes())
    raw[start + 3] = byte
    (root / "model.safetensors").write_bytes(bytes(raw))
    with Checkpoint.open(root) as ckpt:
        ev = structure.check_container(ckpt)
    (finding,) = ev.findings
    assert (finding.file, finding.tensor) == ("model.safetensors", "mask")
    assert finding.message == (f"BOOL element 3 is byte 0x{byte:02x} (file offset {start + 3}); only 0 and 1 "
                               "are valid")


def test_a_checkpoint_without_tensors_fails_the_container_check(tmp_path):
    root = tmp_path / "c"
    root.mkdir()
    save_file({}, str(root / "model.safetensors"))
    with Checkpoint.open(root) as ckpt:
        ev = structure.check_container(ckpt)
    assert [f.message for f in ev.findings] == ["the checkpoint holds no tensors"]
    assert ev.measured == {"files": ["model.safetensors"], "tensors": 0}
