"""Tests for qualify.util.identifiers: the one home of the commit, digest and run-id patterns."""

from __future__ import annotations

import re

import pytest

from qualify.schemas import load_schema
from qualify.util.identifiers import COMMIT_RE, SHA256_RE, is_commit, is_image_digest, new_run_id

COMMIT = "f0848a23e67798281e49f39c6ad3b7a2824d1363"


@pytest.mark.parametrize("text, ok", [
    (COMMIT, True), (COMMIT.upper(), False), (COMMIT[:-1], False), (COMMIT + "0", False), ("main", False),
    (f"{COMMIT}\n", False), ("", False), (None, False), (int("1" * 40), False),
])
def test_a_commit_is_exactly_40_lowercase_hex(text: object, ok: bool) -> None:
    assert is_commit(text) is ok


@pytest.mark.parametrize("text, ok", [
    ("sha256:" + "a" * 64, True), ("a" * 64, False), ("sha256:" + "A" * 64, False), ("sha256:" + "a" * 63, False),
    ("sha512:" + "a" * 64, False), (None, False),
])
def test_an_image_digest_is_sha256_and_64_hex(text: object, ok: bool) -> None:
    assert is_image_digest(text) is ok


def test_run_ids_are_path_safe_whatever_the_profile_is_called() -> None:
    run_id = new_run_id("../my profile\n")
    assert re.fullmatch(r"\d{8}T\d{6}Z-[A-Za-z0-9._-]+-[0-9a-f]{6}", run_id)
    assert "/" not in run_id and "\n" not in run_id


def test_the_schemas_spell_the_same_patterns() -> None:
    manifest = load_schema("manifest")
    text = str(manifest)
    assert f"^{COMMIT_RE.pattern}$" in text
    assert f"^{SHA256_RE.pattern}$" in text
    assert f"^{COMMIT_RE.pattern}$" in str(load_schema("profile"))


@pytest.mark.parametrize(("text", "ok"), [
    ("o/n", True), ("local-inference-lab/GLM-5.3-Flash-DFlash2-MXFP8", True), ("o", False), ("o/n/x", False),
    ("../n", False), ("o/..", False), ("o/a..b", False), ("o/a--b", False), ("-o/n", False), ("o/n-", False),
    ("o/n;ls", False), ("o/$(x)", False), ("o/n\n", False), ("https://hub/o/n", False), ("", False), (None, False),
])
def test_a_repo_id_is_owner_slash_name_and_nothing_else(text: object, ok: bool) -> None:
    from qualify.util.identifiers import is_repo_id

    assert is_repo_id(text) is ok
