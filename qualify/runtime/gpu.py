"""GPU preflight: the machine has the GPUs the profile qualifies on, before anything is launched.

Loading a 4-GPU tensor-parallel model takes minutes; finding out afterwards that the host
has one H200, or no driver at all, wastes them and -- worse -- could let a run on other
hardware be reported under the profile's conditions. So the harness asks ``nvidia-smi``
first and compares:

- every device the profile launches on (``runtime.gpus``, e.g. ``0,1,2,3``) exists;
- each of them is the profile's ``hardware.gpu_name`` exactly (the card names
  "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"; a Server Edition or a Max-Q is a
  different condition);
- the driver and CUDA versions are recorded as evidence.

Parsing is pure (tested against recorded outputs); :func:`query_gpus` runs the tool.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from qualify.core import Evidence
from qualify.errors import GpuQueryError
from qualify.profile import Profile
from qualify.util.records import record_dict

QUERY_FIELDS = ("index", "name", "memory.total", "driver_version")
QUERY_ARGS: tuple[str, ...] = (
    f"--query-gpu={','.join(QUERY_FIELDS)}",
    "--format=csv,noheader,nounits",
)
# The banner of plain `nvidia-smi`: "| NVIDIA-SMI 580.65.06   Driver Version: 580.65.06   CUDA Version: 13.0 |".
_CUDA_VERSION = re.compile(r"CUDA Version:\s*([0-9]+(?:\.[0-9]+)*)")
_TIMEOUT_S = 30

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_total_mib: int
    driver_version: str

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self)


@dataclass(frozen=True)
class GpuInventory:
    """What the machine reported. ``error`` is set when the GPUs could not be listed at all."""

    gpus: tuple[Gpu, ...] = ()
    cuda_version: str | None = None
    tool: str | None = None  # the nvidia-smi that answered
    error: str | None = None
    raw: str = field(default="", repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"gpus": [g.to_dict() for g in self.gpus], "cuda_version": self.cuda_version,
                "tool": self.tool, "error": self.error}


def parse_query_csv(text: str) -> tuple[Gpu, ...]:
    """Parse ``nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader,nounits``."""
    gpus = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        # GPU names contain no commas; split from both ends anyway so one with a comma still parses.
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < len(QUERY_FIELDS):
            raise GpuQueryError(f"line {lineno}: expected {len(QUERY_FIELDS)} fields, got {line.strip()!r}")
        index, name, memory, driver = parts[0], ", ".join(parts[1:-2]), parts[-2], parts[-1]
        try:
            gpus.append(Gpu(int(index), name, int(float(memory)), driver))
        except ValueError:
            raise GpuQueryError(f"line {lineno}: not index,name,memory,driver: {line.strip()!r}") from None
    return tuple(gpus)


def parse_cuda_version(banner: str) -> str | None:
    """The CUDA version from plain ``nvidia-smi`` output's banner, or None when it shows none."""
    match = _CUDA_VERSION.search(banner)
    return match.group(1) if match else None


def _run(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)


def query_gpus(nvidia_smi: str = "nvidia-smi", runner: Runner = _run) -> GpuInventory:
    """Ask ``nvidia-smi`` for the GPUs and the CUDA version; never raises for a machine without GPUs."""
    tool = shutil.which(nvidia_smi)
    if tool is None:
        return GpuInventory(error=f"{nvidia_smi}: command not found (no NVIDIA driver on this machine?)")
    try:
        listed = runner([tool, *QUERY_ARGS])
    except (OSError, subprocess.TimeoutExpired) as exc:
        return GpuInventory(tool=tool, error=f"{tool} could not be run: {exc}")
    out = (listed.stdout or "").strip()
    if listed.returncode != 0:
        # "No devices were found" (exit 6) and "couldn't communicate with the NVIDIA driver" (exit 9) land here.
        said = out or (listed.stderr or "").strip() or "no output"
        return GpuInventory(tool=tool, error=f"{tool} exited with {listed.returncode}: {said.splitlines()[0]}",
                            raw=out)
    try:
        gpus = parse_query_csv(out)
    except GpuQueryError as exc:
        return GpuInventory(tool=tool, error=f"{tool}: unexpected output: {exc}", raw=out)
    cuda = None
    try:
        banner = runner([tool])
        cuda = parse_cuda_version(banner.stdout or "") if banner.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        cuda = None  # the version is evidence, not a condition: its absence is recorded, not fatal
    return GpuInventory(gpus=gpus, cuda_version=cuda, tool=tool, raw=out)


def required_devices(profile: Profile) -> tuple[int, ...]:
    """The device indices the profile launches on (``runtime.gpus``), empty for a CPU profile."""
    return tuple(int(i) for i in profile.runtime.gpus)


def check_gpus(inventory: GpuInventory, profile: Profile) -> Evidence:
    """The devices the profile launches on exist and are the profile's GPU model."""
    want_count, want_name = profile.hardware.gpu_count, profile.hardware.gpu_name
    devices = required_devices(profile)
    if want_count == 0:
        ev = Evidence("the profile needs no GPU (CPU runtime); nothing to compare")
        ev.measured.update(inventory.to_dict())
        ev.expected.update(gpu_count=0)
        return ev
    ev = Evidence(f"devices {','.join(map(str, devices))} are {want_count} x {want_name}")
    ev.expected.update(gpu_count=want_count, gpu_name=want_name, devices=list(devices))
    ev.measured.update(inventory.to_dict())
    if inventory.error:
        ev.add(f"the GPUs could not be listed: {inventory.error}")
        return ev
    by_index = {g.index: g for g in inventory.gpus}
    if len(inventory.gpus) < want_count:
        found = ", ".join(f"{g.index}: {g.name}" for g in inventory.gpus) or "none"
        ev.add(f"the profile needs {want_count} x {want_name}, this machine has {len(inventory.gpus)} GPU(s) ({found})")
    for index in devices:
        gpu = by_index.get(index)
        if gpu is None:
            ev.add(f"GPU {index} (named in $.runtime.gpus) does not exist on this machine")
        elif gpu.name != want_name:
            ev.add(f"GPU {index} is {gpu.name!r}, the profile qualifies on {want_name!r}")
    drivers = sorted({g.driver_version for g in inventory.gpus if g.index in devices})
    if len(drivers) > 1:
        ev.add(f"the devices report different driver versions: {', '.join(drivers)}")
    return ev
