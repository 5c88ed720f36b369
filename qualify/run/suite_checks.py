"""The suites' tests, built from the check catalogue: one pytest test per declared check.

A suite module (``suites/test_<level>.py``) holds no logic of its own: it marks its level and
takes its tests from here::

    pytestmark = pytest.mark.structure
    globals().update(suite_checks("structure"))

Each check of :mod:`qualify.checks.catalogue` becomes ``test_<name>``, whose signature is the
check's inputs (the suites' fixtures) and ``record``: pytest collects it under the name the
check id is derived from, and sets up exactly those fixtures. When it runs, it imports the
check's function (lazily: collecting the suites loads no check module), calls it with the
inputs and hands what it returns to ``record``:

- :class:`~qualify.report.model.Evidence` is recorded (findings fail the check);
- :class:`~qualify.run.checks.result.Measured` is recorded, then the check is skipped: a figure
  with no bound to meet is a measurement, not a qualification;
- :class:`~qualify.run.checks.result.Skipped` skips the check with its reason.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

import pytest

from qualify.checks.catalogue import CheckSpec, level_specs
from qualify.core import LEVELS, Evidence
from qualify.errors import HarnessError
from qualify.run.checks.result import Measured, Skipped

#: The fixture every suite test takes besides its check's inputs (:func:`qualify.run.suite_plugin.record`).
RECORD = "record"


def check_function(spec: CheckSpec) -> Callable[..., Any]:
    """The function that runs ``spec`` (imported now).

    Raises:
        HarnessError: the catalogue names a module or function that does not exist.
    """
    try:
        module = importlib.import_module(spec.module)
    except ModuleNotFoundError as exc:
        if exc.name != spec.module:
            raise  # the module exists, but something it imports is missing
        raise HarnessError(f"{spec.id}: the catalogue's module {spec.module} does not exist") from None
    function = getattr(module, spec.function, None)
    if not callable(function):
        raise HarnessError(f"{spec.id}: {spec.module} has no function {spec.function}")
    return function


def record_result(spec: CheckSpec, result: object, record: Callable[[Evidence], Evidence]) -> None:
    """Hand a check function's result to ``record``, and skip where the result says so."""
    if isinstance(result, Skipped):
        pytest.skip(result.reason)
    if isinstance(result, Measured):
        record(result.evidence)
        pytest.skip(result.skip_reason(spec.level))
    if not isinstance(result, Evidence):
        raise HarnessError(f"{spec.id}: {spec.runs} returned {type(result).__name__}, not the check's evidence")
    record(result)


def suite_test(spec: CheckSpec) -> Callable[..., None]:
    """The pytest test of one check: ``test_<name>(<inputs>..., record)``."""

    def test(**kwargs: Any) -> None:
        record = kwargs.pop(RECORD)
        record_result(spec, check_function(spec)(**kwargs), record)

    test.__name__ = test.__qualname__ = f"test_{spec.name}"
    test.__doc__ = spec.title
    # pytest reads a test's fixtures from its signature, which honours __signature__.
    params = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in (*spec.inputs, RECORD)]
    test.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return test


def suite_checks(level: str) -> dict[str, Callable[..., None]]:
    """A level's suite tests, by name, in the catalogue's order.

    Raises:
        HarnessError: ``level`` is no level.
    """
    if level not in LEVELS:
        raise HarnessError(f"{level!r} is no level (levels: {', '.join(LEVELS)})")
    return {f"test_{spec.name}": suite_test(spec) for spec in level_specs(level)}
