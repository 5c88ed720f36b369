"""Level "reproduction": the checks qualify/checks/catalogue.py declares for it (docs/checks.md),
each run by its function in qualify/run/checks/reproduction.py. Nothing is written here by hand."""

import pytest

from qualify.run.suite_checks import suite_checks

pytestmark = pytest.mark.reproduction
globals().update(suite_checks("reproduction"))
