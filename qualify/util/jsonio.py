"""Strict JSON for the files the harness judges: one parser for every JSON it reads.

Python's ``json`` silently keeps the last of two duplicate keys; in a manifest, a
quantization config or a safetensors header that would let one file say two things, so
duplicates are errors, located by their JSON path. NaN and Infinity are not JSON (they
would let a statistic compare as "equal"); lone UTF-16 surrogates cannot be written as
UTF-8; every position is given in bytes of the file.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from qualify.errors import CheckpointError, JsonProblem, QualifyError, UsageError


class _DupDict(dict[str, Any]):
    """A JSON object that had a repeated key; ``duplicate`` is the first one repeated."""

    duplicate: str


def _is_utf8_encodable(s: str) -> bool:
    # JSON escapes can produce lone surrogates ("\ud800"), which no UTF-8 consumer can
    # represent: serde_json rejects them, and printing such a name would crash the log.
    if s.isascii():
        return True
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


#: A \\u escape of a UTF-16 surrogate (D800-DFFF); only a text holding one can decode to a lone one.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _walk(obj: Any) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    """Every node of a parsed document with its path, in document order (an object before its members)."""
    # Iterative so that a deeply nested (but parseable) document cannot overflow the stack.
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), obj)]
    while stack:
        path, node = stack.pop()
        yield path, node
        if isinstance(node, dict):
            children: list[tuple[str | int, Any]] = list(node.items())
        elif isinstance(node, list):
            children = list(enumerate(node))
        else:
            continue
        stack.extend((((*path, k), v) for k, v in reversed(children)))


def _find_lone_surrogate(obj: Any) -> tuple[str | int, ...] | None:
    """The path to the first string (a key: the path to its object) that is not valid Unicode."""
    # An object's keys are checked when the object is reached, before any of its members, so a
    # path never holds the bad string itself.
    for path, node in _walk(obj):
        if isinstance(node, str) and not _is_utf8_encodable(node):
            return path
        if isinstance(node, dict) and not all(_is_utf8_encodable(key) for key in node):
            return path
    return None


def _pairs_hook(saw_duplicate: list[bool]) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    # Python's json keeps the last of repeated keys without a word; a loader in another
    # language may keep the first. The hook cannot know where in the document it is, so
    # it marks the object and the caller finds the path afterwards.
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        if len(obj) == len(pairs):
            return obj
        seen: set[str] = set()
        marked = _DupDict(obj)
        for key, _ in pairs:
            if key in seen:
                marked.duplicate = key
                break
            seen.add(key)
        saw_duplicate[0] = True
        return marked

    return hook


def _reject_constant(name: str) -> Any:
    # NaN and Infinity are not JSON; serde_json refuses them, Python's json accepts them.
    raise JsonProblem(f"'{name}' is not a JSON value")


def _find_duplicate(obj: Any) -> tuple[tuple[str | int, ...], str] | None:
    """The path to the first object, in document order, that repeated a key."""
    for path, node in _walk(obj):
        if isinstance(node, _DupDict):
            return path, node.duplicate
    return None


def parse_strict(text: str, byte_base: int) -> Any:
    """Parse strictly. ``byte_base`` is the file offset of ``text``, for error positions."""
    saw_duplicate = [False]
    decoder = json.JSONDecoder(object_pairs_hook=_pairs_hook(saw_duplicate), parse_constant=_reject_constant)
    try:
        obj = decoder.decode(text)
    except json.JSONDecodeError as exc:
        at = byte_base + len(text[: exc.pos].encode("utf-8", "surrogatepass"))
        raise JsonProblem(
            f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno} (byte {at} of the file)"
        ) from None
    except RecursionError:
        raise JsonProblem("not valid JSON here: nested too deeply to parse") from None
    except JsonProblem:
        raise
    except ValueError as exc:
        # Python refuses to convert integers of more than 4300 digits; no real size is that long.
        raise JsonProblem(f"not valid JSON here: {exc}") from None
    # Anywhere in the document (an object, a list, the top level): a lone surrogate cannot be
    # written as UTF-8, so no other reader sees the string this one would return.
    if _SURROGATE_ESCAPE.search(text) or not _is_utf8_encodable(text):
        bad = _find_lone_surrogate(obj)
        if bad is not None:
            raise JsonProblem("a string holds a lone UTF-16 surrogate escape, which is not valid Unicode", bad)
    if saw_duplicate[0]:
        found = _find_duplicate(obj)
        if found is not None:
            path, key = found
            raise JsonProblem(f"duplicate key '{key}'", path, duplicate=key)
    return obj


def located(exc: JsonProblem) -> str:
    """`` at $.a[0]`` for a problem found at a path in the document; empty for one that has none."""
    return f" at {json_path(exc.path)}" if exc.path else ""


def json_path(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number with a fraction or exponent"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def load_json_file(
    path: Path, *, display: str | None = None,
    error: type[CheckpointError] | type[UsageError] = CheckpointError, require_object: bool = False,
) -> Any:
    """Read and strictly parse ``path`` (no duplicate keys, no NaN, UTF-8, a regular file).

    Args:
        path: the file to read.
        display: how the file is named in messages (default: ``path``).
        error: whose fault a bad file is: a :class:`CheckpointError` subclass for the
            checkpoint's files, :class:`UsageError` for a file the user named.
        require_object: the top level must be a JSON object.

    Raises:
        error: naming the file and what is wrong with it (missing, unreadable, not UTF-8,
            not valid JSON with line and column, a duplicate key with its JSON path).
    """
    shown = display or str(path)

    def fail(message: str) -> QualifyError:
        if issubclass(error, CheckpointError):
            return error(message, file=shown)
        return error(f"{shown}: {message}")

    try:
        # A FIFO or device would block read_bytes() forever; only regular files are read.
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise fail("not a regular file")
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise fail("file is missing") from None
    except OSError as exc:
        raise fail(f"cannot read: {exc.strerror or exc}") from None
    return parse_json_bytes(raw, display=shown, error=error, require_object=require_object)


def parse_json_bytes(
    raw: bytes, *, display: str, error: type[CheckpointError] | type[UsageError] = CheckpointError,
    require_object: bool = False,
) -> Any:
    """Strictly parse a file's bytes already read (so a caller can hash exactly the bytes it parsed).

    Raises:
        error: naming ``display`` and what is wrong (not UTF-8, not valid JSON with its line and
            column, a duplicate key with its JSON path, a top level that is not an object).
    """
    shown = display

    def fail(message: str) -> QualifyError:
        if issubclass(error, CheckpointError):
            return error(message, file=shown)
        return error(f"{shown}: {message}")

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise fail(f"not valid UTF-8 at byte {exc.start}: {exc.reason}") from None
    try:
        obj = parse_strict(text, byte_base=0)
    except JsonProblem as exc:
        raise fail(f"{exc.message}{located(exc)}") from None
    if require_object and not isinstance(obj, dict):
        raise fail(f"top level must be a JSON object, got {type_name(obj)}")
    return obj
