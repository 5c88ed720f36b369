"""``conversion_manifest.json``: its model, how it is read, and how ``qualify convert`` writes it.

The manifest is a conversion's claims: the immutable source it started from, every file's
checksum, what happened to every source tensor, and the error it measured. The structure
checks that test those claims against the files are in :mod:`qualify.checks.structure`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qualify import __version__
from qualify.checkpoint.checksums import sha256_files
from qualify.checkpoint.files import FileEntry, list_checkpoint_files
from qualify.errors import ManifestError
from qualify.mxfp8.constants import BLOCK_SIZE
from qualify.schemas import schema_errors
from qualify.util.jsonio import load_json_file

if TYPE_CHECKING:  # the statistics are computed with torch; the manifest's model is read without it
    from qualify.mxfp8.statistics import AggregateStatistics

MANIFEST_NAME = "conversion_manifest.json"
MANIFEST_FORMAT_VERSION = 1
ACTIONS = ("quantized", "kept", "excluded")
SCALE_SUFFIX = "_scale"

#: Files whose content decides how a checkpoint loads: each must be listed in the manifest.
LOAD_RELEVANT_SUFFIXES = (".safetensors", ".json")


@dataclass(frozen=True)
class OutputTensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    role: str


@dataclass(frozen=True)
class TensorEntry:
    source_name: str
    action: str
    source_dtype: str
    source_shape: tuple[int, ...]
    outputs: tuple[OutputTensor, ...]
    statistics: dict[str, Any] | None
    reason: str

    @property
    def weight_output(self) -> OutputTensor:
        return self.outputs[0]

    @property
    def scale_output(self) -> OutputTensor | None:
        return self.outputs[1] if self.action == "quantized" and len(self.outputs) > 1 else None


@dataclass(frozen=True)
class Manifest:
    """A manifest that passed its schema. Build it with :func:`load_manifest`."""

    raw: dict[str, Any]
    path: Path
    source_repo: str
    source_revision: str
    source_files: tuple[FileEntry, ...]
    output_files: tuple[FileEntry, ...]
    quantization: dict[str, Any]
    tensors: tuple[TensorEntry, ...]
    aggregate: dict[str, Any]

    @property
    def scale_recipe(self) -> str | None:
        return self.quantization.get("scale_recipe")

    @property
    def quantized(self) -> list[TensorEntry]:
        return [t for t in self.tensors if t.action == "quantized"]


def read_manifest_json(root: Path) -> dict[str, Any]:
    """The manifest as parsed JSON (duplicate keys rejected), before any schema check."""
    path = Path(root) / MANIFEST_NAME
    data = load_json_file(path, display=MANIFEST_NAME, error=ManifestError)
    if not isinstance(data, dict):
        raise ManifestError("the manifest must be a JSON object", file=MANIFEST_NAME)
    return data


def load_manifest(root: Path) -> Manifest:
    """Read, schema-validate and model the manifest of the checkpoint at ``root``."""
    raw = read_manifest_json(root)
    errors = schema_errors(raw, "manifest")
    if errors:
        shown = "; ".join(errors[:3]) + (f" (and {len(errors) - 3} more)" if len(errors) > 3 else "")
        raise ManifestError(f"fails its schema: {shown}", file=MANIFEST_NAME)
    return _model(raw, Path(root) / MANIFEST_NAME)


def _files(items: list[dict[str, Any]]) -> tuple[FileEntry, ...]:
    return tuple(FileEntry(f["path"], f["sha256"], int(f["size"])) for f in items)


def _model(raw: dict[str, Any], path: Path) -> Manifest:
    tensors = []
    for t in raw["tensors"]:
        outputs = tuple(
            OutputTensor(o["name"], o["dtype"], tuple(o["shape"]), o.get("role", "tensor")) for o in t["outputs"]
        )
        tensors.append(
            TensorEntry(
                source_name=t["source_name"],
                action=t["action"],
                source_dtype=t["source_dtype"],
                source_shape=tuple(t["source_shape"]),
                outputs=outputs,
                statistics=t.get("statistics"),
                reason=t.get("reason", ""),
            )
        )
    return Manifest(
        raw=raw,
        path=path,
        source_repo=raw["source"]["repo"],
        source_revision=raw["source"]["revision"],
        source_files=_files(raw["source"]["files"]),
        output_files=_files(raw["output"]["files"]),
        quantization=dict(raw["quantization"]),
        tensors=tuple(tensors),
        aggregate=dict(raw["aggregate"]),
    )


# --------------------------------------------------------------------------- writing
# Writing a manifest decides no verdict (what is written is checked by qualify.checks.structure when
# it is read back), so mutation testing leaves this section out; see docs/development.md, Mutation testing.
# pragma: no mutate block


def file_entries(root: Path, paths: list[str]) -> list[dict[str, Any]]:
    digests = sha256_files([Path(root) / p for p in paths], labels=paths)
    return [{"path": p, "sha256": digests[Path(root) / p], "size": (Path(root) / p).stat().st_size} for p in paths]


def build_manifest(
    *,
    source_dir: Path,
    output_dir: Path,
    source_repo: str,
    source_revision: str,
    entries: list[dict[str, Any]],
    aggregate: AggregateStatistics,
    recipe: str | None,
    excluded_modules: list[str],
    producer: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest document for a conversion whose files are all written (except the manifest)."""
    from qualify.schemas import validate

    output_files = [p for p in list_checkpoint_files(output_dir) if p != MANIFEST_NAME]
    doc: dict[str, Any] = {
        "format_version": MANIFEST_FORMAT_VERSION,
        "producer": producer or {"name": "qualify", "version": __version__},
        "source": {"repo": source_repo, "revision": source_revision,
                   "files": file_entries(source_dir, list_checkpoint_files(source_dir))},
        "output": {"files": file_entries(output_dir, output_files)},
        "quantization": {
            "format": "MXFP8",
            "element_dtype": "float8_e4m3fn",
            "scale_dtype": "uint8",
            "scale_encoding": "e8m0-biased-127",
            "block_size": BLOCK_SIZE,
            "block_axis": "input",
            "scale_layout": "row-major-unswizzled",
            "scale_recipe": recipe,
            "excluded_modules": list(excluded_modules),
        },
        "tensors": entries,
        "aggregate": aggregate.to_dict(),
    }
    validate(doc, "manifest", what="the manifest being written")
    return doc


def write_manifest(output_dir: Path, doc: dict[str, Any]) -> Path:
    import json

    from qualify.util.atomic import atomic_write_text

    path = Path(output_dir) / MANIFEST_NAME
    atomic_write_text(path, json.dumps(doc, indent=2, allow_nan=False) + "\n")
    return path
