"""Reports built in code, for the gate, card and diff tests (no suite run needed).

:func:`seed_run` is a run of the seed profile whose checks passed and whose load and
smoke evidence carry the runtime facts the seed profile's evidence items show, in the measured
keys qualify/report/card.py documents.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

from qualify.core import Evidence, Status
from qualify.profile import load_profile
from qualify.report.model import Check, LevelResult, Run

SEED = "glm53-flash-dflash2-mxfp8-tp4"
DRAFT_REVISION = "0123456789abcdef0123456789abcdef01234567"

FILES = [
    {"path": "config.json", "sha256": "1" * 64, "size": 804},
    {"path": "conversion_manifest.json", "sha256": "2" * 64, "size": 29866},
    {"path": "hf_quant_config.json", "sha256": "3" * 64, "size": 224},
    {"path": "model.safetensors", "sha256": "4" * 64, "size": 1_200_000_000},
]

# Server log lines as vLLM 0.32 prints them while the community image loads the NVFP4 target and then (Model
# Runner V2) the DFlash 2 draft, with the community image's own B12X context K/V projection line; each of the
# seed profile's [[evidence]] patterns matches one; the engine line and the attention backends' lines show the
# launch's engine settings (qualify.serving.engine_config).
LOAD_LOG = """\
INFO 08-30 12:00:00 [core.py:134] Initializing a V1 LLM engine (v0.32.0) with config: \
model='local-inference-lab/GLM-5.3-Flash-NVFP4', speculative_config=SpeculativeConfig(method='dflash', \
model='/models/draft', num_spec_tokens=7), tensor_parallel_size=4, decode_context_parallel_size=1, \
kv_cache_dtype=auto, compilation_config={'mode': <CompilationMode.NONE: 0>, 'cudagraph_mode': <CUDAGraphMode.NONE: 0>}
INFO 08-30 12:00:01 [model.py:733] Resolved architecture: GlmMoeDsaForCausalLM
INFO 08-30 12:00:01 [model.py:733] Resolved architecture: DFlash2DraftModel
INFO 08-30 12:00:01 [cuda.py:446] Using AttentionBackendEnum.B12X backend.
INFO 08-30 12:00:02 [weight_utils.py:1108] Filesystem type for checkpoints: EXT4. Checkpoint size: 283.41 GiB. \
Available RAM: 1500.00 GiB.
INFO 08-30 12:00:09 [default_loader.py:501] Loading weights took 95.31 seconds
INFO 08-30 12:00:10 [cuda.py:446] Using AttentionBackendEnum.FLASH_ATTN backend.
INFO 08-30 12:00:10 [weight_utils.py:1108] Filesystem type for checkpoints: EXT4. Checkpoint size: 1.20 GiB. \
Available RAM: 1200.00 GiB.
INFO 08-30 12:00:10 [__init__.py:982] Using B12xMxfp8LinearKernel for MXFP8 GEMM
INFO 08-30 12:00:10 [dflash.py:210] B12xMxfp8LinearKernel selected for the fused context_kv_proj
INFO 08-30 12:00:11 [default_loader.py:501] Loading weights took 1.90 seconds
"""
SMOKE_LOG = """\
INFO 08-30 12:01:00 [metrics.py:100] SpecDecoding metrics: Mean acceptance length: 4.1, Accepted: 24 tokens, \
Drafted: 28 tokens
"""
COMPLETION = {"prompt": "smoke-1", "completion_tokens": 32, "finish_reason": "length", "token_ids": [1] * 32,
              "text": "..."}

#: (level, check name, measured): the checks of a passing seed run; None = from the logs above.
SEED_CHECKS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("structure", "manifest_schema", {}),
    ("structure", "output_checksums", {"files": 4}),
    ("format", "weights", {"tensors": 120}),
    ("format", "scales", {"tensors": 120}),
    ("reproduction", "quantized_tensors", {"recipe": "modelopt", "tensors": 120}),
    ("load", "ready", {"models": ["GLM-5.3-Flash-NVFP4"]}),
    ("load", "load_evidence", None),
    ("smoke", "smoke_evidence", None),
    ("smoke", "request", {"completions": [COMPLETION]}),
    ("acceptance", "draft_acceptance", {"mean_acceptance_length": 3.1}),
    ("paired", "non_inferiority", {"concurrency": {}}),
    ("losslessness", "greedy_identical", {"identical_fraction": 1.0}),
]


def log_evidence(log: str, level: str, profile: str = SEED) -> dict[str, Any]:
    """What the load suite records for this log: the real check, so the card reads what it writes."""
    from qualify.runtime.log_evidence import check_log_evidence
    from qualify.serving.engine_config import engine_settings_evidence

    p = load_profile(profile)
    ev = check_log_evidence(log, p, level, draft_folder=_draft_printed_as(log))
    assert ev.ok, ev.failure_text()  # a builder that makes failing evidence by accident would test nothing
    if level != "load":
        return ev.measured
    anchor = next((e.after_pattern for e in p.evidence if e.level == "load" and e.after_pattern), None)
    settings = engine_settings_evidence(log, p.launch_env(), draft_anchor=anchor)
    assert settings.ok, settings.failure_text()
    return {**ev.measured, **settings.measured}


def _draft_printed_as(log: str) -> Path:
    """A draft folder whose weight bytes vLLM prints as the log's last "Checkpoint size" (sparse: nothing written)."""
    sizes = re.findall(r"Checkpoint size: (\d+(?:\.\d+)?) GiB", log)
    folder = Path(tempfile.mkdtemp(prefix="qualify-draft-"))
    with open(folder / "model.safetensors", "wb") as f:
        f.truncate(round(float(sizes[-1] if sizes else 0) * 1024**3))
    return folder


def evidence_expected(level: str, profile: str = SEED) -> dict[str, Any]:
    """What the evidence check records as expected of each ``level`` item (its description, source or unverified)."""
    from qualify.runtime.log_evidence import check_log_evidence

    return check_log_evidence("", load_profile(profile), level).expected


def make_check(level: str, name: str, status: Status = Status.PASSED, measured: dict[str, Any] | None = None,
               expected: dict[str, Any] | None = None) -> Check:
    ev = Evidence(f"rule of {name}", measured=dict(measured or {}), expected=dict(expected or {}))
    if status is Status.FAILED:
        ev.add("it is broken", file="model.safetensors")
    return Check(f"{level}.{name}", level, name, status, ev.summary, ev)


def verified_identity(repo: str | None, revision: str | None, method: str = "hub cache snapshot and hub",
                      manifest_repo: str | None = None) -> dict[str, Any]:
    """The report's source.identity of a source proven to be ``repo`` at ``revision``."""
    return {"status": "verified", "verified": True, "trusted": False, "method": method, "repo": repo,
            "revision": revision, "claimed_repo": repo, "claimed_revision": revision,
            "manifest_repo": manifest_repo or repo, "manifest_revision": revision}


def enforced_target(revision: str | None, method: str = "pinned-snapshot") -> dict[str, Any]:
    """The plan's record of a target held to ``revision`` (qualify.runtime.plan.TargetPin.to_dict), as a release
    run records it: for the seed, a pinned snapshot (--target-snapshot); for the CPU profiles, MODEL_REVISION."""
    return {"revision": revision, "enforced": True, "method": method,
            "variable": "MODEL_REVISION" if method == "launcher-env" else None, "snapshot": None, "reason": None}


def target_proof(repo: str | None, revision: str | None, method: str | None = "hub",
                 hub_endpoint: str | None = "https://huggingface.co") -> dict[str, Any]:
    """The report's environment.target_identity (qualify.checkpoint.target_identity.TargetProof.to_dict): the
    mounted target snapshot's files proven to be ``revision`` by ``method`` (None: not proven)."""
    verified = method is not None
    return {"repo": repo, "revision": revision, "verified": verified, "method": method,
            "hub_endpoint": hub_endpoint if method == "hub" else None, "files": 3, "bytes": 1_000, "hash_seconds": 0.5,
            "findings": [], "reason": "compared: they agree" if verified else "only claimed: the hub was not consulted"}


def make_run(profile: str = SEED, *, run_id: str = "r-1", files: list[dict[str, Any]] | None = None,
             revision: str | None = DRAFT_REVISION) -> Run:
    p = load_profile(profile)
    target = enforced_target(p.target.revision if p.target else None)
    return Run(
        run_id=run_id, harness_version="0.1.0", started_at="2026-09-01T00:00:00Z",
        finished_at="2026-09-01T01:00:00Z",
        profile={"name": p.name, "path": str(p.path), "sha256": p.sha256, "conditions": p.conditions()},
        checkpoint={"path": "/ckpt", "repo": "local-inference-lab/GLM-5.3-Flash-DFlash2-MXFP8", "revision": revision,
                    "manifest_sha256": "2" * 64, "files": [dict(f) for f in (FILES if files is None else files)]},
        source={"path": "/src", "files": [{"path": "model.safetensors", "sha256": "5" * 64, "size": 2_400_000_000}],
                "identity": verified_identity(p.source_repo, p.source_revision)},
        environment={"python": "3.11.7", "platform": "Linux", "packages": {"torch": "2.13.0"},
                     "runtime": {"plan": {"target_revision_enforcement": target}},
                     "hub_endpoint": "https://huggingface.co",
                     "target_identity": target_proof(p.target.repo if p.target else None,
                                                     p.target.revision if p.target else None)},
    )


def seed_run(*, status: dict[str, Status] | None = None, measured: dict[str, dict[str, Any]] | None = None,
             levels: tuple[str, ...] = ("structure", "format", "reproduction", "load", "smoke"),
             load_log: str = LOAD_LOG, smoke_log: str = SMOKE_LOG, **kwargs: Any) -> Run:
    """A seed-profile run. ``status`` overrides a check's status by id; ``measured`` replaces a check's measured."""
    status, measured = status or {}, measured or {}
    logs = {"load": load_log, "smoke": smoke_log}
    run = make_run(**kwargs)
    for level in levels:
        lvl = LevelResult(level, required=True)
        for lv, name, values in SEED_CHECKS:
            if lv != level:
                continue
            cid = f"{lv}.{name}"
            # An evidence check records what it expected of each item, whatever it measured.
            expected = evidence_expected(lv) if values is None else None
            if cid in measured:
                values = measured[cid]
            elif values is None:
                values = log_evidence(logs[lv], lv)
            lvl.checks.append(make_check(lv, name, status.get(cid, Status.PASSED), values, expected))
        run.levels.append(lvl)
    return run


#: The seed profile's required levels (a passing release run has each of them).
SEED_REQUIRED = ("structure", "format", "reproduction", "load", "smoke", "acceptance", "paired", "losslessness")


def defined_run(*, levels: tuple[str, ...] = SEED_REQUIRED,
                status: dict[str, Status] | None = None, **kwargs: Any) -> Run:
    """A seed-profile run holding exactly the checks the suites define for ``levels`` (what the gate's policy
    knows each level to consist of); ``status`` overrides a check's status by id."""
    from qualify.release.checklist import level_checks

    status = status or {}
    run = make_run(**kwargs)
    for level in levels:
        lvl = LevelResult(level, required=True)
        for cid in level_checks()[level]:
            lvl.checks.append(make_check(level, cid.split(".", 1)[1], status.get(cid, Status.PASSED), {}))
        run.levels.append(lvl)
    return run
