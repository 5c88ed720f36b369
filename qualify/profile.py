"""Qualification profiles: the conditions under which a checkpoint is qualified.

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
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from qualify.core import LEVELS
from qualify.errors import ProfileError, UsageError
from qualify.schemas import schema_errors
from qualify.util.identifiers import is_commit

PROFILE_FORMAT_VERSION = 1

# The capture group a weight-size evidence pattern must have for expected_gb to be compared.
_GB_GROUP = "gb"

#: Seconds one serving request may take where the profile does not say ([smoke], [acceptance],
#: [paired], [speedup], [throughput] ``request_timeout_s``).
DEFAULT_REQUEST_TIMEOUT_S = 120.0
#: Seconds a local vLLM server may take to answer where ``[local_server] ready_timeout_s`` does not say.
DEFAULT_READY_TIMEOUT_S = 600.0
#: Seconds the runtime container may take to serve where ``$.runtime.startup_timeout_s`` does not say:
#: a 4-GPU load of a large target takes many minutes.
DEFAULT_STARTUP_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class FormatSpec:
    """The quantized format a checkpoint must have, as the format checks consume it."""

    element_dtype: str  # safetensors dtype of quantized weights, "F8_E4M3"
    scale_dtype: str  # safetensors dtype of block scales, "U8"
    block_size: int  # values per scale, along the input dimension
    scale_layout: str  # "row-major-unswizzled"
    scale_recipe: str | None  # how a block's exponent is chosen; None when the profile does not say
    excluded_modules: tuple[str, ...]  # modules left unquantized, e.g. ("lm_head",)
    kv_cache_quant_algo: str | None  # expected value in the quantization config; None = null/absent


@dataclass(frozen=True)
class AcceptanceSpec:
    """``[acceptance]``: the prompt set, the requests, and the gate's thresholds (compared with lower bounds)."""

    prompts: Path  # resolved against the profile's folder
    max_tokens: int
    temperature: float
    min_acceptance_rate: float
    min_mean_acceptance_length: float
    min_category_acceptance_rate: float | None
    min_prompts: int
    confidence: float
    bootstrap_resamples: int
    bootstrap_seed: int
    request_timeout_s: float


@dataclass(frozen=True)
class PromptSetSpec:
    """One ``[[paired.prompt_sets]]`` entry: a local file in its published format."""

    path: Path  # resolved against the profile's folder
    format: str  # one of qualify.serving.prompt_sets.FORMATS
    name: str | None
    limit: int | None


@dataclass(frozen=True)
class PairedSpec:
    """``[paired]``: the checkpoint against its source draft, paired by prompt, at each concurrency."""

    prompt_sets: tuple[PromptSetSpec, ...]
    max_tokens: int
    temperature: float
    margin: float  # relative: the largest loss accepted, as a fraction of the source's figure
    concurrency: tuple[int, ...]  # 1 = one request at a time
    min_prompts: int
    confidence: float
    bootstrap_resamples: int
    bootstrap_seed: int
    full_block: bool
    request_timeout_s: float
    source_endpoint: str | None


@dataclass(frozen=True)
class SpeedupSpec:
    """``[speedup]``: tokens/s and inter-token latency with and without the speculator, at [paired]'s concurrencies."""

    max_tokens: int
    rounds: int
    prompts: int | None
    min_speedup: float | None
    request_timeout_s: float


@dataclass(frozen=True)
class LosslessnessSpec:
    """``[losslessness]``: greedy outputs with the speculator against the target alone."""

    max_tokens: int
    min_identical_fraction: float
    reference_endpoint: str | None


@dataclass(frozen=True)
class ThroughputSpec:
    """``[throughput]``: measured always; gated only by the bounds that are stated."""

    max_tokens: int
    concurrency: int
    temperature: float
    rounds: int
    min_output_tokens_per_s: float | None
    max_mean_ttft_s: float | None
    max_mean_itl_s: float | None
    request_timeout_s: float


@dataclass(frozen=True)
class LocalServerSpec:
    """``[local_server]``: local vLLM servers the harness starts for the serving levels (absolute paths).

    ``kind`` ``vllm-cpu``: processes of the vLLM CPU venv. ``runtime``: the serving levels talk
    to the load level's container, and the reference and source draft's servers are containers
    of the same image and launch plan (then ``draft``/``method``/``dtype`` do not apply).
    """

    kind: str
    target: Path
    draft: Path | None  # None: the speculator is the checkpoint under test (serve_checkpoint)
    source_draft: Path | None  # the unquantized draft, served for the paired level
    reference: bool
    dtype: str
    ready_timeout_s: float
    setup: str | None
    method: str = "draft_model"  # vLLM's speculative method: draft_model or dflash
    serve_checkpoint: bool = False  # the speculator is the run's checkpoint, byte for byte
    exercised: str | None = None  # what this runtime exercises of the profile's draft, for the report and card


@dataclass(frozen=True)
class RepoPin:
    """A hub repository and the immutable commit the profile pins it at (None when it pins none)."""

    repo: str | None
    revision: str | None


@dataclass(frozen=True)
class RuntimeSpec:
    """``[runtime]``: the serving image, how it is launched, and the environment the launcher reads."""

    image: str
    build: str | None  # the image is built from this repository ("standin"), never pulled
    image_digest: str | None  # None when the profile's source states none
    gpus: tuple[str, ...]  # docker --gpus device indices; empty for a CPU runtime
    network: str | None
    ipc: str | None
    shm_size: str | None
    endpoint: str
    served_model_name: str
    startup_timeout_s: float | None  # None: the harness default
    env: Mapping[str, str]  # the published serving command's environment
    qualification_overrides: Mapping[str, str]  # what the qualification launch changes in it


@dataclass(frozen=True)
class HardwareSpec:
    """``[hardware]``: how many GPUs of which model the runtime needs (0 for a CPU runtime)."""

    gpu_count: int
    gpu_name: str | None


@dataclass(frozen=True)
class EvidenceSpec:
    """One ``[[evidence]]`` item: a line the runtime's log must show, and the size it states if any."""

    name: str
    level: str
    description: str
    pattern: str  # a Python regex searched for in the log
    expected_gb: float | None
    tolerance_gb: float | None


@dataclass(frozen=True)
class SmokeSpec:
    """``[smoke]``: the size of the speculative smoke requests."""

    max_tokens: int
    temperature: float
    request_timeout_s: float


@dataclass(frozen=True)
class Profile:
    """A loaded, validated profile, parsed once into typed specs.

    Everything outside this module reads the specs (``runtime``, ``hardware``, ``acceptance``...);
    ``data`` is the TOML as parsed, kept for the specs to be built from and for the report's
    ``conditions``. Each spec is built on first use and kept.
    """

    name: str
    path: Path
    sha256: str
    data: dict[str, Any]
    format: FormatSpec
    required_levels: tuple[str, ...]
    tensor_parallel_size: int
    statistics_rtol: float
    statistics_atol: float
    allow_code: bool = False  # [manifest] allow_code: Python modules, auto_map and pickles may ship

    @cached_property
    def checkpoint(self) -> RepoPin:
        """``[checkpoint]``: the draft's repository and the commit it is pinned at, if any."""
        c = self.data["checkpoint"]
        return RepoPin(c["repo"], c["revision"] or None)

    @cached_property
    def source(self) -> RepoPin:
        """``[source]``: the unquantized draft the checkpoint was converted from."""
        s = self.data.get("source") or {}
        return RepoPin(s.get("repo") or None, s.get("revision") or None)

    @cached_property
    def target(self) -> RepoPin | None:
        """``[target]``: the model the draft speculates for, or None when the profile names none."""
        x = self.data.get("target")
        return RepoPin(x["repo"], x["revision"] or None) if x else None

    @cached_property
    def runtime(self) -> RuntimeSpec:
        r = self.data["runtime"]
        return RuntimeSpec(
            image=r["image"],
            build=r.get("build"),
            image_digest=r["image_digest"] or None,
            gpus=tuple(r["gpus"].split(",")) if r.get("gpus") else (),
            network=r.get("network"),
            ipc=r.get("ipc"),
            shm_size=r.get("shm_size"),
            endpoint=str(r["endpoint"]),
            served_model_name=str(r.get("served_model_name") or r["env"]["SERVED_MODEL_NAME"]),
            startup_timeout_s=float(r["startup_timeout_s"]) if "startup_timeout_s" in r else None,
            env=MappingProxyType(dict(r["env"])),
            qualification_overrides=MappingProxyType(dict(r.get("qualification_overrides", {}))),
        )

    @cached_property
    def hardware(self) -> HardwareSpec:
        h = self.data["hardware"]
        return HardwareSpec(int(h["gpu_count"]), h.get("gpu_name"))

    @cached_property
    def evidence(self) -> tuple[EvidenceSpec, ...]:
        """``[[evidence]]``: the log lines the load and smoke levels must find, in the profile's order."""
        return tuple(
            EvidenceSpec(e["name"], e["level"], e["description"], e["pattern"],
                         float(e["expected_gb"]) if "expected_gb" in e else None,
                         float(e["tolerance_gb"]) if "tolerance_gb" in e else None)
            for e in self.data.get("evidence", [])
        )

    @cached_property
    def smoke(self) -> SmokeSpec | None:
        """``[smoke]``, or None when the profile states no smoke requests."""
        x = self.data.get("smoke")
        if x is None:
            return None
        return SmokeSpec(int(x["max_tokens"]), float(x["temperature"]),
                         float(x.get("request_timeout_s", DEFAULT_REQUEST_TIMEOUT_S)))

    @cached_property
    def proposal_length(self) -> int:
        """Tokens the draft proposes per step: ``$.dflash.proposal_length``, else NUM_SPECULATIVE_TOKENS."""
        dflash = self.data.get("dflash") or {}
        return int(dflash.get("proposal_length") or self.launch_env()["NUM_SPECULATIVE_TOKENS"])

    @cached_property
    def measured_levels(self) -> tuple[str, ...]:
        """Levels a full run performs and records without counting them towards the verdict."""
        return tuple(self.data["levels"].get("measured", ()))

    @cached_property
    def stand_in_levels(self) -> tuple[str, ...]:
        """Levels this profile runs on a stand-in (never required: :func:`stand_in_levels`), in run order."""
        found = stand_in_levels(self.data)
        return tuple(name for name in LEVELS if name in found)

    @cached_property
    def run_levels(self) -> tuple[str, ...]:
        """What ``qualify run`` performs by default: the required levels and the measured ones, in run order."""
        wanted = set(self.required_levels) | set(self.measured_levels)
        return tuple(name for name in LEVELS if name in wanted)

    @cached_property
    def image_build(self) -> str | None:
        """``$.runtime.build``: the image is built from this repository (and pinned to the ID built), or None."""
        return self.runtime.build

    @cached_property
    def local_server(self) -> LocalServerSpec | None:
        x = self.data.get("local_server")
        if x is None:
            return None
        return LocalServerSpec(
            kind=x["kind"],
            target=(self.path.parent / x["target"]).resolve(),
            draft=(self.path.parent / x["draft"]).resolve() if "draft" in x else None,
            source_draft=(self.path.parent / x["source_draft"]).resolve() if "source_draft" in x else None,
            reference=bool(x.get("reference", False)),
            dtype=x.get("dtype", "float32"),
            ready_timeout_s=float(x.get("ready_timeout_s", DEFAULT_READY_TIMEOUT_S)),
            setup=x.get("setup"),
            method=x.get("method", "draft_model"),
            serve_checkpoint=bool(x.get("serve_checkpoint", False)),
            exercised=x.get("exercised"),
        )

    @cached_property
    def serves_from_runtime(self) -> bool:
        """Whether the serving levels talk to the profile's runtime container (``[local_server] kind = "runtime"``)."""
        return self.local_server is not None and self.local_server.kind == "runtime"

    @cached_property
    def source_repo(self) -> str | None:
        return self.source.repo

    @cached_property
    def source_revision(self) -> str | None:
        """The immutable source commit the profile qualifies against; None when it pins none."""
        return self.source.revision

    @cached_property
    def source_content_revision(self) -> str | None:
        """``[source] content_revision``: the content revision a local source folder must have, if pinned."""
        return (self.data.get("source") or {}).get("content_revision") or None

    @cached_property
    def source_sha256(self) -> dict[str, str]:
        """``[source.sha256]``: the sha256 each file of a local source folder must have ({} when not pinned)."""
        return dict((self.data.get("source") or {}).get("sha256") or {})

    @cached_property
    def allowed_config_changes(self) -> tuple[str, ...]:
        """``[source] allowed_config_changes``: config.json key paths the conversion may change besides its
        quantization config."""
        return tuple((self.data.get("source") or {}).get("allowed_config_changes") or ())

    @cached_property
    def endpoint(self) -> str:
        """The OpenAI-compatible endpoint the serving levels talk to (``$.runtime.endpoint``)."""
        return self.runtime.endpoint

    @cached_property
    def served_model_name(self) -> str:
        """The model name requests and counters are filtered by."""
        return self.runtime.served_model_name

    @cached_property
    def acceptance(self) -> AcceptanceSpec | None:
        """``[acceptance]``, or None when the profile states no acceptance gate."""
        a = self.data.get("acceptance")
        if a is None:
            return None
        return AcceptanceSpec(
            prompts=(self.path.parent / a["prompts"]).resolve(),
            max_tokens=int(a["max_tokens"]),
            temperature=float(a["temperature"]),
            min_acceptance_rate=float(a["min_acceptance_rate"]),
            min_mean_acceptance_length=float(a["min_mean_acceptance_length"]),
            min_category_acceptance_rate=(
                float(a["min_category_acceptance_rate"]) if "min_category_acceptance_rate" in a else None
            ),
            min_prompts=int(a.get("min_prompts", 1)),
            confidence=float(a.get("confidence", 0.95)),
            bootstrap_resamples=int(a.get("bootstrap_resamples", 2000)),
            bootstrap_seed=int(a.get("bootstrap_seed", 0)),
            request_timeout_s=float(a.get("request_timeout_s", DEFAULT_REQUEST_TIMEOUT_S)),
        )

    @cached_property
    def paired(self) -> PairedSpec | None:
        """``[paired]``, or None when the profile states no paired comparison."""
        x = self.data.get("paired")
        if x is None:
            return None
        sets = tuple(
            PromptSetSpec((self.path.parent / p["path"]).resolve(), p["format"], p.get("name"), p.get("limit"))
            for p in x["prompt_sets"]
        )
        return PairedSpec(
            prompt_sets=sets,
            max_tokens=int(x["max_tokens"]),
            temperature=float(x["temperature"]),
            margin=float(x["margin"]),
            concurrency=tuple(x.get("concurrency") or _default_concurrency(self.data)),
            min_prompts=int(x.get("min_prompts", 1)),
            confidence=float(x.get("confidence", 0.95)),
            bootstrap_resamples=int(x.get("bootstrap_resamples", 2000)),
            bootstrap_seed=int(x.get("bootstrap_seed", 0)),
            full_block=bool(x.get("full_block", False)),
            request_timeout_s=float(x.get("request_timeout_s", DEFAULT_REQUEST_TIMEOUT_S)),
            source_endpoint=x.get("source_endpoint"),
        )

    @cached_property
    def speedup(self) -> SpeedupSpec | None:
        """``[speedup]``, or None when the profile does not ask for the speedup to be measured."""
        x = self.data.get("speedup")
        if x is None:
            return None
        return SpeedupSpec(
            max_tokens=int(x["max_tokens"]),
            rounds=int(x.get("rounds", 1)),
            prompts=int(x["prompts"]) if "prompts" in x else None,
            min_speedup=float(x["min_speedup"]) if "min_speedup" in x else None,
            request_timeout_s=float(x.get("request_timeout_s", DEFAULT_REQUEST_TIMEOUT_S)),
        )

    @cached_property
    def losslessness(self) -> LosslessnessSpec | None:
        x = self.data.get("losslessness")
        if x is None:
            return None
        return LosslessnessSpec(int(x["max_tokens"]), float(x["min_identical_fraction"]), x.get("reference_endpoint"))

    @cached_property
    def throughput(self) -> ThroughputSpec | None:
        x = self.data.get("throughput")
        if x is None:
            return None

        def opt(key: str) -> float | None:
            return float(x[key]) if key in x else None

        return ThroughputSpec(
            max_tokens=int(x["max_tokens"]),
            concurrency=int(x["concurrency"]),
            temperature=float(x.get("temperature", 0.0)),
            rounds=int(x.get("rounds", 1)),
            min_output_tokens_per_s=opt("min_output_tokens_per_s"),
            max_mean_ttft_s=opt("max_mean_ttft_s"),
            max_mean_itl_s=opt("max_mean_itl_s"),
            request_timeout_s=float(x.get("request_timeout_s", DEFAULT_REQUEST_TIMEOUT_S)),
        )

    def conditions(self) -> dict[str, Any]:
        """The qualified conditions, in the model card's vocabulary, for the report.

        JSON-ready (plain dicts, lists, strings, numbers, None). Keys the profile does
        not state are None rather than missing, so a report always shows the same shape.
        """
        d = self.data
        target = d.get("target")
        runtime = d["runtime"]
        hardware = d["hardware"]
        dflash = d.get("dflash")
        fmt = self.format
        return {
            "source": {"repo": self.source_repo, "revision": self.source_revision},
            "format": {
                "element_dtype": d["format"].get("element_torch_dtype", fmt.element_dtype),
                "scale_dtype": d["format"].get("scale_torch_dtype", fmt.scale_dtype),
                "block_size": fmt.block_size,
                "scale_layout": fmt.scale_layout,
                "scale_recipe": fmt.scale_recipe,
                "excluded_modules": list(fmt.excluded_modules),
                "kv_cache_quant_algo": fmt.kv_cache_quant_algo,
            },
            "target": {"repo": target["repo"], "revision": target["revision"] or None} if target else None,
            "runtime": {"image": runtime["image"], "digest": runtime["image_digest"] or None},
            "hardware": {"count": hardware["gpu_count"], "name": hardware.get("gpu_name")},
            "parallelism": {
                "tensor_parallel_size": d["parallelism"]["tensor_parallel_size"],
                "decode_context_parallel_size": d["parallelism"]["decode_context_parallel_size"],
            },
            "backends": dict(d.get("backends", {})),
            "proposal_length": dflash["proposal_length"] if dflash else None,
            "draft_kv_cache": _kv_cache_words(dflash) if dflash else None,
            # The mode the load and smoke levels run under, and the one the published
            # serving command uses; they differ for the seed, and a reader must see both.
            "cuda_graph_mode": self.launch_env().get("CUDAGRAPH_MODE"),
            "serving_cuda_graph_mode": runtime["env"].get("CUDAGRAPH_MODE"),
            "not_qualified": list(d["levels"].get("not_qualified", [])),
            # Levels run on a stand-in: recorded as plumbing, never qualification (see stand_in_levels).
            "stand_in_levels": list(self.stand_in_levels),
        }

    def launch_env(self, *, draft_revision: str | None = None) -> dict[str, str]:
        """The serving environment with the qualification overrides applied.

        ``draft_revision`` pins ``DFLASH_MODEL_REVISION`` to the release candidate's
        commit: the published command leaves it empty, which makes the launcher resolve
        the main branch, and a qualification must not test whatever main is today.
        Without it, a revision pinned in ``[checkpoint]`` is used when there is one.
        """
        env = dict(self.runtime.env)
        env.update(self.runtime.qualification_overrides)
        pinned = self.checkpoint.revision
        if draft_revision is not None:
            if not is_commit(draft_revision):
                raise UsageError(
                    f"draft revision {draft_revision!r} is not an immutable commit (40 lowercase hex)"
                )
            if pinned and draft_revision != pinned:
                raise UsageError(
                    f"draft revision {draft_revision} contradicts profile {self.name}'s "
                    f"$.checkpoint.revision {pinned}"
                )
            env["DFLASH_MODEL_REVISION"] = draft_revision
        elif pinned and not env.get("DFLASH_MODEL_REVISION"):
            env["DFLASH_MODEL_REVISION"] = pinned
        return env


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
    # ``qualify.profiles`` holds only data files (no __init__), so it is reached from
    # the ``qualify`` package rather than imported as a package of its own.
    return resources.files(__package__ or "qualify").joinpath("profiles")


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
        if "expected_gb" in item and _GB_GROUP not in compiled.groupindex:
            out.append(f"{at}.pattern: has expected_gb but no (?P<{_GB_GROUP}>...) group to read it from")

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
    for level in ("load", "smoke"):
        if level in required and not any(e["level"] == level for e in data.get("evidence", [])):
            out.append(f"$.evidence: level {level!r} is required but no evidence item has level {level!r}")
    for level, why in stand_in_levels(data).items():
        if level in required:
            out.append(f"$.levels.required: {level} runs on {why}: it shows the harness's plumbing, never that a "
                       "runtime loads or serves the checkpoint, so it cannot qualify; list it under measured")
    return out


#: The levels a local vLLM server answers (smoke on), which serve [local_server]'s draft.
_LOCAL_SERVER_LEVELS = ("smoke", "acceptance", "paired", "losslessness", "throughput", "speedup")


def stand_in_levels(data: dict[str, Any]) -> dict[str, str]:
    """The levels a profile runs on a stand-in rather than on a runtime given the checkpoint, and on what.

    The stand-in image (``$.runtime.build = "standin"``) prints load evidence from a description of
    the mounted folder; a ``[local_server]`` whose draft is another model than the checkpoint serves
    that model. Neither shows anything about the checkpoint, so neither may qualify a level.
    """
    out: dict[str, str] = {}
    if (data.get("runtime") or {}).get("build") == "standin":
        out["load"] = "the stand-in image ($.runtime.build = \"standin\"), whose entrypoint prints load evidence"
    local = data.get("local_server")
    if isinstance(local, dict) and not local.get("serve_checkpoint", False):
        for level in _LOCAL_SERVER_LEVELS:
            out[level] = "[local_server]'s draft, which is not the checkpoint ($.local_server.serve_checkpoint unset)"
    return out


def _default_concurrency(data: dict[str, Any]) -> tuple[int, ...]:
    """Batch 1 and the runtime's batch limit: a draft can collapse at either and look healthy at the other."""
    most = int(data["runtime"]["env"]["MAX_NUM_SEQS"])
    return (1, most) if most > 1 else (1,)


def _kv_cache_words(dflash: dict[str, Any]) -> str:
    # The card writes "auto (BF16)": the setting, then what it resolves to.
    dtype = dflash.get("kv_cache_dtype")
    return f"{dflash['kv_cache']} ({dtype})" if dtype else dflash["kv_cache"]
