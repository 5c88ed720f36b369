"""Level "acceptance": the checks qualify/checks/catalogue.py declares for it (docs/checks.md),
each run by its function in qualify/run/checks/acceptance.py. Nothing is written here by hand."""

import pytest

from qualify.run.suite_checks import suite_checks

pytestmark = pytest.mark.acceptance
globals().update(suite_checks("acceptance"))
