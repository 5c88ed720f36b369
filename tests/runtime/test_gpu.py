"""Tests for qualify.runtime.gpu: nvidia-smi parsing and the preflight, against recorded outputs
(tests/data/nvidia-smi)."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest

from qualify.errors import GpuQueryError
from qualify.profile import load_profile
from qualify.runtime.gpu import (
    QUERY_ARGS,
    Gpu,
    GpuInventory,
    check_gpus,
    parse_cuda_version,
    parse_query_csv,
    query_gpus,
    required_devices,
)

DATA = Path(__file__).parents[1] / "data" / "nvidia-smi"
RTX = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"


@pytest.fixture(scope="module")
def seed():
    return load_profile("glm53-flash-dflash2-mxfp8-tp4")


def fake_nvidia_smi(tmp_path: Path, csv: str | None, banner: str | None = None, *, status: int = 0) -> Path:
    """An executable that answers like nvidia-smi from recorded files: the query, or the banner without args."""
    tool = tmp_path / "bin" / "nvidia-smi"
    tool.parent.mkdir(parents=True, exist_ok=True)
    query = " ".join(QUERY_ARGS)
    tool.write_text(
        "#!/bin/sh\n"
        f'if [ "$*" = "{query}" ]; then cat {DATA / csv if csv else "/dev/null"}; exit {status}; fi\n'
        f"cat {DATA / banner if banner else '/dev/null'}; exit {status}\n"
    )
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return tool


def test_parse_four_rtx_pro_6000() -> None:
    gpus = parse_query_csv((DATA / "rtx-pro-6000-x4.csv").read_text())
    assert gpus == tuple(Gpu(i, RTX, 97887, "580.82.07") for i in range(4))
    assert parse_cuda_version((DATA / "rtx-pro-6000-x4.banner.txt").read_text()) == "13.0"
    assert parse_cuda_version((DATA / "h200-x1.banner.txt").read_text()) == "12.8"
    assert parse_cuda_version("no banner") is None


@pytest.mark.parametrize("bad", ["0, NVIDIA H200", "zero, NVIDIA H200, 143771, 570.1", "0, NVIDIA H200, lots, 570"])
def test_parse_rejects_other_output(bad: str) -> None:
    with pytest.raises(GpuQueryError, match="line 1"):
        parse_query_csv(bad)


def test_query_four_rtx_pro_6000_passes_the_seed_profile(tmp_path: Path, seed) -> None:
    tool = fake_nvidia_smi(tmp_path, "rtx-pro-6000-x4.csv", "rtx-pro-6000-x4.banner.txt")
    inventory = query_gpus(str(tool))
    assert inventory.error is None
    assert len(inventory.gpus) == 4 and inventory.cuda_version == "13.0"
    ev = check_gpus(inventory, seed)
    assert ev.ok, ev.failure_text()
    assert ev.measured["cuda_version"] == "13.0"
    assert ev.measured["gpus"][0]["driver_version"] == "580.82.07"
    assert ev.expected == {"gpu_count": 4, "gpu_name": RTX, "devices": [0, 1, 2, 3]}


def test_one_h200_fails_with_a_clear_message(tmp_path: Path, seed) -> None:
    inventory = query_gpus(str(fake_nvidia_smi(tmp_path, "h200-x1.csv", "h200-x1.banner.txt")))
    ev = check_gpus(inventory, seed)
    text = ev.failure_text()
    assert not ev.ok
    assert f"needs 4 x {RTX}, this machine has 1 GPU(s) (0: NVIDIA H200)" in text
    assert f"GPU 0 is 'NVIDIA H200', the profile qualifies on '{RTX}'" in text
    for missing in (1, 2, 3):
        assert f"GPU {missing} (named in $.runtime.gpus) does not exist" in text


def test_missing_command(seed) -> None:
    inventory = query_gpus("nvidia-smi-does-not-exist")
    assert inventory.gpus == () and "command not found" in (inventory.error or "")
    ev = check_gpus(inventory, seed)
    assert not ev.ok
    assert "the GPUs could not be listed: nvidia-smi-does-not-exist: command not found" in ev.failure_text()


@pytest.mark.parametrize(("recorded", "status", "words"), [
    ("no-devices.txt", 6, "exited with 6: No devices were found"),
    ("driver-failed.txt", 9, "exited with 9: NVIDIA-SMI has failed because it couldn't communicate"),
])
def test_no_gpu_or_no_driver(tmp_path: Path, seed, recorded: str, status: int, words: str) -> None:
    inventory = query_gpus(str(fake_nvidia_smi(tmp_path, recorded, recorded, status=status)))
    assert words in (inventory.error or "")
    ev = check_gpus(inventory, seed)
    assert not ev.ok and words in ev.failure_text()


def test_another_edition_of_the_same_family_fails(seed) -> None:
    server = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    inventory = GpuInventory(gpus=tuple(Gpu(i, server if i == 2 else RTX, 97887, "580.82.07") for i in range(4)))
    ev = check_gpus(inventory, seed)
    assert [f.message for f in ev.findings] == [f"GPU 2 is '{server}', the profile qualifies on '{RTX}'"]


def test_extra_gpus_are_fine_but_mixed_drivers_are_not(seed) -> None:
    eight = GpuInventory(gpus=tuple(Gpu(i, RTX, 97887, "580.82.07") for i in range(8)))
    assert check_gpus(eight, seed).ok
    mixed = GpuInventory(gpus=tuple(Gpu(i, RTX, 97887, "580.82.07" if i else "575.51.03") for i in range(4)))
    assert "different driver versions: 575.51.03, 580.82.07" in check_gpus(mixed, seed).failure_text()


def test_cpu_profile_needs_no_gpu() -> None:
    fixture = load_profile("fixture")
    assert required_devices(fixture) == ()
    ev = check_gpus(GpuInventory(error="nvidia-smi: command not found"), fixture)
    assert ev.ok and "needs no GPU" in ev.summary


@pytest.mark.gpu
def test_this_machines_gpus_are_listed() -> None:
    if shutil.which("nvidia-smi") is None:
        pytest.skip("no nvidia-smi on this machine: the real-GPU query cannot be exercised here")
    inventory = query_gpus()
    assert inventory.error is None, inventory.error
    assert inventory.gpus and all(g.name and g.memory_total_mib > 0 for g in inventory.gpus)
