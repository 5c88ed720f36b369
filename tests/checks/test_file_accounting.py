"""Every byte that ships is accounted for: listed and verified, or never loaded; no code, no escape by a link."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import zipfile
from pathlib import Path

import pytest

from qualify.checkpoint import files
from qualify.checkpoint import manifest as m
from qualify.checks import structure
from qualify.profile import load_profile

M = m.MANIFEST_NAME


def list_in_manifest(ckpt: Path, *rels: str) -> None:
    """Add (or refresh) manifest entries for ``rels`` with their real checksums."""
    data = json.loads((ckpt / M).read_text())
    entries = {f["path"]: f for f in data["output"]["files"]}
    for rel in rels:
        raw = (ckpt / rel).read_bytes()
        entries[rel] = {"path": rel, "sha256": hashlib.sha256(raw).hexdigest(), "size": len(raw)}
    data["output"]["files"] = [entries[k] for k in sorted(entries)]
    (ckpt / M).write_text(json.dumps(data))


def file_list(ckpt: Path, **kw) -> list[tuple[str | None, str]]:
    ev = structure.check_file_list(m.load_manifest(ckpt), ckpt, **kw)
    return [(f.file, f.message) for f in ev.findings]


def paths(ckpt: Path) -> list[tuple[str | None, str]]:
    ev = structure.check_paths(m.read_manifest_json(ckpt), ckpt)
    return [(f.file, f.message) for f in ev.findings]


def test_the_fixture_is_fully_accounted_for(fixture_copy):
    ckpt, _ = fixture_copy
    assert file_list(ckpt) == [] and paths(ckpt) == []


@pytest.mark.parametrize("rel", ["README.md", "docs/usage.md", "LICENSE", "LICENSE.txt", "NOTICE", "chart.png",
                                 "img/a.JPG", ".gitattributes"])
def test_files_no_runtime_loads_may_ship_unlisted(fixture_copy, rel):
    ckpt, _ = fixture_copy
    (ckpt / rel).parent.mkdir(parents=True, exist_ok=True)
    (ckpt / rel).write_text("text")
    assert file_list(ckpt) == []


@pytest.mark.parametrize("rel", ["tokenizer.model", "generation_config.json", "merges.txt", "sub/vocab.json",
                                 ".hidden/special.json", "README.md.txt", "notes"])
def test_any_other_unlisted_file_fails_naming_it(fixture_copy, rel):
    ckpt, _ = fixture_copy
    (ckpt / rel).parent.mkdir(parents=True, exist_ok=True)
    (ckpt / rel).write_text("{}")
    found = file_list(ckpt)
    assert [f for f, _ in found] == [rel]
    assert "not listed in the manifest" in found[0][1]


@pytest.mark.parametrize("rel", ["modeling_dflash.py", "sub/helper.py", "pytorch_model.bin", "training_args.bin",
                                 "optimizer.pt", "weights.pth", "state.pkl", "x.ckpt", "lib.so", "cache.pyc"])
def test_code_and_pickles_fail_even_when_listed(fixture_copy, rel):
    ckpt, _ = fixture_copy
    (ckpt / rel).parent.mkdir(parents=True, exist_ok=True)
    (ckpt / rel).write_bytes(b"import os\n")
    list_in_manifest(ckpt, rel)
    found = file_list(ckpt)
    assert [f for f, _ in found] == [rel]
    assert "code or a pickle" in found[0][1] and "allow_code" in found[0][1]
    assert file_list(ckpt, allow_code=True) == []


@pytest.mark.parametrize("make", ["pickle", "torch_zip"])
def test_pickled_content_under_another_name_fails(fixture_copy, make):
    ckpt, _ = fixture_copy
    target = ckpt / "tokenizer.model"
    if make == "pickle":
        target.write_bytes(pickle.dumps({"a": 1}, protocol=4))
    else:
        with zipfile.ZipFile(target, "w") as z:
            z.writestr("archive/data.pkl", pickle.dumps([1]))
    list_in_manifest(ckpt, "tokenizer.model")
    found = file_list(ckpt)
    assert [f for f, _ in found] == ["tokenizer.model"]
    assert ("pickle" in found[0][1]) if make == "pickle" else ("zip archive" in found[0][1])


@pytest.mark.parametrize(("rel", "where"), [
    ("config.json", "$.auto_map"),
    ("tokenizer_config.json", "$.auto_map"),
    ("config.json", "$.text_config.auto_map"),
])
def test_a_config_naming_code_fails(fixture_copy, rel, where):
    ckpt, _ = fixture_copy
    path = ckpt / rel
    data = json.loads(path.read_text()) if path.exists() else {}
    amap = {"AutoModel": "modeling_dflash.DFlashModel"}
    if where == "$.auto_map":
        data["auto_map"] = amap
    else:
        data["text_config"] = {"auto_map": amap}
    path.write_text(json.dumps(data))
    list_in_manifest(ckpt, rel)
    found = file_list(ckpt)
    assert found == [(rel, f"names Python code to import ({where}): loading it with trust_remote_code runs the "
                           "checkpoint's own modules; the profile does not allow code in a checkpoint "
                           "([manifest] allow_code)")]


def test_an_unreadable_json_file_is_not_assumed_free_of_code(fixture_copy):
    ckpt, _ = fixture_copy
    (ckpt / "tokenizer_config.json").write_text('{"auto_map": ')
    list_in_manifest(ckpt, "tokenizer_config.json")
    (file, message), = file_list(ckpt)
    assert file == "tokenizer_config.json" and "whether it names code is unknown" in message


def test_a_second_unindexed_safetensors_file_fails(fixture_copy):
    ckpt, _ = fixture_copy
    (ckpt / "model-extra.safetensors").write_bytes((ckpt / "model.safetensors").read_bytes())
    list_in_manifest(ckpt, "model-extra.safetensors")
    found = file_list(ckpt)
    assert sorted(f for f, _ in found) == ["model-extra.safetensors", "model.safetensors"]
    assert all("without an index" in msg for _, msg in found)


def test_a_shard_the_index_does_not_name_fails(fixture_copy):
    ckpt, _ = fixture_copy
    header_names = ["norm.weight"]
    index = {"metadata": {}, "weight_map": dict.fromkeys(header_names, "model.safetensors")}
    (ckpt / "model.safetensors.index.json").write_text(json.dumps(index))
    (ckpt / "model-00003-of-00003.safetensors").write_bytes((ckpt / "model.safetensors").read_bytes())
    list_in_manifest(ckpt, "model.safetensors.index.json", "model-00003-of-00003.safetensors")
    found = file_list(ckpt)
    assert found == [("model-00003-of-00003.safetensors", "a safetensors file that model.safetensors.index.json "
                      "does not name: its tensors are never checked, yet it ships")]


def test_a_safetensors_file_in_a_subfolder_fails(fixture_copy):
    ckpt, _ = fixture_copy
    (ckpt / "extra").mkdir()
    (ckpt / "extra" / "model.safetensors").write_bytes((ckpt / "model.safetensors").read_bytes())
    list_in_manifest(ckpt, "extra/model.safetensors")
    assert [f for f, _ in file_list(ckpt)] == ["extra/model.safetensors"]


def move_weights(ckpt: Path, rel: str, *, index_to: str | None) -> None:
    """model.safetensors moved to ``rel`` (the manifest says so), with an index mapping every tensor to
    ``index_to`` (None: no index)."""
    from qualify.checkpoint.safetensors_io import Checkpoint

    with Checkpoint.open(ckpt) as opened:
        names = opened.names()
    (ckpt / rel).parent.mkdir(parents=True, exist_ok=True)
    (ckpt / "model.safetensors").rename(ckpt / rel)
    data = json.loads((ckpt / M).read_text())
    data["output"]["files"] = [dict(f, path=rel) if f["path"] == "model.safetensors" else f
                               for f in data["output"]["files"]]
    (ckpt / M).write_text(json.dumps(data))
    if index_to is not None:
        (ckpt / structure.INDEX_NAME).write_text(json.dumps({"metadata": {}, "weight_map": dict.fromkeys(names,
                                                                                                        index_to)}))
        list_in_manifest(ckpt, structure.INDEX_NAME)


def test_an_index_mapping_every_tensor_into_a_subfolder_fails_naming_vllms_rule(fixture_copy):
    # The harness's reader follows the index into weights/; vLLM 0.32 globs the top folder only and finds no
    # weights ("Cannot find any model weights"): the checks would qualify tensors the runtime never loads.
    ckpt, _ = fixture_copy
    move_weights(ckpt, "weights/model.safetensors", index_to="weights/model.safetensors")
    found = file_list(ckpt)
    assert [f for f, _ in found] == ["weights/model.safetensors", structure.INDEX_NAME, structure.INDEX_NAME]
    assert all(structure.VLLM_WEIGHTS_RULE in msg for _, msg in found)
    assert found[1][1].startswith("maps tensors to 'weights/model.safetensors', which vLLM never loads")
    assert found[2][1].startswith("names no safetensors file of the top folder, so vLLM loads no weights")


@pytest.mark.parametrize("index_to", ["weights/model.safetensors", "./model.safetensors"])
def test_an_index_naming_the_top_file_by_another_path_fails_though_the_file_is_there(fixture_copy, index_to):
    # vLLM compares os.path.join(folder, name) with the globbed path as strings: "./x" is not "x".
    ckpt, _ = fixture_copy
    move_weights(ckpt, "model.safetensors", index_to=index_to)
    found = file_list(ckpt)
    assert (structure.INDEX_NAME, f"maps tensors to {index_to!r}, which vLLM never loads (the tensors it names "
            f"would be missing): {structure.VLLM_WEIGHTS_RULE}") in found
    assert ("model.safetensors", "a safetensors file that model.safetensors.index.json does not name: its tensors "
            "are never checked, yet it ships") in found


def test_the_only_shard_in_a_subfolder_without_an_index_fails_naming_vllms_rule(fixture_copy):
    ckpt, _ = fixture_copy
    move_weights(ckpt, "sub/model.safetensors", index_to=None)
    assert file_list(ckpt) == [("sub/model.safetensors", "a safetensors file in a subfolder, never loaded: "
                                + structure.VLLM_WEIGHTS_RULE)]


def test_an_index_naming_the_top_file_passes(fixture_copy):
    ckpt, _ = fixture_copy
    move_weights(ckpt, "model.safetensors", index_to="model.safetensors")
    assert file_list(ckpt) == []


@pytest.mark.parametrize("shape", ["absolute", "relative", "dir", "chain", "readme", "broken", "loop"])
def test_no_link_may_leave_the_checkpoint_listed_or_not(fixture_copy, tmp_path, shape):
    ckpt, src = fixture_copy
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0")
    rel = {"dir": "tokenizer", "readme": "README.md"}.get(shape, "tokenizer.model")
    link = ckpt / rel
    if shape == "absolute":
        link.symlink_to(secret)
    elif shape == "relative":
        link.symlink_to(os.path.relpath(secret, ckpt))
    elif shape == "dir":
        link.symlink_to(tmp_path, target_is_directory=True)
    elif shape == "chain":
        (ckpt / "hop.json").symlink_to(src / "config.json")
        list_in_manifest(ckpt, "hop.json")
        link.symlink_to("hop.json")
    elif shape == "readme":
        link.symlink_to(secret)
    elif shape == "broken":
        link.symlink_to(tmp_path / "nothing-here")
    else:
        link.symlink_to(rel)
    found = dict(paths(ckpt))
    assert rel in found, found
    assert ("resolves outside the checkpoint" in found[rel]) or ("broken link" in found[rel]) or \
        ("cannot be resolved" in found[rel])


def test_a_link_inside_the_checkpoint_is_fine(fixture_copy):
    ckpt, _ = fixture_copy
    (ckpt / "alias.json").symlink_to("config.json")
    list_in_manifest(ckpt, "alias.json")
    assert paths(ckpt) == [] and file_list(ckpt) == []


@pytest.mark.parametrize("bad", ["\x00", "\n", "\x1b", "\u202e", "\r"])
def test_a_control_character_in_a_manifest_path_fails_naming_it(fixture_copy, bad):
    ckpt, _ = fixture_copy
    data = json.loads((ckpt / M).read_text())
    data["output"]["files"][0]["path"] = f"config{bad}.json"
    (ckpt / M).write_text(json.dumps(data))
    ev = structure.check_paths(data, ckpt)
    assert not ev.ok
    assert any(f"control character {bad!a}" in f.message and "config" in f.message for f in ev.findings), ev.findings
    # The checksum check refuses to hash it too, and neither raises.
    assert not structure.check_checksums(m._files(data["output"]["files"]), ckpt, what="output").ok


# -- a hub cache snapshot ---------------------------------------------------------------


def hub_snapshot(ckpt: Path, cache: Path, repo: str = "models--org--draft") -> Path:
    blobs = cache / repo / "blobs"
    snap = cache / repo / "snapshots" / ("2" * 40)
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    for f in sorted(ckpt.iterdir()):
        data = f.read_bytes()
        name = (hashlib.sha256(data).hexdigest() if f.suffix == ".safetensors"
                else hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest())
        f.replace(blobs / name)
        os.symlink(os.path.relpath(blobs / name, snap), snap / f.name)
    return snap


def test_a_hub_snapshot_with_content_addressed_blobs_passes(fixture_copy, tmp_path):
    ckpt, _ = fixture_copy
    snap = hub_snapshot(ckpt, tmp_path / "cache")
    ev = structure.check_paths(m.read_manifest_json(snap), snap)
    assert ev.ok, ev.failure_text()
    assert ev.measured["blobs_verified"] == 4
    assert file_list(snap) == []


def test_a_blobs_folder_that_is_a_link_elsewhere_is_refused(fixture_copy, tmp_path):
    ckpt, _ = fixture_copy
    snap = hub_snapshot(ckpt, tmp_path / "cache")
    repo = snap.parent.parent
    real = tmp_path / "elsewhere"
    (repo / "blobs").rename(real)
    (repo / "blobs").symlink_to(real, target_is_directory=True)
    assert files.storage_roots(snap) == (snap.resolve(),)
    found = paths(snap)
    assert any(f == "blobs" and "is a link or lies outside its repository" in msg for f, msg in found)
    assert any(f == "model.safetensors" and "resolves outside" in msg for f, msg in found)


def test_a_blobs_link_to_the_root_lets_nothing_through(fixture_copy, tmp_path):
    ckpt, _ = fixture_copy
    repo = tmp_path / "cache" / "models--org--draft"
    snap = repo / "snapshots" / ("3" * 40)
    snap.mkdir(parents=True)
    (repo / "blobs").symlink_to("/", target_is_directory=True)
    for f in sorted(ckpt.iterdir()):
        (snap / f.name).symlink_to(f)  # "through blobs" would be anywhere
    found = paths(snap)
    assert {f for f, msg in found if "resolves outside" in msg} >= {"config.json", "model.safetensors"}


@pytest.mark.parametrize("which", ["model.safetensors", "config.json"])
def test_a_blob_whose_name_is_not_its_digest_fails(fixture_copy, tmp_path, which):
    ckpt, _ = fixture_copy
    snap = hub_snapshot(ckpt, tmp_path / "cache")
    blob = (snap / which).resolve()
    with open(blob, "r+b") as fh:  # the content changed, the name did not
        fh.seek(40)
        byte = fh.read(1)
        fh.seek(40)
        fh.write(bytes([byte[0] ^ 1]))
    found = dict(paths(snap))
    assert which in found and "blob is not content-addressed" in found[which]


def test_never_loaded_list_has_one_home():
    from qualify.release import gate

    assert gate.is_load_relevant("README.md") is False and gate.is_load_relevant("tokenizer.model") is True
    assert not hasattr(gate, "NOT_LOAD_RELEVANT_SUFFIXES")
    assert files.is_never_loaded(".cache/huggingface/download/x.json")


def test_the_profile_allows_code_only_when_it_says_so(tmp_path):
    assert load_profile("fixture").allow_code is False
    text = Path(load_profile("fixture").path).read_text()
    path = tmp_path / "p.toml"
    path.write_text(text.replace("[manifest]\n", "[manifest]\nallow_code = true\n"))
    assert load_profile(path).allow_code is True
    path.write_text(text.replace("[manifest]\n", "[manifest]\nallow_code = \"yes\"\n"))
    with pytest.raises(Exception, match="allow_code"):
        load_profile(path)


@pytest.mark.parametrize(("key", "value", "says"), [
    ("statistics_rtol", "nan", "nan is not a finite number"),
    ("statistics_atol", "inf", "inf is not a finite number"),
    ("statistics_rtol", "-inf", "-inf is not a finite number"),
    ("statistics_atol", "-1e-9", "less than the minimum"),
])
def test_profile_tolerances_are_finite_and_not_negative(tmp_path, key, value, says):
    text = Path(load_profile("fixture").path).read_text()
    path = tmp_path / "p.toml"
    lines = [f"{key} = {value}" if line.startswith(f"{key} =") else line for line in text.splitlines()]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(Exception, match=f"manifest.{key}") as info:
        load_profile(path)
    assert says in str(info.value)


def test_an_integer_written_as_a_float_is_refused(tmp_path):
    text = Path(load_profile("fixture").path).read_text()
    path = tmp_path / "p.toml"
    path.write_text(text.replace("block_size = 32", "block_size = 32.0", 1))
    assert "block_size = 32.0" in path.read_text()
    with pytest.raises(Exception, match=r"block_size: 32.0 is written as a float; an integer is required"):
        load_profile(path)


@pytest.mark.parametrize("rel", ["README.md", "LICENSE", "docs/logo.png"])
def test_the_gate_refuses_a_never_loaded_file_that_links_out(fixture_copy, tmp_path, rel):
    from qualify.errors import CheckpointError
    from qualify.release.gate import describe_checkpoint

    ckpt, _ = fixture_copy
    (tmp_path / "secret").write_text("root:x:0:0")
    (ckpt / rel).parent.mkdir(parents=True, exist_ok=True)
    (ckpt / rel).symlink_to(tmp_path / "secret")
    with pytest.raises(CheckpointError, match="resolves outside the checkpoint") as info:
        describe_checkpoint(ckpt)
    assert info.value.file == rel


def test_a_fifo_in_the_checkpoint_fails_file_list(fixture_copy):
    ckpt, _ = fixture_copy
    os.mkfifo(ckpt / "pipe.json")
    found = file_list(ckpt)
    assert ("pipe.json", "is not a regular file (a FIFO, socket or device): nothing can verify what it would "
            "ship") in found
    assert any(f == "pipe.json" and "not listed" in msg for f, msg in found)


def test_a_file_name_that_is_not_utf8_fails_file_list_and_crashes_nothing(fixture_copy):
    from qualify.checkpoint.checksums import folder_revision

    ckpt, _ = fixture_copy
    with open(os.path.join(os.fsencode(ckpt), b"vocab\xff.json"), "wb") as fh:
        fh.write(b"{}")
    found = file_list(ckpt)
    assert ("vocab\udcff.json", "its name is not valid UTF-8, so no manifest (JSON) can list it") in found
    assert len(folder_revision(ckpt)) == 40


# -- weights named like a licence: only exact names are never loaded ---------------------------------------


@pytest.mark.parametrize("rel", ["notice.safetensors", "LICENSE.safetensors", "README.safetensors"])
def test_weights_named_like_a_licence_are_weights(fixture_copy, rel):
    """vLLM 0.32 loads every *.safetensors of a folder with no index: a zeroed copy under a licence's name is served."""
    from qualify.release import gate

    ckpt, _ = fixture_copy
    (ckpt / rel).write_bytes((ckpt / "model.safetensors").read_bytes())
    assert gate.is_load_relevant(rel)
    found = file_list(ckpt)
    assert (rel, "present in the checkpoint but not listed in the manifest: it would ship unverified (only README, "
                 "images and licence texts may be unlisted)") in found
    assert (rel, "one of 2 safetensors files without an index: which tensors load is undefined") in found
    list_in_manifest(ckpt, rel)
    assert (rel, "one of 2 safetensors files without an index: which tensors load is undefined") in file_list(ckpt)


# -- hard links ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rel", ["model.safetensors", "config.json"])
def test_a_hard_linked_file_fails_naming_it(fixture_copy, tmp_path, rel):
    ckpt, _ = fixture_copy
    os.link(ckpt / rel, tmp_path / "elsewhere")
    ev = structure.check_paths(m.read_manifest_json(ckpt), ckpt)
    assert [(f.file, f.message) for f in ev.findings] == [
        (rel, "has 2 hard links: the same bytes are reachable through another path, so they can change after "
              "qualification without any change to the checkpoint; ship a file of its own")]
    assert ev.measured["hard_linked"] == 1
    os.unlink(tmp_path / "elsewhere")
    assert paths(ckpt) == []


# -- runtime-readable files the source lacks ----------------------------------------------------------------


def source_files(ckpt: Path, src: Path) -> list[tuple[str | None, str]]:
    ev = structure.check_source_files(m.load_manifest(ckpt), ckpt, src)
    return [(f.file, f.message) for f in ev.findings]


ADDED = ("a file a runtime may read that the source lacks: a conversion adds only the weights, "
         "conversion_manifest.json and hf_quant_config.json, so this one changes what the runtime does unchecked")


def test_the_fixture_adds_only_what_conversion_adds(fixture_copy):
    ckpt, src = fixture_copy
    ev = structure.check_source_files(m.load_manifest(ckpt), ckpt, src)
    assert ev.ok, ev.failure_text()
    assert ev.measured == {"runtime_readable_files": 1}  # config.json (structure.source_config compares it)


@pytest.mark.parametrize("rel", ["tokenizer.json", "tokenizer_config.json", "generation_config.json",
                                 "chat_template.jinja", "special_tokens_map.json", "tokenizer.model", "merges.txt",
                                 "preprocessor_config.json", "sub/vocab.json", "params.json"])
def test_a_runtime_readable_file_the_source_lacks_fails_even_when_listed(fixture_copy, rel):
    ckpt, src = fixture_copy
    (ckpt / rel).parent.mkdir(parents=True, exist_ok=True)
    (ckpt / rel).write_text('{"eos_token_id": 7}')
    list_in_manifest(ckpt, rel)
    assert source_files(ckpt, src) == [(rel, ADDED)]
    (src / rel).parent.mkdir(parents=True, exist_ok=True)
    (src / rel).write_text('{"eos_token_id": 7}')
    assert source_files(ckpt, src) == []


def test_a_file_no_other_check_compares_must_equal_the_sources(fixture_copy):
    ckpt, src = fixture_copy
    for root, text in ((ckpt, '{"size": 2}'), (src, '{"size": 1}')):
        (root / "preprocessor_config.json").write_text(text)
        (root / "tokenizer_config.json").write_text(text)
    assert source_files(ckpt, src) == [("preprocessor_config.json", "differs from the source's byte for byte, and a "
                                                                    "runtime may read it")]


def test_readmes_licences_and_the_conversions_own_files_are_not_the_sources(fixture_copy):
    ckpt, src = fixture_copy
    for rel in ("README.md", "LICENSE", "docs/chart.png"):
        (ckpt / rel).parent.mkdir(parents=True, exist_ok=True)
        (ckpt / rel).write_text("text")
    assert source_files(ckpt, src) == []


def test_weights_the_manifest_does_not_list_are_not_the_conversions(fixture_copy):
    ckpt, src = fixture_copy
    (ckpt / "extra.safetensors").write_bytes((ckpt / "model.safetensors").read_bytes())
    assert source_files(ckpt, src) == [("extra.safetensors", ADDED)]
