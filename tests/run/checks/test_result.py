"""qualify.run.checks.result: a measurement the profile does not qualify says what was measured and why not."""

from __future__ import annotations

from qualify.core import Evidence
from qualify.run.checks.result import Measured


def test_a_measurements_skip_reason_names_the_figure_and_why_it_is_not_qualified() -> None:
    measured = Measured(Evidence("120.0 output tokens/s"), "the profile states no bound")
    assert measured.skip_reason("throughput") == ("throughput measured (120.0 output tokens/s) but not qualified: "
                                                  "the profile states no bound")
