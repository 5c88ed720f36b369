"""The import rule of the package, stated once: which part may import which.

A part is a subpackage (``qualify/checks/``) or a top-level module (``qualify/errors.py``).
Arrows point down this table: a part imports only the parts listed for it, so the data flow
reads top-down (command line, run, release, serving and runtime, checks, checkpoint and profile,
report, numerics, utilities, errors, core) and a change low in the table cannot reach up.
``tests/test_layout.py`` enforces it on the code; docs/architecture.md quotes it.
"""

from __future__ import annotations

#: What each part may import, besides itself.
MAY_IMPORT: dict[str, frozenset[str]] = {
    # Levels, statuses, verdicts, findings, evidence: everyone's vocabulary, importing nothing of ours.
    "core": frozenset(),
    # One error hierarchy and its exit codes.
    "errors": frozenset(),
    "layers": frozenset(),
    "util": frozenset({"errors"}),
    "schemas": frozenset({"errors"}),
    # Numerics are pure: no I/O, no checkpoint.
    "mxfp8": frozenset({"errors"}),
    "report": frozenset({"core", "errors", "schemas", "util"}),
    "profile": frozenset({"core", "errors", "schemas", "util"}),
    "checkpoint": frozenset({"core", "errors", "schemas", "util", "mxfp8"}),
    "checks": frozenset({"core", "errors", "schemas", "util", "mxfp8", "checkpoint", "profile"}),
    "runtime": frozenset({"core", "errors", "schemas", "util", "profile", "checkpoint"}),
    "serving": frozenset({"core", "errors", "schemas", "util", "profile", "checkpoint", "runtime"}),
    "release": frozenset({"core", "errors", "schemas", "util", "mxfp8", "report", "profile", "checkpoint", "checks"}),
    "run": frozenset({"core", "errors", "schemas", "util", "mxfp8", "report", "profile", "checkpoint", "checks",
                      "runtime", "serving", "release"}),
    "commands": frozenset({"core", "errors", "schemas", "util", "report", "profile", "checkpoint", "runtime",
                           "release", "run"}),
    "cli": frozenset({"errors", "util", "commands"}),
}


def rule_lines() -> list[str]:
    """The rule as text, one part a line, in the table's order (what the docs quote)."""
    return [f"{part}: {', '.join(sorted(allowed)) or '(nothing of ours)'}" for part, allowed in MAY_IMPORT.items()]


if __name__ == "__main__":
    print("\n".join(f"- {line}" for line in rule_lines()))
