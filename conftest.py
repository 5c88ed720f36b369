"""Root conftest: the qualification suites' options, and the plugin that turns them into a report.

``qualify run`` runs ``suites/`` in-process with its own plugin and its typed run context.
Running ``pytest suites --checkpoint DIR [--source DIR] [--profile P] [--report-dir D]`` by
hand goes through the same plugin and writes the same report: its options are read here,
once, into the same context (:func:`qualify.run.context.context_from_pytest`).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from qualify.run.suite_plugin import add_options, find_plugin, record  # noqa: F401  (record is a fixture)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    checkpoint = config.getoption("--checkpoint")
    if checkpoint is None or find_plugin(config) is not None:
        return
    from qualify.profile import load_profile
    from qualify.report.model import parse_levels
    from qualify.run.context import context_from_pytest
    from qualify.run.pinning import pinned_copy, record_pinned
    from qualify.run.runner import claim_run_dir, finish_run, new_run
    from qualify.run.suite_plugin import QualifyPlugin

    profile = load_profile(config.getoption("--profile") or "fixture")
    levels = parse_levels(config.getoption("--levels"), profile.required_levels)
    run = new_run(profile, checkpoint, config.getoption("--source"), levels, command=["pytest", *config.args])
    report_root = config.getoption("--report-dir")
    run_dir = claim_run_dir(report_root, run) if report_root else None
    pinned = None
    if Path(checkpoint).is_dir():
        # The checks read a pinned copy, as in a qualify run; it is removed when pytest ends.
        stack = contextlib.ExitStack()
        config.add_cleanup(stack.close)
        pinned = stack.enter_context(pinned_copy(Path(checkpoint)))
        record_pinned(run, pinned)
    context = context_from_pytest(config, profile, run_dir)
    config.pluginmanager.register(QualifyPlugin(run, context, on_finish=lambda r: finish_run(r, run_dir),
                                                pinned=pinned))
