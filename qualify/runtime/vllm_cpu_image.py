"""Build the real vLLM CPU runtime image ``qualify-vllm-cpu:latest`` locally, never pulling anything.

The image is the stand-in's Debian base (debootstrap, :mod:`qualify.runtime.standin`) with
``runtimes/vllm-cpu/launch.py`` (the launcher: the serving image's environment contract
turned into a vLLM server) and the vLLM CPU plugin (``runtimes/vllm-cpu/plugin``) on top.
vLLM itself is the CPU venv ``scripts/setup-vllm-cpu.sh`` makes (3.5 GB), mounted read-only
at launch with the Python it was made with (:func:`mounts`), so the launch plan names
exactly what the container runs. The image is rebuilt when its base or any file of its
build context changes (their digest is the image's label) and is pinned to the image ID.

    python -m qualify.runtime.vllm_cpu_image     # build what is missing, print timings
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from qualify.errors import HarnessError
from qualify.profile import Profile
from qualify.runtime import standin
from qualify.runtime.plan import HF_CACHE_TARGET, Mount

REPO_ROOT = Path(__file__).resolve().parents[2]
CONTEXT_DIR = REPO_ROOT / "runtimes" / "vllm-cpu"
IMAGE = "qualify-vllm-cpu:latest"
#: Where the launcher runs vLLM from (runtimes/vllm-cpu/launch.py: VENV_PYTHON).
VENV_TARGET = "/opt/vllm-venv"
#: vLLM's cache of what it learnt inspecting a model class (VLLM_CACHE_ROOT/modelinfos in the container).
MODELINFOS_TARGET = "/root/.cache/vllm/modelinfos"
LABEL_SOURCE = "qualify.runtime.vllm-cpu.source-sha256"
_SKIP = ("__pycache__",)
#: The launcher variables this image's launcher does not apply (runtimes/vllm-cpu/launch.py: NOT_ON_CPU; a test
#: holds the two equal): one process, no GPU backends, no CUDA graphs. ``qualify preflight`` reports them
#: unapplied instead of comparing them.
NOT_APPLIED = ("TP", "DCP", "DFLASH_KV_CACHE_DTYPE", "DFLASH_ATTENTION_BACKEND", "ATTENTION_BACKEND", "MOE_BACKEND",
               "LINEAR_BACKEND", "B12X_PCIE_ALLREDUCE", "CUDAGRAPH_MODE", "VLLM_B12X_MOE_FP4_FORCE_A16")
#: Debian packages vLLM's CPU extension links against that the base lacks (vllm/_C: libnuma.so.1),
#: fetched with apt-get from the Debian archive and unpacked into the image (no RUN step, no registry).
PACKAGES = ("libnuma1",)


def context_files() -> list[Path]:
    """Every file of the build context, in a fixed order (bytecode caches left out)."""
    return sorted(p for p in CONTEXT_DIR.rglob("*") if p.is_file() and not any(s in p.parts for s in _SKIP))


def source_digest(base_id: str, debs: list[Path]) -> str:
    """What the image is made of: its base image, every file of its build context and the packages' bytes."""
    h = hashlib.sha256(base_id.encode())
    for path in context_files():
        h.update(str(path.relative_to(CONTEXT_DIR)).encode() + b"\0" + path.read_bytes())
    for deb in debs:
        h.update(deb.name.encode() + b"\0" + deb.read_bytes())
    return h.hexdigest()


def fetch_packages() -> list[Path]:
    """The .deb files of :data:`PACKAGES`, downloaded once into the cache (``apt-get download``)."""
    folder = standin.cache_dir() / "vllm-cpu-debs"
    folder.mkdir(parents=True, exist_ok=True)
    debs = []
    for name in PACKAGES:
        found = sorted(folder.glob(f"{name}_*.deb"))
        if not found:
            done = subprocess.run(["apt-get", "download", name], cwd=folder, capture_output=True, text=True,
                                  check=False)
            found = sorted(folder.glob(f"{name}_*.deb"))
            if done.returncode != 0 or not found:
                raise HarnessError(f"apt-get download {name} failed (exit {done.returncode}): "
                                   f"{(done.stdout + done.stderr).strip()[-500:]}")
        debs.append(found[-1])
    return debs


def _context(tmp: Path, debs: list[Path]) -> Path:
    """The build context: runtimes/vllm-cpu, and the packages unpacked under overlay/."""
    ctx = tmp / "context"
    shutil.copytree(CONTEXT_DIR, ctx, ignore=shutil.ignore_patterns(*_SKIP))
    overlay = ctx / "overlay"
    overlay.mkdir()
    for deb in debs:
        done = subprocess.run(["dpkg-deb", "-x", str(deb), str(overlay)], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise HarnessError(f"dpkg-deb -x {deb} failed: {done.stderr.strip()[-500:]}")
    return ctx


def ensure_image(client: Any, *, rebuild: bool = False) -> standin.BuildReport:
    """``qualify-vllm-cpu:latest``, built if missing or stale, on the stand-in's base. Never pulls."""
    with standin._locked():
        report = standin.BuildReport(IMAGE, "")
        base_tag = standin.ensure_base_image(client, report)
        debs = fetch_packages()
        digest = source_digest(client.images.get(base_tag).id, debs)
        existing = standin._image(client, IMAGE)
        if not rebuild and existing is not None and (existing.labels or {}).get(LABEL_SOURCE) == digest:
            report.image_id = existing.id
            return report
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="qualify-vllm-cpu-") as tmp:
            try:
                image, _ = client.images.build(path=str(_context(Path(tmp), debs)), tag=IMAGE, pull=False, rm=True,
                                               forcerm=True, buildargs={"BASE": base_tag},
                                               labels={LABEL_SOURCE: digest})
            except HarnessError:
                raise
            except Exception as exc:  # docker.errors.BuildError/APIError: name the image, keep the engine's words
                raise HarnessError(f"building {IMAGE} failed: {exc}") from exc
        report.timings_s["build"] = time.perf_counter() - t0
        report.built.append(IMAGE)
        report.image_id = image.id
        return report


def python_home(venv: Path) -> Path:
    """The Python installation a venv was made from (``home`` in its pyvenv.cfg, one level up from ``bin``)."""
    cfg = venv / "pyvenv.cfg"
    try:
        lines = cfg.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise HarnessError(f"the vLLM venv {venv} has no readable pyvenv.cfg: {exc}") from exc
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            return Path(value.strip()).parent
    raise HarnessError(f"{cfg} names no 'home' (the Python the venv was made with)")


def mounts(profile: Profile, venv: Path) -> tuple[Mount, ...]:
    """What a launch of this image mounts besides the draft.

    Read-only: the venv at ``/opt/vllm-venv``, the Python it was made with at its own path
    (the venv's interpreter links there), and the profile's target folder
    (``[local_server].target``) where the Hugging Face cache keeps ``MODEL`` at
    ``MODEL_REVISION``. Writable: vLLM's model-inspection cache (``modelinfos``, kept under
    the harness's cache), which vLLM keys by the hash of the model's module and writes
    atomically; without it every start inspects the target's and the draft's classes in a
    subprocess again (20 s on an idle machine, minutes on busy shared cores).

    Raises:
        HarnessError: the profile names no target folder or revision, or the venv is unusable.
    """
    env = profile.launch_env()
    spec = profile.local_server
    revision = env.get("MODEL_REVISION")
    if spec is None or not revision:
        raise HarnessError(f"profile {profile.name}: the vLLM CPU image needs [local_server].target and "
                           "$.runtime.env.MODEL_REVISION (where the target is mounted)")
    home = python_home(venv)
    target = f"{HF_CACHE_TARGET}/models--{env['MODEL'].replace('/', '--')}/snapshots/{revision}"
    modelinfos = standin.cache_dir() / "vllm-cpu-modelinfos"
    modelinfos.mkdir(parents=True, exist_ok=True)
    return (Mount(str(venv.resolve()), VENV_TARGET), Mount(str(home), str(home)),
            Mount(str(spec.target), target), Mount(str(modelinfos), MODELINFOS_TARGET, read_only=False))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qualify.runtime.vllm_cpu_image",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--rebuild", action="store_true", help="rebuild the image (the base is kept)")
    args = parser.parse_args(argv)
    from qualify.runtime.engine import docker_client

    t0 = time.perf_counter()
    standin.print_build(ensure_image(docker_client(), rebuild=args.rebuild), t0)
    return 0


if __name__ == "__main__":
    standin.run_main(main, "qualify.runtime.vllm_cpu_image")
