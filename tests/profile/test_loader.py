"""Tests for qualify.profile.loader: the shipped profiles are listed and load, lookup by name or path, and
every bad file is refused with a message naming it and the key."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from qualify.errors import ProfileError
from qualify.profile import PROFILE_FORMAT_VERSION, list_profiles, load_profile
from tests.profile.support import (
    GPU_NAME,
    PAIRED,
    PROFILES_DIR,
    SEED_PROFILE,
    TARGET_REV,
    no_paired,
    profile_error,
    write_variant,
)

# -- shipped profiles ------------------------------------------------------------------


def test_shipped_profiles_are_listed() -> None:
    names = list_profiles()
    assert "fixture" in names
    assert SEED_PROFILE in names
    assert names == sorted(names)
    assert all(not n.endswith(".toml") for n in names)


@pytest.mark.parametrize("name", list_profiles())
def test_every_shipped_profile_loads(name: str) -> None:
    profile = load_profile(name)
    assert profile.name == name
    assert profile.path.name == f"{name}.toml"
    assert profile.data["format_version"] == PROFILE_FORMAT_VERSION == 1
    assert profile.sha256 == hashlib.sha256(profile.path.read_bytes()).hexdigest()
    assert profile.statistics_rtol == 1e-6
    assert profile.statistics_atol == 1e-12
    json.dumps(profile.conditions())  # the report stores it as JSON


def test_schema_levels_match_the_report_model() -> None:
    from qualify.core import LEVELS
    from qualify.schemas import load_schema

    assert tuple(load_schema("profile")["$defs"]["level"]["enum"]) == LEVELS


def test_schema_scale_recipes_match_the_quantizer() -> None:
    from qualify.mxfp8.codec import RECIPES
    from qualify.schemas import load_schema

    enum = load_schema("profile")["properties"]["format"]["properties"]["scale_recipe"]["enum"]
    assert enum == [str(r) for r in RECIPES]



# -- lookup ----------------------------------------------------------------------------


def test_unknown_name_lists_the_shipped_profiles() -> None:
    with pytest.raises(ProfileError) as info:
        load_profile("glm53-nonexistent")
    message = str(info.value)
    assert "'glm53-nonexistent'" in message
    for name in list_profiles():
        assert name in message


def test_load_by_path(tmp_path: Path, fixture_text: str) -> None:
    copy = tmp_path / "my-copy.toml"
    copy.write_text(fixture_text, encoding="utf-8")
    by_path = load_profile(copy)
    by_str = load_profile(str(copy))
    shipped = load_profile("fixture")
    assert by_path.path == by_str.path == copy
    assert by_path.name == "fixture"  # the name comes from the file's contents
    assert by_path.sha256 == by_str.sha256 == shipped.sha256
    assert by_path.data == shipped.data
    assert load_profile(PROFILES_DIR / f"{SEED_PROFILE}.toml").name == SEED_PROFILE


def test_missing_path_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    assert "no such file" in profile_error(missing)


def test_sha256_changes_with_the_bytes(tmp_path: Path, fixture_text: str) -> None:
    path = write_variant(tmp_path, fixture_text, "# No GPU:", "# No GPU at all:")
    assert load_profile(path).sha256 != load_profile("fixture").sha256


# -- bad profiles ----------------------------------------------------------------------


def test_malformed_toml_reports_the_line(tmp_path: Path, fixture_text: str) -> None:
    broken = fixture_text.replace('name = "fixture"', 'name = "fixture', 1)
    line = broken.splitlines().index('name = "fixture') + 1
    path = tmp_path / "broken.toml"
    path.write_text(broken, encoding="utf-8")
    message = profile_error(path)
    assert "malformed TOML" in message
    assert f"line {line}" in message


def test_unknown_top_level_key(tmp_path: Path, fixture_text: str) -> None:
    path = write_variant(tmp_path, fixture_text, 'name = "fixture"', 'name = "fixture"\nnmae = "typo"')
    assert "$: Additional properties are not allowed ('nmae' was unexpected)" in profile_error(path)


def test_unknown_nested_key(tmp_path: Path, fixture_text: str) -> None:
    path = write_variant(tmp_path, fixture_text, "block_size = 32", "block_size = 32\nblock_sise = 32")
    message = profile_error(path)
    assert "$.format: Additional properties are not allowed ('block_sise' was unexpected)" in message


def test_unknown_env_variable(tmp_path: Path, fixture_text: str) -> None:
    path = write_variant(tmp_path, fixture_text, 'CUDAGRAPH_MODE = "NONE"', 'CUDAGRAPH_MDOE = "NONE"')
    message = profile_error(path)
    assert "$.runtime.qualification_overrides" in message
    assert "'CUDAGRAPH_MDOE' was unexpected" in message


def test_wrong_type(tmp_path: Path, fixture_text: str) -> None:
    path = write_variant(tmp_path, fixture_text, 'TP = "4"', "TP = 4")
    assert "$.runtime.env.TP: 4 is not of type 'string'" in profile_error(path)


def test_revision_that_is_a_branch_name(tmp_path: Path, fixture_text: str) -> None:
    path = write_variant(
        tmp_path, fixture_text, '\nrevision = "f0848a23e67798281e49f39c6ad3b7a2824d1363"', '\nrevision = "main"'
    )
    message = profile_error(path)
    assert "$.source.revision: 'main' does not match" in message


def test_optional_revision_still_rejects_a_branch(tmp_path: Path, fixture_text: str) -> None:
    path = write_variant(
        tmp_path, fixture_text, 'DFLASH_MODEL_REVISION = ""', 'DFLASH_MODEL_REVISION = "main"'
    )
    assert "$.runtime.env.DFLASH_MODEL_REVISION: 'main' does not match" in profile_error(path)


def test_unknown_level_name(tmp_path: Path, fixture_text: str) -> None:
    path = write_variant(
        tmp_path,
        fixture_text,
        'required = ["structure", "format", "reproduction"]',
        'required = ["structure", "fromat"]',
    )
    assert "$.levels.required[1]: 'fromat' is not one of" in profile_error(path)



def test_format_version_2(tmp_path: Path, fixture_text: str) -> None:
    path = write_variant(tmp_path, fixture_text, "format_version = 1", "format_version = 2")
    message = profile_error(path)
    assert "$.format_version" in message
    assert "unsupported format version 2" in message


def test_format_version_missing_or_not_an_integer(tmp_path: Path, fixture_text: str) -> None:
    gone = write_variant(tmp_path, fixture_text, "format_version = 1\n", "", name="gone.toml")
    assert "$.format_version: missing" in profile_error(gone)
    boolean = write_variant(
        tmp_path, fixture_text, "format_version = 1", "format_version = true", name="bool.toml"
    )
    assert "unsupported format version True" in profile_error(boolean)


def test_env_contradicting_parallelism(tmp_path: Path, fixture_text: str) -> None:
    path = write_variant(tmp_path, fixture_text, 'TP = "4"', 'TP = "8"')
    assert "$.runtime.env.TP: '8' contradicts $.parallelism.tensor_parallel_size (4)" in profile_error(path)


def test_cpu_profile_may_not_name_a_gpu(tmp_path: Path, fixture_text: str) -> None:
    path = write_variant(tmp_path, fixture_text, "gpu_count = 0", f'gpu_count = 0\ngpu_name = "{GPU_NAME}"')
    assert "$.hardware.gpu_name: set, but $.hardware.gpu_count is 0" in profile_error(path)


def test_gpu_profile_must_name_its_gpu(tmp_path: Path, seed_profile_text: str) -> None:
    path = write_variant(tmp_path, seed_profile_text, f'gpu_name = "{GPU_NAME}"\n', "")
    assert "$.hardware: 'gpu_name' is a required property" in profile_error(path)


def test_gpu_list_must_match_the_gpu_count(tmp_path: Path, seed_profile_text: str) -> None:
    path = write_variant(tmp_path, seed_profile_text, 'gpus = "0,1,2,3"', 'gpus = "0,1"')
    assert "$.runtime.gpus: '0,1' names 2 devices but $.hardware.gpu_count is 4" in profile_error(path)


def test_smoke_level_requires_a_smoke_table(tmp_path: Path, seed_profile_text: str) -> None:
    path = write_variant(tmp_path, seed_profile_text, "[smoke]\n", "[smoke_]\n")
    message = profile_error(path)
    assert "'smoke' is a required property" in message


def test_evidence_pattern_must_be_a_valid_regex(tmp_path: Path, seed_profile_text: str) -> None:
    path = write_variant(
        tmp_path,
        seed_profile_text,
        r"pattern = 'Resolved architecture: DFlash2DraftModel\b'",
        "pattern = '(unclosed'",
    )
    assert "$.evidence[1].pattern: not a valid Python regex" in profile_error(path)


def test_a_size_item_needs_a_gb_group(tmp_path: Path, seed_profile_text: str) -> None:
    path = write_variant(tmp_path, seed_profile_text, "(?P<gb>", "(")
    assert "$.evidence[4].pattern: has checkpoint_size but no (?P<gb>...) group" in profile_error(path)
    fixture = (PROFILES_DIR / "fixture.toml").read_text(encoding="utf-8")
    path = write_variant(tmp_path, fixture, r"(?P<gb>\d+(?:\.\d+)?)\s*Gi?B", r"(\d+(?:\.\d+)?)\s*Gi?B")
    assert "$.evidence[3].pattern: has expected_gb but no (?P<gb>...) group" in profile_error(path)


def test_an_unverified_item_is_never_required(tmp_path: Path, seed_profile_text: str) -> None:
    """A size judged on an unverified line would require it; and only bound items count for a required level."""
    path = write_variant(tmp_path, seed_profile_text, 'unverified = "taken from the model card',
                         'checkpoint_size = true\nunverified = "taken from the model card')
    path.write_text(path.read_text(encoding="utf-8").replace(
        "pattern = '(?i)B12xMxfp8LinearKernel\\b[^\\n]*\\bcontext",
        "pattern = '(?i)(?P<gb>B)12xMxfp8LinearKernel\\b[^\\n]*\\bcontext"), encoding="utf-8")
    assert "$.evidence[3]: is unverified (no source at hand prints its line), so it is never required, but it " \
           "states a size to judge" in profile_error(path)
    smoke = re.sub(r'(?m)^source = \{ file = "vllm/v1/spec_decode/metrics.py".*$',
                   'unverified = "a guess"', seed_profile_text)
    path = tmp_path / "unverified_smoke.toml"
    path.write_text(smoke, encoding="utf-8")
    assert "level 'smoke' is required but no evidence item bound to its source has level 'smoke'" in profile_error(path)


def test_a_size_is_judged_against_one_figure(tmp_path: Path, seed_profile_text: str) -> None:
    path = write_variant(tmp_path, seed_profile_text, "checkpoint_size = true",
                         "checkpoint_size = true\nexpected_gb = 1.2\ntolerance_gb = 0.005")
    assert "$.evidence[4]: has both expected_gb and checkpoint_size" in profile_error(path)


def test_revision_must_be_lowercase(tmp_path: Path, seed_profile_text: str) -> None:
    path = write_variant(
        tmp_path, seed_profile_text, f'revision = "{TARGET_REV}"', f'revision = "{TARGET_REV.upper()}"'
    )
    assert "$.target.revision" in profile_error(path)


def test_unpinned_digest_must_be_empty_or_a_digest(tmp_path: Path, seed_profile_text: str) -> None:
    path = write_variant(tmp_path, seed_profile_text, 'image_digest = ""', 'image_digest = "latest"')
    assert "$.runtime.image_digest: 'latest' does not match" in profile_error(path)



@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        ("margin = 0.02", "margin = 0.02\nconcurrency = [1, 8]",
         "$.paired.concurrency: [8] exceed $.runtime.env.MAX_NUM_SEQS (4)"),
        ("margin = 0.02", "margin = 0", "$.paired.margin"),
        ('format = "mt-bench"', 'format = "alpaca"', "$.paired.prompt_sets[0].format"),
        ("margin = 0.02", "margin = 0.02\nmarginn = 1", "marginn"),
    ],
)
def test_paired_table_errors(tmp_path: Path, fixture_text: str, old: str, new: str, words: str) -> None:
    text = no_paired(fixture_text).replace("[losslessness]", PAIRED.replace(old, new) + "\n[losslessness]")
    path = tmp_path / "p.toml"
    path.write_text(text, encoding="utf-8")
    assert words in profile_error(path)


def test_speedup_needs_paired_and_a_required_level_needs_its_table(tmp_path: Path, fixture_text: str) -> None:
    alone = write_variant(tmp_path, no_paired(fixture_text), "[losslessness]",
                          "[speedup]\nmax_tokens = 32\n\n[losslessness]")
    assert "$.speedup: needs a [paired] table" in profile_error(alone)
    required = write_variant(tmp_path, no_paired(fixture_text), 'required = ["structure"',
                             'required = ["paired", "structure"', "required.toml")
    assert "paired" in profile_error(required)
    both = no_paired(fixture_text).replace("[losslessness]", PAIRED + "\n[speedup]\nmax_tokens = 32\n\n[losslessness]")
    path = tmp_path / "both.toml"
    path.write_text(both, encoding="utf-8")
    speedup = load_profile(path).speedup
    assert speedup is not None and (speedup.max_tokens, speedup.rounds, speedup.min_speedup) == (32, 1, None)


def test_an_evidence_item_must_name_its_source_or_why_it_cannot(tmp_path: Path, fixture_text: str) -> None:
    path = write_variant(tmp_path, fixture_text, 'source = { project = "runtimes/standin/entrypoint.py", '
                         'format = "Detected ModelOpt MXFP8 checkpoint (group size " }\n', "")
    assert "$.evidence[0]" in profile_error(path)


def test_an_evidence_anchor_must_be_a_valid_regex(tmp_path: Path) -> None:
    text = (PROFILES_DIR / "fixture-dflash-cpu.toml").read_text(encoding="utf-8")
    path = write_variant(tmp_path, text, r"after = { pattern = 'Loading drafter model\.\.\.'",
                         "after = { pattern = '('")
    assert "$.evidence[5].after.pattern: not a valid Python regex" in profile_error(path)


def test_some_load_evidence_must_be_the_drafts(tmp_path: Path, seed_profile_text: str) -> None:
    text = re.sub(r'(?m)^draft = ".*"\n', "", seed_profile_text)
    path = tmp_path / "nodraft.toml"
    path.write_text(text, encoding="utf-8")
    assert "no load evidence item states why it is the draft's" in profile_error(path)
