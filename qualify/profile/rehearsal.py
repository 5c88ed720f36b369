"""What a CPU rehearsal may change of the release profile: the allow-list, declared once, each rule with its reason.

``make qualify`` rehearses the release run (profile ``glm53-flash-dflash2-mxfp8-tp4``) on CPU with profile
``fixture-dflash2-cpu`` (and the DFlash (1) fixture's ``fixture-dflash-cpu`` the same way). The rehearsal
shows something about the release only where it takes the same path: the same levels, arms run the same way,
the same proposal length, temperatures, concurrency rule, launch overrides and measurement methods. What a CPU
cannot share with four GPUs is listed in :data:`ALLOWED` (hardware, the image and its build, model
repositories and revisions, served names, ports, sizes, the log lines each runtime prints, absolute thresholds a
tiny draft can show, words); every other difference is drift. The paired level's decision rules (its margins, the
confidence, the bootstrap) are not on the list: the rehearsal decides by the release's rules, and differs only in
prompt sets, counts and token lengths, whose cost ``qualify profile-check`` shows.

A rule names keys as :mod:`qualify.profile.diff` flattens them, with ``*`` for one key segment, ``[*]`` for
any array item and ``**`` for any rest (nothing included). A difference whose table or item is on one side
only is allowed only if every key under it is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from qualify.profile.diff import Difference, diff_profiles
from qualify.profile.model import Profile

#: The release profile and the CPU profile that rehearses it.
RELEASE_PROFILE = "glm53-flash-dflash2-mxfp8-tp4"
REHEARSAL_PROFILE = "fixture-dflash2-cpu"
#: Every CPU profile that rehearses the release run (make qualify's first): each is held to the same allow-list.
REHEARSAL_PROFILES = (REHEARSAL_PROFILE, "fixture-dflash-cpu")

Condition = Callable[[Mapping[str, Any], Mapping[str, Any]], bool]


def _max_num_seqs(data: Mapping[str, Any]) -> int | None:
    """The launcher's MAX_NUM_SEQS, or None where it is not a whole number."""
    try:
        return int(((data.get("runtime") or {}).get("env") or {}).get("MAX_NUM_SEQS", ""))
    except ValueError:
        return None


def _on_both(rule: Callable[[Mapping[str, Any]], bool]) -> Condition:
    """A condition that holds when ``rule`` holds on each profile: the same rule at another size."""
    return lambda a, b: rule(a) and rule(b)


def _throughput_at(data: Mapping[str, Any]) -> bool:
    most = _max_num_seqs(data)
    return most is not None and (data.get("throughput") or {}).get("concurrency") == most


#: Both sides measure throughput at their own MAX_NUM_SEQS.
_throughput_at_max_num_seqs = _on_both(_throughput_at)


def _local_server_is_the_runtime(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """``[local_server] kind = "runtime"``: the serving levels talk to the run's own containers, as the release
    profile's do whenever its load level runs; the table only says where this machine's built models are."""
    return all((data.get("local_server") or {"kind": "runtime"}).get("kind") == "runtime" for data in (a, b))


#: Modules vLLM 0.32 builds unquantized in every DFlash 2 draft (``ReplicatedLinear(..., quant_config=None)``):
#: format.draft_model holds any DFlash 2 draft to it whatever its profile's list says.
_ALWAYS_UNQUANTIZED = frozenset({"candidate_selector.hidden_projection"})


def _exclusions_differ_by_what_vllm_never_quantizes(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """The excluded modules differ only by those vLLM builds unquantized anyway."""
    def excluded(data: Mapping[str, Any]) -> set[str]:
        return set((data.get("format") or {}).get("excluded_modules") or ())
    return (excluded(a) ^ excluded(b)) <= _ALWAYS_UNQUANTIZED


def _paired_at(data: Mapping[str, Any]) -> bool:
    most = _max_num_seqs(data)
    return most is not None and list((data.get("paired") or {}).get("concurrency", ())) == [1, most]


#: Both sides measure paired at batch 1 and at their own MAX_NUM_SEQS.
_concurrency_is_one_and_max_num_seqs = _on_both(_paired_at)


@dataclass(frozen=True)
class AllowedKey:
    """Keys matching ``pattern`` may differ between the release and its rehearsal, for ``reason``.

    ``condition``, when set, must also hold on both profiles (a size may differ only while the rule
    that derives it is the same).
    """

    pattern: str
    reason: str
    condition: Condition | None = None

    def matches(self, key: str) -> bool:
        return _compile(self.pattern).fullmatch(key) is not None


def _compile(pattern: str) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(r".*")
            i += 2
        elif pattern.startswith("[*]", i):
            out.append(r"\[[^\]]*\]")
            i += 3
        elif pattern[i] == "*":
            out.append(r"[^.\[\]]+")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


_HW = "hardware: four RTX PRO 6000 Blackwell GPUs against 2 CPU cores"
_IMAGE = "the runtime image: the community GPU image by tag against vLLM's CPU build, built here"
_REPOS = "model repositories and revisions: the 4-GPU target and draft against the tiny fixtures trained here"
_NAMES = "served model name: follows the target that is served"
_PORTS = "ports and endpoints: whatever the machine has free"
_SIZES = "sizes: what a 2-core CPU runs in minutes, at the same rule"
_SLOW = "timeouts: how long this hardware takes to start and answer"
_EVIDENCE = ("load and smoke evidence: each runtime prints its own lines; every pattern names the vLLM source "
             "line or the project file that prints it (tests/profile/test_evidence_source.py)")
_WORDS = "descriptions, names and the card's wording: they state, they do not run anything"

#: The keys that may differ between the release profile and its CPU rehearsal. Nothing else may.
ALLOWED: tuple[AllowedKey, ...] = (
    AllowedKey("name", _WORDS),
    AllowedKey("description", _WORDS),
    AllowedKey("levels.not_qualified", _WORDS),
    AllowedKey("local_server.exercised", _WORDS),
    AllowedKey("local_server.setup", _WORDS),
    AllowedKey("hardware.**", _HW),
    AllowedKey("backends", _HW + " (the B12X and FlashAttention kernels exist on the GPUs only)"),
    AllowedKey("backends.**", _HW + " (the B12X and FlashAttention kernels exist on the GPUs only)"),
    AllowedKey("runtime.gpus", _HW),
    AllowedKey("runtime.ipc", _HW + " (the GPU image's tensor-parallel workers share memory over the host IPC)"),
    AllowedKey("runtime.shm_size", _HW + " (shared memory the engine's workers exchange tensors through)"),
    AllowedKey("runtime.image", _IMAGE),
    AllowedKey("runtime.image_digest", _IMAGE),
    AllowedKey("runtime.build", _IMAGE),
    AllowedKey("checkpoint.repo", _REPOS),
    AllowedKey("checkpoint.revision", _REPOS),
    AllowedKey("source.repo", _REPOS),
    AllowedKey("source.revision", _REPOS),
    AllowedKey("source.content_revision", _REPOS),
    AllowedKey("source.sha256", _REPOS),
    AllowedKey("source.sha256.**", _REPOS),
    AllowedKey("target.repo", _REPOS),
    AllowedKey("target.revision", _REPOS),
    AllowedKey("runtime.env.MODEL", _REPOS),
    AllowedKey("runtime.env.MODEL_REVISION", _REPOS),
    AllowedKey("runtime.env.DFLASH_MODEL", _REPOS),
    AllowedKey("runtime.env.DFLASH_MODEL_REVISION", _REPOS),
    AllowedKey("runtime.target_revision_env", _REPOS + " (the variable each launcher pins the target's revision "
               "by; the run records whether it was enforced)"),
    AllowedKey("local_server", "the CPU image's local models: the serving levels talk to the run's own containers "
               "on both sides (kind runtime); only where the built target and source folders are differs",
               _local_server_is_the_runtime),
    AllowedKey("local_server.kind", "as local_server", _local_server_is_the_runtime),
    AllowedKey("local_server.serve_checkpoint", "as local_server", _local_server_is_the_runtime),
    AllowedKey("local_server.method", "as local_server", _local_server_is_the_runtime),
    AllowedKey("local_server.reference", "as local_server", _local_server_is_the_runtime),
    AllowedKey("local_server.target", _REPOS + " (where the target's files are)"),
    AllowedKey("local_server.source_draft", _REPOS + " (where the source draft's files are)"),
    AllowedKey("runtime.served_model_name", _NAMES),
    AllowedKey("runtime.env.SERVED_MODEL_NAME", _NAMES),
    AllowedKey("runtime.endpoint", _PORTS),
    AllowedKey("runtime.env.PORT", _PORTS),
    AllowedKey("paired.source_endpoint", _PORTS),
    AllowedKey("losslessness.reference_endpoint", _PORTS),
    AllowedKey("runtime.env.MAX_MODEL_LEN", _SIZES),
    AllowedKey("runtime.env.MAX_NUM_SEQS", _SIZES),
    AllowedKey("runtime.env.MAX_NUM_BATCHED_TOKENS", _SIZES),
    AllowedKey("runtime.env.DTYPE", _SIZES + " (float32 compute on CPU, where BF16 matmuls are emulated)"),
    AllowedKey("dflash.kv_cache_dtype", _SIZES + " (the dtype DFLASH_KV_CACHE_DTYPE=auto resolves to)"),
    AllowedKey("paired.max_tokens", _SIZES),
    AllowedKey("paired.min_prompts", _SIZES),
    AllowedKey("paired.prompt_sets", _SIZES + " (the published sets take hours at 256 tokens on 2 cores; the "
               "rehearsal's set has the same MT-Bench format and per-category pairing)"),
    AllowedKey("paired.prompt_sets[*]", _SIZES + " (the prompts, as above)"),
    AllowedKey("paired.prompt_sets[*].**", _SIZES + " (the prompts, as above)"),
    AllowedKey("paired.concurrency", _SIZES + " (batch 1 and MAX_NUM_SEQS on both)",
               _concurrency_is_one_and_max_num_seqs),
    AllowedKey("acceptance.prompts", _SIZES + " (the prompts)"),
    AllowedKey("acceptance.max_tokens", _SIZES),
    AllowedKey("acceptance.min_prompts", _SIZES),
    AllowedKey("speedup.max_tokens", _SIZES),
    AllowedKey("speedup.prompts", _SIZES),
    AllowedKey("losslessness.max_tokens", _SIZES),
    AllowedKey("throughput.max_tokens", _SIZES),
    AllowedKey("format.excluded_modules", "the card names lm_head only; vLLM 0.32 builds the candidate selector's "
               "hidden projection unquantized in every DFlash 2 draft, and format.draft_model requires it so, whatever "
               "the list says", _exclusions_differ_by_what_vllm_never_quantizes),
    AllowedKey("throughput.concurrency", _SIZES + " (MAX_NUM_SEQS on both)", _throughput_at_max_num_seqs),
    AllowedKey("*.request_timeout_s", _SLOW),
    AllowedKey("runtime.startup_timeout_s", _SLOW),
    AllowedKey("local_server.ready_timeout_s", _SLOW),
    AllowedKey("evidence", _EVIDENCE),
    AllowedKey("evidence[*]", _EVIDENCE),
    AllowedKey("evidence[*].**", _EVIDENCE),
    AllowedKey("paired.pilot_spread", "the per-prompt spread each design assumes, measured on its own runtime and "
               "draft: it prices the design (qualify profile-check), it decides nothing"),
    AllowedKey("paired.pilot_source", _WORDS),
    AllowedKey("acceptance.pilot_*", "the good draft's acceptance each design assumes, measured on its own runtime "
               "and draft: it prices the floors (qualify profile-check), it decides nothing"),
    AllowedKey("acceptance.min_*", "threshold: absolute acceptance depends on the draft and target; each profile's "
               "comment gives the measured figures its bounds sit between"),
    AllowedKey("losslessness.near_tie_reason", "prose: why the tolerance is what it is on that hardware (the "
               "tolerance itself, the decision rule, is the release's)"),
)


@dataclass(frozen=True)
class Judged:
    """A difference and the rule that allows it (None: drift, not allowed)."""

    difference: Difference
    allowed_by: AllowedKey | None

    @property
    def allowed(self) -> bool:
        return self.allowed_by is not None


def _rule_for(key: str, a: Mapping[str, Any], b: Mapping[str, Any],
              allowed: tuple[AllowedKey, ...]) -> AllowedKey | None:
    for rule in allowed:
        if rule.matches(key) and (rule.condition is None or rule.condition(a, b)):
            return rule
    return None


def judge(difference: Difference, a: Mapping[str, Any], b: Mapping[str, Any],
          allowed: tuple[AllowedKey, ...] = ALLOWED) -> Judged:
    """Whether ``difference`` is allowed: its key, and every key under it when one side lacks it."""
    rule = _rule_for(difference.key, a, b, allowed)
    if rule is None and difference.one_sided and difference.leaves:
        rules = [_rule_for(leaf, a, b, allowed) for leaf in difference.leaves]
        rule = rules[0] if all(r is not None for r in rules) else None
    return Judged(difference, rule)


def judge_all(a: Profile | Mapping[str, Any], b: Profile | Mapping[str, Any],
              allowed: tuple[AllowedKey, ...] = ALLOWED) -> list[Judged]:
    """Every difference between ``a`` and ``b``, each with the rule that allows it, if any."""
    left = a.data if isinstance(a, Profile) else a
    right = b.data if isinstance(b, Profile) else b
    return [judge(d, left, right, allowed) for d in diff_profiles(left, right)]


def drift(a: Profile | Mapping[str, Any], b: Profile | Mapping[str, Any],
          allowed: tuple[AllowedKey, ...] = ALLOWED) -> list[Difference]:
    """The differences no rule allows: what the rehearsal changes that it may not."""
    return [j.difference for j in judge_all(a, b, allowed) if not j.allowed]


def disallowed_leaves(judged: Judged, a: Mapping[str, Any], b: Mapping[str, Any],
                      allowed: tuple[AllowedKey, ...] = ALLOWED) -> list[str]:
    """The keys under a disallowed one-sided difference that no rule allows (its own key otherwise)."""
    if judged.allowed:
        return []
    d = judged.difference
    if not d.one_sided:
        return [d.key]
    return [leaf for leaf in d.leaves if _rule_for(leaf, a, b, allowed) is None] or [d.key]
