"""The engine settings vLLM logs at start, parsed and compared between the paired level's two servers.

vLLM prints its whole engine configuration once per engine start, as
``Initializing a V1 LLM engine (vX) with config: key=value, key=value, ...`` (values nest
brackets, braces, parentheses and quotes). The paired level compares the checkpoint with its
source draft; the comparison means something only when the two servers differ in the draft
alone, so their logged configurations must be equal once the draft's path is set aside.
Parsing and comparing are pure; :func:`same_engine_settings` turns them into evidence.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from qualify.core import Evidence

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


__all__ = ["ENGINE_LINE", "differing_keys", "parse_engine_config", "same_engine_settings", "split_top_level",
           "without_draft_path"]
