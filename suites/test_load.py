"""Level "load": the checks qualify/checks/catalogue.py declares for it (docs/checks.md),
each run by its function in qualify/run/checks/load.py. Nothing is written here by hand."""

import pytest

from qualify.run.suite_checks import suite_checks

pytestmark = pytest.mark.load
globals().update(suite_checks("load"))
