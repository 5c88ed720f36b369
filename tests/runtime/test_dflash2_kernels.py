"""vLLM 0.32's own DFlash 2 Triton kernels, run by Triton's interpreter, against the plugin's CPU paths.

``scripts/gpu/dflash2_kernels.py`` runs in the vLLM CPU venv (Triton 3.9) with
``TRITON_INTERPRET=1``, on copies of the very source files vLLM imports (the CPU build swaps
``triton`` for a placeholder there, so the script executes the kernels' definitions bound to
the real module): the candidate walk (``_selector_walk_kernel`` through
``CandidateSampler.sample``) must equal ``candidate_walk`` bit for bit at temperature 0, and
the grouped convolution kernel must equal ``_grouped_conv``'s PyTorch path (bit for bit in
float32, within the stated bound in bfloat16). A walk that is wrong, a kernel that moved and
a kernel whose parameters changed each fail, by name. Without the vLLM venv these tests FAIL
and name the setup script.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from qualify.errors import HarnessError
from qualify.runtime.vllm_cpu import find_vllm_python

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu" / "dflash2_kernels.py"
WALK = REPO / "runtimes" / "vllm-cpu" / "plugin" / "qualify_vllm_cpu" / "candidate_walk.py"
#: Where each file the script reads lives in the vllm package.
SOURCES = {
    "speculator.py": "v1/worker/gpu/spec_decode/dflash2/speculator.py",
    "gumbel.py": "v1/worker/gpu/sample/gumbel.py",
    "qwen3_dflash2.py": "model_executor/models/qwen3_dflash2.py",
}
TIMEOUT_S = 600


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dflash2_kernels_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _python() -> Path:
    try:
        return find_vllm_python()
    except HarnessError as exc:
        pytest.fail(f"{exc} ({exc.hint})", pytrace=False)


def _run(src: Path, *args: str, interpret: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    return subprocess.run([str(_python()), str(SCRIPT), str(src), "--device", "cpu", *args], capture_output=True,
                          text=True, env=env, timeout=TIMEOUT_S, cwd=tempfile.gettempdir())


@pytest.fixture(scope="module")
def vllm_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Copies of the installed vLLM's three source files (the package is located without importing vLLM)."""
    probe = subprocess.run([str(_python()), "-c", "import importlib.util as u; "
                            "print(u.find_spec('vllm').submodule_search_locations[0])"],
                           capture_output=True, text=True, timeout=120, cwd=tempfile.gettempdir(), check=True)
    package = Path(probe.stdout.strip())
    folder = tmp_path_factory.mktemp("vllm-src")
    for name, relative in SOURCES.items():
        shutil.copyfile(package / relative, folder / name)
    return folder


@pytest.fixture(scope="module")
def summary(vllm_src: Path) -> dict[str, Any]:
    done = _run(vllm_src)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def _doctored(vllm_src: Path, tmp_path: Path, filename: str, old: str, new: str) -> Path:
    folder = tmp_path / "src"
    shutil.copytree(vllm_src, folder)
    text = (folder / filename).read_text(encoding="utf-8")
    assert old in text, f"{old!r} not in vLLM's {filename}: the test no longer doctors what it means to"
    (folder / filename).write_text(text.replace(old, new), encoding="utf-8")
    return folder


def test_vllms_walk_kernel_equals_the_cpu_walk_bit_for_bit(summary: dict[str, Any]) -> None:
    script = _script()
    walk = summary["walk"]
    assert summary["triton_interpret"] is True and summary["triton"] == "3.9.0"
    assert [r["case"] for r in walk["results"]] == [c[0] for c in script.WALK_CASES]
    for result in walk["results"]:
        assert result["tokens_equal"] and result["realized_scores_bit_equal"], result
        assert result["invalid_rows_untouched"], result
    assert walk["equal"] == walk["cases"] == len(script.WALK_CASES)
    shapes = {r["case"]: r["shape"] for r in walk["results"]}
    # The fixture's head (top_k 8, block 16: 15 steps) is among the cases.
    assert shapes["fixture-15-steps"] == [64, 15, 8]


def test_vllms_conv_kernel_equals_the_pytorch_path(summary: dict[str, Any]) -> None:
    conv = {r["case"]: r for r in summary["conv"]["results"]}
    assert conv["fixture-block-16"]["shape"] == {"rows": 64, "channels": 256, "group_size": 16, "taps": 2,
                                                 "block_size": 16}
    for name, result in conv.items():
        if result["dtype"] == "float32":
            # The interpreter computes in numpy without fused multiply-adds: the same roundings, the same bits.
            assert result["bit_equal"] and result["max_abs_diff"] == 0.0, (name, result)
        else:
            assert result["within_tolerance"] and result["max_diff_in_ulps"] <= 4, (name, result)
    assert conv["fixture-bf16"]["tolerance"] == "4 bfloat16 ulps of sum(|coefficient * x|)"


def test_a_wrong_cpu_walk_is_caught(vllm_src: Path, tmp_path: Path) -> None:
    # A walk that keeps reading row 0 (never following its previous pick) must not pass.
    text = WALK.read_text(encoding="utf-8")
    assert "        previous = index\n" in text
    broken = tmp_path / "candidate_walk.py"
    broken.write_text(text.replace("        previous = index\n", "        previous = previous\n"), encoding="utf-8")
    done = _run(vllm_src, "--walk", str(broken))
    assert done.returncode == 1, done.stderr[-2000:]
    results = {r["case"]: r for r in json.loads(done.stdout)["walk"]["results"]}
    assert not results["fixture-15-steps"]["tokens_equal"] and results["fixture-15-steps"]["tokens_differing"] > 0
    assert results["one-step"]["ok"]  # one step reads row 0 either way


@pytest.mark.parametrize(("filename", "old", "new", "words"), [
    ("speculator.py", "def _selector_walk_kernel(", "def _selector_walk(",
     "speculator.py: _selector_walk_kernel not found (the vLLM source moved"),
    ("speculator.py", "    USE_FP64: tl.constexpr,\n):\n    row = tl.program_id(0)",
     "    USE_FP64: tl.constexpr,\n    EXTRA: tl.constexpr,\n):\n    row = tl.program_id(0)",
     "_selector_walk_kernel takes (scores_ptr, candidate_ptr"),
    ("gumbel.py", "def gumbel_noised_argmax(", "def gumbel_argmax(", "gumbel.py: gumbel_noised_argmax not found"),
    ("qwen3_dflash2.py", "def _grouped_conv(", "def grouped_conv(", "qwen3_dflash2.py: _grouped_conv not found"),
    ("qwen3_dflash2.py", "    delta_stride_tap,\n    base_stride_tap,", "    delta_stride_tap,\n    base_stride,",
     "_dflash2_grouped_conv_kernel takes ("),
], ids=["walk-kernel-renamed", "walk-kernel-signature", "gumbel-renamed", "conv-path-renamed",
        "conv-kernel-signature"])
def test_a_moved_kernel_is_refused_by_name(vllm_src: Path, tmp_path: Path, filename: str, old: str, new: str,
                                           words: str) -> None:
    done = _run(_doctored(vllm_src, tmp_path, filename, old, new))
    assert done.returncode == 2 and done.stdout == ""
    assert words in done.stderr, done.stderr[-2000:]


def test_a_missing_source_file_is_refused_by_name(vllm_src: Path, tmp_path: Path) -> None:
    folder = tmp_path / "src"
    shutil.copytree(vllm_src, folder)
    (folder / "gumbel.py").unlink()
    done = _run(folder)
    assert done.returncode == 2 and "gumbel.py: cannot be read" in done.stderr


def test_cpu_without_the_interpreter_is_refused(vllm_src: Path) -> None:
    done = _run(vllm_src, interpret=False)
    assert done.returncode == 2 and "set TRITON_INTERPRET=1" in done.stderr
