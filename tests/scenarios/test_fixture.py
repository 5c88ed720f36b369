"""The shipped fixture is what the generator makes: same seed, same bytes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.generate import generate, source_revision
from qualify.profile import load_profile
from tests.helpers import FIXTURE, REPO


def digests(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_regenerating_gives_the_shipped_bytes(tmp_path):
    generate(tmp_path / "again")
    assert digests(tmp_path / "again") == digests(FIXTURE)


@pytest.mark.slow
@pytest.mark.parametrize("threads", ["1", "2"])
def test_any_thread_count_gives_the_shipped_bytes(tmp_path, threads):
    # The manifest's statistics are float64 sums: torch's own reductions would change
    # their last bits with the thread count, so generate as `make fixtures` does, in a
    # process of its own that torch starts with this many threads.
    done = subprocess.run(
        [sys.executable, "-m", "fixtures.generate", "--variant", "tiny", "--out", str(tmp_path / "again")],
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": threads},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert digests(tmp_path / "again") == digests(FIXTURE)


def test_another_seed_gives_other_bytes(tmp_path):
    generate(tmp_path / "other", seed=1)
    a, b = digests(tmp_path / "other"), digests(FIXTURE)
    assert a["source/model.safetensors"] != b["source/model.safetensors"]
    assert a["source/config.json"] == b["source/config.json"]


def test_fixture_profile_pins_the_generated_source_revision():
    assert load_profile("fixture").source_revision == source_revision(FIXTURE / "source")
