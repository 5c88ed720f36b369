"""Every bad input in the corpus fails the check that must catch it, with its message, through the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fixtures.corpus import CASES
from fixtures.run_corpus import forged_output

pytestmark = pytest.mark.slow  # runs the real CLI in subprocesses

REPO = Path(__file__).resolve().parents[2]
TRACEBACK = "Traceback (most recent call last)"


@pytest.fixture(scope="module")
def summary(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("corpus")
    proc = subprocess.run(
        [sys.executable, "-m", "fixtures.run_corpus", str(work)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_fails_the_right_check(case, summary):
    result = summary[case.name]
    assert TRACEBACK not in result["stdout"] + result["stderr"], result["stderr"][-2000:]
    assert forged_output(result["stdout"], result["stderr"]) is None, result["stdout"][-2000:]
    assert result["exit"] == 1, f"exit {result['exit']}: {result['stderr'][-1000:]}"
    assert result["verdict"] == "not qualified"
    check = result["checks"].get(case.check)
    assert check is not None, f"{case.check} did not run; checks: {sorted(result['checks'])}"
    assert check["status"] == "failed", check
    text = " ".join([check["message"], *check["findings"]])
    for word in case.words:
        assert word in text, f"{word!r} not in {text!r}"


def test_corpus_is_large_and_its_names_unique():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
    assert len(names) >= 40
