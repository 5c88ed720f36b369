"""The strict safetensors reader: good files read exactly as safetensors reads them, and
every bad file fails with a message that names the file and, where there is one, the tensor."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest
import safetensors
import safetensors.torch
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qualify.checkpoint.safetensors_io import (
    DTYPES,
    INDEX_NAME,
    MAX_HEADER_SIZE,
    Checkpoint,
    SafetensorsFile,
    TensorInfo,
    parse_header,
)
from qualify.errors import CheckpointError, SafetensorsError, UsageError
from tests.helpers import peak_allocation

BAD = "bad.safetensors"

# ------------------------------------------------------------------ helpers


def header_bytes(header: dict[str, Any] | str | bytes, *, pad: bool = True) -> bytes:
    """The JSON header as the format stores it, space-padded to a multiple of 8."""
    if isinstance(header, dict):
        hb = json.dumps(header, separators=(",", ":")).encode()
    elif isinstance(header, str):
        hb = header.encode()
    else:
        hb = header
    if pad:
        hb += b" " * (-len(hb) % 8)
    return hb


def assemble(
    header: dict[str, Any] | str | bytes, data: bytes = b"", *, length: int | None = None, pad: bool = True
) -> bytes:
    """A whole file: u64 little-endian header length, header, data. ``length`` lies about N."""
    hb = header_bytes(header, pad=pad)
    n = len(hb) if length is None else length
    return struct.pack("<Q", n) + hb + data


def entry(dtype: str, shape: list[int], start: int, end: int) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "data_offsets": [start, end]}


def good_header() -> tuple[dict[str, Any], bytes]:
    """Two tensors, 'a' (F32 [2,2], 16 bytes) then 'b' (U8 [4], 4 bytes)."""
    return (
        {"__metadata__": {"format": "pt"}, "a": entry("F32", [2, 2], 0, 16), "b": entry("U8", [4], 16, 20)},
        bytes(range(20)),
    )


def as_bytes(t: torch.Tensor) -> bytes:
    return bytes(t.contiguous().reshape(-1).view(torch.uint8).tolist())


def write(tmp_path: Path, content: bytes, name: str = BAD) -> Path:
    p = tmp_path / name
    p.write_bytes(content)
    return p


def open_bad(tmp_path: Path, content: bytes) -> SafetensorsError:
    """Open ``content`` as a file and return the error, checking it names the file."""
    p = write(tmp_path, content)
    with pytest.raises(SafetensorsError) as info:
        SafetensorsFile.open(p, display=BAD)
    err = info.value
    assert err.file == BAD
    assert str(err).startswith(f"{BAD}: ")
    return err


def expect(err: SafetensorsError, *fragments: str, tensor: str | None) -> None:
    assert err.tensor == tensor, str(err)
    if tensor is not None:
        assert f"tensor '{tensor}'" in str(err)
    for fragment in fragments:
        assert fragment in str(err), f"{fragment!r} not in {str(err)!r}"


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


# ------------------------------------------------------------------ header framing


@pytest.mark.parametrize("size", [0, 1, 7])
def test_shorter_than_8_bytes(tmp_path: Path, size: int) -> None:
    err = open_bad(tmp_path, b"\x10" * size)
    expect(err, f"file is {size} bytes", tensor=None)


@pytest.mark.parametrize("cut", ["length", "header", "data", "last_byte"])
def test_truncated_at_several_points(tmp_path: Path, cut: str) -> None:
    header, data = good_header()
    whole = assemble(header, data)
    n = struct.unpack("<Q", whole[:8])[0]
    at = {"length": 5, "header": 8 + n // 2, "data": 8 + n + 10, "last_byte": len(whole) - 1}[cut]
    err = open_bad(tmp_path, whole[:at])
    if cut == "length":
        expect(err, "shorter than the 8-byte", tensor=None)
    elif cut == "header":
        expect(err, f"header of {n} bytes", "past the end", tensor=None)
    elif cut == "data":
        # 'a' needs data bytes 0..16, of which only 10 are there.
        expect(err, "truncated", "[0, 16]", "10 bytes missing", tensor="a")
    else:
        expect(err, "truncated", "1 bytes missing", tensor="b")


def test_header_length_past_end_of_file(tmp_path: Path) -> None:
    header, data = good_header()
    whole = assemble(header, data)
    err = open_bad(tmp_path, struct.pack("<Q", len(whole)) + whole[8:])
    expect(err, f"declares a header of {len(whole)} bytes", "past the end", tensor=None)


@pytest.mark.parametrize("declared", [MAX_HEADER_SIZE + 1, 5 * 10**9, 2**64 - 1])
def test_huge_declared_header_is_refused_without_allocating(tmp_path: Path, declared: int) -> None:
    with peak_allocation() as peak:
        err = open_bad(tmp_path, struct.pack("<Q", declared) + b"{}      ")
    assert peak() < 1 << 20  # refused from the declared size alone, nothing of that size allocated
    expect(err, f"declares a header of {declared} bytes, more than the 100 MB limit", tensor=None)


def test_declared_header_within_limit_but_past_file_is_not_read(tmp_path: Path) -> None:
    # 90 MB declared in a 16-byte file: refused from the size alone.
    with peak_allocation() as peak:
        err = open_bad(tmp_path, struct.pack("<Q", 90_000_000) + b"{}      ")
    assert peak() < 1 << 20
    expect(err, "past the end of the 16-byte file", tensor=None)


def test_parse_header_is_pure_and_checks_declared_size_first() -> None:
    with pytest.raises(SafetensorsError, match="past the end"):
        parse_header(struct.pack("<Q", 50), file_size=20, display="x")
    with pytest.raises(SafetensorsError, match="could be read"):
        parse_header(struct.pack("<Q", 8), file_size=16, display="x")
    meta, tensors, n = parse_header(assemble("{}"), file_size=16, display="x")
    assert (meta, tensors, n) == ({}, {}, 8)


def test_invalid_utf8(tmp_path: Path) -> None:
    err = open_bad(tmp_path, assemble(b'{"caf\xe9":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"x"))
    expect(err, "not valid UTF-8", "byte 13", tensor=None)


def test_malformed_json_names_position(tmp_path: Path) -> None:
    err = open_bad(tmp_path, assemble('{"a": {"dtype": "U8", "shape": [1] "data_offsets": [0, 1]}}', b"x"))
    expect(err, "not valid JSON", "line 1 column 36", "byte 43", tensor=None)


@pytest.mark.parametrize("text", ['  {"a": 1}', '["a"]', "\ufeff{}", "x"])
def test_header_not_starting_with_brace(tmp_path: Path, text: str) -> None:
    expect(open_bad(tmp_path, assemble(text)), "not '{'", tensor=None)


def test_empty_header(tmp_path: Path) -> None:
    expect(open_bad(tmp_path, assemble(b"", pad=False)), "header is empty", tensor=None)


def test_json_trailing_garbage_and_nan(tmp_path: Path) -> None:
    expect(
        open_bad(tmp_path, assemble("{}\x00\x00\x00\x00\x00\x00")),
        "not valid JSON",
        "Extra data",
        tensor=None,
    )
    err = open_bad(tmp_path, assemble('{"__metadata__": {"x": NaN}}'))
    expect(err, "'NaN' is not a JSON value", tensor=None)


def test_duplicate_tensor_names(tmp_path: Path) -> None:
    text = (
        '{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        '"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}'
    )
    err = open_bad(tmp_path, assemble(text, b"xy"))
    expect(err, "appears twice", tensor="w")


def test_duplicate_key_inside_an_entry(tmp_path: Path) -> None:
    text = '{"w":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}}'
    expect(open_bad(tmp_path, assemble(text, b"x")), "duplicate key 'dtype'", tensor="w")


def test_duplicate_key_in_metadata(tmp_path: Path) -> None:
    text = '{"__metadata__":{"k":"1","k":"2"}}'
    expect(open_bad(tmp_path, assemble(text)), "__metadata__", "duplicate key 'k'", tensor=None)


def test_lone_surrogate_in_name(tmp_path: Path) -> None:
    text = '{"w\\ud800":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    expect(open_bad(tmp_path, assemble(text, b"x")), "surrogate", tensor=None)


# ------------------------------------------------------------------ header content


@pytest.mark.parametrize(
    ("metadata", "fragment"),
    [
        ({"k": 1}, "value for 'k' must be a string"),
        ({"k": None}, "'k'"),
        (["x"], "must be an object"),
        (None, "null"),
    ],
)
def test_metadata_must_map_strings_to_strings(tmp_path: Path, metadata: Any, fragment: str) -> None:
    expect(open_bad(tmp_path, assemble({"__metadata__": metadata})), "__metadata__", fragment, tensor=None)


def test_unknown_dtype(tmp_path: Path) -> None:
    err = open_bad(tmp_path, assemble({"w": entry("F8_E4M3FN", [1], 0, 1)}, b"x"))
    expect(err, "unknown dtype 'F8_E4M3FN'", tensor="w")


def test_dtype_not_a_string(tmp_path: Path) -> None:
    expect(
        open_bad(tmp_path, assemble({"w": entry(8, [1], 0, 1)}, b"x")), "dtype must be a string", tensor="w"
    )  # type: ignore[arg-type]


def test_extra_entry_field(tmp_path: Path) -> None:
    bad = {"w": {**entry("U8", [1], 0, 1), "scale": 1.0}}
    expect(open_bad(tmp_path, assemble(bad, b"x")), "unknown field 'scale'", tensor="w")


@pytest.mark.parametrize("field", ["dtype", "shape", "data_offsets"])
def test_missing_entry_field(tmp_path: Path, field: str) -> None:
    bad = entry("U8", [1], 0, 1)
    del bad[field]
    expect(open_bad(tmp_path, assemble({"w": bad}, b"x")), f"no '{field}' field", tensor="w")


def test_entry_not_an_object(tmp_path: Path) -> None:
    expect(open_bad(tmp_path, assemble({"w": [1, 2]})), "must be an object", tensor="w")


@pytest.mark.parametrize(
    ("shape", "fragment"),
    [([-1], "shape[0] is -1"), ([2, 1.0], "shape[1] is 1.0"), ([True], "shape[0] is a boolean"),
     (["2"], "shape[0] is a string"), ({"0": 1}, "must be a list"), (None, "got null")],
)  # fmt: skip
def test_bad_shape(tmp_path: Path, shape: Any, fragment: str) -> None:
    expect(open_bad(tmp_path, assemble({"w": entry("U8", shape, 0, 1)}, b"x")), fragment, tensor="w")


@pytest.mark.parametrize(
    ("offsets", "fragment"),
    [([4, 0], "end before they start"), ([0], "list of 1"), ([0, 1, 2], "list of 3"),
     ([-1, 0], "non-negative"), ([0, 1.0], "non-negative integers"), ([False, True], "non-negative integers"),
     ("0,1", "got a string")],
)  # fmt: skip
def test_bad_data_offsets(tmp_path: Path, offsets: Any, fragment: str) -> None:
    bad = {"w": {"dtype": "U8", "shape": [4], "data_offsets": offsets}}
    expect(open_bad(tmp_path, assemble(bad, b"xxxx")), fragment, tensor="w")


def test_byte_size_disagrees_with_offsets(tmp_path: Path) -> None:
    err = open_bad(tmp_path, assemble({"w": entry("BF16", [2, 3], 0, 10)}, b"x" * 10))
    expect(err, "shape [2, 3] x BF16 is 12 bytes but data_offsets [0, 10] span 10", tensor="w")


def test_absurd_shapes_fail_fast(tmp_path: Path) -> None:
    err = open_bad(tmp_path, assemble({"w": entry("F64", [2**40, 2**40, 2**40], 0, 8)}, b"x" * 8))
    expect(err, "more than 2**64 elements", tensor="w")
    # A million huge dimensions: must not turn into a giant multiplication, and the
    # message must not print a million numbers.
    err = open_bad(tmp_path, assemble({"w": entry("U8", [10**18] * 1_000_000, 0, 8)}, b"x" * 8))
    expect(err, "(1000000 dimensions)", tensor="w")
    assert len(str(err)) < 300


def test_hole_between_tensors(tmp_path: Path) -> None:
    header = {"a": entry("U8", [4], 0, 4), "b": entry("U8", [4], 6, 10)}
    err = open_bad(tmp_path, assemble(header, b"x" * 10))
    expect(err, "2 bytes", "'a' (ends at 4)", "starts at 6", tensor="b")


def test_overlap_names_both_tensors(tmp_path: Path) -> None:
    header = {"a": entry("U8", [4], 0, 4), "b": entry("U8", [4], 2, 6)}
    err = open_bad(tmp_path, assemble(header, b"x" * 6))
    expect(err, "overlap tensor 'a'", tensor="b")


def test_zero_size_tensor_inside_another_is_an_overlap(tmp_path: Path) -> None:
    header = {"a": entry("U8", [4], 0, 4), "z": entry("U8", [0], 2, 2)}
    expect(open_bad(tmp_path, assemble(header, b"x" * 4)), "overlap tensor 'a'", tensor="z")


def test_same_offsets_twice_is_an_overlap(tmp_path: Path) -> None:
    header = {"a": entry("U8", [4], 0, 4), "b": entry("I8", [4], 0, 4)}
    expect(open_bad(tmp_path, assemble(header, b"x" * 4)), "overlap tensor 'a'", tensor="b")


def test_first_offset_not_zero(tmp_path: Path) -> None:
    err = open_bad(tmp_path, assemble({"a": entry("U8", [4], 3, 7)}, b"x" * 7))
    expect(err, "first tensor starts at data offset 3, not 0", tensor="a")


def test_trailing_bytes_after_data(tmp_path: Path) -> None:
    header, data = good_header()
    err = open_bad(tmp_path, assemble(header, data + b"junk"))
    expect(err, "4 trailing bytes", "'b'", tensor=None)
    expect(open_bad(tmp_path, assemble("{}", b"x")), "1 trailing bytes", tensor=None)


def test_tensor_info_properties() -> None:
    t = TensorInfo(name="w", dtype="BF16", shape=(3, 4), start=8, end=32)
    assert (t.nbytes, t.numel) == (24, 12)
    assert TensorInfo("s", "F32", (), 0, 4).numel == 1


# ------------------------------------------------------------------ property test

_VALID_DTYPES = [d for d, v in DTYPES.items() if v.torch_dtype is not None]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=10,
)


@st.composite
def valid_files(draw: st.DrawFn) -> tuple[dict[str, Any], bytes]:
    header: dict[str, Any] = {}
    if draw(st.booleans()):
        header["__metadata__"] = draw(st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3))
    pos = 0
    for i in range(draw(st.integers(0, 4))):
        dtype = draw(st.sampled_from(_VALID_DTYPES))
        shape = draw(st.lists(st.integers(0, 4), max_size=3))
        numel = 1
        for d in shape:
            numel *= d
        size = numel * DTYPES[dtype].bits // 8
        header[f"t{i}"] = entry(dtype, shape, pos, pos + size)
        pos += size
    data = bytearray(draw(st.binary(min_size=pos, max_size=pos)))
    for name, t in header.items():
        if name != "__metadata__" and t["dtype"] == "BOOL":
            # Only 0 and 1 are valid BOOL bytes (the reader checks).
            start, end = t["data_offsets"]
            data[start:end] = bytes(b & 1 for b in data[start:end])
    return header, bytes(data)


def _mutate_json(draw: st.DrawFn, node: Any) -> Any:
    """Replace, delete or add one thing somewhere in a JSON value."""
    if isinstance(node, dict) and node and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(node)))
        action = draw(st.sampled_from(["descend", "delete", "replace", "add"]))
        out = dict(node)
        if action == "descend":
            out[key] = _mutate_json(draw, node[key])
        elif action == "delete":
            del out[key]
        elif action == "replace":
            out[key] = draw(json_values)
        else:
            out[draw(st.text(max_size=6))] = draw(json_values)
        return out
    if isinstance(node, list) and node and draw(st.booleans()):
        i = draw(st.integers(0, len(node) - 1))
        out_list = list(node)
        out_list[i] = _mutate_json(draw, node[i])
        return out_list
    if isinstance(node, int) and not isinstance(node, bool) and draw(st.booleans()):
        return node + draw(st.integers(-3, 3))
    return draw(json_values)


@st.composite
def mutated_files(draw: st.DrawFn) -> bytes:
    header, data = draw(valid_files())
    if draw(st.booleans()):
        # The mutated top level may no longer be an object; dump it whatever it is.
        blob = assemble(json.dumps(_mutate_json(draw, header)), data)
    else:
        blob = bytearray(assemble(header, data))
        for _ in range(draw(st.integers(1, 4))):
            kind = draw(st.sampled_from(["flip", "delete", "insert", "truncate"]))
            at = draw(st.integers(0, max(len(blob) - 1, 0)))
            if kind == "flip" and blob:
                blob[at] ^= draw(st.integers(1, 255))
            elif kind == "delete":
                del blob[at : at + draw(st.integers(1, 4))]
            elif kind == "insert":
                blob[at:at] = draw(st.binary(min_size=1, max_size=4))
            else:
                del blob[at:]
        blob = bytes(blob)
    return blob


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_files())
def test_mutations_raise_only_safetensors_error(blob: bytes) -> None:
    try:
        meta, tensors, n = parse_header(blob, file_size=len(blob), display="m.safetensors")
    except SafetensorsError as exc:
        assert str(exc).startswith("m.safetensors: ")
        return
    # It parsed, so it must be internally consistent, as the layout rules promise.
    assert all(isinstance(v, str) for v in meta.values())
    pos = 0
    for t in tensors.values():
        assert t.start == pos and t.nbytes * 8 == t.numel * DTYPES[t.dtype].bits
        pos = t.end
    assert 8 + n + pos == len(blob)


@settings(max_examples=60, deadline=None)
@given(valid_files())
def test_valid_files_agree_with_safetensors(tmp_path_factory: pytest.TempPathFactory, case: Any) -> None:
    header, data = case
    p = tmp_path_factory.mktemp("prop") / "m.safetensors"
    p.write_bytes(assemble(header, data))
    want = safetensors.torch.load_file(str(p))
    with SafetensorsFile.open(p) as f:
        assert set(f.tensors) == set(want)
        for name, t in want.items():
            got = f.tensor(name)
            assert got.dtype == t.dtype and got.shape == t.shape
            assert bytes(f.raw(name)) == as_bytes(t)
            assert as_bytes(got) == as_bytes(t)


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
