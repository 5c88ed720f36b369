"""Tests for qualify.util.jsonio: the one strict JSON reader refuses what Python's json lets by.

Duplicate keys, NaN and Infinity, lone surrogates, bad UTF-8, files that are not regular files
and a wrong top level are each refused with a message naming the file, the key or the place.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from qualify.errors import CheckpointError, JsonProblem, ManifestError, UsageError
from qualify.util.jsonio import json_path, load_json_file, parse_strict, type_name


def problem(text: str, byte_base: int = 0) -> JsonProblem:
    with pytest.raises(JsonProblem) as info:
        parse_strict(text, byte_base)
    return info.value


# ------------------------------------------------------------------ parse_strict


def test_valid_json_parses_to_plain_python_values() -> None:
    text = '{"a": [1, 2.5, "x", true, null], "b": {"c": "\\u00e9\\ud83d\\ude00"}}'
    assert parse_strict(text, 0) == {"a": [1, 2.5, "x", True, None], "b": {"c": "\u00e9\U0001f600"}}
    assert type(parse_strict(text, 0)) is dict  # no marker subclass leaks out of a clean document


def test_a_duplicate_key_is_refused_with_the_key() -> None:
    exc = problem('{"a": 1, "a": 2}')
    assert exc.message == "duplicate key 'a'"
    assert exc.duplicate == "a"
    assert exc.path == ()


def test_a_nested_duplicate_key_is_located_by_its_json_path() -> None:
    exc = problem('{"outer": [{"ok": 1}, {"k": 1, "j": 2, "k": 3}]}')
    assert exc.duplicate == "k"
    assert exc.path == ("outer", 1)
    assert json_path(exc.path) == "outer[1]"


def test_the_first_duplicate_in_document_order_is_the_one_reported() -> None:
    exc = problem('{"first": {"x": 1, "x": 2}, "second": {"y": 1, "y": 2}}')
    assert (exc.path, exc.duplicate) == (("first",), "x")


def test_the_same_key_in_different_objects_is_not_a_duplicate() -> None:
    assert parse_strict('{"a": {"k": 1}, "b": {"k": 2}, "k": 3}', 0) == {"a": {"k": 1}, "b": {"k": 2}, "k": 3}


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json_values(constant: str) -> None:
    exc = problem(f'{{"amax": {constant}}}')
    assert f"'{constant}' is not a JSON value" in exc.message


@pytest.mark.parametrize("text, path", [
    ('{"k\\ud800": 1}', ()),  # a key: located at its object, never printed itself
    ('{"k": "\\udc00"}', ("k",)),
    ('{"k": ["ok", "\\ud800x"]}', ("k", 1)),
    ('["\\udbff"]', (0,)),
    ('"\\ud800"', ()),
    ('{"k": "\\ude00\\ud83d"}', ("k",)),  # the two halves of a pair in the wrong order
])
def test_a_lone_surrogate_anywhere_is_refused(text: str, path: tuple[str | int, ...]) -> None:
    exc = problem(text)
    assert "lone UTF-16 surrogate" in exc.message
    assert exc.path == path


def test_an_escaped_backslash_before_u_is_not_a_surrogate() -> None:
    assert parse_strict('["\\\\ud800", "\\ud83d\\ude00"]', 0) == ["\\ud800", "\U0001f600"]


def test_a_syntax_error_is_located_by_line_column_and_byte_of_the_file() -> None:
    exc = problem('{"\u00e9": 1,\n "b": }', byte_base=8)
    # '}' is character 15 of the text; 'é' is two bytes in UTF-8, so it is byte 16, and 8 + 16 of the file.
    assert exc.message == "not valid JSON: Expecting value at line 2 column 7 (byte 24 of the file)"


def test_a_document_nested_too_deeply_is_refused_not_a_crash() -> None:
    exc = problem("[" * 100_000 + "]" * 100_000)
    assert "nested too deeply" in exc.message


def test_an_integer_too_long_to_convert_is_refused() -> None:
    exc = problem('{"size": ' + "9" * 5000 + "}")
    assert exc.message.startswith("not valid JSON here:")


def test_a_duplicate_deep_in_a_nested_document_is_found_and_located() -> None:
    depth = 800  # nearly as deep as the parser goes; the search for the key's path is iterative
    exc = problem('{"a": ' * depth + '{"k": 1, "k": 2}' + "}" * depth)
    assert exc.path == ("a",) * depth
    assert exc.duplicate == "k"


# ------------------------------------------------------------------ json_path and type_name


@pytest.mark.parametrize("path, shown", [
    ((), ""),
    (("a",), "a"),
    ((0,), "[0]"),
    (("a", 0, "b"), "a[0].b"),
    (("a", "b", 2, 3), "a.b[2][3]"),
])
def test_json_path_joins_keys_with_dots_and_indices_in_brackets(path: tuple[str | int, ...], shown: str) -> None:
    assert json_path(path) == shown


@pytest.mark.parametrize("value, name", [
    (None, "null"),
    (True, "a boolean"),
    (False, "a boolean"),
    (3, "an integer"),
    (3.0, "a number with a fraction or exponent"),
    ("s", "a string"),
    ([], "a list"),
    ({}, "an object"),
])
def test_type_name_names_json_types(value: object, name: str) -> None:
    assert type_name(value) == name


# ------------------------------------------------------------------ load_json_file


def test_a_good_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes('{"name": "caf\u00e9"}'.encode())
    assert load_json_file(path) == {"name": "caf\u00e9"}


def test_a_duplicate_key_names_the_key_its_path_and_the_file(tmp_path: Path) -> None:
    path = tmp_path / "hf_quant_config.json"
    path.write_text('{"quantization": {"quant_algo": "MXFP8", "quant_algo": "FP8"}}')
    with pytest.raises(CheckpointError) as info:
        load_json_file(path, display="hf_quant_config.json")
    assert info.value.file == "hf_quant_config.json"
    assert info.value.detail == "duplicate key 'quant_algo' at quantization"
    assert "hf_quant_config.json" in str(info.value)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError) as info:
        load_json_file(tmp_path / "absent.json", display="absent.json")
    assert info.value.file == "absent.json"
    assert info.value.detail == "file is missing"


def test_a_directory_is_not_a_regular_file(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError) as info:
        load_json_file(tmp_path)
    assert info.value.detail == "not a regular file"
    assert info.value.file == str(tmp_path)  # without ``display`` the path itself is shown


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_is_refused_without_blocking_on_it(tmp_path: Path) -> None:
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    with pytest.raises(CheckpointError) as info:
        load_json_file(fifo)
    assert info.value.detail == "not a regular file"


def test_a_file_that_cannot_be_read_says_why(tmp_path: Path) -> None:
    # A path through a regular file: stat itself fails with ENOTDIR, an OSError other than "missing".
    (tmp_path / "plain").write_text("{}")
    with pytest.raises(CheckpointError) as info:
        load_json_file(tmp_path / "plain" / "config.json")
    assert info.value.detail == "cannot read: Not a directory"


def test_bad_utf8_is_located_by_its_byte(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b'{"name": "ab\xff"}')
    with pytest.raises(CheckpointError) as info:
        load_json_file(path, display="config.json")
    assert info.value.detail == "not valid UTF-8 at byte 12: invalid start byte"


def test_a_utf8_byte_order_mark_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}')
    with pytest.raises(CheckpointError) as info:
        load_json_file(path)
    assert info.value.detail.startswith("not valid JSON: ")


def test_nan_in_a_file_is_refused_with_its_place(tmp_path: Path) -> None:
    path = tmp_path / "stats.json"
    path.write_text('{"amax": NaN}')
    with pytest.raises(CheckpointError) as info:
        load_json_file(path)
    assert info.value.detail == "'NaN' is not a JSON value"


def test_a_lone_surrogate_in_a_file_is_located(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"names": ["ok", "bad\\ud800"]}')
    with pytest.raises(CheckpointError) as info:
        load_json_file(path)
    assert info.value.detail.endswith("not valid Unicode at names[1]")


@pytest.mark.parametrize("text, got", [
    ("[1, 2]", "a list"),
    ('"text"', "a string"),
    ("3", "an integer"),
    ("null", "null"),
])
def test_require_object_refuses_any_other_top_level(tmp_path: Path, text: str, got: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    assert load_json_file(path) is not None or text == "null"  # without the rule it loads
    with pytest.raises(CheckpointError) as info:
        load_json_file(path, require_object=True)
    assert info.value.detail == f"top level must be a JSON object, got {got}"


def test_the_error_class_says_whose_fault_a_bad_file_is(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text('{"a": 1, "a": 2}')
    with pytest.raises(UsageError) as usage:
        load_json_file(path, error=UsageError, display="report.json")
    assert not isinstance(usage.value, CheckpointError)
    assert str(usage.value) == "report.json: duplicate key 'a'"
    with pytest.raises(ManifestError) as manifest:
        load_json_file(path, error=ManifestError, display="conversion_manifest.json")
    assert manifest.value.file == "conversion_manifest.json"
    assert manifest.value.detail == "duplicate key 'a'"
