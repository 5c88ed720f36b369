"""The report model: the one thing the suites, the CLI and the renderers share.

A :class:`Run` holds :class:`LevelResult` objects, each holding :class:`Check` objects,
each carrying its :class:`~qualify.core.Evidence` (levels, statuses and evidence are the
core's, :mod:`qualify.core`). Statuses of levels and the run's verdict are
*derived* from the checks, never stored by hand, so a report cannot claim more than
its checks show. ``report.json`` is this model serialised and validated against
``schemas/report.schema.json``; reading a report back validates it too.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qualify.core import LEVEL_TITLES, LEVELS, Evidence, Status, Verdict, combine, jsonable
from qualify.errors import UsageError
from qualify.schemas import validate
from qualify.util.atomic import atomic_write_text
from qualify.util.jsonio import load_json_file
from qualify.util.redact import redact_data

#: Where a run records its pinned copy of the checkpoint (qualify.run.pinning), "voided" among it.
PINNED_KEY = "pinned"

REPORT_FORMAT_VERSION = 1

def parse_levels(text: str | None, default: tuple[str, ...] | list[str]) -> list[str]:
    """``--levels structure,format`` -> the level names, checked; no text -> ``default``."""
    if not text:
        return list(default)
    levels = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [lv for lv in levels if lv not in LEVELS]
    if unknown:
        raise UsageError(f"unknown level(s) {', '.join(unknown)}; known levels: {', '.join(LEVELS)}")
    return levels


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

    def harness_faults(self) -> list[str]:
        """What kept the run from a verdict: checks that ended in an error, and the run's harness errors (a run
        its checkpoint's own change voided is the checkpoint's doing, not the harness's)."""
        voided = (self.checkpoint.get(PINNED_KEY) or {}).get("voided")
        faults = [f"{c.id}: {c.message}" for lvl in self.levels for c in lvl.checks if c.status is Status.ERROR]
        return faults + [e for e in self.errors if e != voided]

    @property
    def reached_verdict(self) -> bool:
        """False where the harness or the machine kept the run from one: not qualified, yet no check failed and
        a fault is recorded. ``verdict`` still says "not qualified" (nothing may ship on such a run); what a
        person reads says there was no verdict, and ``qualify run`` ends with the harness's exit code."""
        if self.verdict is Verdict.QUALIFIED:
            return True
        failed = any(c.status is Status.FAILED for lvl in self.levels for c in lvl.checks)
        return failed or not self.harness_faults()

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
            "profile": jsonable(self.profile),
            "checkpoint": jsonable(self.checkpoint),
            "source": jsonable(self.source),
            "environment": jsonable(self.environment),
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
