"""Structure checks at the library level: each claim the manifest makes can be caught lying."""

from __future__ import annotations

import json
import os

import pytest

from qualify import manifest as m
from qualify.errors import ManifestError
from qualify.profile import load_profile
from qualify.safetensors_io import Checkpoint


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
            m.check_schema(ckpt),
            m.check_source_pinned(man.raw, prof.source_revision),
            m.check_paths(man.raw, ckpt),
            m.check_file_list(man, ckpt),
            m.check_checksums(man.output_files, ckpt, what="output"),
            m.check_checksums(man.source_files, src, what="source"),
            m.check_output_coverage(man, c),
            m.check_source_coverage(man, s),
            m.check_statistics(man, c, s, rtol=1e-6, atol=1e-12),
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
    ev = m.check_paths(m.read_manifest_json(ckpt), ckpt)
    assert not ev.ok and words in messages(ev) and path.strip() in messages(ev)


def test_a_symlink_out_of_the_checkpoint_is_caught(fixture_copy, tmp_path):
    ckpt, _ = fixture_copy
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    os.symlink(outside, ckpt / "extra.json")
    edit_manifest(ckpt, lambda d: d["output"]["files"].append({"path": "extra.json", "sha256": "0" * 64, "size": 2}))
    ev = m.check_paths(m.read_manifest_json(ckpt), ckpt)
    assert "resolves outside the checkpoint" in messages(ev)


def test_a_file_listed_twice(fixture_copy):
    ckpt, _ = fixture_copy
    edit_manifest(ckpt, lambda d: d["output"]["files"].append(dict(d["output"]["files"][0])))
    assert "listed 2 times" in messages(m.check_paths(m.read_manifest_json(ckpt), ckpt))


def test_an_unlisted_config_file_is_unverified(fixture_copy):
    ckpt, _ = fixture_copy
    (ckpt / "generation_config.json").write_text("{}")
    (ckpt / "README.md").write_text("notes")  # does not affect loading: allowed unlisted
    ev = m.check_file_list(m.load_manifest(ckpt), ckpt)
    assert [f.file for f in ev.findings] == ["generation_config.json"]


def test_size_and_checksum_mismatch(fixture_copy):
    ckpt, _ = fixture_copy
    with open(ckpt / "config.json", "a") as fh:
        fh.write(" ")
    ev = m.check_checksums(m.load_manifest(ckpt).output_files, ckpt, what="output")
    text = messages(ev)
    assert "config.json: size is" in text and "config.json: sha256 is" in text


@pytest.mark.parametrize(("revision", "words"), [("main", "'main'"), ("", "empty"), ("v1.0", "'v1.0'")])
def test_mutable_revisions_are_refused(fixture_copy, revision, words):
    ckpt, _ = fixture_copy
    edit_manifest(ckpt, lambda d: d["source"].update(revision=revision))
    ev = m.check_source_pinned(m.read_manifest_json(ckpt), None)
    assert words in messages(ev) and "40-hex" in messages(ev)


def test_a_revision_other_than_the_profiles(fixture_copy):
    ckpt, _ = fixture_copy
    ev = m.check_source_pinned(m.read_manifest_json(ckpt), "a" * 40)
    assert "is not the revision the profile qualifies" in messages(ev)


def test_schema_violations_are_listed_with_their_path(fixture_copy):
    ckpt, _ = fixture_copy
    edit_manifest(ckpt, lambda d: d["tensors"][0].update(action="rounded"))
    ev = m.check_schema(ckpt)
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
        text = messages(m.check_source_coverage(m.load_manifest(ckpt), s))
    assert "accounted for 2 times" in text
    assert "ghost.weight" in text and "source does not have" in text


def test_a_source_tensor_the_manifest_forgot(fixture_copy):
    ckpt, src = fixture_copy
    edit_manifest(ckpt, lambda d: d.update(tensors=[t for t in d["tensors"] if t["source_name"] != "norm.weight"]))
    with Checkpoint.open(src) as s:
        ev = m.check_source_coverage(m.load_manifest(ckpt), s)
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
        ev = m.check_statistics(m.load_manifest(ckpt), c, s, rtol=1e-6, atol=1e-12)
    assert len(ev.findings) == 1 and "mse: claimed" in messages(ev)
    assert ev.findings[0].tensor == "candidate_selector.hidden_projection.weight"


def test_statistics_with_nothing_quantized_are_not_a_pass(fixture_copy):
    ckpt, src = fixture_copy
    edit_manifest(ckpt, lambda d: d.update(tensors=[t for t in d["tensors"] if t["action"] != "quantized"]))
    with Checkpoint.open(ckpt) as c, Checkpoint.open(src) as s:
        ev = m.check_statistics(m.load_manifest(ckpt), c, s, rtol=1e-6, atol=1e-12)
    assert "nothing to verify" in messages(ev)
