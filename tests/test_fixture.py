"""The shipped fixture is what the generator makes: same seed, same bytes."""

from __future__ import annotations

import hashlib
from pathlib import Path

from fixtures.generate import generate, source_revision
from qualify.profile import load_profile
from tests.helpers import FIXTURE


def digests(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_regenerating_gives_the_shipped_bytes(tmp_path):
    generate(tmp_path / "again")
    assert digests(tmp_path / "again") == digests(FIXTURE)


def test_another_seed_gives_other_bytes(tmp_path):
    generate(tmp_path / "other", seed=1)
    a, b = digests(tmp_path / "other"), digests(FIXTURE)
    assert a["source/model.safetensors"] != b["source/model.safetensors"]
    assert a["source/config.json"] == b["source/config.json"]


def test_fixture_profile_pins_the_generated_source_revision():
    assert load_profile("fixture").source_revision == source_revision(FIXTURE / "source")
