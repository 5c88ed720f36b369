"""qualify.release.policy: the committed release policy, and the refusals of one that cannot be used."""

from __future__ import annotations

from pathlib import Path

import pytest

from qualify.errors import UsageError
from qualify.profile import load_profile
from qualify.release.policy import check_repo_id, load_policy, main


def test_the_shipped_policy_names_the_release_profile_its_levels_and_repository() -> None:
    policy = load_policy()
    assert policy.profile == "glm53-flash-dflash2-mxfp8-tp4"
    assert policy.required_levels[:len(load_profile(policy.profile).required_levels)] == \
        load_profile(policy.profile).required_levels
    assert policy.repository == "local-inference-lab/GLM-5.3-Flash-DFlash2-MXFP8"
    # The seed's runtime image is not known by digest: none is pinned, so the gate refuses until one is.
    assert policy.runtime_images == ()


def test_the_runtime_images_a_release_may_use_are_image_ids(tmp_path: Path) -> None:
    ids = ["sha256:" + "a" * 64, "sha256:" + "b" * 64]
    policy = load_policy(_write(tmp_path, f'profile = "fixture"\nrepository = "o/n"\nruntime_images = {ids!r}\n'
                                .replace("'", '"')))
    assert policy.runtime_images == tuple(ids)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return path


def test_require_adds_levels_to_the_profile_never_replaces_them(tmp_path: Path) -> None:
    policy = load_policy(_write(tmp_path, 'profile = "fixture"\nrequire = ["load", "structure"]\nrepository = "o/n"\n'))
    assert policy.required_levels == (*load_profile("fixture").required_levels, "load")


@pytest.mark.parametrize(("text", "words"), [
    ('profile = "my-lenient"\nrepository = "o/n"\n', "is not a profile this harness ships"),
    ('profile = "fixture"\nrepository = "o/n"\nrequire = ["speed"]\n', "unknown level(s) speed"),
    ('profile = "fixture"\nrepository = "https://evil/o/n"\n', "is not a hub repository id"),
    ('profile = "fixture"\nrepository = "o/n"\nrelease_repo = "x/y"\n', "unknown key(s) release_repo"),
    ('profile = "fixture"\n', "names no repository"),
    ('profile = \n', "not valid TOML"),
    ('profile = "fixture"\nrepository = "o/n"\nruntime_images = "sha256:' + "a" * 64 + '"\n',
     "runtime_images must be a list of image IDs"),
    ('profile = "fixture"\nrepository = "o/n"\nruntime_images = ["vllm/vllm-openai:latest"]\n',
     "runtime_images must be a list of image IDs"),
    ('profile = "fixture"\nrepository = "o/n"\nruntime_images = ["sha256:' + "A" * 64 + '"]\n',
     "runtime_images must be a list of image IDs"),
])
def test_a_policy_that_cannot_be_used_is_refused_naming_why(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")):
        load_policy(_write(tmp_path, text))


@pytest.mark.parametrize("repo", ["o/n", "local-inference-lab/GLM-5.3-Flash-DFlash2-MXFP8"])
def test_a_plain_repo_id_is_accepted(repo: str) -> None:
    assert check_repo_id(repo) == repo


@pytest.mark.parametrize("repo", ["o", "o/n/x", "../n", "o/..", "o/n;ls", "o/$(x)", "-o/n", "o/n\n", ""])
def test_anything_but_owner_name_is_refused(repo: str) -> None:
    with pytest.raises(UsageError, match="is not a hub repository id"):
        check_repo_id(repo)


def test_the_scripts_read_one_field(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["repository"]) == 0
    assert capsys.readouterr().out == "local-inference-lab/GLM-5.3-Flash-DFlash2-MXFP8\n"
    assert main(["nothing"]) == 2
    assert "usage:" in capsys.readouterr().err


def test_the_policy_names_the_hubs_a_release_may_be_proven_by(tmp_path: Path) -> None:
    assert load_policy().hub_endpoints == ("https://huggingface.co",)
    # One spelling (the one runs record): a trailing slash, case and the default port do not make another hub.
    policy = load_policy(_write(tmp_path, 'profile = "fixture"\nrepository = "o/n"\n'
                                          'hub_endpoints = ["https://HuggingFace.co:443/", "https://hub.example.org/"]\n'))
    assert policy.hub_endpoints == ("https://huggingface.co", "https://hub.example.org")
    # Not named: the public hub alone.
    assert load_policy(_write(tmp_path, 'profile = "fixture"\nrepository = "o/n"\n')).hub_endpoints == (
        "https://huggingface.co",)


@pytest.mark.parametrize(("hubs", "words"), [
    ('[]', "hub_endpoints must be a non-empty list of https URLs"),
    ('"https://huggingface.co"', "hub_endpoints must be a non-empty list"),
    ('["http://127.0.0.1:8080"]', "hub_endpoints http://127.0.0.1:8080: not https"),
    ('["huggingface.co"]', "hub_endpoints entry 'huggingface.co' is not an http(s) URL"),
])
def test_a_hub_list_that_cannot_be_used_is_refused_naming_why(tmp_path: Path, hubs: str, words: str) -> None:
    path = _write(tmp_path, f'profile = "fixture"\nrepository = "o/n"\nhub_endpoints = {hubs}\n')
    with pytest.raises(UsageError) as caught:
        load_policy(path)
    assert words in str(caught.value) and str(path) in str(caught.value)
