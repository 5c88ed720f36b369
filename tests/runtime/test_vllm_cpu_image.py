"""The real vLLM CPU runtime's image pieces that need no engine: its launcher's refusals, the venv's Python."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from qualify.errors import HarnessError
from qualify.runtime import vllm_cpu_image

LAUNCHER = vllm_cpu_image.CONTEXT_DIR / "launch.py"
CONTRACT = {"MODEL": "org/target", "SERVED_MODEL_NAME": "t", "PORT": "18391", "SPECULATOR": "dflash",
            "NUM_SPECULATIVE_TOKENS": "7", "DFLASH_MODEL": "org/draft"}


def _launch(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in CONTRACT and not k.startswith(("DFLASH", "MODEL"))}
    return subprocess.run([sys.executable, str(LAUNCHER)], capture_output=True, text=True, timeout=60,
                          env={**clean, "HF_HUB_CACHE": str(tmp_path / "hub"), **env})


def test_launcher_refuses_a_missing_contract_variable(tmp_path: Path) -> None:
    done = _launch(tmp_path, **{k: v for k, v in CONTRACT.items() if k != "DFLASH_MODEL"})
    assert done.returncode == 1 and "error: missing DFLASH_MODEL" in done.stdout


def test_launcher_never_downloads_a_draft_it_does_not_find(tmp_path: Path) -> None:
    target = tmp_path / "hub" / "models--org--target" / "snapshots" / ("a" * 40)
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    done = _launch(tmp_path, **CONTRACT, MODEL_REVISION="a" * 40, DFLASH_MODEL_REVISION="b" * 40)
    assert done.returncode == 1
    assert f"DFLASH_MODEL org/draft at revision {'b' * 40} is not in" in done.stdout
    assert "nothing is downloaded" in done.stdout


def test_launcher_asks_for_a_revision_when_several_snapshots_exist(tmp_path: Path) -> None:
    for rev in ("a" * 40, "c" * 40):
        folder = tmp_path / "hub" / "models--org--target" / "snapshots" / rev
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
    done = _launch(tmp_path, **CONTRACT)
    assert done.returncode == 1 and "no revision given and 2 snapshots" in done.stdout


def test_python_home_is_read_from_the_venv(tmp_path: Path) -> None:
    (tmp_path / "pyvenv.cfg").write_text("home = /opt/python/3.11.7/bin\nversion = 3.11.7\n")
    assert vllm_cpu_image.python_home(tmp_path) == Path("/opt/python/3.11.7")
    (tmp_path / "pyvenv.cfg").write_text("version = 3.11.7\n")
    with pytest.raises(HarnessError, match="names no 'home'"):
        vllm_cpu_image.python_home(tmp_path)
    with pytest.raises(HarnessError, match=r"no readable pyvenv\.cfg"):
        vllm_cpu_image.python_home(tmp_path / "nowhere")


def test_the_image_digest_covers_the_launcher_the_plugin_and_the_packages(tmp_path: Path) -> None:
    files = {p.relative_to(vllm_cpu_image.CONTEXT_DIR).as_posix() for p in vllm_cpu_image.context_files()}
    assert {"Dockerfile", "launch.py", "plugin/qualify_vllm_cpu/__init__.py"} <= files
    assert not any("__pycache__" in f for f in files)
    deb = tmp_path / "libnuma1_1.deb"
    deb.write_bytes(b"one")
    before = vllm_cpu_image.source_digest("sha256:base", [deb])
    deb.write_bytes(b"two")
    assert vllm_cpu_image.source_digest("sha256:base", [deb]) != before
    assert vllm_cpu_image.source_digest("sha256:other", [deb]) != vllm_cpu_image.source_digest("sha256:base", [deb])


def _snapshot(tmp_path: Path, repo: str, revision: str) -> None:
    folder = tmp_path / "hub" / f"models--{repo.replace('/', '--')}" / "snapshots" / revision
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")


def _argv(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The vLLM command line the launcher printed before handing over (no vLLM venv here: the exec fails)."""
    line = next(x for x in done.stdout.splitlines() if x.startswith("qualify-vllm-cpu launcher: $ "))
    return line.removeprefix("qualify-vllm-cpu launcher: $ ").split(" ")


def test_launcher_serves_the_target_alone_without_a_draft(tmp_path: Path) -> None:
    _snapshot(tmp_path, "org/target", "a" * 40)
    env = {k: v for k, v in CONTRACT.items() if k not in ("DFLASH_MODEL", "NUM_SPECULATIVE_TOKENS")}
    env.update(SPECULATOR="none", MODEL_REVISION="a" * 40, PER_REQUEST_SPEC_DECODE_METRICS="summary")
    done = _launch(tmp_path, **env)
    assert "no speculator (SPECULATOR=none)" in done.stdout
    argv = _argv(done)
    assert "--speculative-config" not in argv and "--per-request-spec-decode-metrics" not in argv
    assert argv[argv.index("--model") + 1].endswith("snapshots/" + "a" * 40)


def test_launcher_passes_the_per_request_metrics_flag_to_a_speculating_server(tmp_path: Path) -> None:
    _snapshot(tmp_path, "org/target", "a" * 40)
    _snapshot(tmp_path, "org/draft", "b" * 40)
    base = {**CONTRACT, "MODEL_REVISION": "a" * 40, "DFLASH_MODEL_REVISION": "b" * 40}
    argv = _argv(_launch(tmp_path, **base, PER_REQUEST_SPEC_DECODE_METRICS="summary"))
    assert argv[argv.index("--per-request-spec-decode-metrics") + 1] == "summary"
    assert '"method":' in " ".join(argv) and argv.count("--speculative-config") == 1
    assert "--per-request-spec-decode-metrics" not in _argv(_launch(tmp_path, **base))


def test_the_image_mounts_vllm_read_only_and_only_its_model_inspection_cache_writable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from qualify.profile import load_profile

    monkeypatch.setenv("QUALIFY_CACHE", str(tmp_path / "cache"))
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / "pyvenv.cfg").write_text("home = /opt/python/3.11.7/bin\n")
    mounts = vllm_cpu_image.mounts(load_profile("fixture-dflash-cpu"), venv)
    writable = [m for m in mounts if not m.read_only]
    assert [(m.source, m.target) for m in writable] == [
        (str(tmp_path / "cache" / "vllm-cpu-modelinfos"), vllm_cpu_image.MODELINFOS_TARGET)]
    assert Path(writable[0].source).is_dir()  # docker binds only a folder that exists
    assert {m.target for m in mounts if m.read_only} >= {vllm_cpu_image.VENV_TARGET, "/opt/python/3.11.7"}
