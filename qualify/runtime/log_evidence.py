"""The profile's ``[[evidence]]`` items, looked for in a runtime's log.

Each item names what the model card says the runtime showed ("loaded 1.20 GB of draft weights") and a
regex for the log line that shows it, bound to the statement that prints it (``source``, checked against
the pinned vLLM's sources by the profile tests) or marked ``unverified``. An item with an anchor
(``after``) is searched for only after the line that starts the draft's load. An item that no line
matches is a finding: missing evidence is a failed check, never a pass.
An item with ``expected_gb`` compares the number its ``gb`` group captured; when several
lines match, *every* captured number must agree, because picking the convenient one
would let a log that also says "9.99 GiB" pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from qualify.core import Evidence
from qualify.profile import EvidenceSpec, Profile
from qualify.profile.evidence_source import evidence_matches
from qualify.util.redact import redact

_MAX_LINE = 300  # characters of a matched line kept as evidence


def read_log(path: Path | None) -> str:
    """A server's log as text so far; empty when there is none yet or it cannot be read.

    A log is read while its server writes it (and may not exist before the first line), so an
    unreadable log is "nothing shown yet": the evidence it lacks fails its check with that finding.
    """
    try:
        return path.read_text(encoding="utf-8", errors="replace") if path is not None else ""
    except OSError:
        return ""


def evidence_items(profile: Profile, level: str) -> list[EvidenceSpec]:
    return [e for e in profile.evidence if e.level == level]


def _line_at(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    line = text[start:] if end < 0 else text[start:end]
    return redact(line.strip())[:_MAX_LINE]


def _expected(item: EvidenceSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"description": item.description, "pattern": item.pattern}
    if item.after_pattern is not None:
        out["after"] = item.after_pattern
    if item.expected_gb is not None:
        out.update(gb=item.expected_gb, tolerance_gb=item.tolerance_gb)
    if item.source is not None:
        out["source"] = {"where": item.source.where, "format": item.source.format}
    if item.unverified is not None:
        out["unverified"] = item.unverified
    if item.draft is not None:
        out["draft"] = item.draft
    return out


def check_log_evidence(log_text: str, profile: Profile, level: str, *, log_name: str = "server log") -> Evidence:
    """Every ``level`` evidence item of ``profile`` is shown by ``log_text`` (and its number agrees)."""
    items = evidence_items(profile, level)
    ev = Evidence(f"the {log_name} shows the profile's {len(items)} {level} evidence item(s)")
    ev.measured["log_lines"] = log_text.count("\n") + (1 if log_text and not log_text.endswith("\n") else 0)
    found: dict[str, Any] = {}
    ev.measured["items"] = found
    if not items:
        ev.add(f"the profile has no {level} evidence items: nothing would show that the runtime loaded the draft")
        return ev
    if not log_text.strip():
        ev.add(f"the {log_name} is empty")
    for item in items:
        name = item.name
        ev.expected[name] = _expected(item)
        matches, anchored = evidence_matches(item, log_text)
        if not matches:
            found[name] = None
            where = (f"no line of the {log_name} matches {item.pattern!r}" if anchored else
                     f"no line of the {log_name} matches its anchor {item.after_pattern!r}, after which it is "
                     "searched for")
            ev.add(f"missing evidence {name!r}: {where} ({item.description})", file=log_name)
            continue
        record: dict[str, Any] = {"line": _line_at(log_text, matches[0].start()), "matches": len(matches)}
        found[name] = record
        if item.expected_gb is not None and item.tolerance_gb is not None:
            values = [float(m.group("gb")) for m in matches]
            record["gb"] = values
            want, tol = item.expected_gb, item.tolerance_gb
            off = [v for v in values if abs(v - want) > tol]
            if off:
                ev.add(f"evidence {name!r}: the log shows {', '.join(f'{v:g}' for v in values)} GB, the profile "
                       f"expects {want:g} +/- {tol:g} ({item.description})", file=log_name)
    return ev


def wait_for_log_evidence(read_new: Callable[[], str], profile: Profile, level: str, *, log_name: str,
                          timeout_s: float, poll_s: float = 0.5) -> Evidence:
    """:func:`check_log_evidence` on what ``read_new`` returns, re-read until it passes or ``timeout_s`` ends.

    A server writes some evidence only periodically (vLLM logs its speculative-decoding
    metrics every few seconds), so a line that is not there yet is not yet missing.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        ev = check_log_evidence(read_new(), profile, level, log_name=log_name)
        if ev.ok or time.monotonic() >= deadline:
            ev.measured["waited_up_to_s"] = timeout_s
            return ev
        time.sleep(poll_s)
