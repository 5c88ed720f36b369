"""The strict safetensors reader: good files read exactly as safetensors reads them, and
every bad file fails with a message that names the file and, where there is one, the tensor."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import safetensors
import safetensors.torch
import torch

from qualify.checkpoint.safetensors_header import DTYPES
from qualify.checkpoint.safetensors_io import INDEX_NAME, Checkpoint, SafetensorsFile
from qualify.errors import CheckpointError, SafetensorsError, UsageError
from tests.checkpoint.safetensors_files import (
    BAD,
    as_bytes,
    assemble,
    entry,
    expect,
    good_header,
    header_bytes,
    open_bad,
    write,
)

# ------------------------------------------------------------------ good files


def test_roundtrip_matches_safetensors_loader(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(0)
    tensors = {
        "model.embed.weight": torch.randn(16, 8, generator=g).to(torch.bfloat16),
        "model.norm.weight": torch.randn(8, generator=g),
        "model.layers.0.mlp.weight": torch.randn(4, 32, generator=g).to(torch.float8_e4m3fn),
        "model.layers.0.mlp.weight_scale": torch.randint(0, 255, (4, 1), generator=g, dtype=torch.uint8),
        "scalar": torch.tensor(3.5),
        "empty": torch.empty(0, 4, dtype=torch.bfloat16),
        "flags": torch.tensor([True, False, True]),
        "ids": torch.arange(5, dtype=torch.int64),
    }
    path = tmp_path / "model.safetensors"
    safetensors.torch.save_file(tensors, str(path), metadata={"format": "pt", "quant": "mxfp8"})
    reference = safetensors.torch.load_file(str(path))

    with SafetensorsFile.open(path) as f:
        assert f.metadata == {"format": "pt", "quant": "mxfp8"}
        assert set(f.tensors) == set(tensors)
        assert f.data_offset == 8 + f.header_size
        starts = [t.start for t in f.tensors.values()]
        assert starts == sorted(starts), "tensors must come back in offset order"
        for name, want in reference.items():
            got = f.tensor(name)
            assert got.dtype == want.dtype and got.shape == want.shape, name
            # Compare bytes: float8 has no equality kernel and NaN != NaN anyway.
            assert as_bytes(got) == as_bytes(want), name
            assert bytes(f.raw(name)) == as_bytes(want), name
            info = f.tensors[name]
            assert info.nbytes == len(f.raw(name)) == want.numel() * want.element_size()
            assert info.numel == want.numel()


def test_open_is_lazy_and_tensor_is_zero_copy(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    safetensors.torch.save_file({"w": torch.arange(1024, dtype=torch.float32)}, str(path))
    f = SafetensorsFile.open(path)
    assert f._mm is None, "opening must read only the header"
    a = f.tensor("w")
    b = f.tensor("w")
    assert a.data_ptr() == b.data_ptr(), "two reads share the mapped pages"
    assert a.data_ptr() % 4 == 0
    a[0] = 99.0  # copy-on-write: the file stays as it was
    f.close()
    assert safetensors.torch.load_file(str(path))["w"][0].item() == 0.0
    assert b[0].item() == 99.0, "a tensor outlives close() (same private mapping)"
    f.close()  # idempotent


def test_no_writable_buffer_warning(tmp_path: Path, recwarn: pytest.WarningsRecorder) -> None:
    path = tmp_path / "model.safetensors"
    safetensors.torch.save_file({"w": torch.ones(4)}, str(path))
    with SafetensorsFile.open(path) as f:
        f.tensor("w")
    assert not [w for w in recwarn if "not writable" in str(w.message)]


def test_unpadded_header_reads_misaligned_data_correctly(tmp_path: Path) -> None:
    # A writer that does not pad the header leaves F32 data at an odd offset.
    values = torch.tensor([1.5, -2.0, 3.25], dtype=torch.float32)
    data = bytes(values.view(torch.uint8).tolist())
    header = header_bytes({"x": entry("F32", [3], 0, 12)}, pad=False)
    assert (8 + len(header)) % 4 != 0
    p = write(tmp_path, assemble(header, data, pad=False))
    with SafetensorsFile.open(p) as f:
        t = f.tensor("x")
        assert t.data_ptr() % 4 == 0
        assert t.tolist() == values.tolist()


def test_zero_size_tensors_allowed_anywhere_in_the_layout(tmp_path: Path) -> None:
    header = {
        "z0": entry("F32", [0], 0, 0),
        "a": entry("U8", [4], 0, 4),
        "z1": entry("BF16", [3, 0], 4, 4),
        "b": entry("U8", [2], 4, 6),
    }
    p = write(tmp_path, assemble(header, b"abcdef"))
    with SafetensorsFile.open(p) as f:
        assert list(f.tensors) == ["z0", "a", "z1", "b"]
        assert f.tensor("z1").shape == (3, 0)
        assert f.tensor("z1").dtype == torch.bfloat16
        assert bytes(f.raw("z0")) == b""


def test_no_tensors_and_trailing_spaces_in_header(tmp_path: Path) -> None:
    p = write(tmp_path, assemble("{}      "))
    with SafetensorsFile.open(p) as f:
        assert f.tensors == {} and f.metadata == {}


def test_sub_byte_dtypes_validate_but_read_only_raw(tmp_path: Path) -> None:
    p = write(
        tmp_path, assemble({"fp4": entry("F4", [2, 4], 0, 4), "fp6": entry("F6_E2M3", [4], 4, 7)}, b"x" * 7)
    )
    with SafetensorsFile.open(p, display="m.safetensors") as f:
        assert bytes(f.raw("fp4")) == b"xxxx"
        with pytest.raises(SafetensorsError) as info:
            f.tensor("fp4")
        expect(info.value, "F4", "raw()", tensor="fp4")
    err = open_bad(tmp_path, assemble({"fp4": entry("F4", [3], 0, 2)}, b"xx"))
    expect(err, "12 bits", tensor="fp4")


def test_every_known_dtype_reads_with_its_torch_dtype(tmp_path: Path) -> None:
    header: dict[str, Any] = {}
    pos = 0
    for name, dt in DTYPES.items():
        if dt.torch_dtype is None:
            continue
        size = 2 * dt.bits // 8
        header[name] = entry(name, [2], pos, pos + size)
        pos += size
    p = write(tmp_path, assemble(header, b"\x01" * pos))
    with SafetensorsFile.open(p) as f:
        for name, dt in DTYPES.items():
            if dt.torch_dtype is not None:
                assert f.tensor(name).dtype == dt.torch_dtype
                assert f.tensor(name).shape == (2,)


def test_bool_bytes_other_than_0_1_are_rejected(tmp_path: Path) -> None:
    p = write(tmp_path, assemble({"mask": entry("BOOL", [3], 0, 3)}, b"\x00\x01\x02"))
    with SafetensorsFile.open(p, display=BAD) as f, pytest.raises(SafetensorsError) as info:
        f.tensor("mask")
    expect(info.value, "element 2", "0x02", tensor="mask")


def test_unknown_tensor_name(tmp_path: Path) -> None:
    header, data = good_header()
    with SafetensorsFile.open(write(tmp_path, assemble(header, data)), display=BAD) as f:
        with pytest.raises(SafetensorsError) as info:
            f.raw("nope")
        expect(info.value, "no such tensor", tensor="nope")


def test_file_changed_after_open_is_detected(tmp_path: Path) -> None:
    header, data = good_header()
    p = write(tmp_path, assemble(header, data))
    f = SafetensorsFile.open(p, display=BAD)
    p.write_bytes(assemble(header, data) + b"x")
    with pytest.raises(SafetensorsError, match="changed on disk"):
        f.tensor("a")
    header["a"]["dtype"] = "I32"
    p.write_bytes(assemble(header, data))
    with pytest.raises(SafetensorsError, match="header changed on disk"):
        f.tensor("a")


def test_fifo_and_directory_are_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "model.safetensors")
    err = ckpt_error(tmp_path)
    assert err.file == "model.safetensors" and "not a regular file" in str(err)
    (tmp_path / "d.safetensors").mkdir()
    with pytest.raises(SafetensorsError, match="not a regular file"):
        SafetensorsFile.open(tmp_path / "d.safetensors")


def test_missing_file_is_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file"):
        SafetensorsFile.open(tmp_path / "nope.safetensors")


# ------------------------------------------------------------------ checkpoints


def save(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    safetensors.torch.save_file(tensors, str(path))


def sharded(tmp_path: Path, weight_map: dict[str, str] | None = None) -> Path:
    root = tmp_path / "ckpt"
    save(
        root / "model-00001-of-00002.safetensors",
        {"a": torch.ones(2), "b": torch.zeros(3, dtype=torch.bfloat16)},
    )
    save(root / "model-00002-of-00002.safetensors", {"c": torch.arange(4, dtype=torch.uint8)})
    if weight_map is None:
        weight_map = {
            "a": "model-00001-of-00002.safetensors",
            "b": "model-00001-of-00002.safetensors",
            "c": "model-00002-of-00002.safetensors",
        }
    (root / INDEX_NAME).write_text(json.dumps({"metadata": {"total_size": 18}, "weight_map": weight_map}))
    return root


def ckpt_error(root: Path) -> SafetensorsError:
    with pytest.raises(SafetensorsError) as info:
        Checkpoint.open(root)
    return info.value


def test_single_file_checkpoint(tmp_path: Path) -> None:
    save(tmp_path / "model.safetensors", {"w": torch.ones(3)})
    (tmp_path / "config.json").write_text(
        '{"model_type": "llama", "quantization_config": {"quant_method": "fp8"}}'
    )
    with Checkpoint.open(tmp_path) as ck:
        assert ck.names() == ["w"] and "w" in ck and "x" not in ck
        assert ck.file_of("w") == "model.safetensors"
        assert ck.info("w").shape == (3,)
        assert ck.tensor("w").tolist() == [1.0, 1.0, 1.0]
        assert len(ck.raw("w")) == 12
        assert ck.index is None
        assert ck.read_json("config.json") == {
            "model_type": "llama",
            "quantization_config": {"quant_method": "fp8"},
        }
        assert ck.read_json("generation_config.json") is None
        with pytest.raises(SafetensorsError) as info:
            ck.info("x")
        assert info.value.tensor == "x"


def test_exactly_one_other_safetensors_file(tmp_path: Path) -> None:
    save(tmp_path / "draft.safetensors", {"w": torch.ones(1)})
    with Checkpoint.open(tmp_path) as ck:
        assert list(ck.files) == ["draft.safetensors"]


def test_file_errors_inside_checkpoint_use_relative_name(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 4)
    err = ckpt_error(tmp_path)
    assert err.file == "model.safetensors"


def test_not_a_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such directory"):
        Checkpoint.open(tmp_path / "missing")
    (tmp_path / "f").write_text("x")
    with pytest.raises(UsageError, match="not a checkpoint directory"):
        Checkpoint.open(tmp_path / "f")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match=r"no \*\.safetensors"):
        Checkpoint.open(tmp_path / "empty")


def test_several_files_without_index(tmp_path: Path) -> None:
    save(tmp_path / "a.safetensors", {"x": torch.ones(1)})
    save(tmp_path / "b.safetensors", {"y": torch.ones(1)})
    err = ckpt_error(tmp_path)
    assert err.file == INDEX_NAME and "2 *.safetensors files" in str(err)


def test_consistent_sharded_checkpoint(tmp_path: Path) -> None:
    root = sharded(tmp_path)
    save(root / "consolidated.safetensors", {"a": torch.ones(2)})  # ignored by index-following loaders
    with Checkpoint.open(root) as ck:
        assert sorted(ck.names()) == ["a", "b", "c"]
        assert ck.file_of("c") == "model-00002-of-00002.safetensors"
        assert ck.tensor("c").tolist() == [0, 1, 2, 3]
        assert ck.index is not None and ck.index["metadata"]["total_size"] == 18
        assert ck.unindexed == ["consolidated.safetensors"]
        assert set(ck.files) == {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}


def test_sharded_in_subdirectory(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    save(root / "shards" / "one.safetensors", {"a": torch.ones(1)})
    (root / INDEX_NAME).write_text(json.dumps({"weight_map": {"a": "shards/one.safetensors"}}))
    with Checkpoint.open(root) as ck:
        assert ck.file_of("a") == "shards/one.safetensors"


def test_index_names_tensor_missing_from_its_file(tmp_path: Path) -> None:
    root = sharded(tmp_path)
    wm = json.loads((root / INDEX_NAME).read_text())["weight_map"]
    wm["d"] = "model-00002-of-00002.safetensors"
    (root / INDEX_NAME).write_text(json.dumps({"weight_map": wm}))
    err = ckpt_error(root)
    assert err.file == "model-00002-of-00002.safetensors" and err.tensor == "d"
    assert "no file has it" in str(err)


def test_index_maps_tensor_to_the_wrong_file(tmp_path: Path) -> None:
    one, two = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    root = sharded(tmp_path, {"a": two, "b": one, "c": two})
    err = ckpt_error(root)
    assert err.file == "model-00002-of-00002.safetensors" and err.tensor == "a"
    assert "it is in 'model-00001-of-00002.safetensors'" in str(err)


def test_tensor_in_two_files(tmp_path: Path) -> None:
    root = sharded(tmp_path)
    save(root / "model-00002-of-00002.safetensors", {"c": torch.ones(1), "a": torch.ones(2)})
    err = ckpt_error(root)
    assert err.tensor == "a" and err.file == "model-00002-of-00002.safetensors"
    assert "also in 'model-00001-of-00002.safetensors'" in str(err)


def test_file_named_in_index_is_missing(tmp_path: Path) -> None:
    root = sharded(tmp_path)
    (root / "model-00002-of-00002.safetensors").unlink()
    err = ckpt_error(root)
    assert err.file == "model-00002-of-00002.safetensors" and err.tensor == "c"
    assert "missing" in str(err) and INDEX_NAME in str(err)


def test_extra_tensor_not_in_index(tmp_path: Path) -> None:
    root = sharded(tmp_path)
    save(
        root / "model-00002-of-00002.safetensors",
        {"c": torch.arange(4, dtype=torch.uint8), "extra": torch.ones(1)},
    )
    err = ckpt_error(root)
    assert err.file == "model-00002-of-00002.safetensors" and err.tensor == "extra"
    assert "not in" in str(err) and "weight_map" in str(err)


@pytest.mark.parametrize(
    ("path", "fragment"),
    [("../model.safetensors", "'..'"), ("/etc/model.safetensors", "absolute"), ("a/../b.safetensors", "'..'"),
     ("./model-00001-of-00002.safetensors", "normalized"), ("a\\b.safetensors", "backslash"),
     ("model.bin", "not a .safetensors"), ("", "empty"), (3, "must be a string")],
)  # fmt: skip
def test_unsafe_weight_map_paths(tmp_path: Path, path: Any, fragment: str) -> None:
    root = sharded(tmp_path)
    wm = json.loads((root / INDEX_NAME).read_text())["weight_map"]
    wm["c"] = path
    (root / INDEX_NAME).write_text(json.dumps({"weight_map": wm}))
    err = ckpt_error(root)
    assert err.file == INDEX_NAME and err.tensor == "c" and fragment in str(err), str(err)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [('{"weight_map": {"a": "x.safetensors",}}', "line 1 column 38"), ("[]", "must be a JSON object"),
     ('{"metadata": {}}', "no weight_map"), ('{"weight_map": {}}', "empty"), ('{"weight_map": []}', "a list"),
     ('{"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}}', "duplicate key 'a' at weight_map")],
)  # fmt: skip
def test_malformed_index(tmp_path: Path, text: str, fragment: str) -> None:
    root = sharded(tmp_path)
    (root / INDEX_NAME).write_text(text)
    err = ckpt_error(root)
    assert err.file == INDEX_NAME and fragment in str(err), str(err)


def test_model_safetensors_beside_an_index_that_ignores_it(tmp_path: Path) -> None:
    root = sharded(tmp_path)
    save(root / "model.safetensors", {"a": torch.ones(2)})
    err = ckpt_error(root)
    assert err.file == INDEX_NAME and "loaders disagree" in str(err)


def test_read_json_errors(tmp_path: Path) -> None:
    save(tmp_path / "model.safetensors", {"w": torch.ones(1)})
    with Checkpoint.open(tmp_path) as ck:
        (tmp_path / "config.json").write_text('{\n  "a": 1,\n  "a": 2\n}')
        with pytest.raises(CheckpointError) as info:
            ck.read_json("config.json")
        assert info.value.file == "config.json" and "duplicate key 'a'" in str(info.value)
        (tmp_path / "config.json").write_text('{\n  "a": 1\n  "b": 2\n}')
        with pytest.raises(CheckpointError, match="line 3 column 3") as info:
            ck.read_json("config.json")
        assert info.value.file == "config.json"
        (tmp_path / "config.json").write_text('{"q": {"x": {"y": 1, "y": 1}}}')
        with pytest.raises(CheckpointError, match=r"duplicate key 'y' at q\.x"):
            ck.read_json("config.json")
        (tmp_path / "config.json").write_text("[1]")
        with pytest.raises(CheckpointError, match="must be a JSON object"):
            ck.read_json("config.json")
        with pytest.raises(UsageError, match=r"'\.\.'"):
            ck.read_json("../config.json")
