"""The suites' fixtures, which live in the package (:mod:`qualify.run.fixtures`), typed and checked there.

A suite module holds no logic: its tests are generated from the check catalogue
(:mod:`qualify.run.suite_checks`), each calling its check's function with these fixtures and
recording what it returns.
"""

from qualify.run.fixtures.inputs import *  # noqa: F403
from qualify.run.fixtures.runtime import *  # noqa: F403
from qualify.run.fixtures.serving import *  # noqa: F403
