"""The engine settings vLLM logs at start, parsed and compared between the paired level's two servers.

vLLM prints its whole engine configuration once per engine start, as
``Initializing a V1 LLM engine (vX) with config: key=value, key=value, ...`` (values nest
brackets, braces, parentheses and quotes). The paired level compares the checkpoint with its
source draft; the comparison means something only when the two servers differ in the draft
alone, so their logged configurations must be equal once the draft's path is set aside.
Parsing and comparing are pure; :func:`same_engine_settings` turns them into evidence.

The same lines are read back against the launch (:func:`read_engine_log`, :func:`compare_engine_settings`):
tensor and decode-context parallelism, the speculative method and tokens, the KV cache dtype and the CUDA graph
mode from the engine line, the target's and the draft's attention backends from vLLM's backend lines. Each
setting names the statement (file and format string) that prints it, checked against the pinned vLLM's
sources by the tests; a setting no statement prints (the draft's KV cache dtype) says so. A setting the log
does not show is never claimed; one the runtime's launcher says it did not apply is recorded as such.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from qualify.core import Evidence
from qualify.util.escape import escape_terminal


@dataclass(frozen=True)
class Statement:
    """A statement that prints a line: its format string, in a file of the pinned vLLM (or this project's)."""

    file: str  # relative to site-packages, or to this repository when ``project``
    format: str  # as qualify.profile.evidence_source renders the literal
    project: bool = False

    @property
    def where(self) -> str:
        return f"{self.file} (this project)" if self.project else self.file

#: vLLM 0.32's engine start line (vllm/v1/engine/core.py).
ENGINE_LINE = re.compile(r"Initializing a V1 LLM engine \(v(?P<version>[^)\s]*)\) with config: (?P<config>[^\n]*)")
#: The draft's path inside the logged speculative_config: the one value the two servers must differ in.
_DRAFT_MODEL = re.compile(r"(\bmodel=)('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^,)]*)")
DRAFT_KEY = "speculative_config"
_OPEN, _CLOSE = "([{", ")]}"


def split_top_level(text: str) -> list[str]:
    """``text`` split at the commas outside brackets and quotes (vLLM's ``key=value, ...`` layout)."""
    parts, depth, quote, start, i = [], 0, "", 0, 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
        i += 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def parse_engine_config(log: str) -> dict[str, str] | None:
    """The last engine configuration ``log`` states, as key -> value text; None when it states none."""
    found = list(ENGINE_LINE.finditer(log))
    if not found:
        return None
    match = found[-1]
    out = {"vllm_version": match.group("version")}
    for part in split_top_level(match.group("config").rstrip()):
        key, sep, value = part.partition("=")
        out[key.strip() if sep else part] = value.strip() if sep else ""
    return out


def without_draft_path(config: Mapping[str, str]) -> dict[str, str]:
    """``config`` with the draft's path in ``speculative_config`` replaced by a placeholder."""
    out = dict(config)
    if DRAFT_KEY in out:
        out[DRAFT_KEY] = _DRAFT_MODEL.sub(r"\1<draft>", out[DRAFT_KEY], count=1)
    return out


def differing_keys(a: Mapping[str, str], b: Mapping[str, str]) -> list[str]:
    """The keys whose values differ between two normalised configurations (or that one of them lacks)."""
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def same_engine_settings(logs: Mapping[str, str]) -> Evidence:
    """Whether two servers' logged engine settings are identical but for the draft's path.

    Args:
        logs: exactly two entries, server name -> its log text. A log without the engine's
            start line fails the evidence: the comparison is then unknown, not passed.

    Raises:
        ValueError: ``logs`` does not name exactly two servers.
    """
    names = list(logs)
    if len(names) != 2:
        raise ValueError(f"two servers' logs are compared, not {len(names)}")
    ev = Evidence(f"the {' and '.join(names)} servers run identical vLLM engine settings except the draft's path")
    configs: dict[str, dict[str, str]] = {}
    for name, text in logs.items():
        parsed = parse_engine_config(text)
        if parsed is None:
            ev.add(f"the {name} server's engine settings are unknown: its log states no 'Initializing a V1 LLM "
                   "engine' line")
        else:
            configs[name] = parsed
    ev.measured["engine_configs"] = configs
    if len(configs) != 2:
        return ev
    a, b = (without_draft_path(configs[n]) for n in names)
    diff = differing_keys(a, b)
    ev.measured["differing_keys"] = diff
    ev.measured["draft_paths"] = {n: configs[n].get(DRAFT_KEY) for n in names}
    if diff:
        shown = "; ".join(f"{k}: {a.get(k, '(absent)')[:160]} vs {b.get(k, '(absent)')[:160]}" for k in diff)
        ev.add(f"the engine settings differ in {', '.join(diff)} ({names[0]} vs {names[1]}: {shown})")
    if configs[names[0]].get(DRAFT_KEY) == configs[names[1]].get(DRAFT_KEY):
        ev.add(f"both servers load the same draft ({configs[names[0]].get(DRAFT_KEY)}): there is nothing to compare")
    return ev


# -- the engine's settings read back against the launch ----------------------------------------------------------

#: The statement that prints the engine line: its settings are the values of VllmConfig.__str__ inside it.
ENGINE_STATEMENT = Statement("vllm/v1/engine/core.py", "Initializing a V1 LLM engine (v%s) with config: %s")
#: vLLM 0.32's attention backend lines (a backend chosen by name, and one chosen by priority).
BACKEND_STATEMENTS = (Statement("vllm/platforms/cuda.py", "Using %s backend."),
                      Statement("vllm/platforms/cuda.py", "Using %s attention backend out of potential backends: %s."))
#: The CPU runtime's launcher names, on one line, the variables it does not apply (runtimes/vllm-cpu/launch.py).
NOT_APPLIED_STATEMENT = Statement("runtimes/vllm-cpu/launch.py",
                                  "not applied on a CPU (one process, no GPU backends, no CUDA graphs): ",
                                  project=True)
_BACKEND_LINE = re.compile(r"Using (?:AttentionBackendEnum\.)?(?P<name>[A-Z][A-Z0-9_]*) "
                           r"(?:backend\.|attention backend out of potential backends: )")
_NOT_APPLIED = re.compile(r"not applied on a CPU \([^)\n]*\): (?P<vars>[^\n]*)")
_CUDAGRAPH = re.compile(r"'cudagraph_mode': <CUDAGraphMode\.(?P<mode>[A-Z_]+)")
_SPEC = re.compile(r"SpeculativeConfig\(method=(?P<method>'[^']*'|None), model=.*, num_spec_tokens=(?P<n>\d+|None)\)")

AGREES, DIFFERS, NOT_SHOWN, NOT_APPLIED, SHOWN = "agrees", "differs", "not shown", "not applied", "shown"


@dataclass(frozen=True)
class EngineSetting:
    """One setting the launch sets and vLLM may print: the launcher's variable and the statement printing it."""

    name: str
    words: str  # the model card's words for it
    env: str  # the launcher's variable that sets it
    statements: tuple[Statement, ...]  # empty: vLLM 0.32 prints it nowhere
    not_printed: str | None = None  # why no statement prints it


def _in_engine_line(fmt: str) -> tuple[Statement, ...]:
    return (ENGINE_STATEMENT, Statement("vllm/config/vllm.py", fmt))


_SPEC_FORMAT = "SpeculativeConfig(method={method!r}, model={model!r}, num_spec_tokens={num_spec_tokens!r})"
#: What vLLM 0.32 logs of its engine configuration, in the card's order.
ENGINE_SETTINGS: tuple[EngineSetting, ...] = (
    EngineSetting("tensor_parallel_size", "tensor parallel size", "TP",
                  _in_engine_line("tensor_parallel_size={self.parallel_config.tensor_parallel_size}, ")),
    EngineSetting("decode_context_parallel_size", "decode-context parallel size", "DCP",
                  _in_engine_line("decode_context_parallel_size="
                                  "{self.parallel_config.decode_context_parallel_size}, ")),
    EngineSetting("attention_backend", "target attention backend", "ATTENTION_BACKEND", BACKEND_STATEMENTS),
    EngineSetting("draft_attention_backend", "DFlash attention backend", "DFLASH_ATTENTION_BACKEND",
                  BACKEND_STATEMENTS),
    EngineSetting("speculative_method", "speculative method", "SPECULATOR",
                  (ENGINE_STATEMENT, Statement("vllm/config/speculative.py", _SPEC_FORMAT))),
    EngineSetting("num_speculative_tokens", "speculative tokens", "NUM_SPECULATIVE_TOKENS",
                  (ENGINE_STATEMENT, Statement("vllm/config/speculative.py", _SPEC_FORMAT))),
    EngineSetting("kv_cache_dtype", "KV cache dtype", "KV_CACHE_DTYPE",
                  _in_engine_line("kv_cache_dtype={self.cache_config.cache_dtype}, ")),
    EngineSetting("draft_kv_cache_dtype", "DFlash KV cache dtype", "DFLASH_KV_CACHE_DTYPE", (),
                  not_printed="vLLM 0.32 logs the speculative config as its method, model and tokens only "
                  "(SpeculativeConfig.__repr__), never the draft's kv_cache_dtype"),
    EngineSetting("cudagraph_mode", "CUDA graph mode", "CUDAGRAPH_MODE",
                  _in_engine_line("compilation_config={self.compilation_config!r}, ")),
)


@dataclass(frozen=True)
class Shown:
    """A setting's value as a log line printed it."""

    value: str
    line: str


def _line_of(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return (text[start:] if end < 0 else text[start:end]).strip()[:300]


def read_engine_log(log: str, *, draft_anchor: str | None = None) -> dict[str, Shown]:
    """What ``log`` shows of :data:`ENGINE_SETTINGS` (name -> value and the line), and nothing it does not show.

    The engine line's settings are its last statement's; the target's attention backend is the first backend
    line before ``draft_anchor`` (the line that starts the draft's load: the target is built before it), the
    draft's the first after it (none without an anchor: a backend line alone does not say whose it is).
    A launch preflight reads a launch's first lines with this same function.
    """
    out: dict[str, Shown] = {}
    engines = list(ENGINE_LINE.finditer(log))
    if engines:
        line = _line_of(log, engines[-1].start())
        config = parse_engine_config(log) or {}
        for key in ("tensor_parallel_size", "decode_context_parallel_size", "kv_cache_dtype"):
            if config.get(key):
                out[key] = Shown(config[key], line)
        spec = _SPEC.search(config.get(DRAFT_KEY, ""))
        if spec is not None:
            if spec.group("method") != "None":
                out["speculative_method"] = Shown(spec.group("method").strip("'"), line)
            if spec.group("n") != "None":
                out["num_speculative_tokens"] = Shown(spec.group("n"), line)
        graph = _CUDAGRAPH.search(config.get("compilation_config", ""))
        if graph is not None:
            out["cudagraph_mode"] = Shown(graph.group("mode"), line)
    anchor = re.search(draft_anchor, log, re.MULTILINE) if draft_anchor else None
    split = anchor.start() if anchor is not None else len(log)
    backends = list(_BACKEND_LINE.finditer(log))
    target = next((m for m in backends if m.start() < split), None)
    draft = next((m for m in backends if m.start() >= split), None) if anchor is not None else None
    for key, found in (("attention_backend", target), ("draft_attention_backend", draft)):
        if found is not None:
            out[key] = Shown(found.group("name"), _line_of(log, found.start()))
    return out


def not_applied(log: str) -> dict[str, str]:
    """The launcher's variables the log says the runtime did not apply, each -> the line saying so."""
    out: dict[str, str] = {}
    for m in _NOT_APPLIED.finditer(log):
        for pair in m.group("vars").split():
            out[pair.partition("=")[0]] = _line_of(log, m.start())
    return out


@dataclass(frozen=True)
class SettingReading:
    """One engine setting: what the launch set, what the log showed, and whether they agree."""

    setting: EngineSetting
    expected: str | None  # the launch environment's value; None: the launch does not set it
    shown: Shown | None
    status: str  # AGREES, DIFFERS, NOT_SHOWN, NOT_APPLIED, SHOWN (the launch sets none)
    not_applied_line: str | None = None

    def to_dict(self) -> dict[str, Any]:
        s = self.setting
        return {"words": s.words, "env": s.env, "expected": self.expected, "status": self.status,
                "shown": self.shown.value if self.shown else None, "line": self.shown.line if self.shown else None,
                "statements": [x.where for x in s.statements], "not_printed": s.not_printed,
                "not_applied_line": self.not_applied_line}


def _same(a: str, b: str) -> bool:
    return a.strip().strip("'\"").upper() == b.strip().strip("'\"").upper()


def compare_engine_settings(log: str, launch_env: Mapping[str, str], *,
                            draft_anchor: str | None = None) -> list[SettingReading]:
    """Each of :data:`ENGINE_SETTINGS` as the launch set it (``launch_env``) and as ``log`` showed it."""
    shown, skipped = read_engine_log(log, draft_anchor=draft_anchor), not_applied(log)
    out = []
    for setting in ENGINE_SETTINGS:
        want = launch_env.get(setting.env) or None
        got = shown.get(setting.name)
        if setting.env in skipped:
            out.append(SettingReading(setting, want, got, NOT_APPLIED, skipped[setting.env]))
        elif got is None:
            out.append(SettingReading(setting, want, None, NOT_SHOWN))
        elif want is None:
            out.append(SettingReading(setting, None, got, SHOWN))
        else:
            out.append(SettingReading(setting, want, got, AGREES if _same(want, got.value) else DIFFERS))
    return out


def engine_settings_evidence(log: str, launch_env: Mapping[str, str], *, draft_anchor: str | None = None,
                             log_name: str = "server log") -> Evidence:
    """The launch's engine settings read back from its log: a setting the log shows otherwise is a finding.

    A setting the log does not show, or that the launcher says it did not apply, is recorded as such
    (``measured["engine_settings"]``) and never claimed: the card lists it as set, not shown by the runtime.
    """
    readings = compare_engine_settings(log, launch_env, draft_anchor=draft_anchor)
    ev = Evidence(f"the {log_name} shows the engine settings the launch set")
    ev.measured["engine_settings"] = {r.setting.name: r.to_dict() for r in readings}
    for r in readings:
        if r.status == DIFFERS and r.shown is not None:
            where = " and ".join(f"{x.where} ({x.format!r})" for x in r.setting.statements)
            ev.add(f"the launch set {r.setting.env}={r.expected} ({r.setting.words}), but the runtime printed "
                   f"{r.shown.value!r}: {escape_terminal(r.shown.line)!r} (printed by {where})", file=log_name)
    return ev


__all__ = ["AGREES", "DIFFERS", "ENGINE_LINE", "ENGINE_SETTINGS", "NOT_APPLIED", "NOT_SHOWN", "SHOWN",
           "EngineSetting", "SettingReading", "Shown", "Statement", "compare_engine_settings", "differing_keys",
           "engine_settings_evidence", "not_applied", "parse_engine_config", "read_engine_log",
           "same_engine_settings", "split_top_level", "without_draft_path"]
