"""Tests for qualify.profile: shipped profiles, the seed's conditions, and rejection of bad files."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shlex
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from qualify.errors import ProfileError, UsageError
from qualify.profile import PROFILE_FORMAT_VERSION, FormatSpec, Profile, list_profiles, load_profile

SEED = Path("/work/shared/seed/000_dc485141736b43eb.txt")
SEED_PROFILE = "glm53-flash-dflash2-mxfp8-tp4"
PROFILES_DIR = Path(str(resources.files("qualify").joinpath("profiles")))

# The seed's Serving command, copied by hand. It is checked against the seed file when
# that exists, so this copy cannot drift; without the file it still pins the values.
SEED_IMAGE = "voipmonitor/vllm:glm53-flash-nvfp4-dflash2-community-20260830-r5"
SEED_ENV: dict[str, str] = {
    "MODEL": "local-inference-lab/GLM-5.3-Flash-NVFP4",
    "SERVED_MODEL_NAME": "GLM-5.3-Flash-NVFP4",
    "PORT": "8000",
    "TP": "4",
    "DCP": "1",
    "MAX_NUM_SEQS": "16",
    "MAX_MODEL_LEN": "262144",
    "MAX_NUM_BATCHED_TOKENS": "4096",
    "SPECULATOR": "dflash",
    "NUM_SPECULATIVE_TOKENS": "7",
    "DFLASH_MODEL": "local-inference-lab/GLM-5.3-Flash-DFlash2-MXFP8",
    "DFLASH_MODEL_REVISION": "",
    "DFLASH_KV_CACHE_DTYPE": "auto",
    "DFLASH_ATTENTION_BACKEND": "FLASH_ATTN",
    "ATTENTION_BACKEND": "B12X",
    "MOE_BACKEND": "b12x",
    "LINEAR_BACKEND": "b12x",
    "B12X_PCIE_ALLREDUCE": "1",
    "CUDAGRAPH_MODE": "FULL",
    "VLLM_B12X_MOE_FP4_FORCE_A16": "0",
}
SEED_DOCKER_FLAGS = {"gpus": "0,1,2,3", "network": "host", "ipc": "host", "shm_size": "32g"}
SOURCE_REV = "dc77ff1c99eeb2df044ee3d4f0094eb033fee410"
TARGET_REV = "520de24eabf507659eaef7c70f14fd584527facc"
GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
CANDIDATE_REV = "0123456789abcdef0123456789abcdef01234567"


def parse_seed_docker_run(text: str) -> dict[str, Any]:
    """The seed's ``docker run`` command: its flags, its -e pairs in order, and the image."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("docker run"))
    block = []
    for line in lines[start:]:
        block.append(line.rstrip().removesuffix("\\"))
        if not line.rstrip().endswith("\\"):
            break
    tokens = shlex.split(" ".join(block))
    assert tokens[:2] == ["docker", "run"]
    flags: dict[str, str] = {}
    env: list[tuple[str, str]] = []
    positional: list[str] = []
    it = iter(tokens[2:])
    for tok in it:
        if tok == "-e":
            key, sep, value = next(it).partition("=")
            assert sep == "=", key
            env.append((key, value))
        elif tok == "--rm":
            flags["rm"] = ""
        elif tok.startswith("--"):
            flags[tok[2:].replace("-", "_")] = next(it)
        else:
            positional.append(tok)
    return {"flags": flags, "env": env, "positional": positional}


@pytest.fixture(scope="module")
def seed_profile() -> Profile:
    return load_profile(SEED_PROFILE)


@pytest.fixture(scope="module")
def fixture_text() -> str:
    return (PROFILES_DIR / "fixture.toml").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def seed_profile_text() -> str:
    return (PROFILES_DIR / f"{SEED_PROFILE}.toml").read_text(encoding="utf-8")


def write_variant(tmp_path: Path, text: str, old: str, new: str, name: str = "variant.toml") -> Path:
    """``text`` with exactly one ``old`` replaced by ``new``, written to a file."""
    assert text.count(old) == 1, f"test setup: {old!r} occurs {text.count(old)} times"
    path = tmp_path / name
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


def profile_error(path: Path) -> str:
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    message = str(info.value)
    assert str(path) in message, "a profile error must name the file"
    return message


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


def test_scale_recipe_when_stated(tmp_path: Path, fixture_text: str) -> None:
    stated = write_variant(
        tmp_path, fixture_text, "block_size = 32", 'block_size = 32\nscale_recipe = "modelopt"'
    )
    assert load_profile(stated).format.scale_recipe == "modelopt"
    wrong = write_variant(tmp_path, fixture_text, "block_size = 32", 'block_size = 32\nscale_recipe = "ceil"')
    assert "$.format.scale_recipe: 'ceil' is not one of" in profile_error(wrong)


def test_throughput_request_timeout(tmp_path: Path, fixture_text: str) -> None:
    spec = load_profile("fixture").throughput
    assert spec is not None and spec.request_timeout_s == 120.0  # unstated: the library's default
    stated = write_variant(tmp_path, fixture_text, "rounds = 1\n", "rounds = 1\nrequest_timeout_s = 15\n")
    spec = load_profile(stated).throughput
    assert spec is not None and spec.request_timeout_s == 15.0
    zero = write_variant(tmp_path, fixture_text, "rounds = 1\n", "rounds = 1\nrequest_timeout_s = 0\n", "zero.toml")
    assert "$.throughput.request_timeout_s" in profile_error(zero)


def test_format_spec_is_the_seed_format(seed_profile: Profile) -> None:
    expected = FormatSpec(
        element_dtype="F8_E4M3",
        scale_dtype="U8",
        block_size=32,
        scale_layout="row-major-unswizzled",
        scale_recipe=None,
        excluded_modules=("lm_head",),
        kv_cache_quant_algo=None,
    )
    assert seed_profile.format == expected
    # The DFlash 2 fixture adds the module vLLM's DFlash 2 class builds unquantized; the card names lm_head only.
    assert load_profile("fixture").format == dataclasses.replace(
        expected, excluded_modules=("lm_head", "candidate_selector.hidden_projection"))
    fmt = seed_profile.data["format"]
    assert fmt["element_torch_dtype"] == "float8_e4m3fn"
    assert fmt["scale_torch_dtype"] == "uint8"
    assert fmt["scale_encoding"] == "biased-e8m0"
    assert fmt["block_axis"] == "input"
    with pytest.raises(dataclasses.FrozenInstanceError):
        seed_profile.format.block_size = 16  # type: ignore[misc]


def test_seed_profile_hard_values(seed_profile: Profile) -> None:
    d = seed_profile.data
    assert d["checkpoint"] == {"repo": "local-inference-lab/GLM-5.3-Flash-DFlash2-MXFP8", "revision": ""}
    assert d["source"] == {"repo": "incoai/GLM-5.3-Flash-DFlash2", "revision": SOURCE_REV}
    assert d["target"] == {"repo": "local-inference-lab/GLM-5.3-Flash-NVFP4", "revision": TARGET_REV}
    runtime = d["runtime"]
    assert runtime["image"] == SEED_IMAGE
    assert runtime["image_digest"] == ""
    assert {k: runtime[k] for k in SEED_DOCKER_FLAGS} == SEED_DOCKER_FLAGS
    assert runtime["endpoint"] == "http://127.0.0.1:8000/v1"
    assert runtime["served_model_name"] == "GLM-5.3-Flash-NVFP4"
    assert list(runtime["env"].items()) == list(SEED_ENV.items())  # same pairs, same order
    assert runtime["qualification_overrides"] == {"CUDAGRAPH_MODE": "NONE"}
    assert d["hardware"] == {"gpu_count": 4, "gpu_name": GPU_NAME}
    assert seed_profile.tensor_parallel_size == 4
    assert d["parallelism"] == {"tensor_parallel_size": 4, "decode_context_parallel_size": 1}
    assert d["dflash"] == {"proposal_length": 7, "kv_cache": "auto", "kv_cache_dtype": "BF16"}
    assert d["smoke"] == {"max_tokens": 32, "temperature": 0}
    assert seed_profile.required_levels == ("structure", "format", "reproduction", "load", "smoke", "paired")
    assert seed_profile.measured_levels == ("speedup",)
    paired = seed_profile.paired
    assert paired is not None and (paired.margin, paired.concurrency, paired.full_block) == (0.02, (1, 16), True)
    assert d["levels"]["not_qualified"] == ["runtime throughput", "CUDA graph performance"]

    assert seed_profile.conditions() == {
        "source": {"repo": "incoai/GLM-5.3-Flash-DFlash2", "revision": "dc77ff1c99eeb2df044ee3d4f0094eb033fee410"},
        "format": {
            "element_dtype": "float8_e4m3fn",
            "scale_dtype": "uint8",
            "block_size": 32,
            "scale_layout": "row-major-unswizzled",
            "scale_recipe": None,
            "excluded_modules": ["lm_head"],
            "kv_cache_quant_algo": None,
        },
        "target": {"repo": "local-inference-lab/GLM-5.3-Flash-NVFP4", "revision": TARGET_REV},
        "runtime": {"image": SEED_IMAGE, "digest": None},
        "hardware": {"count": 4, "name": GPU_NAME},
        "parallelism": {"tensor_parallel_size": 4, "decode_context_parallel_size": 1},
        "backends": {
            "target_attention": "B12X",
            "target_moe": "B12X",
            "target_linear": "B12X",
            "target_all_reduce": "B12X",
            "dflash_attention": "FlashAttention 2",
            "dflash_linear": "B12X MXFP8",
        },
        "proposal_length": 7,
        "draft_kv_cache": "auto (BF16)",
        "cuda_graph_mode": "NONE",
        "serving_cuda_graph_mode": "FULL",
        "not_qualified": ["runtime throughput", "CUDA graph performance"],
        "stand_in_levels": [],
    }


def test_seed_profile_evidence(seed_profile: Profile) -> None:
    evidence = {e["name"]: e for e in seed_profile.data["evidence"]}
    assert set(evidence) == {
        "modelopt_mxfp8_detected",
        "b12x_mxfp8_linear_kernel_draft_gemms",
        "b12x_mxfp8_linear_kernel_context_kv_proj",
        "draft_weights_loaded",
        "speculative_request_completed",
    }
    weights = evidence["draft_weights_loaded"]
    assert weights["expected_gb"] == 1.20
    assert 0 < weights["tolerance_gb"] <= 0.005
    assert evidence["speculative_request_completed"]["level"] == "smoke"

    # Plausible log lines each pattern must find, and one line none may find. The exact
    # wording is not in the seed; these guard against patterns that match nothing or everything.
    samples = {
        "modelopt_mxfp8_detected": "INFO [modelopt.py:123] Detected ModelOpt MXFP8 checkpoint.",
        "b12x_mxfp8_linear_kernel_draft_gemms": (
            "INFO [mxfp8.py:88] Using B12xMxfp8LinearKernel for draft GEMMs"
        ),
        "b12x_mxfp8_linear_kernel_context_kv_proj": (
            "INFO [dflash.py:51] Using B12xMxfp8LinearKernel for fused DFlash context_kv_proj"
        ),
        "draft_weights_loaded": "INFO [gpu_model_runner.py:1700] Loading drafter model weights took 1.20 GB",
        "speculative_request_completed": (
            "INFO [metrics.py:90] SpecDecoding metrics: Mean acceptance length: 3.10, "
            "Accepted: 22 tokens, Drafted: 49 tokens"
        ),
    }
    unrelated = "INFO [api_server.py:1] Starting vLLM API server on http://127.0.0.1:8000"
    for name, line in samples.items():
        pattern = re.compile(evidence[name]["pattern"])
        assert pattern.search(line), name
        assert not pattern.search(unrelated), name
    match = re.search(weights["pattern"], samples["draft_weights_loaded"])
    assert match is not None
    assert abs(float(match.group("gb")) - weights["expected_gb"]) <= weights["tolerance_gb"]


@pytest.mark.skipif(not SEED.exists(), reason="seed model card not present; hard values are checked above")
def test_seed_profile_equals_the_seed_text(seed_profile: Profile) -> None:
    text = SEED.read_text(encoding="utf-8")
    docker = parse_seed_docker_run(text)
    runtime = seed_profile.data["runtime"]

    assert docker["positional"] == [runtime["image"]] == [SEED_IMAGE]
    assert docker["env"] == list(runtime["env"].items())
    assert dict(docker["env"]) == SEED_ENV
    flags = docker["flags"]
    assert flags.pop("gpus") == f'"device={runtime["gpus"]}"'
    assert flags.pop("rm") == ""
    assert flags == {k: runtime[k] for k in ("network", "ipc", "shm_size")}

    # The immutable revisions the seed names are exactly the profile's source and target.
    assert set(re.findall(r"(?<![0-9a-f])[0-9a-f]{40}(?![0-9a-f])", text)) == {
        seed_profile.data["source"]["revision"],
        seed_profile.data["target"]["revision"],
    }
    assert f"{seed_profile.data['source']['repo']}\nat immutable revision {SOURCE_REV}" in text
    assert f"{seed_profile.data['target']['repo']}revision{TARGET_REV}" in text
    assert f"available at {runtime['endpoint']}." in text
    assert f"four {seed_profile.data['hardware']['gpu_name']} GPUs" in text
    assert "CUDA graph mode:\nNONEfor the load-and-inference qualification" in text
    assert "DFlash proposal length: seven tokens" in text
    assert "auto(BF16)" in text
    assert "loaded 1.20 GB of\ndraft weights" in text
    assert "completed a 32-token speculative request" in text
    assert "Runtime\nthroughput and CUDA graph performance are not qualified" in text


# -- launch_env ------------------------------------------------------------------------


def test_launch_env_applies_the_qualification_override(seed_profile: Profile) -> None:
    env = seed_profile.launch_env()
    assert env["CUDAGRAPH_MODE"] == "NONE"
    assert {k: v for k, v in env.items() if k != "CUDAGRAPH_MODE"} == {
        k: v for k, v in SEED_ENV.items() if k != "CUDAGRAPH_MODE"
    }
    env["TP"] = "1"  # a copy: changing it must not change the profile
    assert seed_profile.data["runtime"]["env"]["CUDAGRAPH_MODE"] == "FULL"
    assert seed_profile.launch_env()["TP"] == "4"
    assert load_profile("fixture").launch_env()["CUDAGRAPH_MODE"] == "NONE"


def test_launch_env_pins_the_draft_revision(seed_profile: Profile) -> None:
    assert seed_profile.launch_env(draft_revision=CANDIDATE_REV)["DFLASH_MODEL_REVISION"] == CANDIDATE_REV
    for bad in ("main", "", CANDIDATE_REV.upper(), CANDIDATE_REV[:-1]):
        with pytest.raises(UsageError, match="40 lowercase hex"):
            seed_profile.launch_env(draft_revision=bad)


def test_launch_env_uses_a_pinned_checkpoint_revision(tmp_path: Path, fixture_text: str) -> None:
    unpinned = ("# folder's content revision (qualify.checkpoint.checksums.folder_revision), which changes with any"
                " byte.\n"
                "revision = \"\"")
    path = write_variant(tmp_path, fixture_text, unpinned, f'revision = "{CANDIDATE_REV}"')
    profile = load_profile(path)
    assert profile.launch_env()["DFLASH_MODEL_REVISION"] == CANDIDATE_REV
    with pytest.raises(UsageError, match="contradicts"):
        profile.launch_env(draft_revision="f" * 40)


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


def test_the_fixture_profile_requires_only_what_no_stand_in_shows() -> None:
    fixture = load_profile("fixture")
    assert fixture.required_levels == ("structure", "format", "reproduction")
    assert fixture.stand_in_levels == ("load", "smoke", "acceptance", "paired", "losslessness", "throughput", "speedup")
    assert set(fixture.measured_levels) == set(fixture.stand_in_levels)
    assert fixture.conditions()["stand_in_levels"] == list(fixture.stand_in_levels)
    # The real runtimes: the pinned image, and the vLLM CPU image serving the checkpoint itself.
    assert load_profile("glm53-flash-dflash2-mxfp8-tp4").stand_in_levels == ()
    assert load_profile("fixture-dflash-cpu").stand_in_levels == ()


@pytest.mark.parametrize(("levels", "named"), [
    ('required = ["structure", "format", "reproduction", "load"]\nmeasured = ["smoke"]',
     "load runs on the stand-in image"),
    ('required = ["structure", "format", "reproduction", "paired"]\nmeasured = ["load"]',
     "paired runs on [local_server]'s draft, which is not the checkpoint"),
])
def test_a_level_run_on_a_stand_in_cannot_be_required(tmp_path: Path, fixture_text: str, levels: str,
                                                       named: str) -> None:
    block = ('required = ["structure", "format", "reproduction"]\nmeasured = ["load", "smoke", "acceptance", '
             '"paired", "losslessness", "throughput", "speedup"]')
    assert block in fixture_text
    message = profile_error(write_variant(tmp_path, fixture_text, block, levels))
    assert f"$.levels.required: {named}" in message and "cannot qualify; list it under measured" in message


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
        r"pattern = '(?i)\bdetected\s+modelopt\s+mxfp8\b'",
        "pattern = '(unclosed'",
    )
    assert "$.evidence[0].pattern: not a valid Python regex" in profile_error(path)


def test_expected_gb_needs_a_gb_group(tmp_path: Path, seed_profile_text: str) -> None:
    path = write_variant(tmp_path, seed_profile_text, "(?P<gb>", "(")
    assert "$.evidence[3].pattern: has expected_gb but no (?P<gb>...) group" in profile_error(path)


def test_revision_must_be_lowercase(tmp_path: Path, seed_profile_text: str) -> None:
    path = write_variant(
        tmp_path, seed_profile_text, f'revision = "{TARGET_REV}"', f'revision = "{TARGET_REV.upper()}"'
    )
    assert "$.target.revision" in profile_error(path)


def test_unpinned_digest_must_be_empty_or_a_digest(tmp_path: Path, seed_profile_text: str) -> None:
    path = write_variant(tmp_path, seed_profile_text, 'image_digest = ""', 'image_digest = "latest"')
    assert "$.runtime.image_digest: 'latest' does not match" in profile_error(path)


def no_paired(text: str) -> str:
    """The fixture profile without its [paired] and [speedup] tables and levels (the tests below write their own)."""
    text = text[:text.index("[paired]")] + text[text.index("[losslessness]"):]
    return text.replace('"acceptance", "paired", "losslessness"', '"acceptance", "losslessness"').replace(
        'measured = ["throughput", "speedup"]', 'measured = ["throughput"]')


PAIRED = """
[paired]
prompt_sets = [{ path = "sets/question.jsonl", format = "mt-bench" },
               { path = "p.json", format = "qualify", limit = 5 }]
max_tokens = 64
temperature = 0.0
margin = 0.02
"""


def test_paired_table(tmp_path: Path, fixture_text: str) -> None:
    path = write_variant(tmp_path, no_paired(fixture_text), "[losslessness]", PAIRED + "\n[losslessness]")
    spec = load_profile(path).paired
    assert spec is not None
    assert spec.prompt_sets[0].path == (tmp_path / "sets" / "question.jsonl").resolve()
    assert [(s.format, s.limit) for s in spec.prompt_sets] == [("mt-bench", None), ("qualify", 5)]
    # Unstated: batch 1 and the runtime's MAX_NUM_SEQS; the interval's defaults; no full-block rule.
    assert spec.concurrency == (1, 4)
    assert (spec.confidence, spec.bootstrap_resamples, spec.bootstrap_seed, spec.full_block) == (0.95, 2000, 0, False)
    assert spec.margin == 0.02 and spec.source_endpoint is None


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
