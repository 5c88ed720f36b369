"""What the profile tests share: the seed's published conditions, a profile variant written with one change,
and the error loading it must raise."""

from __future__ import annotations

import shlex
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from qualify.errors import ProfileError
from qualify.profile import load_profile

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
