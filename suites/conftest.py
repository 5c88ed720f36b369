"""The suites' fixtures, which live in the package (:mod:`qualify.run.fixtures`), typed and checked there.

A suite module holds checks only: each calls a library function with these fixtures and
records its evidence.
"""

from qualify.run.fixtures.inputs import *  # noqa: F403
from qualify.run.fixtures.runtime import *  # noqa: F403
from qualify.run.fixtures.serving import *  # noqa: F403
