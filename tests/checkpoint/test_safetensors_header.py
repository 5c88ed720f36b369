"""The strict safetensors header parser: every bad header fails with a message that names the file and,
where there is one, the tensor; a mutated header raises only SafetensorsError, and a valid one reads as
safetensors reads it."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
import safetensors
import safetensors.torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qualify.checkpoint.safetensors_header import DTYPES, MAX_HEADER_SIZE, TensorInfo, parse_header
from qualify.checkpoint.safetensors_io import SafetensorsFile
from qualify.errors import SafetensorsError
from tests.checkpoint.safetensors_files import (
    as_bytes,
    assemble,
    entry,
    expect,
    good_header,
    open_bad,
)
from tests.helpers import peak_allocation

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
