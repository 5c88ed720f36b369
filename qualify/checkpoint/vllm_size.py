"""A checkpoint's size as vLLM 0.32 prints it when it loads it: "Checkpoint size: %.2f GiB".

vLLM's statement (``vllm/model_executor/model_loader/weight_utils.py``, ``safetensors_weights_iterator``)
prints ``total_bytes / 1024**3`` with ``%.2f``, where ``total_bytes`` is the sum of ``os.path.getsize`` over
the weight files the default loader chose (``default_loader.py``, ``_prepare_weights``) for a local folder:

- ``consolidated*.safetensors`` when the folder has one (the Mistral layout), with the index
  ``consolidated.safetensors.index.json``; otherwise the first of ``*.safetensors`` and ``*.bin`` that
  matches anything, ``*.pt`` after them when no safetensors file is there (``glob`` in the folder itself:
  no subfolder, no name starting with a dot);
- safetensors files are kept only when the index (``model.safetensors.index.json``) names them in its
  ``weight_map``, if the folder has an index; a file the index names that is missing fails the load;
- only safetensors weights print the line: ``.bin`` and ``.pt`` weights go through other iterators.

A model class may also drop shards whose every tensor it does not use (``is_unused_checkpoint_weight``);
no DFlash model of vLLM 0.32 defines it, so the size here is that of every file above. The size is
computed from the bytes on disk, so a number a file merely claims (a card's "1.20 GB") never enters it.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qualify.errors import CheckpointError
from qualify.util.jsonio import load_json_file

SAFE_WEIGHTS_INDEX = "model.safetensors.index.json"
MISTRAL_INDEX = "consolidated.safetensors.index.json"
#: vLLM's ``filter_files_not_needed_for_inference``: training state that is never loaded.
NOT_FOR_INFERENCE = ("training_args.bin", "optimizer.bin", "optimizer.pt", "scheduler.pt", "scaler.pt")
GIB = 1024**3


@dataclass(frozen=True)
class LoadedSize:
    """The weight files vLLM reads from a folder, their sizes, and the figure it prints for them."""

    files: tuple[tuple[str, int], ...]  # (name, bytes) in name order
    total_bytes: int

    @property
    def gib(self) -> float:
        return self.total_bytes / GIB

    @property
    def printed(self) -> str:
        """The number exactly as vLLM's ``%.2f`` prints it (Python's formatting is the same)."""
        return f"{self.gib:.2f}"

    def to_dict(self) -> dict[str, Any]:
        return {"files": [{"name": n, "bytes": b} for n, b in self.files], "total_bytes": self.total_bytes,
                "gib": self.gib, "printed": f"{self.printed} GiB"}


def _glob(names: list[str], pattern: str) -> list[str]:
    # glob.glob's "*" never matches a leading dot; fnmatch's does.
    return [n for n in names if not n.startswith(".") and fnmatch.fnmatchcase(n, pattern)]


def vllm_checkpoint_size(folder: Path) -> LoadedSize:
    """The safetensors weight files vLLM 0.32 loads from ``folder`` and their total size.

    Raises:
        CheckpointError: the folder cannot be listed, holds no safetensors weights (vLLM then prints no
            size), its index is not valid JSON or names a file that is missing, or a file cannot be sized;
            each message names the folder or the file.
    """
    try:
        names = sorted(os.listdir(folder))
    except OSError as exc:
        raise CheckpointError(f"cannot list the folder: {exc.strerror or exc}", file=str(folder)) from None
    if _glob(names, "consolidated*.safetensors"):
        patterns, index = ["consolidated*.safetensors"], MISTRAL_INDEX
    else:
        patterns, index = ["*.safetensors", "*.bin", "*.pt"], SAFE_WEIGHTS_INDEX
    chosen: list[str] = []
    for pattern in patterns:
        chosen = _glob(names, pattern)
        if chosen:
            break
    if not chosen or not chosen[0].endswith(".safetensors"):
        found = f"its weights are {', '.join(chosen)}" if chosen else "it has no weight file"
        raise CheckpointError(f"no safetensors weights for vLLM to size ({found}): vLLM prints a checkpoint size "
                              "only for safetensors weights", file=str(folder))
    if index in names:
        data = load_json_file(folder / index, display=str(folder / index), require_object=True)
        weight_map = data.get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise CheckpointError("'weight_map' is not an object of file names", file=str(folder / index))
        listed = set(weight_map.values())
        missing = sorted(listed - set(chosen))
        if missing:
            raise CheckpointError(f"names weight files the folder lacks: {', '.join(missing)} (vLLM refuses to "
                                  "load it)", file=str(folder / index))
        chosen = [n for n in chosen if n in listed]
    sizes = []
    for name in chosen:
        try:
            sizes.append((name, os.path.getsize(folder / name)))
        except OSError as exc:
            raise CheckpointError(f"cannot read its size: {exc.strerror or exc}", file=str(folder / name)) from None
    return LoadedSize(tuple(sizes), sum(b for _, b in sizes))


__all__ = ["GIB", "LoadedSize", "vllm_checkpoint_size"]
