"""Per-module mutation counts from ``mutmut results --all true`` on stdin (``make mutation`` prints them).

A mutant counts as caught when a test failed (killed) or hung past mutmut's timeout; the
score is caught / (all mutants). Survivors are listed with ``mutmut results`` and shown
with ``mutmut show NAME``; the README's reliability section says why each remaining one
is harmless.
"""

from __future__ import annotations

import re
import sys
from collections import Counter, defaultdict

LINE = re.compile(r"^\s*(?P<module>[\w.]+?)\.x.*__mutmut_\d+: (?P<status>.+)$")


def main() -> int:
    by_module: dict[str, Counter[str]] = defaultdict(Counter)
    for line in sys.stdin:
        m = LINE.match(line)
        if m:
            by_module[m["module"]][m["status"].strip()] += 1
    if not by_module:
        print("no mutation results (run `mutmut run` first)", file=sys.stderr)
        return 1
    total: Counter[str] = Counter()
    print(f"{'module':<28} {'mutants':>7} {'killed':>7} {'timeout':>7} {'survived':>8} {'no tests':>8} {'score':>6}")
    for module in sorted(by_module):
        c = by_module[module]
        total.update(c)
        _row(module, c)
    _row("all", total)
    return 0


def _row(name: str, c: Counter[str]) -> None:
    n = sum(c.values())
    caught = c["killed"] + c["timeout"]
    print(f"{name:<28} {n:>7} {c['killed']:>7} {c['timeout']:>7} {c['survived']:>8} {c['no tests']:>8} "
          f"{100 * caught / n:>5.1f}%")


if __name__ == "__main__":
    sys.exit(main())
