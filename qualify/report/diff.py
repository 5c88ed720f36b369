"""What changed between two reports, and whether it could change a verdict.

Each difference is a :class:`Change`, marked *relevant* when it bears on what a verdict
is about or says:

- relevant: the verdict, the qualified levels, interruption and harness errors; the
  checkpoint's and source's identity (repo, revision, manifest sha256, the source's proven identity, every file's
  sha256 and size: added, removed, changed); the profile (name, sha256, every
  condition, the runtime image and digest among them); any environment value whose
  key names an image or a digest (the runtime actually used); each level's presence,
  ``required`` flag and status; each check's presence and status.
- informational: measured and expected figures (numbers with their relative change,
  ``[lo, hi]`` intervals as such), finding counts, the harness version and other
  environment values, checkpoint and profile paths. A figure that moved without
  moving a status did not change a verdict; it is shown so a reader can see drift.
- ignored: run id, command, start and finish times, durations: they differ every run.

Ordering is stable: sections in a fixed order, levels in run order (:data:`LEVELS`),
checks, files and keys sorted. :func:`diff_runs` is pure.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from qualify.core import LEVELS
from qualify.report.model import Check, Run
from qualify.util.escape import escape_lines

_MISSING = object()
_MAX_VALUE_CHARS = 100
# Environment keys whose values identify what ran (the runtime image), not how the harness ran.
_IDENTITY_KEY_WORDS = ("image", "digest")


@dataclass(frozen=True)
class Change:
    subject: str  # what changed, e.g. "checkpoint file model.safetensors", "check format.weights status"
    before: str | None  # None: absent in A
    after: str | None  # None: absent in B
    relevant: bool
    note: str = ""  # e.g. the relative change of a number

    def __str__(self) -> str:
        if self.before is None:
            text = f"{self.subject}: added ({self.after})" if self.after else f"{self.subject}: added"
        elif self.after is None:
            text = f"{self.subject}: removed ({self.before})" if self.before else f"{self.subject}: removed"
        else:
            text = f"{self.subject}: {self.before} -> {self.after}"
        return f"{text} ({self.note})" if self.note else text


def diff_runs(a: Run, b: Run) -> list[Change]:
    """Every difference between report ``a`` and report ``b``, in a stable order."""
    out: list[Change] = []
    out += _compare("verdict", str(a.verdict), str(b.verdict), relevant=True)
    out += _compare("qualified levels", _level_list(a.qualified_levels), _level_list(b.qualified_levels),
                    relevant=True)
    out += _compare("interrupted", a.interrupted or "no", b.interrupted or "no", relevant=True)
    out += _set_changes("harness error", a.errors, b.errors)

    out += _compare("profile name", a.profile.get("name"), b.profile.get("name"), relevant=True)
    out += _compare("profile sha256", a.profile.get("sha256"), b.profile.get("sha256"), relevant=True)
    out += _flat_changes("profile condition", a.profile.get("conditions") or {}, b.profile.get("conditions") or {},
                         relevant=lambda key: True)

    for what, x, y in (("checkpoint", a.checkpoint, b.checkpoint), ("source", a.source, b.source)):
        for key in ("repo", "revision", "manifest_sha256"):
            out += _compare(f"{what} {key}", x.get(key), y.get(key), relevant=True)
        out += file_changes(what, x.get("files") or [], y.get("files") or [])
    # Whether the source was proven to be its pin, and how: a release on a trusted folder differs from one on a
    # verified snapshot even when every byte is the same.
    ia, ib = a.source.get("identity") or {}, b.source.get("identity") or {}
    for key in ("status", "method", "repo", "revision"):
        out += _compare(f"source identity {key}", ia.get(key), ib.get(key), relevant=True)

    out += _level_changes(a, b)

    out += _compare("harness version", a.harness_version, b.harness_version, relevant=False)
    for what, x, y in (("checkpoint", a.checkpoint, b.checkpoint), ("source", a.source, b.source)):
        out += _compare(f"{what} path", x.get("path"), y.get("path"), relevant=False)
    out += _compare("profile path", a.profile.get("path"), b.profile.get("path"), relevant=False)
    out += _flat_changes("environment", a.environment, b.environment, relevant=_names_identity)
    return out


def relevant(changes: list[Change]) -> list[Change]:
    return [c for c in changes if c.relevant]


def render(changes: list[Change], label_a: str, label_b: str) -> list[str]:
    """Plain text: the two reports, the relevant changes, then the informational ones, then a count.

    Every line is escaped for a terminal: a file name or message from a report is shown, never obeyed.
    """
    rel = [c for c in changes if c.relevant]
    info = [c for c in changes if not c.relevant]
    lines = [f"A: {label_a}", f"B: {label_b}", ""]
    lines.append("verdict-relevant differences:" if rel else "verdict-relevant differences: none")
    lines += [f"  {c}" for c in rel]
    if info:
        lines += ["", "other differences (informational):"]
        lines += [f"  {c}" for c in info]
    lines += ["", f"{len(rel)} verdict-relevant difference{'s' if len(rel) != 1 else ''}, "
                  f"{len(info)} informational"]
    return escape_lines(lines)


# -- files ------------------------------------------------------------------------------


def file_changes(what: str, a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[Change]:
    """Added, removed and changed files (by path), sorted by path."""
    xa = {f["path"]: f for f in a}
    xb = {f["path"]: f for f in b}
    out = []
    for path in sorted(set(xa) | set(xb)):
        fa, fb = xa.get(path), xb.get(path)
        subject = f"{what} file {path}"
        if fa is None:
            out.append(Change(subject, None, _file_words(fb), relevant=True))
        elif fb is None:
            out.append(Change(subject, _file_words(fa), None, relevant=True))
        elif fa.get("sha256") != fb.get("sha256") or fa.get("size") != fb.get("size"):
            out.append(Change(subject, _file_words(fa), _file_words(fb), relevant=True))
    return out


def _file_words(f: dict[str, Any] | None) -> str:
    if f is None:
        return ""
    return f"sha256 {f.get('sha256') or '(not hashed)'}, {f.get('size')} bytes"


# -- levels and checks ------------------------------------------------------------------


def _level_order(name: str) -> int:
    return LEVELS.index(name) if name in LEVELS else len(LEVELS)


def _level_list(names: list[str]) -> str:
    return ", ".join(sorted(names, key=lambda n: (_level_order(n), n))) or "none"


def _keyed_checks(checks: list[Check]) -> dict[str, Check]:
    # Two checks with one id (a parametrised test) are told apart by their order.
    out: dict[str, Check] = {}
    for c in checks:
        key, n = c.id, 1
        while key in out:
            n += 1
            key = f"{c.id}#{n}"
        out[key] = c
    return out


def _level_changes(a: Run, b: Run) -> list[Change]:
    la = {lvl.name: lvl for lvl in a.levels}
    lb = {lvl.name: lvl for lvl in b.levels}
    out: list[Change] = []
    for name in sorted(set(la) | set(lb), key=lambda n: (_level_order(n), n)):
        x, y = la.get(name), lb.get(name)
        if x is None or y is None:
            present = x if x is not None else y
            assert present is not None  # the name came from one of the two
            words = f"{present.status}, {'required' if present.required else 'not required'}"
            out.append(Change(f"level {name}", None if x is None else words, None if y is None else words,
                              relevant=True))
            continue
        out += _compare(f"level {name} status", str(x.status), str(y.status), relevant=True)
        out += _compare(f"level {name} required", str(x.required).lower(), str(y.required).lower(), relevant=True)
        ca, cb = _keyed_checks(x.checks), _keyed_checks(y.checks)
        for key in sorted(set(ca) | set(cb)):
            c, d = ca.get(key), cb.get(key)
            if c is None or d is None:
                out.append(Change(f"check {key}", None if c is None else str(c.status),
                                  None if d is None else str(d.status), relevant=True))
                continue
            out += _compare(f"check {key} status", str(c.status), str(d.status), relevant=True)
            out += _evidence_changes(key, c, d)
    return out


def _evidence_changes(key: str, c: Check, d: Check) -> list[Change]:
    out: list[Change] = []
    ea, eb = c.evidence, d.evidence
    na = (ea.findings_total or len(ea.findings)) if ea else 0
    nb = (eb.findings_total or len(eb.findings)) if eb else 0
    out += _compare(f"check {key} findings", str(na), str(nb), relevant=False)
    for part in ("measured", "expected"):
        out += _flat_changes(f"{part} {key}", getattr(ea, part, {}) if ea else {},
                             getattr(eb, part, {}) if eb else {}, relevant=lambda k: False)
    return out


# -- values -----------------------------------------------------------------------------


def _compare(subject: str, x: Any, y: Any, *, relevant: bool) -> list[Change]:
    if x == y:
        return []
    return [Change(subject, None if x is None else _fmt(x), None if y is None else _fmt(y), relevant)]


def _set_changes(subject: str, a: list[str], b: list[str]) -> list[Change]:
    out = [Change(subject, e, None, relevant=True) for e in sorted(set(a) - set(b))]
    out += [Change(subject, None, e, relevant=True) for e in sorted(set(b) - set(a))]
    return out


def _flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Dotted keys down to the leaves; lists are leaves (an interval is one value, not two)."""
    if isinstance(value, dict) and value:
        for k in sorted(value, key=str):
            yield from _flatten(value[k], f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, value


def _flat_changes(subject: str, a: Any, b: Any, *, relevant: Any) -> list[Change]:
    fa, fb = dict(_flatten(a)), dict(_flatten(b))
    fa.pop("", None)
    fb.pop("", None)
    out = []
    for key in sorted(set(fa) | set(fb)):
        x, y = fa.get(key, _MISSING), fb.get(key, _MISSING)
        if x == y and type(x) is type(y):
            continue
        name = f"{subject} {key}"
        rel = bool(relevant(key))
        if x is _MISSING:
            out.append(Change(name, None, _fmt(y), rel))
        elif y is _MISSING:
            out.append(Change(name, _fmt(x), None, rel))
        else:
            out.append(Change(name, _fmt(x), _fmt(y), rel, note=relative_change(x, y)))
    return out


def _names_identity(key: str) -> bool:
    return any(word in key.lower() for word in _IDENTITY_KEY_WORDS)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def relative_change(x: Any, y: Any) -> str:
    """"+12.5%" for two finite numbers; "" for anything else (intervals and text are shown as they are)."""
    if not (_is_number(x) and _is_number(y)) or not (math.isfinite(x) and math.isfinite(y)):
        return ""
    if x == 0:
        return "from zero"
    return f"{(y - x) / abs(x) * 100:+.3g}%"


def _fmt(v: Any) -> str:
    if isinstance(v, str):
        text = v
    elif isinstance(v, list) and len(v) == 2 and all(_is_number(e) for e in v):
        text = f"[{_fmt(v[0])}, {_fmt(v[1])}]"
    elif _is_number(v):
        text = repr(v)
    else:
        text = json.dumps(v, sort_keys=True, allow_nan=True)
    return text if len(text) <= _MAX_VALUE_CHARS else text[: _MAX_VALUE_CHARS - 3] + "..."
