"""The harness's core: levels, statuses, verdicts, findings and evidence. It imports nothing of ours.

Every part of the harness speaks these words: a check returns :class:`Evidence` (it passed
if and only if it has no :class:`Finding`), a check ends with a :class:`Status`, statuses
:func:`combine` into a level's, and the run's :class:`Verdict` is derived from its required
levels (:mod:`qualify.report.model`). Nothing here reads a file or knows a checkpoint, so
any layer above may use it, and the release gate reads it without torch.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

#: Every level the harness knows, in the order a full run performs them.
LEVELS: tuple[str, ...] = (
    "structure",
    "format",
    "reproduction",
    "load",
    "smoke",
    "acceptance",
    "paired",
    "losslessness",
    "throughput",
    "speedup",
)

LEVEL_TITLES: dict[str, str] = {
    "structure": "checkpoint structure",
    "format": "MXFP8 format",
    "reproduction": "exact format reproduction",
    "load": "loading",
    "smoke": "smoke inference",
    "acceptance": "draft acceptance",
    "paired": "acceptance against the source draft",
    "losslessness": "lossless speculative decoding",
    "throughput": "runtime throughput",
    "speedup": "speculative speedup",
}


#: The words a report, its Markdown and the model card use for a source folder that no proof tied to its pin.
SOURCE_NOT_VERIFIED = "source identity not verified"


class Status(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    ERROR = "error"
    NOT_RUN = "not-run"


class Verdict(StrEnum):
    QUALIFIED = "qualified"
    NOT_QUALIFIED = "not qualified"


@dataclass
class Finding:
    """One concrete problem, located as precisely as the check can."""

    message: str
    file: str | None = None
    tensor: str | None = None

    def __str__(self) -> str:
        parts = [p for p in (self.file, f"tensor '{self.tensor}'" if self.tensor else None) if p]
        return ": ".join([*parts, self.message])

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        return cls(data["message"], data.get("file"), data.get("tensor"))


#: A check lists at most this many findings in full; the rest are counted.
MAX_FINDINGS = 50


@dataclass
class Evidence:
    """What a check measured. It passed if and only if there are no findings.

    A library check function returns one of these. ``summary`` says in one sentence
    what was checked and found; ``measured`` and ``expected`` hold the figures a
    reader needs to recompute the result.
    """

    summary: str
    findings: list[Finding] = field(default_factory=list)
    measured: dict[str, Any] = field(default_factory=dict)
    expected: dict[str, Any] = field(default_factory=dict)
    findings_total: int | None = None

    @property
    def ok(self) -> bool:
        return not self.findings

    def add(self, message: str, *, file: str | None = None, tensor: str | None = None) -> None:
        self.findings_total = (self.findings_total or len(self.findings)) + 1
        if len(self.findings) < MAX_FINDINGS:
            self.findings.append(Finding(message, file, tensor))

    def failure_text(self) -> str:
        shown = "\n".join(f"  - {f}" for f in self.findings)
        total = self.findings_total or len(self.findings)
        more = f"\n  ... and {total - len(self.findings)} more" if total > len(self.findings) else ""
        return f"{self.summary}\n{shown}{more}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary,
            "findings": [f.to_dict() for f in self.findings],
            "findings_total": self.findings_total or len(self.findings),
            "measured": jsonable(self.measured),
            "expected": jsonable(self.expected),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Evidence:
        return cls(
            summary=data["summary"],
            findings=[Finding.from_dict(f) for f in data.get("findings", [])],
            measured=dict(data.get("measured", {})),
            expected=dict(data.get("expected", {})),
            findings_total=data.get("findings_total"),
        )


def combine(statuses: list[Status]) -> Status:
    """A level's status from its checks' statuses.

    Nothing measured is ``not-run``; any error wins over any failure (the result is
    unknown, not known-bad); a skipped check makes the level skipped, never passed.
    """
    if not statuses:
        return Status.NOT_RUN
    for worst in (Status.ERROR, Status.FAILED, Status.NOT_RUN, Status.SKIPPED):
        if worst in statuses:
            return worst
    return Status.PASSED


def jsonable(value: Any) -> Any:
    """Make measured values JSON-safe: no NaN/inf (JSON has none), no tuples, no tensors."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if isinstance(value, Path):
        return str(value)
    item = getattr(value, "item", None)
    if callable(item):
        return jsonable(item())
    return str(value)
