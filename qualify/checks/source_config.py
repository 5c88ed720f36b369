"""Config faithfulness: the checkpoint's configuration is its source's, but for what conversion documents.

Quantizing changes tensors, not the model: a runtime builds the draft from ``config.json``,
so a conversion that also changed a key (other target layers, another mask token, another
norm epsilon or activation) ships another model, one the format and reproduction checks
cannot see since they read the tensors. For a DFlash draft such a change collapses
acceptance silently. The rule: every key of the checkpoint's ``config.json`` equals the
source's, recursively and with JSON types kept apart (``1``, ``1.0`` and ``true`` differ),
except ``quantization_config``, which the conversion adds, and the key paths a profile lists
in ``[source] allowed_config_changes``. The other files a runtime reads with the model
(generation and tokenizer configuration) must be the source's wherever both sides have them.

:func:`config_differences` is pure; :func:`check_source_config` reads the files.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qualify.checkpoint.quant_config import MODEL_CONFIG
from qualify.core import Evidence
from qualify.errors import CheckpointError
from qualify.util.jsonio import load_json_file

#: The key the conversion adds to config.json (a ModelOpt export and ``qualify convert`` alike).
QUANTIZATION_KEY = "quantization_config"

#: Keys a speculative-decoding runtime reads to wire the draft to its target and to draft tokens
#: (vLLM: ``dflash_config.target_layer_ids``, ``mask_token_id``, ``block_size``, the layer types, the
#: architecture it instantiates): any change under them changes what is accepted.
ACCEPTANCE_CRITICAL_KEYS = frozenset({
    "dflash_config", "eagle_config", "target_layer_ids", "dspark_target_layer_ids", "mask_token_id",
    "dspark_noise_token_id", "pard_token", "block_size", "layer_types", "architectures",
})

#: JSON files a runtime reads beside config.json: compared key by key where both sides have them.
JSON_COMPANIONS = ("generation_config.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json",
                   "added_tokens.json", "vocab.json", "chat_template.json")
#: Other tokenizer files a runtime reads: compared byte for byte where both sides have them.
BYTE_COMPANIONS = ("tokenizer.model", "merges.txt", "chat_template.jinja", "tiktoken.model")

_SHOWN = 120  # characters of a value a message shows
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Difference:
    """One key whose value differs: its path, and each side's value (``MISSING`` when absent)."""

    path: tuple[str | int, ...]
    output: Any
    source: Any

    @property
    def critical(self) -> bool:
        return any(isinstance(p, str) and p in ACCEPTANCE_CRITICAL_KEYS for p in self.path)


class _Missing:
    def __repr__(self) -> str:
        return "absent"


MISSING: Any = _Missing()


def key_path(path: Sequence[str | int]) -> str:
    """``dflash_config.target_layer_ids[1]``; a key that is not a plain name is quoted (``["a.b"]``)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENT.fullmatch(part):
            out += f".{part}" if out else part
        else:
            out += "[" + json.dumps(part) + "]"
    return out or "(the whole document)"


def _same(a: Any, b: Any) -> bool:
    # JSON types kept apart: Python says True == 1 == 1.0, a runtime reading the config may not.
    # (Objects and lists of one length never get here: config_differences walks into them.)
    return type(a) is type(b) and bool(a == b)


def config_differences(output: Any, source: Any, path: tuple[str | int, ...] = ()) -> list[Difference]:
    """Every key path at which ``output`` and ``source`` (parsed JSON) differ, outermost first.

    Objects are compared key by key and lists of equal length element by element, so a
    difference is named where it is; a list whose length changed is one difference.
    """
    if isinstance(output, dict) and isinstance(source, dict):
        out: list[Difference] = []
        for key in sorted(set(output) | set(source)):
            if key not in source:
                out.append(Difference((*path, key), output[key], MISSING))
            elif key not in output:
                out.append(Difference((*path, key), MISSING, source[key]))
            else:
                out += config_differences(output[key], source[key], (*path, key))
        return out
    if isinstance(output, list) and isinstance(source, list) and len(output) == len(source):
        out = []
        for i, (a, b) in enumerate(zip(output, source, strict=True)):
            out += config_differences(a, b, (*path, i))
        return out
    return [] if _same(output, source) else [Difference(path, output, source)]


def is_allowed(path: Sequence[str | int], allowed: Sequence[str]) -> bool:
    """Whether ``path`` is at or under a key path of ``allowed`` (the quantization config always is)."""
    if path and path[0] == QUANTIZATION_KEY:
        return True
    shown = key_path(path)
    return any(shown == a or shown.startswith(a + ".") or shown.startswith(a + "[") for a in allowed)


def _show(value: Any) -> str:
    if value is MISSING:
        return "absent"
    # JSON text escapes control characters and non-ASCII, so a hostile value cannot forge a log line.
    text = json.dumps(value, ensure_ascii=True, sort_keys=True)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def difference_message(diff: Difference) -> str:
    """The finding for one difference: the key path and both values, acceptance-critical keys said so."""
    text = f"{key_path(diff.path)} is {_show(diff.output)} in the checkpoint but {_show(diff.source)} in the source"
    if diff.critical:
        text += (" (acceptance-critical: a DFlash runtime reads it to wire the draft to its target and draft "
                 "tokens; a change collapses acceptance silently)")
    return text


def _read(path: Path, display: str) -> Any:
    return load_json_file(path, display=display, error=CheckpointError)


def check_source_config(checkpoint_dir: Path, source_dir: Path, *, allowed: Sequence[str] = ()) -> Evidence:
    """The checkpoint's config.json, and its generation and tokenizer files, are the source's.

    ``allowed`` are ``[source] allowed_config_changes``: key paths (``a.b[0]``) that may differ,
    with everything under them.
    """
    checkpoint_dir, source_dir = Path(checkpoint_dir), Path(source_dir)
    ev = Evidence("config.json and the generation/tokenizer files equal the source's, but for the quantization "
                  "config" + (f" and {', '.join(allowed)}" if allowed else ""))
    ev.expected["allowed_changes"] = [QUANTIZATION_KEY, *allowed]
    compared: list[str] = []
    ours, theirs = checkpoint_dir / MODEL_CONFIG, source_dir / MODEL_CONFIG
    if not theirs.is_file():
        ev.add("the source has no config.json: the checkpoint's cannot be shown to be the source's",
               file=f"source {MODEL_CONFIG}")
    if not ours.is_file():
        ev.add("the checkpoint has no config.json", file=MODEL_CONFIG)
    names = [MODEL_CONFIG] if ours.is_file() and theirs.is_file() else []
    names += [n for n in JSON_COMPANIONS if (checkpoint_dir / n).is_file() and (source_dir / n).is_file()]
    allowed_changes = 0
    for name in names:
        try:
            output = _read(checkpoint_dir / name, name)
            source = _read(source_dir / name, f"source {name}")
        except CheckpointError as exc:
            ev.add(exc.detail, file=exc.file)
            continue
        compared.append(name)
        for diff in config_differences(output, source):
            if name == MODEL_CONFIG and is_allowed(diff.path, allowed):
                allowed_changes += 1
                continue
            ev.add(difference_message(diff), file=name)
    for name in BYTE_COMPANIONS:
        a, b = checkpoint_dir / name, source_dir / name
        if a.is_file() and b.is_file():
            compared.append(name)
            if a.read_bytes() != b.read_bytes():
                ev.add("differs from the source's byte for byte (a runtime tokenizes with it)", file=name)
    ev.measured.update(files_compared=compared, allowed_differences=allowed_changes)
    return ev


__all__ = ["ACCEPTANCE_CRITICAL_KEYS", "BYTE_COMPANIONS", "JSON_COMPANIONS", "QUANTIZATION_KEY", "Difference",
           "check_source_config", "config_differences", "difference_message", "is_allowed", "key_path"]
