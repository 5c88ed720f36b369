"""Loading a profile: a shipped one by name, any by path, validated before it is parsed into specs.

A profile is a versioned TOML file (``qualify/profiles/<name>.toml``) validated against
``schemas/profile.schema.json``. It encodes what a model card's "Validation status"
states -- target, runtime image, hardware, parallelism, backends, proposal length, CUDA
graph mode -- plus the serving command's environment and the evidence the runtime must
show. A report records the profile's name and sha256 so a verdict is tied to the exact
conditions it was reached under.

Loading is strict on purpose: every table in the schema is closed, so a misspelt key
is an error instead of a silently ignored condition, and values that must agree with
each other (``TP`` in the env and ``tensor_parallel_size``, say) are cross-checked.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from qualify.errors import ProfileError
from qualify.profile.levels import stand_in_levels
from qualify.profile.model import Profile
from qualify.profile.specs import FormatSpec
from qualify.schemas import schema_errors

PROFILE_FORMAT_VERSION = 1

# The capture group a weight-size evidence pattern must have for expected_gb to be compared.
_GB_GROUP = "gb"


def list_profiles() -> list[str]:
    """The names of the profiles shipped with the package, sorted."""
    return sorted(
        entry.name.removesuffix(".toml")
        for entry in _profiles_dir().iterdir()
        if entry.is_file() and entry.name.endswith(".toml")
    )


def load_profile(name_or_path: str | Path) -> Profile:
    """Load a shipped profile by name, or any profile by path to its ``.toml`` file."""
    if isinstance(name_or_path, Path) or _looks_like_path(name_or_path):
        path = Path(name_or_path)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise ProfileError(f"profile {path}: no such file") from None
        except OSError as exc:
            raise ProfileError(f"profile {path}: cannot read: {exc.strerror or exc}") from exc
        return _parse(raw, path, shipped_name=None)

    name = name_or_path
    shipped = list_profiles()
    if name not in shipped:
        raise ProfileError(
            f"unknown profile {name!r}; shipped profiles: {', '.join(shipped) or '(none)'}",
            hint="or pass a path to a .toml file",
        )
    entry = _profiles_dir().joinpath(f"{name}.toml")
    return _parse(entry.read_bytes(), _as_path(entry), shipped_name=name)


# -- internals -------------------------------------------------------------------------


def _profiles_dir() -> Traversable:
    # ``qualify/profiles/`` holds only data files (no __init__), so it is reached from
    # the ``qualify`` package rather than imported as a package of its own.
    return resources.files("qualify").joinpath("profiles")


def _as_path(entry: Traversable) -> Path:
    return entry if isinstance(entry, Path) else Path(str(entry))


def _looks_like_path(text: str) -> bool:
    # Shipped names are bare words; anything with a directory part or the extension is a file.
    return text.endswith(".toml") or "/" in text or "\\" in text


def _parse(raw: bytes, path: Path, *, shipped_name: str | None) -> Profile:
    where = f"profile {path}"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{where}: not UTF-8 text (byte {exc.start})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message carries "(at line N, column M)".
        raise ProfileError(f"{where}: malformed TOML: {exc}") from None

    # The version is checked before the schema: a newer file may differ anywhere, and
    # "unsupported version" is the one message that is true about all of it.
    version = data.get("format_version")
    if version is None:
        raise ProfileError(
            f"{where}: $.format_version: missing (this harness reads {PROFILE_FORMAT_VERSION})"
        )
    if type(version) is not int or version != PROFILE_FORMAT_VERSION:
        raise ProfileError(
            f"{where}: $.format_version: unsupported format version {version!r} "
            f"(this harness reads {PROFILE_FORMAT_VERSION})"
        )

    errors = schema_errors(data, "profile")
    if errors:
        raise ProfileError(f"{where}: " + "; ".join(errors))
    problems = _consistency_errors(data)
    if problems:
        raise ProfileError(f"{where}: " + "; ".join(problems))

    if shipped_name is not None and data["name"] != shipped_name:
        raise ProfileError(f"{where}: $.name: {data['name']!r} differs from the file name {shipped_name!r}")

    fmt = data["format"]
    return Profile(
        name=data["name"],
        path=path,
        sha256=hashlib.sha256(raw).hexdigest(),
        data=data,
        format=FormatSpec(
            element_dtype=fmt["element_dtype"],
            scale_dtype=fmt["scale_dtype"],
            block_size=fmt["block_size"],
            scale_layout=fmt["scale_layout"],
            scale_recipe=fmt.get("scale_recipe"),
            excluded_modules=tuple(fmt["excluded_modules"]),
            kv_cache_quant_algo=fmt["kv_cache_quant_algo"] or None,
        ),
        required_levels=tuple(data["levels"]["required"]),
        tensor_parallel_size=data["parallelism"]["tensor_parallel_size"],
        statistics_rtol=float(data["manifest"]["statistics_rtol"]),
        statistics_atol=float(data["manifest"]["statistics_atol"]),
        allow_code=bool(data["manifest"].get("allow_code", False)),
    )


def _consistency_errors(data: dict[str, Any]) -> list[str]:
    """Disagreements between keys that state the same fact twice; the schema cannot see them."""
    out: list[str] = []
    runtime = data["runtime"]
    env = runtime["env"]

    def agree(env_key: str, expected: object, where: str) -> None:
        if env[env_key] != str(expected):
            out.append(f"$.runtime.env.{env_key}: {env[env_key]!r} contradicts {where} ({expected!r})")

    par = data["parallelism"]
    agree("TP", par["tensor_parallel_size"], "$.parallelism.tensor_parallel_size")
    agree("DCP", par["decode_context_parallel_size"], "$.parallelism.decode_context_parallel_size")
    agree("DFLASH_MODEL", data["checkpoint"]["repo"], "$.checkpoint.repo")
    if "target" in data:
        agree("MODEL", data["target"]["repo"], "$.target.repo")
    if "served_model_name" in runtime:
        agree("SERVED_MODEL_NAME", runtime["served_model_name"], "$.runtime.served_model_name")
    if "dflash" in data:
        agree("NUM_SPECULATIVE_TOKENS", data["dflash"]["proposal_length"], "$.dflash.proposal_length")
        agree("DFLASH_KV_CACHE_DTYPE", data["dflash"]["kv_cache"], "$.dflash.kv_cache")
    var = runtime.get("target_revision_env")
    if var is not None:
        target_revision = (data.get("target") or {}).get("revision")
        if not target_revision:
            out.append(f"$.runtime.target_revision_env: names {var}, but $.target.revision pins no revision for it")
        elif env.get(var, "") not in ("", target_revision):
            agree(var, target_revision, "$.target.revision")
    pinned = data["checkpoint"]["revision"]
    if pinned and env["DFLASH_MODEL_REVISION"] not in ("", pinned):
        agree("DFLASH_MODEL_REVISION", pinned, "$.checkpoint.revision")

    url = urlsplit(runtime["endpoint"])
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        out.append(f"$.runtime.endpoint: {runtime['endpoint']!r} has an invalid port")
    else:
        agree("PORT", port, "the port of $.runtime.endpoint")

    gpu_count = data["hardware"]["gpu_count"]
    if "gpus" in runtime:
        devices = runtime["gpus"].split(",")
        if len(devices) != gpu_count:
            out.append(
                f"$.runtime.gpus: {runtime['gpus']!r} names {len(devices)} devices but "
                f"$.hardware.gpu_count is {gpu_count}"
            )
    elif gpu_count > 0:
        out.append(f"$.runtime.gpus: missing, but $.hardware.gpu_count is {gpu_count}")
    if gpu_count == 0 and "gpu_name" in data["hardware"]:
        # A CPU-only profile naming a GPU is a contradiction, not extra detail.
        out.append("$.hardware.gpu_name: set, but $.hardware.gpu_count is 0 (no GPU required)")

    seen: set[str] = set()
    for i, item in enumerate(data.get("evidence", [])):
        at = f"$.evidence[{i}]"
        if item["name"] in seen:
            out.append(f"{at}.name: duplicate evidence name {item['name']!r}")
        seen.add(item["name"])
        try:
            compiled = re.compile(item["pattern"])
        except re.error as exc:
            out.append(f"{at}.pattern: not a valid Python regex: {exc}")
            continue
        for key in ("expected_gb", "checkpoint_size"):
            if key in item and _GB_GROUP not in compiled.groupindex:
                out.append(f"{at}.pattern: has {key} but no (?P<{_GB_GROUP}>...) group to read it from")
        if "expected_gb" in item and "checkpoint_size" in item:
            out.append(f"{at}: has both expected_gb and checkpoint_size; the size is judged against one of them")
        if "unverified" in item and ("expected_gb" in item or "checkpoint_size" in item):
            # An unverified line is reported when seen, never required: a size judged on it would require it.
            out.append(f"{at}: is unverified (no source at hand prints its line), so it is never required, but "
                       "it states a size to judge; bind it to its source or drop the size")
        if "after" in item:
            try:
                re.compile(item["after"]["pattern"])
            except re.error as exc:
                out.append(f"{at}.after.pattern: not a valid Python regex: {exc}")

    paired = data.get("paired") or {}
    try:
        most = int(env["MAX_NUM_SEQS"])
    except (KeyError, ValueError):
        most = None
    over = [c for c in paired.get("concurrency", ()) if most is not None and c > most]
    if over:
        out.append(f"$.paired.concurrency: {over} exceed $.runtime.env.MAX_NUM_SEQS ({most}): the server would queue "
                   "the extra requests, so that concurrency is never measured")
    if "speedup" in data and "paired" not in data:
        out.append("$.speedup: needs a [paired] table (its prompt sets and concurrencies)")

    required = data["levels"]["required"]
    both = [lv for lv in data["levels"].get("measured", []) if lv in required]
    if both:
        out.append(f"$.levels.measured: {', '.join(both)} also required; a level is either required or only measured")
    # Only an item bound to its source is required (an unverified one is reported when seen), so only those count.
    verified = [e for e in data.get("evidence", []) if "unverified" not in e]
    for level in ("load", "smoke"):
        if level in required and not any(e["level"] == level for e in verified):
            out.append(f"$.evidence: level {level!r} is required but no evidence item bound to its source has level "
                       f"{level!r} (an unverified item is never required)")
    loads = [e for e in verified if e["level"] == "load"]
    if any(e["level"] == "load" for e in data.get("evidence", [])) and not any("draft" in e for e in loads):
        # A line the target alone can print shows nothing of the draft: one must say why it is the draft's.
        out.append("$.evidence: no load evidence item states why it is the draft's (draft = ...) among those bound "
                   "to their source: nothing would show that the draft loaded")
    for level, why in stand_in_levels(data).items():
        if level in required:
            out.append(f"$.levels.required: {level} runs on {why}: it shows the harness's plumbing, never that a "
                       "runtime loads or serves the checkpoint, so it cannot qualify; list it under measured")
    return out
