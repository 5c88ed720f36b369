"""Per-module mutation counts from ``mutmut results --all true`` on stdin (``make mutation`` prints them).

A mutant counts as caught when a test failed (killed) or hung past mutmut's timeout; the
score is caught / (all mutants run). Mutants this run did not try (``not checked``: another
module's, when ``make mutation`` names the gate's only) are left out of every count. With
``--functions`` each module's functions get a row of their own under it. Survivors are
listed with ``mutmut results`` and shown with ``mutmut show NAME``; the README's
reliability section says why each remaining one is harmless.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter, defaultdict

LINE = re.compile(r"^\s*(?P<module>[\w.]+?)\.x(?P<function>.*)__mutmut_\d+: (?P<status>.+)$")
NOT_RUN = "not checked"


def function_name(mangled: str) -> str:
    """``_gate_attestation`` from mutmut's ``x__gate_attestation``; ``Class.method`` from ``xǁClassǁmethod``."""
    if mangled.startswith("ǁ"):
        return ".".join(part for part in mangled.split("ǁ") if part)
    return mangled.removeprefix("_")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--functions", action="store_true", help="a row per function under each module")
    args = parser.parse_args(argv)
    by_module: dict[str, Counter[str]] = defaultdict(Counter)
    by_function: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
    for line in sys.stdin:
        m = LINE.match(line)
        if m and m["status"].strip() != NOT_RUN:
            status = m["status"].strip()
            by_module[m["module"]][status] += 1
            by_function[m["module"]][function_name(m["function"])][status] += 1
    if not by_module:
        print("no mutation results (run `mutmut run` first)", file=sys.stderr)
        return 1
    total: Counter[str] = Counter()
    print(f"{'module':<40} {'mutants':>7} {'killed':>7} {'timeout':>7} {'survived':>8} {'no tests':>8} {'score':>6}")
    for module in sorted(by_module):
        c = by_module[module]
        total.update(c)
        _row(module, c)
        if args.functions:
            for name in sorted(by_function[module]):
                _row(f"  {name}", by_function[module][name])
    _row("all", total)
    return 0


def _row(name: str, c: Counter[str]) -> None:
    n = sum(c.values())
    caught = c["killed"] + c["timeout"]
    print(f"{name:<40} {n:>7} {c['killed']:>7} {c['timeout']:>7} {c['survived']:>8} {c['no tests']:>8} "
          f"{100 * caught / n:>5.1f}%")


if __name__ == "__main__":
    sys.exit(main())
