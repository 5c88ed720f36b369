"""The runtime conditions of a run in the model card's words, each launch setting claimed only where the log showed it.

The card (:mod:`qualify.report.card`) and report.md (:mod:`qualify.report.markdown`) share these lines. The
profile states what the launch sets (parallelism, backends, proposal length, KV cache, CUDA graph mode); a
passed load check records what the runtime's log printed of it (``measured["engine_settings"]``, written by
:func:`qualify.serving.engine_config.engine_settings_evidence`: each setting's ``status`` is ``agrees`` only
when the log printed the launch's value). A condition is claimed only when every setting that shows it agrees
(:data:`SHOWN_BY`); the rest follow :data:`NOT_SHOWN_HEAD` ("not applied by the runtime's launcher" where its
launcher said so). Without the record nothing the launch set is claimed. Pure functions.
"""

from __future__ import annotations

from typing import Any

from qualify.core import Status
from qualify.report.model import Run

_NUMBERS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}


def number_words(n: int) -> str:
    return _NUMBERS.get(n, str(n))


def passed_measured(run: Run, level: str) -> list[dict[str, Any]]:
    """The measured values of the passed checks of ``level``, if the level itself passed and is required."""
    for lvl in run.levels:
        if lvl.name == level and lvl.status is Status.PASSED and lvl.required:
            return [c.evidence.measured for c in lvl.checks if c.status is Status.PASSED and c.evidence is not None]
    return []


def engine_settings(run: Run) -> dict[str, Any]:
    """The launch's engine settings as a passed load check read them back from the runtime's log
    (qualify.serving.engine_config: name -> its record with ``status``); {} when no passed check read them."""
    for m in passed_measured(run, "load"):
        record = m.get("engine_settings")
        if isinstance(record, dict):
            return record
    return {}


def run_runtime_conditions(run: Run) -> list[str]:
    """:func:`runtime_conditions` of a run: its profile's conditions and the image it built, if it built one, each
    launch setting claimed only where the run's log showed it."""
    return runtime_conditions(run.profile.get("conditions") or {}, run.environment.get("runtime_image_build"),
                              shown=engine_settings(run))


#: What the conditions the launch set but the runtime's log did not show follow.
NOT_SHOWN_HEAD = "Set, not shown by the runtime (the launch set these; the runtime's log does not show them):"
#: The engine settings (qualify.serving.engine_config) that show each launch condition of the card; none: no
#: vLLM 0.32 statement prints it (the MoE, linear and all-reduce backends; the DFlash linear kernel is an
#: evidence item of its own).
SHOWN_BY: dict[str, tuple[str, ...]] = {
    "parallelism": ("tensor_parallel_size", "decode_context_parallel_size"),
    "target_attention": ("attention_backend",),
    "target_others": (),
    "dflash_attention": ("draft_attention_backend",),
    "dflash_linear": (),
    "proposal_length": ("speculative_method", "num_speculative_tokens"),
    "draft_kv_cache": ("draft_kv_cache_dtype",),
    "cuda_graph_mode": ("cudagraph_mode",),
}


def _is_shown(key: str, shown: dict[str, Any]) -> bool:
    names = SHOWN_BY[key]
    return bool(names) and all(isinstance(shown.get(n), dict) and shown[n].get("status") == "agrees" for n in names)


def _not_applied(key: str, shown: dict[str, Any]) -> bool:
    return any(isinstance(shown.get(n), dict) and shown[n].get("status") == "not applied" for n in SHOWN_BY[key])


def runtime_conditions(conditions: dict[str, Any], built: dict[str, Any] | None = None, *,
                       shown: dict[str, Any] | None = None) -> list[str]:
    """The runtime conditions in the model card's words (target, runtime, hardware, parallelism, backends).

    Args:
        conditions: the profile's conditions as the run recorded them.
        built: the run's ``runtime_image_build`` record, when the run built its image here: a profile
            that pins no digest ran the image ID built, and the card names that ID.
        shown: the launch's engine settings as the runtime's log showed them (:func:`engine_settings`); given,
            a launch setting is claimed only where they show it, and the rest follow :data:`NOT_SHOWN_HEAD`.
            None: every condition is listed as the profile sets it.
    """
    c = conditions
    lines = []
    t = c.get("target") or {}
    if t.get("repo"):
        lines.append(f"- Target: {t['repo']}" + (f" revision {t['revision']}" if t.get("revision") else " (unpinned)"))
    rt = c.get("runtime") or {}
    if rt.get("image"):
        if rt.get("digest"):
            pin = f" ({rt['digest']})"
        elif built and built.get("image_id") and not built.get("error"):
            pin = f" (image {built['image_id']}, pinned {built.get('pinned') or 'to the image the run built'})"
        else:
            pin = ""
        lines.append(f"- Runtime: {rt['image']}{pin}")
    hw = c.get("hardware") or {}
    on_gpus = bool(hw.get("count"))
    if on_gpus:
        lines.append(f"- Hardware: {number_words(hw['count'])} {hw.get('name') or 'GPU'} GPUs")
    elif hw:
        lines.append("- Hardware: CPU only (no GPU)")
    # (condition key, line): the launch's settings, each claimed only where the log showed it.
    launch: list[tuple[str, str]] = []
    par = c.get("parallelism") or {}
    if par and (on_gpus or not hw):
        launch.append(("parallelism", f"- Parallelism: tensor parallel size {par.get('tensor_parallel_size')} and "
                       f"decode-context parallel size {par.get('decode_context_parallel_size')}"))
    elif par:
        # A CPU runtime is one process: the profile's parallelism was checked against the tensors' shapes by
        # the format level, but no runtime ran it, and a qualified condition must be one a runtime ran under.
        lines.append(f"- Parallelism: none (one CPU process); tensor parallel size "
                     f"{par.get('tensor_parallel_size')} was checked only as a format condition (every sharded "
                     "dimension divides evenly), not run")
    # The GPU backends are launcher settings a CPU runtime cannot apply (its launcher logs them as ignored).
    b = (c.get("backends") or {}) if (on_gpus or not hw) else {}
    target = [b.get(k) for k in ("target_attention", "target_moe", "target_linear", "target_all_reduce")]
    together = bool(target) and all(target) and len(set(target)) == 1
    if together and (shown is None or not _is_shown("target_attention", shown)):
        launch.append(("target_others",
                       f"- Target attention, MoE, linear, and tensor-parallel all-reduce: {target[0]}"))
    elif together:
        launch.append(("target_attention", f"- Target attention: {target[0]}"))
        launch.append(("target_others", f"- Target MoE, linear, and tensor-parallel all-reduce: {target[0]}"))
    else:
        labels = (("target_attention", "Target attention"), ("target_moe", "Target MoE"),
                  ("target_linear", "Target linear"), ("target_all_reduce", "Target tensor-parallel all-reduce"))
        for key, label in labels:
            if b.get(key):
                launch.append(("target_attention" if key == "target_attention" else "target_others",
                               f"- {label}: {b[key]}"))
    if b.get("dflash_attention"):
        launch.append(("dflash_attention", f"- DFlash attention: {b['dflash_attention']}"))
    if b.get("dflash_linear"):
        launch.append(("dflash_linear", f"- DFlash linear: {b['dflash_linear']}"))
    if c.get("proposal_length"):
        n = c["proposal_length"]
        launch.append(("proposal_length", f"- DFlash proposal length: {number_words(n)} token{'s' if n != 1 else ''}"))
    if c.get("draft_kv_cache"):
        launch.append(("draft_kv_cache", f"- DFlash KV cache: {c['draft_kv_cache']}"))
    if c.get("cuda_graph_mode") and (on_gpus or not hw):
        launch.append(("cuda_graph_mode",
                       f"- CUDA graph mode: {c['cuda_graph_mode']} for the load-and-inference qualification"))
    if shown is None:
        return lines + [line for _, line in launch]
    lines += [line for key, line in launch if _is_shown(key, shown)]
    hidden = [line + (" (not applied by the runtime's launcher)" if _not_applied(key, shown) else "")
              for key, line in launch if not _is_shown(key, shown)]
    return lines + (["", NOT_SHOWN_HEAD, "", *hidden] if hidden else [])
