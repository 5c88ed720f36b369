"""The report model: the one thing the suites, the CLI and the renderers share.

A :class:`Run` holds :class:`LevelResult` objects, each holding :class:`Check` objects,
each carrying its :class:`Evidence`. Statuses of levels and the run's verdict are
*derived* from the checks, never stored by hand, so a report cannot claim more than
its checks show. ``report.json`` is this model serialised and validated against
``schemas/report.schema.json``; reading a report back validates it too.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from qualify.errors import UsageError
from qualify.schemas import validate
from qualify.util.atomic import atomic_write_text
from qualify.util.jsonio import load_json_file
from qualify.util.records import record_dict
from qualify.util.redact import redact_data

REPORT_FORMAT_VERSION = 1

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


def parse_levels(text: str | None, default: tuple[str, ...] | list[str]) -> list[str]:
    """``--levels structure,format`` -> the level names, checked; no text -> ``default``."""
    if not text:
        return list(default)
    levels = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [lv for lv in levels if lv not in LEVELS]
    if unknown:
        raise UsageError(f"unknown level(s) {', '.join(unknown)}; known levels: {', '.join(LEVELS)}")
    return levels


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
        return record_dict(self)

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
            "measured": _jsonable(self.measured),
            "expected": _jsonable(self.expected),
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


@dataclass
class Check:
    id: str
    level: str
    title: str
    status: Status
    message: str = ""
    evidence: Evidence | None = None
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "level": self.level,
            "title": self.title,
            "status": str(self.status),
            "message": self.message,
            "evidence": self.evidence.to_dict() if self.evidence else None,
            "duration_s": round(self.duration_s, 6),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Check:
        ev = data.get("evidence")
        return cls(
            id=data["id"],
            level=data["level"],
            title=data["title"],
            status=Status(data["status"]),
            message=data.get("message", ""),
            evidence=Evidence.from_dict(ev) if ev else None,
            duration_s=float(data.get("duration_s", 0.0)),
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


@dataclass
class LevelResult:
    name: str
    required: bool = True
    checks: list[Check] = field(default_factory=list)
    reason: str = ""  # why a level was not run, when it was not

    @property
    def status(self) -> Status:
        return combine([c.status for c in self.checks])

    @property
    def title(self) -> str:
        return LEVEL_TITLES.get(self.name, self.name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "required": self.required,
            "status": str(self.status),
            "reason": self.reason,
            "checks": [c.to_dict() for c in self.checks],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LevelResult:
        return cls(
            name=data["name"],
            required=bool(data.get("required", True)),
            checks=[Check.from_dict(c) for c in data.get("checks", [])],
            reason=data.get("reason", ""),
        )


@dataclass
class Run:
    """One qualification run: what was asked, on what, under which conditions, and what was found."""

    run_id: str
    harness_version: str
    started_at: str
    command: list[str] = field(default_factory=list)
    finished_at: str | None = None
    profile: dict[str, Any] = field(default_factory=dict)
    checkpoint: dict[str, Any] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    levels: list[LevelResult] = field(default_factory=list)
    interrupted: str | None = None  # e.g. "SIGTERM", "KeyboardInterrupt"
    errors: list[str] = field(default_factory=list)  # harness errors outside any check

    def level(self, name: str) -> LevelResult:
        for lvl in self.levels:
            if lvl.name == name:
                return lvl
        lvl = LevelResult(name, required=False)
        self.levels.append(lvl)
        return lvl

    @property
    def required_levels(self) -> list[LevelResult]:
        return [lvl for lvl in self.levels if lvl.required]

    @property
    def qualified_levels(self) -> list[str]:
        # A level recorded as measured only (not required) never counts as qualified.
        return [lvl.name for lvl in self.levels if lvl.required and lvl.status is Status.PASSED]

    @property
    def verdict(self) -> Verdict:
        required = self.required_levels
        if self.interrupted or self.errors or not required:
            return Verdict.NOT_QUALIFIED
        if all(lvl.status is Status.PASSED for lvl in required):
            return Verdict.QUALIFIED
        return Verdict.NOT_QUALIFIED

    def to_dict(self) -> dict[str, Any]:
        return {
            "report_format_version": REPORT_FORMAT_VERSION,
            "run_id": self.run_id,
            "harness": {"name": "qualify", "version": self.harness_version},
            "command": list(self.command),
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "profile": _jsonable(self.profile),
            "checkpoint": _jsonable(self.checkpoint),
            "source": _jsonable(self.source),
            "environment": _jsonable(self.environment),
            "levels": [lvl.to_dict() for lvl in self.levels],
            "interrupted": self.interrupted,
            "errors": list(self.errors),
            "qualified_levels": self.qualified_levels,
            "verdict": str(self.verdict),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Run:
        validate(data, "report")
        _refuse_repeats(data)
        run = cls(
            run_id=data["run_id"],
            harness_version=data["harness"]["version"],
            started_at=data["started_at"],
            command=list(data.get("command", [])),
            finished_at=data.get("finished_at"),
            profile=dict(data.get("profile", {})),
            checkpoint=dict(data.get("checkpoint", {})),
            source=dict(data.get("source", {})),
            environment=dict(data.get("environment", {})),
            levels=[LevelResult.from_dict(lv) for lv in data.get("levels", [])],
            interrupted=data.get("interrupted"),
            errors=list(data.get("errors", [])),
        )
        # The stored verdict is only a convenience for readers; recomputing it catches
        # a report edited by hand to say more than its checks show.
        if str(run.verdict) != data["verdict"]:
            raise UsageError(
                f"report {data['run_id']}: stored verdict {data['verdict']!r} contradicts its checks "
                f"({run.verdict!s}); the report was altered or is corrupt"
            )
        return run


def _refuse_repeats(data: dict[str, Any]) -> None:
    """A level or check that appears twice: which one counts is a reader's guess, so no reader guesses.

    The verdict would read every copy, a card or gate keyed by name only one; refusing the
    report keeps all of them reading it the same way.
    """
    levels = Counter(lv.get("name") for lv in data.get("levels", []))
    checks = Counter(c.get("id") for lv in data.get("levels", []) for c in lv.get("checks", []))
    repeated = [f"level {n!r} ({k} times)" for n, k in levels.items() if k > 1]
    repeated += [f"check {n!r} ({k} times)" for n, k in checks.items() if k > 1]
    if repeated:
        raise UsageError(f"report {data.get('run_id')}: {', '.join(repeated)} appear more than once; a report holds "
                         "each level and check once: it was altered or is corrupt")


def _valid_unicode(value: Any) -> Any:
    """``value`` with every string made valid Unicode: a file name that is not UTF-8 on disk reaches
    Python as surrogate escapes, which no strict JSON reader accepts back; its bytes are written as
    ``\\xNN`` instead, so the report stays readable by the card, the gate and diff."""
    if isinstance(value, str):
        if not any(0xD800 <= ord(ch) <= 0xDFFF for ch in value):
            return value
        try:
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # a surrogate that stands for no byte
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_valid_unicode(k): _valid_unicode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_valid_unicode(v) for v in value]
    return value


def write_json(run: Run, path: Path) -> None:
    """Validate and atomically write ``report.json``, every string redacted of secrets first.

    Names from the checkpoint are kept exactly (they are escaped only where a person reads them);
    a credential that reached a message, the command line or a URL is masked here, the last net.
    """
    data = _valid_unicode(redact_data(run.to_dict()))
    validate(data, "report")
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, allow_nan=False) + "\n")


def read_json_data(path: Path) -> dict[str, Any]:
    """The raw object of a ``report.json``, read with the strict JSON reader (a duplicate key is an error).

    Raises:
        UsageError: the file is missing, unreadable or not a strict JSON object.
    """
    if not Path(path).exists():
        raise UsageError(f"{path}: no such report")
    try:
        data: dict[str, Any] = load_json_file(Path(path), error=UsageError, require_object=True)
    except UsageError as exc:
        raise UsageError(f"not a readable JSON report: {exc}") from None
    return data


def read_json(path: Path) -> Run:
    """Read a ``report.json`` back: schema-validated, its verdict recomputed from its checks.

    Raises:
        UsageError: the file is not a report this harness can read, or contradicts itself.
    """
    return Run.from_dict(read_json_data(path))


def _jsonable(value: Any) -> Any:
    """Make measured values JSON-safe: no NaN/inf (JSON has none), no tuples, no tensors."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
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
        return _jsonable(item())
    return str(value)
