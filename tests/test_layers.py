"""qualify.layers: the import rule as the docs quote it (tests/test_layout.py holds the code to it)."""

from __future__ import annotations

from qualify.layers import MAY_IMPORT, rule_lines
from tests.helpers import REPO


def test_the_rule_reads_one_part_a_line_in_table_order() -> None:
    lines = rule_lines()
    assert [line.split(":")[0] for line in lines] == list(MAY_IMPORT)
    assert lines[0] == "core: (nothing of ours)"
    assert "cli: commands, errors, util" in lines


def test_the_docs_quote_the_rule_as_the_code_states_it() -> None:
    text = (REPO / "docs" / "architecture.md").read_text()
    for line in rule_lines():
        assert f"- {line}" in text, f"docs/architecture.md does not quote: {line} (python -m qualify.layers prints it)"
