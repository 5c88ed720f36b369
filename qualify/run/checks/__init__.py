"""The functions that run the checks: one module per level, one function per check of the catalogue.

Each function is named as its check (``structure.paths`` is :func:`structure.paths`), takes
exactly the run inputs :mod:`qualify.checks.catalogue` declares for it, and returns what the
check found (:data:`result.CheckResult`); the generated suites record it.
"""
