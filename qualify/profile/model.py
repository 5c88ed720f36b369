"""A loaded profile, parsed once into typed specs.

Every table of the TOML is read here and nowhere else: the rest of the harness reads the
specs (``runtime``, ``hardware``, ``acceptance``...), and :meth:`Profile.conditions` gives the
report the qualified conditions in the model card's vocabulary. Loading and validation are
:mod:`qualify.profile.loader`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any

from qualify.core import LEVELS
from qualify.errors import UsageError
from qualify.profile.levels import stand_in_levels
from qualify.profile.specs import (
    DEFAULT_READY_TIMEOUT_S,
    DEFAULT_REQUEST_TIMEOUT_S,
    AcceptanceSpec,
    EvidenceSource,
    EvidenceSpec,
    FormatSpec,
    HardwareSpec,
    LocalServerSpec,
    LosslessnessSpec,
    PairedSpec,
    PromptSetSpec,
    RepoPin,
    RuntimeSpec,
    SmokeSpec,
    SpeedupSpec,
    ThroughputSpec,
)
from qualify.util.identifiers import is_commit


@dataclass(frozen=True)
class Profile:
    """A loaded, validated profile, parsed once into typed specs.

    Everything outside this package reads the specs (``runtime``, ``hardware``, ``acceptance``...);
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
            target_revision_env=r.get("target_revision_env") or None,
        )

    @cached_property
    def hardware(self) -> HardwareSpec:
        h = self.data["hardware"]
        return HardwareSpec(int(h["gpu_count"]), h.get("gpu_name"))

    @cached_property
    def evidence(self) -> tuple[EvidenceSpec, ...]:
        """``[[evidence]]``: the log lines the load and smoke levels must find, in the profile's order."""
        def source(x: dict[str, Any] | None) -> EvidenceSource | None:
            if x is None:
                return None
            return EvidenceSource(x["format"], x.get("file"), x.get("project"), tuple(x.get("args", ())))

        return tuple(
            EvidenceSpec(e["name"], e["level"], e["description"], e["pattern"],
                         float(e["expected_gb"]) if "expected_gb" in e else None,
                         float(e["tolerance_gb"]) if "tolerance_gb" in e else None,
                         source=source(e.get("source")), unverified=e.get("unverified"),
                         after_pattern=(e.get("after") or {}).get("pattern"), after_source=source(e.get("after")),
                         draft=e.get("draft"), checkpoint_size=bool(e.get("checkpoint_size", False)),
                         card_size=e.get("card_size"))
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
    def arms_side_by_side(self) -> bool:
        """``$.orchestration.arms``: whether the run's arms are served all at once (else one after another).

        Sequential is the default: it is what a release run on one set of GPUs can do, so the
        rehearsal takes the same path unless a profile says its hardware holds every arm at once.
        """
        return (self.data.get("orchestration") or {}).get("arms", "sequential") == "side-by-side"

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
    def target_sha256(self) -> dict[str, str]:
        """``[target.sha256]``: the sha256 each file of a mounted target snapshot must have ({} when not pinned)."""
        return dict((self.data.get("target") or {}).get("sha256") or {})

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
            prompts_sha256=a.get("prompts_sha256"),
            pilot_rate=float(a["pilot_rate"]) if "pilot_rate" in a else None,
            pilot_spread=float(a["pilot_spread"]) if "pilot_spread" in a else None,
            pilot_source=a.get("pilot_source"),
        )

    @cached_property
    def paired(self) -> PairedSpec | None:
        """``[paired]``, or None when the profile states no paired comparison."""
        x = self.data.get("paired")
        if x is None:
            return None
        sets = tuple(
            PromptSetSpec((self.path.parent / p["path"]).resolve() if "path" in p else None, p["format"],
                          p.get("name"), p.get("limit"), p.get("sha256"), p.get("set"))
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
            category_margin=float(x["category_margin"]) if "category_margin" in x else None,
            pilot_spread=float(x["pilot_spread"]) if "pilot_spread" in x else None,
            pilot_source=x.get("pilot_source"),
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
            as_published=bool(x.get("as_published", False)),
        )

    @cached_property
    def losslessness(self) -> LosslessnessSpec | None:
        x = self.data.get("losslessness")
        if x is None:
            return None
        return LosslessnessSpec(int(x["max_tokens"]), float(x["near_tie_tolerance"]), str(x["near_tie_reason"]),
                                x.get("reference_endpoint"))

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
        return self.with_target_revision(env)

    def with_target_revision(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with the launcher's target revision variable (``$.runtime.target_revision_env``) set to
        ``[target].revision``; unchanged where the profile declares no such variable. The loader has refused
        a profile that declares one without pinning a target revision, or whose env contradicts it."""
        var = self.runtime.target_revision_env
        if var is not None and self.target is not None and self.target.revision is not None:
            env[var] = self.target.revision
        return env


def _default_concurrency(data: dict[str, Any]) -> tuple[int, ...]:
    """Batch 1 and the runtime's batch limit: a draft can collapse at either and look healthy at the other."""
    most = int(data["runtime"]["env"]["MAX_NUM_SEQS"])
    return (1, most) if most > 1 else (1,)


def _kv_cache_words(dflash: dict[str, Any]) -> str:
    # The card writes "auto (BF16)": the setting, then what it resolves to.
    dtype = dflash.get("kv_cache_dtype")
    return f"{dflash['kv_cache']} ({dtype})" if dtype else dflash["kv_cache"]
