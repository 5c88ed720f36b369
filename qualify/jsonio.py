"""Strict JSON reading for files the harness judges.

Python's ``json`` silently keeps the last of two duplicate keys; in a manifest or a
quantization config that would let one file say two things, so duplicates are errors.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from .errors import CheckpointError


class DuplicateKeyError(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _reject_constant(name: str) -> Any:
    # NaN and Infinity are not JSON; accepting them would let a statistic compare as "equal".
    raise ValueError(f"{name} is not valid JSON")


def loads_strict(text: str | bytes) -> Any:
    """Parse JSON, rejecting duplicate keys and NaN/Infinity. Raises ValueError with the position."""
    return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)


def load_json_file(
    path: Path, *, display: str | None = None, error: type[CheckpointError] = CheckpointError
) -> Any:
    """Read and strictly parse ``path``; every failure is ``error`` naming the file."""
    shown = display or str(path)
    try:
        # A FIFO or device would block read_bytes() forever; only regular files are read.
        if Path(path).exists() and not stat.S_ISREG(os.stat(path).st_mode):
            raise error("not a regular file", file=shown)
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise error("file is missing", file=shown) from None
    except OSError as exc:
        raise error(f"cannot read: {exc.strerror or exc}", file=shown) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"not UTF-8 text (byte {exc.start})", file=shown) from None
    try:
        return loads_strict(text)
    except json.JSONDecodeError as exc:
        raise error(f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", file=shown) from None
    except ValueError as exc:
        raise error(f"malformed JSON: {exc}", file=shown) from None
