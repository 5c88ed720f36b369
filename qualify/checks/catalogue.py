"""The check catalogue: every check of every level, declared once.

A check's id, title and meaning live here, and nowhere else: the suites are generated
from this list (:func:`qualify.run.suite_checks.suite_checks`), the suite plugin takes a
check's title from it, the release gate reads each level's checks from it
(:mod:`qualify.release.checklist`), and ``docs/checks.md`` is rendered from it
(``python -m qualify.checks.catalogue > docs/checks.md``). A check's id is what every
report and attestation names, so it never changes with the function that runs it.

Each :class:`CheckSpec` names the function that runs it (``runs``, "module:function", one
module per level under ``qualify/run/checks/``) and that function's parameters, the run
inputs (the suites' fixtures) it takes; the harness's tests hold the two to each other.

This module imports nothing heavy (no torch, no pytest): the gate reads it on a release
machine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from qualify.core import LEVELS

#: A check id: ``<level>.<name>``, the name a Python identifier in lower case.
CHECK_ID = re.compile(r"^(?P<level>[a-z]+)\.(?P<name>[a-z][a-z0-9_]*)$")


@dataclass(frozen=True)
class CheckSpec:
    """One check, as reports, attestations and the docs name it.

    Attributes:
        id: ``<level>.<name>``, e.g. ``structure.paths``; never renamed (reports and attestations
            name it).
        title: one line, what passing means (the report's title of the check).
        what: one or two sentences for the docs: what it checks and why it matters.
        runs: the function that runs it, ``"module:function"`` (``qualify.run.checks.<level>:<name>``).
        inputs: that function's parameters, in order: the run inputs (the suites' fixtures) it takes.
    """

    id: str
    title: str
    what: str
    runs: str
    inputs: tuple[str, ...]

    @property
    def level(self) -> str:
        return self.id.split(".", 1)[0]

    @property
    def name(self) -> str:
        return self.id.split(".", 1)[1]

    @property
    def module(self) -> str:
        return self.runs.split(":", 1)[0]

    @property
    def function(self) -> str:
        return self.runs.split(":", 1)[1]


#: What each level establishes, for the docs.
LEVEL_SUMMARY: dict[str, str] = {
    "structure": "The manifest's claims against the files (schema, checksums, coverage, statistics), and the "
                 "checkpoint against its proven source (identity, configuration).",
    "format": "What a runtime's MXFP8 loader needs to find in the tensors and the configs.",
    "reproduction": "Re-quantize the pinned source and compare every weight and scale byte.",
    "load": "The pinned runtime launches on the profile's hardware, serves, and shows the load evidence.",
    "smoke": "The endpoint serves the model and speculates on a short greedy request.",
    "acceptance": "How often the target accepts the draft's tokens, with intervals, gated by lower bounds.",
    "paired": "The checkpoint against the draft it was made from, on the same prompts, at each concurrency.",
    "losslessness": "Greedy output with the speculator equals the target's own greedy output.",
    "throughput": "Output tokens/s, TTFT and ITL as measured; qualified only against bounds the profile states.",
    "speedup": "Output tokens/s and inter-token latency with and without the speculator, same server settings.",
}


def _check(check_id: str, title: str, what: str, inputs: tuple[str, ...]) -> CheckSpec:
    level, name = check_id.split(".", 1)
    return CheckSpec(check_id, title, what, f"qualify.run.checks.{level}:{name}", inputs)


#: Every check, in run order: levels in :data:`qualify.report.model.LEVELS` order, then the level's own order.
CATALOGUE: tuple[CheckSpec, ...] = (
    # ---- structure
    _check("structure.pinned",
           "Every file of the folder was pinned at the start as a regular file: the checks read exactly those bytes.",
           "At its start the run copied every file of the checkpoint folder once, hashing it as it copied, and the "
           "other checks read that copy; an entry that could not be pinned (a link out of the folder, a hard link, "
           "no regular file, a file that changed while it was copied) fails here.",
           ("pinned_checkpoint",)),
    _check("structure.safetensors_container",
           "Every safetensors file parses under the strict reader (header, offsets, dtypes, sizes, BOOL bytes).",
           "Each safetensors file parses under a reader stricter than the reference one (header size, contiguous "
           "offsets, no holes or overlaps, known dtypes, BOOL bytes 0 or 1); a file a lenient loader accepts but "
           "misreads is refused here, naming the file and tensor.",
           ("checkpoint",)),
    _check("structure.manifest_schema",
           "conversion_manifest.json exists, is strict JSON and validates against its schema.",
           "The conversion manifest is the record every later check holds the files to; it must be strict JSON (no "
           "duplicate keys, no NaN) and valid against the manifest schema.",
           ("checkpoint_dir",)),
    _check("structure.source_pinned",
           "The source is named at an immutable commit, in the repository and at the revision the profile qualifies.",
           "The manifest names its source at a 40-hex commit of the repository the profile qualifies: a branch name "
           "or another repository is another source.",
           ("manifest_raw", "profile")),
    _check("structure.source_identity",
           "The local source folder is proven to be the pinned repository and revision (profile digests, hub cache, "
           "hub).",
           "The --source folder is proven to be the pinned source (the profile's digests, the hub cache or the hub); "
           "until it is, every check that reads the source fails or does not run, since a different model with a "
           "manifest that agrees with it would pass them all.",
           ("source_identity",)),
    _check("structure.paths",
           "Manifest paths are relative, unique and stay inside the checkpoint.",
           "Manifest paths are relative, normalised and unique, and no file of the folder (listed or not) resolves "
           "outside it; a path or link that leaves the checkpoint would make a runtime read bytes nobody checked.",
           ("manifest_raw", "checkpoint_folder")),
    _check("structure.file_list",
           "Every file that ships is listed with its checksum (or is never loaded), none is code, every listed one "
           "exists.",
           "Every file in the folder is listed with its checksum or is one no runtime loads, no file is code or a "
           "pickle unless the profile allows it, and every listed file exists: what ships is exactly what was "
           "checked, and loading it runs no code.",
           ("manifest", "checkpoint_dir", "profile")),
    _check("structure.output_checksums",
           "Every output file's sha256 and size equal the manifest's.",
           "The sha256 and size of every checkpoint file equal the manifest's, so the manifest speaks for these "
           "bytes.",
           ("manifest", "checkpoint_dir")),
    _check("structure.source_checksums",
           "Every source file's sha256 and size equal the manifest's (the source is the pinned one).",
           "The sha256 and size of every source file equal the manifest's, and no source file is left out: the "
           "conversion was made from the source being compared with.",
           ("manifest", "source_dir")),
    _check("structure.source_config",
           "config.json (and the generation/tokenizer files) are the source's, but for the quantization config.",
           "The checkpoint's config.json is the source's key by key (generation config and tokenizer files too), "
           "but for the quantization config and the changes the profile allows: a changed architecture or "
           "tokenizer would change what the draft computes.",
           ("checkpoint_dir", "source_dir", "profile")),
    _check("structure.source_files",
           "Every file a runtime may read is the source's, but the weights and the conversion's "
           "hf_quant_config.json.",
           "Every file a runtime may read, other than the weights and the conversion's hf_quant_config.json, is "
           "byte for byte the source's: the conversion changed nothing else.",
           ("manifest", "checkpoint_dir", "source_dir")),
    _check("structure.output_coverage",
           "The checkpoint holds exactly the tensors the manifest names, as it names them.",
           "The checkpoint holds exactly the tensors the manifest names, with its dtypes and shapes: no tensor is "
           "missing, extra or different from the record.",
           ("manifest", "checkpoint")),
    _check("structure.source_coverage",
           "Every source tensor is quantized, kept or excluded exactly once.",
           "Every source tensor is quantized, kept or excluded exactly once: nothing of the source was dropped or "
           "converted twice.",
           ("manifest", "source")),
    _check("structure.statistics",
           "Per-weight and aggregate quantization statistics recomputed from the tensors match the manifest.",
           "Per-weight and aggregate quantization error statistics, recomputed from the source and the dequantized "
           "weights, agree with the manifest within the profile's tolerances: the figures a release quotes are the "
           "checkpoint's.",
           ("manifest", "checkpoint", "source", "profile")),
    # ---- format
    _check("format.weights",
           "Quantized linear weights are F8_E4M3 [N, K], K a multiple of 32 (per TP shard too), with no fp8 NaN.",
           "Quantized linear weights are F8_E4M3 [N, K] with K a multiple of the block size, per tensor-parallel "
           "shard too, and hold no E4M3 NaN byte: what an MXFP8 kernel can load and shard.",
           ("checkpoint", "profile")),
    _check("format.scales",
           "Every quantized weight has a U8 [N, K/32] E8M0 scale with no 0xFF byte; no orphan or foreign scales.",
           "Every quantized weight has a U8 [N, K/32] E8M0 scale with no 0xFF (NaN) byte, and there is no orphan "
           "scale or tensor of another scheme: a loader would otherwise read scales that do not belong to the "
           "weights.",
           ("checkpoint", "profile")),
    _check("format.block_normalization",
           "Every non-zero block's largest element sits where its 1x32 E8M0 scale puts it.",
           "Every non-zero block's largest element lies where an amax-derived 1x32 E8M0 scale puts it; this catches "
           "per-tensor scaling and transposed or mis-blocked weights that are well-formed but wrong.",
           ("checkpoint", "profile")),
    _check("format.quant_config",
           "The quantization config declares MXFP8, group 32, kv_cache_quant_algo and the tensors' exclusions.",
           "hf_quant_config.json and config.json's quantization_config declare MXFP8, group size 32, the profile's "
           "kv_cache_quant_algo and exactly the exclusions the tensors show, and agree with each other: the runtime "
           "builds its layers from this config.",
           ("checkpoint", "profile", "quant_config")),
    _check("format.exclusions",
           "Excluded modules (lm_head) are present, unquantized and carry no scale.",
           "The modules the profile excludes from quantization (lm_head) are present, unquantized and carry no "
           "scale.",
           ("checkpoint", "profile", "quant_config")),
    _check("format.linear_coverage",
           "No linear layer that is not excluded was left unquantized.",
           "No linear layer that is not excluded was left in BF16: a layer the config calls quantized but stored "
           "unquantized fails at load or runs at the wrong precision.",
           ("checkpoint", "profile", "quant_config")),
    _check("format.model_config",
           "config.json's architecture agrees with the tensor shapes.",
           "config.json's architecture (hidden size, layers, heads, head_dim, intermediate size, vocabulary, target "
           "layers) agrees with the tensor shapes the runtime will allocate.",
           ("checkpoint", "model_config")),
    _check("format.draft_model",
           "The runtime's draft model class finds every config key it reads, its shapes, and unquantized what it "
           "builds unquantized.",
           "The config has every key the runtime's draft model class reads with no default, its convolution and "
           "selector tensors have the shapes the runtime builds, and modules it builds unquantized are stored "
           "unquantized: otherwise the load fails.",
           ("checkpoint", "model_config")),
    _check("format.declared_format",
           "The manifest's declared quantization format is the profile's.",
           "The quantization format the manifest declares is the one the profile qualifies.",
           ("manifest", "profile")),
    # ---- reproduction
    _check("reproduction.quantized_tensors",
           "Every quantized weight and scale byte equals the reference quantizer's output from the source.",
           "Re-quantizing the source with the reference MXFP8 quantizer (the manifest's recipe, else the profile's, "
           "else detected and named) gives every weight and scale byte; a difference is reported per tensor with "
           "its most likely cause.",
           ("plan", "manifest", "checkpoint", "source", "profile")),
    _check("reproduction.unquantized_tensors",
           "Kept and excluded tensors (lm_head, norms) are byte-identical to the source.",
           "Kept and excluded tensors (lm_head, norms) are byte-identical to the source.",
           ("plan", "checkpoint", "source")),
    # ---- load
    _check("load.gpu_preflight",
           "The devices the profile launches on exist and are the profile's GPU model (nvidia-smi).",
           "The GPUs the profile launches on exist and are its GPU model (nvidia-smi), before anything starts.",
           ("runtime",)),
    _check("load.image_pinned",
           "The runtime image is present locally (never pulled) and is the profile's pinned digest.",
           "The runtime image is present locally, never pulled, and is the pinned digest: the runtime qualified is "
           "the one named.",
           ("runtime",)),
    _check("load.revisions_pinned",
           "The draft and the target are named at immutable commits.",
           "The draft and the target are named at immutable commits; a moving revision is refused unless the run "
           "allows it, and then the report says it is not reproducible.",
           ("runtime",)),
    _check("load.draft_identity",
           "The draft the runtime loads is, file for file and byte for byte, the one the run pinned and checked.",
           "The draft the container loads (the mounted folder, or the hub revision) is, file for file and byte for "
           "byte, the one the run pinned and the checkpoint levels checked.",
           ("runtime", "pinned_checkpoint")),
    _check("load.container_started",
           "The container runs the inspected image with the planned GPUs, network, IPC, shm, env and mounts.",
           "The container runs the inspected image with the planned GPUs, network, IPC, shared memory, environment "
           "and mounts: the launch is the profile's, not an approximation.",
           ("started_runtime",)),
    _check("load.ready",
           "/health answers and /v1/models lists the served name before the deadline, and the container stays up.",
           "/health answers and /v1/models lists the served name before the deadline, while the container stays "
           "up; a runtime that cannot load the checkpoint fails here with its own last error.",
           ("started_runtime",)),
    _check("load.load_evidence",
           "The server log shows every required load evidence item of the profile (kernel, architecture, the "
           "draft's own weight size) and the engine settings the launch set.",
           "The server log shows every load evidence item of the profile bound to its source (the kernels chosen, "
           "the draft's weight size as vLLM sizes its pinned files), and no engine setting it prints differs from "
           "the launch's: the runtime loaded the checkpoint the way the release claims.",
           ("started_runtime",)),
    _check("load.teardown",
           "Every container of the run is removed and none is left (docker ps, label filter).",
           "Every container the run started is removed and none is left behind (docker ps, label filter).",
           ("runtime_teardown",)),
    # ---- smoke
    _check("smoke.models_listed",
           "/v1/models lists the served model name.",
           "/v1/models lists the served model name.",
           ("openai_client", "served_model", "server_info", "profile")),
    _check("smoke.completion",
           'A completion returns max_tokens tokens with finish_reason "length".',
           'A completion at the profile\'s smoke size returns max_tokens tokens ended by finish_reason "length".',
           ("openai_client", "served_model", "profile")),
    _check("smoke.chat_completion",
           'A chat completion returns max_tokens tokens with finish_reason "length".',
           'A chat completion at the profile\'s smoke size returns max_tokens tokens ended by finish_reason "length" '
           "(the chat template applies).",
           ("openai_client", "served_model", "profile")),
    _check("smoke.speculating",
           "The speculative-decoding counters on /metrics moved during a request (drafts and draft tokens > 0).",
           "The speculative-decoding counters on /metrics moved during a request (drafts and draft tokens above "
           "0): the server speculates, rather than serving the target alone.",
           ("openai_client", "endpoint", "served_model", "profile")),
    _check("smoke.log_evidence",
           "After a speculative request, the server log shows the profile's smoke evidence (the speculator drafted).",
           "After a speculative request, the lines the server logs from then on show the profile's smoke evidence "
           "(the speculator drafted); an earlier run's lines do not count.",
           ("openai_client", "served_model", "profile", "server_log")),
    # ---- acceptance
    _check("acceptance.draft_acceptance",
           "Acceptance rate, mean acceptance length and per-position rates, overall and per category, clear the "
           "profile.",
           "The draft acceptance rate, mean acceptance length and per-position rates over the profile's prompt set, "
           "overall and per category, have bootstrap confidence intervals whose lower bounds clear the profile's "
           "thresholds; a per-position chart goes beside the report.",
           ("acceptance_result",)),
    # ---- paired
    _check("paired.non_inferiority",
           "No worse than the source draft by more than the margin: acceptance rate and length, overall and per "
           "category.",
           "On the same prompts, at every concurrency, the checkpoint's acceptance rate and length are no worse than "
           "the draft it was made from by more than the margin (paired bootstrap lower bound, overall and per "
           "category), on servers whose engine settings are shown identical but for the draft.",
           ("paired_result", "paired_spec")),
    # ---- losslessness
    _check("losslessness.greedy_identical",
           "Temperature-0 outputs with and without the speculator differ only at near-ties of the target's own "
           "distribution.",
           "Temperature-0 outputs of every prompt with the speculator and from the target alone are compared token "
           "by token; each divergence is looked up in the target alone (both tokens' log-probabilities after the "
           "common prefix): within the profile's tolerance it is a near-tie, listed; a wider gap, or a divergence "
           "that could not be looked up, fails: speculative decoding must not change what the model says.",
           ("losslessness_outputs", "prompt_set", "losslessness_spec", "server_info")),
    # ---- throughput
    _check("throughput.serving_throughput",
           "Streamed requests at the profile's concurrency: output tokens/s, time to first token, inter-token "
           "latency.",
           "Output tokens/s, time to first token and inter-token latency of streamed requests at the profile's "
           "concurrency; recorded, and qualified only against the bounds the profile states.",
           ("throughput_run", "prompt_set", "throughput_spec", "server_info")),
    # ---- speedup
    _check("speedup.speculative_speedup",
           "Streamed requests with the speculator and without it at each concurrency of [paired]: the speedup.",
           "Output tokens/s and inter-token latency with the speculator and without it (the reference server), at "
           "each paired concurrency; recorded, gated only by a stated min_speedup, and a concurrency where the "
           "speculator saves no time is called out in the report.",
           ("speedup_runs", "speedup_spec", "server_info")),
)

_BY_ID: dict[str, CheckSpec] = {spec.id: spec for spec in CATALOGUE}


def by_id(check_id: str) -> CheckSpec | None:
    """The declared check of this id, or None when the catalogue has none."""
    return _BY_ID.get(check_id)


def level_specs(level: str) -> tuple[CheckSpec, ...]:
    """The checks of one level, in run order (none for a name that is no level)."""
    return tuple(spec for spec in CATALOGUE if spec.level == level)


def level_checks() -> dict[str, tuple[str, ...]]:
    """Every level's check ids, in run order (a new dict on each call)."""
    return {level: tuple(spec.id for spec in level_specs(level)) for level in LEVELS}


def level_of_check(check_id: str) -> str | None:
    """The level a check id names (its prefix), or None when the prefix is no level."""
    level = check_id.split(".", 1)[0]
    return level if level in LEVELS and "." in check_id else None


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown() -> str:
    """``docs/checks.md``: the levels and their checks, as this catalogue declares them."""
    lines = [
        "# Checks",
        "",
        "<!-- Generated from qualify/checks/catalogue.py: python -m qualify.checks.catalogue > docs/checks.md -->",
        "",
        "Every check of every level, in the order a run performs them. A check's id (`<level>.<name>`) is what",
        "reports and attestations name; it is declared once, in `qualify/checks/catalogue.py`, with the function",
        "that runs it (`<name>` in `qualify/run/checks/<level>.py`) and the run inputs that function takes (the",
        "suites' fixtures, `qualify/run/fixtures/`). The suites in `suites/` are generated from the same list.",
        "",
        "| level | checks |",
        "|---|---|",
    ]
    lines += [f"| [{level}](#{level}) | {len(level_specs(level))} |" for level in LEVELS]
    lines.append(f"| all | {len(CATALOGUE)} |")
    for level in LEVELS:
        lines += ["", f"## {level}", "", LEVEL_SUMMARY[level], "", "| check | what it checks | inputs |",
                  "|---|---|---|"]
        for spec in level_specs(level):
            inputs = ", ".join(f"`{name}`" for name in spec.inputs)
            lines.append(f"| `{spec.id}` | {_cell(spec.what)} | {inputs} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
