"""The structure level: the conversion manifest's claims tested against the files.

Each ``check_*`` function tests one family of claims (schema, pinned source, paths, file
list, checksums, coverage, statistics) and returns :class:`~qualify.report.model.Evidence`;
it passes only if every claim was verified, and a set of claims that is empty is a finding,
never a pass.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections import Counter
from pathlib import Path, PurePosixPath
from typing import Any

from qualify.checkpoint import files
from qualify.checkpoint.checksums import sha256_files, thread_map
from qualify.checkpoint.files import FileEntry, list_checkpoint_files, storage_roots
from qualify.checkpoint.manifest import (
    ACTIONS,
    LOAD_RELEVANT_SUFFIXES,
    MANIFEST_FORMAT_VERSION,
    MANIFEST_NAME,
    SCALE_SUFFIX,
    Manifest,
    OutputTensor,
    TensorEntry,
    read_manifest_json,
)
from qualify.checkpoint.quant_config import HF_QUANT_CONFIG, MODEL_CONFIG
from qualify.checkpoint.safetensors_io import INDEX_NAME, Checkpoint, invalid_bools
from qualify.checks.source_config import BYTE_COMPANIONS, JSON_COMPANIONS
from qualify.core import Evidence
from qualify.errors import CheckpointError, ManifestError
from qualify.mxfp8 import codec as mxfp8
from qualify.mxfp8 import statistics
from qualify.schemas import schema_errors
from qualify.util.identifiers import is_commit
from qualify.util.jsonio import load_json_file
from qualify.util.progress import StepProgress


def check_container(checkpoint: Checkpoint) -> Evidence:
    """The safetensors files parsed under the strict reader; what parsing cannot see is checked here.

    A BOOL tensor's bytes must each be 0 or 1 (:func:`~qualify.checkpoint.safetensors_io.invalid_bools`).
    """
    names = checkpoint.names()
    ev = Evidence(f"{len(checkpoint.files)} safetensors file(s) with {len(names)} tensors parse strictly")
    ev.measured.update(files=sorted(checkpoint.files), tensors=len(names))
    if not names:
        ev.add("the checkpoint holds no tensors")
    for rel, f in sorted(checkpoint.files.items()):
        for tensor, index, byte, offset in invalid_bools(f):
            ev.add(f"BOOL element {index} is byte 0x{byte:02x} (file offset {offset}); only 0 and 1 are valid",
                   file=rel, tensor=tensor)
    return ev


def check_schema(root: Path) -> Evidence:
    """The manifest exists, is strict JSON and satisfies ``manifest.schema.json``."""
    ev = Evidence(f"{MANIFEST_NAME} validates against manifest schema v{MANIFEST_FORMAT_VERSION}")
    raw = read_manifest_json(root)
    errors = schema_errors(raw, "manifest")
    for line in errors:
        ev.add(f"schema: {line}", file=MANIFEST_NAME)
    ev.measured["format_version"] = raw.get("format_version")
    ev.measured["schema_violations"] = len(errors)
    return ev


def check_source_pinned(manifest_raw: dict[str, Any], pinned_revision: str | None,
                        pinned_repo: str | None = None) -> Evidence:
    """The source is named at an immutable commit, and it is the repository and revision the profile pins.

    A manifest naming another repository at the same revision string is another source: a
    commit id is only unique within its repository.
    """
    named = manifest_raw.get("source")
    source: dict[str, Any] = named if isinstance(named, dict) else {}
    revision = source.get("revision")
    repo = source.get("repo")
    ev = Evidence("the source checkpoint is pinned to an immutable 40-hex commit")
    ev.measured.update(repo=repo, revision=revision)
    if pinned_repo:
        ev.expected["repo"] = pinned_repo
        if repo != pinned_repo:
            shown = "missing" if repo in ("", None) else repr(repo)
            ev.add(f"source repository is {shown}, not the repository the profile qualifies ({pinned_repo})",
                   file=MANIFEST_NAME)
    if not is_commit(revision):
        shown = "empty" if revision in ("", None) else repr(revision)
        ev.add(
            f"source revision is {shown}: a branch, tag or empty revision moves, so the conversion cannot be "
            "reproduced; record the 40-hex commit the conversion read",
            file=MANIFEST_NAME,
        )
    if pinned_revision:
        ev.expected["revision"] = pinned_revision
        if revision != pinned_revision:
            ev.add(
                f"source revision {revision!r} is not the revision the profile qualifies ({pinned_revision})",
                file=MANIFEST_NAME,
            )
    return ev


def _path_problem(path: str) -> str | None:
    p = PurePosixPath(path)
    if not path or path != path.strip():
        return "is empty or has surrounding whitespace"
    bad = next((ch for ch in path if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs")), None)
    if bad is not None:
        # A NUL ends the path for the operating system; other controls hide what the name says.
        return f"contains the control character {bad!a}, which no file name may hold"
    if "\\" in path or re.match(r"^[A-Za-z]:", path):
        return "is not a POSIX relative path"
    if p.is_absolute():
        return "is absolute; manifest paths are relative to the checkpoint root"
    if ".." in p.parts:
        return "contains '..' and would leave the checkpoint directory"
    if any(part in ("", ".") for part in path.split("/")):
        return "is not normalised (empty or '.' components)"
    return None


def _resolved(path: Path) -> tuple[Path | None, str | None]:
    """``path`` with every link resolved, or None and why it cannot be."""
    try:
        return path.resolve(strict=True), None
    except FileNotFoundError:
        return None, "is a broken link or names no file"
    except (OSError, RuntimeError, ValueError) as exc:  # a link loop, a NUL byte, a name too long
        return None, f"cannot be resolved: {exc}"


def _check_storage(root: Path, ev: Evidence, reported: set[str]) -> int:
    """Every file in the folder stays inside its storage roots; a hub snapshot's blobs are named by their digests.

    ``reported``: paths whose escape the manifest's own entries already reported. Returns how
    many files were looked at.
    """
    allowed = storage_roots(root)
    repo_dir = files.hub_repo_of(root)
    blobs = allowed[1] if len(allowed) > 1 else None
    if repo_dir is not None and blobs is None and (repo_dir / "blobs").exists():
        ev.add(f"the hub cache's blobs folder {repo_dir / 'blobs'} is a link or lies outside its repository "
               f"(it resolves to {(repo_dir / 'blobs').resolve()}): no file may be read through it",
               file="blobs")
    in_blobs: list[tuple[str, Path]] = []
    present = list_checkpoint_files(root)
    hard_linked = 0
    for rel in present:
        resolved, problem = _resolved(root / rel)
        if resolved is None:
            if rel not in reported:
                ev.add(f"{problem}; it would ship as it is", file=rel)
            continue
        links = _hard_links(resolved)
        if links > 1:
            hard_linked += 1
            ev.add(f"has {links} hard links: the same bytes are reachable through another path, so they can change "
                   "after qualification without any change to the checkpoint; ship a file of its own", file=rel)
        if not any(resolved.is_relative_to(r) for r in allowed):
            if rel not in reported:
                ev.add(f"resolves outside the checkpoint (to {resolved}); it would ship another file's bytes",
                       file=rel)
        elif blobs is not None and resolved.is_relative_to(blobs):
            if resolved.parent != blobs:
                ev.add(f"resolves into a subfolder of the hub cache's blobs ({resolved})", file=rel)
            else:
                in_blobs.append((rel, resolved))
    if in_blobs:
        try:
            digests = sha256_files([p for _, p in in_blobs], labels=[r for r, _ in in_blobs])
        except CheckpointError as exc:
            ev.add(exc.detail, file=exc.file)
            return len(present)
        for rel, blob in in_blobs:
            problem = files.blob_name_problem(blob, digests[blob])
            if problem:
                ev.add(f"hub cache blob is not content-addressed: {problem}", file=rel)
    ev.measured["blobs_verified"] = len(in_blobs)
    ev.measured["hard_linked"] = hard_linked
    return len(present)


def _hard_links(path: Path) -> int:
    """How many names a regular file has (1 for anything else, or a file that cannot be looked at)."""
    try:
        st = os.stat(path)
    except OSError:
        return 1
    return st.st_nlink if os.path.isfile(path) else 1


def check_paths(manifest_raw: dict[str, Any], root: Path) -> Evidence:
    """Every path is relative, stays inside the checkpoint (symlinks included) and is listed once.

    Every file in the folder, listed or not, must resolve inside the checkpoint (or, for a hub
    cache snapshot, into its own repository's content-addressed blobs): a release uploads them all.
    No file may have a second name (a hard link): through it the bytes could change after
    qualification.
    """
    ev = Evidence("manifest paths are relative, unique and stay inside the checkpoint, and so does every file "
                  "in the folder (none of them hard-linked)")
    root = Path(root)
    allowed = storage_roots(root)
    checked = 0
    reported: set[str] = set()
    for section, base in (("output", root), ("source", None)):
        # The raw JSON has not passed the schema yet: any part of it may have any type.
        sec = manifest_raw.get(section)
        entries = sec.get("files") if isinstance(sec, dict) else None
        entries = entries if isinstance(entries, list) else []
        counts = Counter(f["path"] for f in entries if isinstance(f, dict) and isinstance(f.get("path"), str))
        for path, n in counts.items():
            if n > 1:
                ev.add(f"{section} file {path!r} is listed {n} times", file=MANIFEST_NAME)
        for f in entries:
            path = f.get("path") if isinstance(f, dict) else None
            if not isinstance(path, str):
                ev.add(f"{section} file entry has no path", file=MANIFEST_NAME)
                continue
            checked += 1
            problem = _path_problem(path)
            if problem:
                ev.add(f"{section} path {path!r} {problem}", file=MANIFEST_NAME)
                continue
            if base is not None:
                try:
                    resolved = (base / path).resolve()
                except (OSError, RuntimeError, ValueError) as exc:
                    ev.add(f"output path {path!r} cannot be resolved: {exc}", file=MANIFEST_NAME)
                    reported.add(path)
                    continue
                if not any(resolved.is_relative_to(r) for r in allowed):
                    ev.add(f"output path {path!r} resolves outside the checkpoint (to {resolved})", file=path)
                    reported.add(path)
    ev.measured["paths_checked"] = checked
    if checked == 0:
        ev.add("the manifest lists no files", file=MANIFEST_NAME)
    if root.is_dir():
        ev.measured["files_in_folder"] = _check_storage(root, ev, reported)
    return ev


def _index_shards(root: Path, ev: Evidence) -> set[str] | None:
    """The shards ``model.safetensors.index.json`` names, or None when there is no index."""
    index_path = root / INDEX_NAME
    if not (index_path.exists() or index_path.is_symlink()):
        return None
    try:
        index = load_json_file(index_path, display=INDEX_NAME, error=ManifestError)
    except ManifestError as exc:
        ev.add(f"cannot tell which safetensors files are loaded: {exc.detail}", file=INDEX_NAME)
        return set()
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        ev.add("has no weight_map object, so no shard is indexed", file=INDEX_NAME)
        return set()
    return {v for v in weight_map.values() if isinstance(v, str)}


#: How vLLM selects a checkpoint's weight files (``DefaultModelLoader._prepare_weights``), for the findings:
#: the checks account for the weights as it does, so that what they read is what it loads.
VLLM_WEIGHTS_RULE = ("vLLM loads only the *.safetensors files of the checkpoint's top folder (a glob of that folder, "
                     f"never a subfolder), and with {INDEX_NAME} only those whose path is the top folder joined "
                     "with a name the index gives")


def _check_safetensors_accounted(root: Path, present: list[str], ev: Evidence) -> None:
    """Every ``.safetensors`` file is the single weights file, or a shard the index names, and in the top folder
    (:data:`VLLM_WEIGHTS_RULE`): a shard vLLM would not load is tensors the checks read and the runtime never does."""
    weights = [r for r in present if r.endswith(".safetensors")]
    shards = _index_shards(root, ev)
    for rel in weights:
        if "/" in rel:
            ev.add(f"a safetensors file in a subfolder, never loaded: {VLLM_WEIGHTS_RULE}", file=rel)
    top = [r for r in weights if "/" not in r]
    if shards is None:
        for rel in top:
            if len(top) > 1:
                ev.add(f"one of {len(top)} safetensors files without an index: which tensors load is undefined",
                       file=rel)
        return
    for shard in sorted(shards):
        # A plain file name of the top folder: "weights/x", "./x" and "x/" are never the path vLLM compares with.
        if "/" in shard or "\\" in shard or shard in ("", ".", ".."):
            ev.add(f"maps tensors to {shard!r}, which vLLM never loads (the tensors it names would be missing): "
                   f"{VLLM_WEIGHTS_RULE}", file=INDEX_NAME)
    if shards and not any(s in top for s in shards):
        ev.add("names no safetensors file of the top folder, so vLLM loads no weights (it stops: \"Cannot find any "
               f"model weights\", or \"Weight files referenced in index but missing\"): {VLLM_WEIGHTS_RULE}",
               file=INDEX_NAME)
    for rel in top:
        if rel not in shards:
            ev.add(f"a safetensors file that {INDEX_NAME} does not name: its tensors are never checked, "
                   "yet it ships", file=rel)


def _check_code(root: Path, present: list[str], ev: Evidence) -> int:
    """Findings for every file that is code, a pickle, or a JSON file naming code (``auto_map``)."""
    found = 0
    for rel in present:
        path = root / rel
        if not path.is_file():
            continue
        try:
            head = files.read_head(path)
        except OSError as exc:
            ev.add(f"cannot be read: {exc.strerror or exc}", file=rel)
            continue
        reason = files.executable_reason(rel, head)
        if reason is None and rel.endswith(".json") and rel != MANIFEST_NAME:
            try:
                data = load_json_file(path, display=rel, error=ManifestError)
            except ManifestError as exc:
                reason = f"cannot be read as JSON, so whether it names code is unknown: {exc.detail}"
            else:
                keys = list(files.code_keys(data))
                if keys:
                    reason = (f"names Python code to import ({', '.join(keys)}): loading it with "
                              "trust_remote_code runs the checkpoint's own modules")
        if reason is not None:
            found += 1
            ev.add(f"{reason}; the profile does not allow code in a checkpoint ([manifest] allow_code)", file=rel)
    return found


def check_file_list(manifest: Manifest, root: Path, *, allow_code: bool = False) -> Evidence:
    """Every file in the folder is accounted for: listed with its checksum, or on the never-loaded list.

    Beyond that: no file is code or a pickle (unless ``allow_code``), and every
    ``.safetensors`` file is the single weights file or a shard the index names.
    """
    ev = Evidence("every file in the checkpoint is listed in the manifest (or is one no runtime loads: "
                  "README, images, licence), no file is code or a pickle, and every listed file exists")
    root = Path(root)
    present = list_checkpoint_files(root)
    listed = {f.path for f in manifest.output_files}
    for path in sorted(listed - set(present)):
        ev.add("listed in the manifest but missing from the checkpoint", file=path)
    for path in present:
        if any(0xDC80 <= ord(ch) <= 0xDCFF for ch in path):
            ev.add("its name is not valid UTF-8, so no manifest (JSON) can list it", file=path)
        if not (root / path).is_symlink() and not (root / path).is_file():
            ev.add("is not a regular file (a FIFO, socket or device): nothing can verify what it would ship",
                   file=path)
    unlisted = [p for p in present if p not in listed and p != MANIFEST_NAME]
    for path in unlisted:
        if not files.is_never_loaded(path):
            ev.add("present in the checkpoint but not listed in the manifest: it would ship unverified (only "
                   "README, images and licence texts may be unlisted)", file=path)
    if MANIFEST_NAME in listed:
        ev.add("the manifest lists itself; its own checksum cannot be inside it", file=MANIFEST_NAME)
    _check_safetensors_accounted(root, present, ev)
    code = 0 if allow_code else _check_code(root, present, ev)
    ev.expected["allow_code"] = allow_code
    ev.measured.update(files_listed=len(listed), files_present=len(present),
                       files_unlisted_never_loaded=sum(files.is_never_loaded(p) for p in unlisted), code_files=code)
    return ev


#: Files a conversion adds to its source's (besides the weights the manifest lists): what it declares.
CONVERSION_FILES = (MANIFEST_NAME, HF_QUANT_CONFIG)


def _compared_by_source_config(rel: str) -> bool:
    """Whether structure.source_config compares the file with the source's (key by key or byte for byte)."""
    return rel in (MODEL_CONFIG, *JSON_COMPANIONS, *BYTE_COMPANIONS)


def check_source_files(manifest: Manifest, root: Path, source: Path) -> Evidence:
    """Every file of the checkpoint a runtime may read is the source's, but the weights and what conversion adds.

    A tokenizer, generation config or chat template the source lacks changes what a runtime
    does, and nothing else compares it with anything: such a file fails, named. A conversion
    adds :data:`CONVERSION_FILES` and the ``.safetensors`` weights (and their index) the
    manifest lists; every other file a runtime may read must exist in the source, and the
    ones ``structure.source_config`` does not compare must equal the source's byte for byte.
    """
    ev = Evidence("every file a runtime may read is the source's (config, tokenizer, generation, templates), but "
                  f"the weights the manifest lists and {', '.join(CONVERSION_FILES)}")
    root, source = Path(root), Path(source)
    listed = {f.path for f in manifest.output_files}
    readable = 0
    for rel in list_checkpoint_files(root):
        if files.is_never_loaded(rel) or rel in CONVERSION_FILES:
            continue
        if rel in listed and (rel.endswith(".safetensors") or rel == INDEX_NAME):
            continue  # the conversion's weights: structure.output_coverage and the format level read them
        readable += 1
        theirs = source / rel
        if not theirs.is_file():
            ev.add("a file a runtime may read that the source lacks: a conversion adds only the weights, "
                   f"{' and '.join(CONVERSION_FILES)}, so this one changes what the runtime does unchecked", file=rel)
            continue
        if _compared_by_source_config(rel) or not (root / rel).is_file():
            continue
        try:
            same = (root / rel).read_bytes() == theirs.read_bytes()
        except OSError as exc:
            ev.add(f"cannot be compared with the source's: {exc.strerror or exc}", file=rel)
            continue
        if not same:
            ev.add("differs from the source's byte for byte, and a runtime may read it", file=rel)
    ev.measured["runtime_readable_files"] = readable
    return ev


def check_checksums(files: tuple[FileEntry, ...], root: Path, *, what: str, complete: bool = False) -> Evidence:
    """Every listed file's size and streamed sha256 equal the manifest's.

    With ``complete``, every load-relevant file under ``root`` must also be listed: a source
    whose weights are missing from the list would otherwise be "verified" by its config alone.
    """
    ev = Evidence(f"{what} files match the manifest's sha256 and size")
    root = Path(root)
    if not files:
        ev.add(f"the manifest lists no {what} files", file=MANIFEST_NAME)
        return ev
    if complete:
        listed = {f.path for f in files}
        for rel in list_checkpoint_files(root):
            if rel.endswith(LOAD_RELEVANT_SUFFIXES) and rel not in listed and rel != MANIFEST_NAME:
                ev.add(f"{what} file is not listed in the manifest: its content is unverified", file=rel)
    to_hash: list[tuple[FileEntry, Path]] = []
    for f in files:
        if _path_problem(f.path):
            ev.add(f"not hashed: unsafe path {f.path!r}", file=MANIFEST_NAME)
            continue
        path = root / f.path
        if not path.is_file():
            ev.add(f"{what} file is missing", file=f.path)
            continue
        size = path.stat().st_size
        if size != f.size:
            ev.add(f"size is {size} bytes, the manifest says {f.size}", file=f.path)
        to_hash.append((f, path))
    try:
        digests = sha256_files([p for _, p in to_hash], labels=[f.path for f, _ in to_hash])
    except CheckpointError as exc:
        ev.add(exc.detail, file=exc.file)
        return ev
    for f, path in to_hash:
        got = digests[path]
        if got != f.sha256:
            ev.add(f"sha256 is {got}, the manifest says {f.sha256}", file=f.path)
    ev.measured.update(files_hashed=len(to_hash), bytes_hashed=sum(p.stat().st_size for _, p in to_hash))
    return ev


def check_output_coverage(manifest: Manifest, checkpoint: Checkpoint) -> Evidence:
    """The manifest's output tensors and the checkpoint's tensors are the same set, with the same dtype and shape."""
    ev = Evidence("every tensor in the checkpoint is named by the manifest, and every named tensor exists as claimed")
    claimed: dict[str, OutputTensor] = {}
    for entry in manifest.tensors:
        for out in entry.outputs:
            if out.name in claimed:
                ev.add(f"output tensor is claimed by two manifest entries (again by '{entry.source_name}')",
                       file=MANIFEST_NAME, tensor=out.name)
            claimed[out.name] = out
        _check_entry_shape(entry, ev)
    actual = set(checkpoint.names())
    for name in sorted(set(claimed) - actual):
        ev.add("named by the manifest but missing from the checkpoint", tensor=name, file=MANIFEST_NAME)
    for name in sorted(actual - set(claimed)):
        ev.add("present in the checkpoint but not named by the manifest", tensor=name, file=checkpoint.file_of(name))
    for name in sorted(actual & set(claimed)):
        info, out = checkpoint.info(name), claimed[name]
        if info.dtype != out.dtype or tuple(info.shape) != tuple(out.shape):
            ev.add(f"is {info.dtype} {list(info.shape)}, the manifest says {out.dtype} {list(out.shape)}",
                   tensor=name, file=checkpoint.file_of(name))
    ev.measured.update(manifest_outputs=len(claimed), checkpoint_tensors=len(actual))
    if not actual:
        ev.add("the checkpoint has no tensors")
    return ev


def _check_entry_shape(entry: TensorEntry, ev: Evidence) -> None:
    """An entry's outputs must be what its action produces from its source."""
    name = entry.source_name
    if entry.action == "quantized":
        weight, scale = entry.outputs[0], entry.outputs[1] if len(entry.outputs) > 1 else None
        if weight.name != name:
            ev.add(f"quantized output is named '{weight.name}', expected the source name", tensor=name,
                   file=MANIFEST_NAME)
        if scale is None or scale.name != name + SCALE_SUFFIX:
            ev.add(f"quantized tensor needs a scale output named '{name}{SCALE_SUFFIX}'", tensor=name,
                   file=MANIFEST_NAME)
        if tuple(weight.shape) != entry.source_shape:
            ev.add(f"quantized shape {list(weight.shape)} differs from the source shape {list(entry.source_shape)}",
                   tensor=name, file=MANIFEST_NAME)
    else:
        out = entry.outputs[0]
        if out.name != name or out.dtype != entry.source_dtype or tuple(out.shape) != entry.source_shape:
            ev.add(f"{entry.action} tensor must be copied unchanged, but the manifest maps it to "
                   f"'{out.name}' {out.dtype} {list(out.shape)}", tensor=name, file=MANIFEST_NAME)


def check_source_coverage(manifest: Manifest, source: Checkpoint) -> Evidence:
    """Every source tensor is accounted for exactly once (quantized, kept or excluded), as it is in the source."""
    ev = Evidence("every source tensor is quantized, kept or excluded exactly once")
    counts = Counter(t.source_name for t in manifest.tensors)
    for name, n in sorted(counts.items()):
        if n > 1:
            ev.add(f"accounted for {n} times", tensor=name, file=MANIFEST_NAME)
    actual = set(source.names())
    for name in sorted(actual - set(counts)):
        ev.add("source tensor is not accounted for by the manifest (dropped silently?)", tensor=name,
               file=source.file_of(name))
    for name in sorted(set(counts) - actual):
        ev.add("the manifest names a source tensor that the source does not have", tensor=name, file=MANIFEST_NAME)
    for entry in manifest.tensors:
        if entry.source_name in actual:
            info = source.info(entry.source_name)
            if info.dtype != entry.source_dtype or tuple(info.shape) != entry.source_shape:
                ev.add(f"source is {info.dtype} {list(info.shape)}, the manifest says "
                       f"{entry.source_dtype} {list(entry.source_shape)}", tensor=entry.source_name,
                       file=source.file_of(entry.source_name))
    ev.measured.update(
        source_tensors=len(actual), **{a: sum(1 for t in manifest.tensors if t.action == a) for a in ACTIONS}
    )
    if not actual:
        ev.add("the source checkpoint has no tensors")
    return ev


def recompute_statistics(
    entry: TensorEntry, checkpoint: Checkpoint, source: Checkpoint, recipe: str | None
) -> statistics.WeightStatistics:
    weight = checkpoint.tensor(entry.source_name)
    scale = checkpoint.tensor(entry.source_name + SCALE_SUFFIX)
    q = mxfp8.MXFP8Weight(data=weight, scale=scale)
    return statistics.weight_statistics(source.tensor(entry.source_name), q, recipe or mxfp8.ScaleRecipe.MODELOPT)


def check_statistics(
    manifest: Manifest, checkpoint: Checkpoint, source: Checkpoint, *, rtol: float, atol: float
) -> Evidence:
    """Per-weight and aggregate statistics recomputed from the tensors agree with the manifest's claims."""
    ev = Evidence(f"per-weight and aggregate quantization statistics recomputed from the tensors "
                  f"agree with the manifest (rtol {rtol:g}, atol {atol:g})")
    ev.expected.update(rtol=rtol, atol=atol)
    recomputed: list[statistics.WeightStatistics] = []
    quantized = manifest.quantized
    if not quantized:
        ev.add("the manifest marks no tensor as quantized: there is nothing to verify", file=MANIFEST_NAME)
        return ev

    def recompute(entry: TensorEntry) -> statistics.WeightStatistics | tuple[str, str | None]:
        """The statistics, or the finding (message, file) that says why there are none."""
        name = entry.source_name
        if name not in checkpoint or name + SCALE_SUFFIX not in checkpoint or name not in source:
            return "cannot recompute: weight, scale or source tensor is missing", None
        try:
            return recompute_statistics(entry, checkpoint, source, manifest.scale_recipe)
        except CheckpointError as exc:
            return exc.detail, exc.file
        except (TypeError, ValueError) as exc:  # dtypes or shapes that are not MXFP8 at all
            return f"cannot recompute statistics: {exc}", checkpoint.file_of(name)

    # Tensors are recomputed on worker threads, a few at a time, and reported in manifest order.
    sizes = [source.info(e.source_name).nbytes if e.source_name in source else 0 for e in quantized]
    with StepProgress("statistics", f"{len(quantized)} tensors", sum(sizes)) as bar:
        for entry, size, stats in zip(quantized, sizes, thread_map(recompute, quantized), strict=True):
            bar.advance(size)
            name = entry.source_name
            if isinstance(stats, tuple):
                message, file = stats
                ev.add(message, tensor=name, file=file)
                continue
            recomputed.append(stats)
            diffs = statistics.compare(entry.statistics or {}, stats.to_dict(), rtol=rtol, atol=atol)
            if diffs:
                ev.add("statistics differ from the tensors: " + "; ".join(diffs), tensor=name, file=MANIFEST_NAME)
    if len(recomputed) == len(quantized):
        agg = statistics.aggregate(recomputed)
        diffs = statistics.compare(manifest.aggregate, agg.to_dict(), rtol=rtol, atol=atol)
        if diffs:
            ev.add("aggregate statistics differ from the tensors: " + "; ".join(diffs), file=MANIFEST_NAME)
        ev.measured["aggregate"] = agg.to_dict()
    ev.measured["tensors_recomputed"] = len(recomputed)
    return ev


