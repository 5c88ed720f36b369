"""The profile's ``[[evidence]]`` items, looked for in a runtime's log.

Each item names what the model card says the runtime showed ("loaded 1.20 GB of draft weights") and a
regex for the log line that shows it, bound to the statement that prints it (``source``, checked against
the pinned vLLM's sources by the profile tests) or marked ``unverified``. An item with an anchor
(``after``) is searched for only after the line that starts the draft's load. A bound item that no line
matches is a finding: missing evidence is a failed check, never a pass. An unverified item is reported
when seen and never required: its absence is a note (``measured["notes"]``), since no source at hand
shows that any runtime prints it. A missing item's finding quotes the log's nearest lines (those sharing
the most words with its format; a few, escaped), so a runtime that words the line otherwise shows how.

An item with ``expected_gb`` compares the number its ``gb`` group captured; one with ``checkpoint_size``
compares it with the pinned draft's own weight bytes as vLLM sizes and prints them
(:mod:`qualify.checkpoint.vllm_size`), the card's figure (``card_size``) only reported. When several
lines match, *every* captured number must agree, because picking the convenient one would let a log
that also says "9.99 GiB" pass.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from qualify.checkpoint.vllm_size import LoadedSize, vllm_checkpoint_size
from qualify.core import Evidence
from qualify.errors import CheckpointError
from qualify.profile import EvidenceSpec, Profile
from qualify.profile.evidence_source import evidence_matches
from qualify.util.escape import escape_terminal
from qualify.util.redact import redact

_MAX_LINE = 300  # characters of a matched line kept as evidence
#: How many of the log's nearest lines a missing item's finding quotes, and how much of each.
NEAREST_LINES = 3
_NEAREST_CHARS = 200
_PLACEHOLDER = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(?:\d+|\*)?(?:\.\d+)?[diouxXeEfFgGcrsa]|\{[^{}]*\}")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]{2,}")


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


def _words(source_format: str | None, pattern: str | None) -> list[str]:
    """The words a line would hold: its format's literal text and its pattern's (escapes, flags, group names out)."""
    text = _PLACEHOLDER.sub(" ", source_format or "") + " "
    text += re.sub(r"\\.|\(\?[A-Za-z]+\)|\(\?P<[^>]*>", " ", pattern or "")
    return sorted({w.lower() for w in _WORD.findall(text)})


def nearest_lines(item: EvidenceSpec, log_text: str, limit: int = NEAREST_LINES, *, anchor: bool = False) -> list[str]:
    """The log's lines sharing the most words with ``item``'s line (or, with ``anchor``, its anchor's), best first.

    At most ``limit``, each sharing at least a third of the words. Each is redacted, cut and escaped: the log
    is the runtime's, so a line cannot forge the report's text.
    """
    source = item.after_source if anchor else item.source
    words = _words(source.format if source else None, item.after_pattern if anchor else item.pattern)
    least = max(1, -(-len(words) // 3))
    scored: list[tuple[int, int, str]] = []
    for index, line in enumerate(log_text.splitlines()):
        low = line.lower()
        score = sum(1 for w in words if w in low)
        if score >= least:
            scored.append((-score, index, line))
    return [escape_terminal(redact(line.strip())[:_NEAREST_CHARS]) for _, _, line in sorted(scored)[:limit]]


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
    if item.card_size is not None:
        out["card_size"] = item.card_size
    out["required"] = item.required
    return out


class _DraftSize:
    """The pinned draft's size as vLLM prints it, computed once and only when an item asks for it."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._result: LoadedSize | str | None = None

    def get(self) -> LoadedSize | str:
        """The size, or why it cannot be computed."""
        if self._result is None:
            if self.folder is None:
                self._result = "the harness was given no folder of the draft the runtime loads"
            else:
                try:
                    self._result = vllm_checkpoint_size(self.folder)
                except CheckpointError as exc:
                    self._result = str(exc)
        return self._result


def _missing(item: EvidenceSpec, anchored: bool, log_text: str, log_name: str) -> str:
    where = (f"no line of the {log_name} matches {item.pattern!r}" if anchored else
             f"no line of the {log_name} matches its anchor {item.after_pattern!r}, after which it is searched for")
    near = nearest_lines(item, log_text, anchor=not anchored)
    quoted = ("; its nearest lines: " + " | ".join(repr(x) for x in near) if near else
              "; no line of the log is near it (none shares a third of its words)")
    return f"missing evidence {item.name!r}: {where} ({item.description}){quoted}"


def _judge_checkpoint_size(ev: Evidence, item: EvidenceSpec, matches: list[re.Match[str]], record: dict[str, Any],
                           draft: _DraftSize, log_name: str) -> None:
    size = draft.get()
    card = f"; the card states {item.card_size}, reported only" if item.card_size else ""
    if isinstance(size, str):
        ev.expected[item.name]["checkpoint_size"] = {"error": size}
        ev.add(f"evidence {item.name!r}: the draft's size as vLLM prints it cannot be computed, so the "
               f"{', '.join(m.group('gb') for m in matches)} GiB the log shows is not shown to be the draft's: "
               f"{size}{card}", file=log_name)
        return
    ev.expected[item.name]["checkpoint_size"] = size.to_dict()
    off = [m.group("gb") for m in matches if float(m.group("gb")) != float(size.printed)]
    if off:
        files = ", ".join(f"{n} ({b:,} bytes)" for n, b in size.files)
        ev.add(f"evidence {item.name!r}: the log shows {', '.join(m.group('gb') for m in matches)} GiB, but the "
               f"pinned draft's weight files ({files}) are {size.printed} GiB as vLLM sizes and prints them "
               f"({item.description}){card}", file=log_name)


def check_log_evidence(log_text: str, profile: Profile, level: str, *, log_name: str = "server log",
                       draft_folder: Path | None = None) -> Evidence:
    """Every required ``level`` evidence item of ``profile`` is shown by ``log_text`` (and its number agrees).

    ``draft_folder`` is the folder of the draft the runtime loads (the pinned copy it mounts), whose weight
    files a ``checkpoint_size`` item is judged against; without it such an item fails, its size unknown.
    """
    items = evidence_items(profile, level)
    ev = Evidence(f"the {log_name} shows the profile's {len(items)} {level} evidence item(s)")
    ev.measured["log_lines"] = log_text.count("\n") + (1 if log_text and not log_text.endswith("\n") else 0)
    found: dict[str, Any] = {}
    ev.measured["items"] = found
    notes: list[str] = []
    if not items:
        ev.add(f"the profile has no {level} evidence items: nothing would show that the runtime loaded the draft")
        return ev
    if not any(item.required for item in items):
        ev.add(f"the profile's {level} evidence items are all unverified: none is required, so nothing would show "
               "that the runtime loaded the draft")
    if not log_text.strip():
        ev.add(f"the {log_name} is empty")
    draft = _DraftSize(draft_folder)
    for item in items:
        name = item.name
        ev.expected[name] = _expected(item)
        matches, anchored = evidence_matches(item, log_text)
        if not matches:
            found[name] = None
            message = _missing(item, anchored, log_text, log_name)
            if item.required:
                ev.add(message, file=log_name)
            else:
                notes.append(f"{message}; not required: {item.unverified}")
            continue
        record: dict[str, Any] = {"line": _line_at(log_text, matches[0].start()), "matches": len(matches)}
        found[name] = record
        if item.expected_gb is not None or item.checkpoint_size:
            record["gb"] = [float(m.group("gb")) for m in matches]
        if item.checkpoint_size:
            _judge_checkpoint_size(ev, item, matches, record, draft, log_name)
        elif item.expected_gb is not None and item.tolerance_gb is not None:
            values = record["gb"]
            want, tol = item.expected_gb, item.tolerance_gb
            off = [v for v in values if abs(v - want) > tol]
            if off:
                ev.add(f"evidence {name!r}: the log shows {', '.join(f'{v:g}' for v in values)} GB, the profile "
                       f"expects {want:g} +/- {tol:g} ({item.description})", file=log_name)
    if notes:
        ev.measured["notes"] = notes
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
