"""Build the local stand-in runtime image ``qualify-standin:latest``, never pulling anything.

The fixture profile's runtime is this image: Debian bookworm (minbase, plus its own
python3) made with ``debootstrap`` from the Debian archive, imported as
``qualify-standin-base``, with ``runtimes/standin/entrypoint.py`` on top. No registry is
involved at any step, so the harness's "never pull" rule holds for its own tests too.

The expensive step (debootstrap, minutes) is cached as a tarball under
``$QUALIFY_CACHE`` (default ``~/.cache/qualify``); the images are rebuilt only when the
tarball, the Dockerfile or the entrypoint change (their digests are the image's labels).

    python -m qualify.runtime.standin            # build what is missing, print timings
    python -m qualify.runtime.standin --rebuild  # rebuild the images (the tarball is kept)
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qualify.errors import HarnessError

REPO_ROOT = Path(__file__).resolve().parents[2]
CONTEXT_DIR = REPO_ROOT / "runtimes" / "standin"
IMAGE = "qualify-standin:latest"
BASE_REPOSITORY = "qualify-standin-base"
SUITE = "bookworm"
VARIANT = "minbase"
INCLUDE = ("python3",)
# Bump when the rootfs recipe (suite, packages, pruning) changes: it names the cached tarball.
ROOTFS_RECIPE = 1
# Dropped from the rootfs: package lists and caches, docs, manuals, translations (~140 MB, none used).
_PRUNE = ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/locale",
          "usr/share/info")
LABEL_ROOTFS = "qualify.runtime.standin.rootfs-sha256"
LABEL_SOURCE = "qualify.runtime.standin.source-sha256"


@dataclass
class BuildReport:
    image: str
    image_id: str
    timings_s: dict[str, float] = field(default_factory=dict)
    built: list[str] = field(default_factory=list)  # what had to be made this time


def cache_dir() -> Path:
    return Path(os.environ.get("QUALIFY_CACHE") or Path.home() / ".cache" / "qualify")


def recipe_key() -> str:
    text = f"{SUITE}|{VARIANT}|{','.join(INCLUDE)}|{','.join(_PRUNE)}|{ROOTFS_RECIPE}"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def rootfs_tarball() -> Path:
    return cache_dir() / f"standin-rootfs-{SUITE}-{VARIANT}-{recipe_key()}.tar.gz"


def source_digest(base_id: str) -> str:
    """What the stand-in image is made of: its base image and every file of its build context."""
    h = hashlib.sha256(base_id.encode())
    for path in sorted(CONTEXT_DIR.iterdir()):
        if path.is_file():
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    # Two test sessions building at once would debootstrap twice and race on the tags.
    cache_dir().mkdir(parents=True, exist_ok=True)
    with (cache_dir() / "standin.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def make_rootfs_tarball(dest: Path) -> None:
    """debootstrap the rootfs and pack it as ``dest`` (atomically: a half-built tarball is never left)."""
    tool = shutil.which("debootstrap")
    if tool is None:
        raise HarnessError("debootstrap is not installed", hint="run scripts/install-docker.sh")
    mirror = os.environ.get("QUALIFY_DEBIAN_MIRROR", "http://deb.debian.org/debian")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix="rootfs-") as tmp:
        root = Path(tmp) / "rootfs"
        cmd = [tool, f"--variant={VARIANT}", f"--include={','.join(INCLUDE)}", SUITE, str(root), mirror]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-10:])
            raise HarnessError(f"debootstrap failed (exit {done.returncode}):\n{tail}")
        for rel in _PRUNE:
            target = root / rel
            if target.is_dir():
                shutil.rmtree(target)
                target.mkdir()
        partial = Path(tmp) / "rootfs.tar.gz"
        # The tar CLI keeps device nodes, owners and xattrs exactly as debootstrap made them.
        with partial.open("wb") as out:
            tar = subprocess.Popen(["tar", "--numeric-owner", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
            gz = subprocess.run(["gzip", "-1"], stdin=tar.stdout, stdout=out, check=False)
            assert tar.stdout is not None
            tar.stdout.close()
            if tar.wait() != 0 or gz.returncode != 0:
                raise HarnessError(f"packing the rootfs into {partial} failed")
        partial.replace(dest)


def _image(client: Any, ref: str) -> Any | None:
    import docker.errors

    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        return None


def ensure_base_image(client: Any, report: BuildReport) -> str:
    """The imported base image's tag, importing (and debootstrapping) it when missing."""
    tarball = rootfs_tarball()
    if not tarball.is_file():
        t0 = time.perf_counter()
        make_rootfs_tarball(tarball)
        report.timings_s["debootstrap"] = time.perf_counter() - t0
        report.built.append(str(tarball))
    tag = f"{BASE_REPOSITORY}:{recipe_key()}"
    existing = _image(client, tag)
    digest = _sha256_file(tarball)
    if existing is not None and (existing.labels or {}).get(LABEL_ROOTFS) == digest:
        return tag
    t0 = time.perf_counter()
    client.api.import_image_from_file(str(tarball), repository=BASE_REPOSITORY, tag=recipe_key(),
                                      changes=[f"LABEL {LABEL_ROOTFS}={digest}"])
    client.images.get(tag).tag(BASE_REPOSITORY, "latest")
    report.timings_s["import"] = time.perf_counter() - t0
    report.built.append(tag)
    return tag


def ensure_image(client: Any, *, rebuild: bool = False) -> BuildReport:
    """``qualify-standin:latest``, built if missing or stale. Never pulls."""
    with _locked():
        report = BuildReport(IMAGE, "")
        base_tag = ensure_base_image(client, report)
        base = client.images.get(base_tag)
        digest = source_digest(base.id)
        existing = _image(client, IMAGE)
        if not rebuild and existing is not None and (existing.labels or {}).get(LABEL_SOURCE) == digest:
            report.image_id = existing.id
            return report
        t0 = time.perf_counter()
        try:
            image, _ = client.images.build(path=str(CONTEXT_DIR), tag=IMAGE, pull=False, rm=True, forcerm=True,
                                           buildargs={"BASE": base_tag}, labels={LABEL_SOURCE: digest})
        except Exception as exc:  # docker.errors.BuildError/APIError: name the image, keep the engine's words
            raise HarnessError(f"building {IMAGE} failed: {exc}") from exc
        report.timings_s["build"] = time.perf_counter() - t0
        report.built.append(IMAGE)
        report.image_id = image.id
        return report


def ensure_fault_image(client: Any, fault: str, **env: str) -> str:
    """A tag of the stand-in that misbehaves as ``STANDIN_FAULT=fault`` (baked into the image, not the launch).

    Baking the fault into the image keeps the launch itself exactly the profile's: the
    suites see a runtime that crashes, not a harness that was told to expect one.
    """
    ensure_image(client)
    tag = f"qualify-standin:fault-{fault}"
    lines = [f"FROM {IMAGE}", f"ENV STANDIN_FAULT={fault}"] + [f"ENV {k}={v}" for k, v in sorted(env.items())]
    dockerfile = ("\n".join(lines) + "\n").encode()
    digest = hashlib.sha256(dockerfile + client.images.get(IMAGE).id.encode()).hexdigest()
    existing = _image(client, tag)
    if existing is not None and (existing.labels or {}).get(LABEL_SOURCE) == digest:
        return tag
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
    context.seek(0)
    client.images.build(fileobj=context, custom_context=True, tag=tag, pull=False, rm=True, forcerm=True,
                        labels={LABEL_SOURCE: digest})
    return tag


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qualify.runtime.standin", description=__doc__.splitlines()[0])
    parser.add_argument("--rebuild", action="store_true", help="rebuild the images (the rootfs tarball is kept)")
    args = parser.parse_args(argv)
    from qualify.runtime.engine import docker_client

    t0 = time.perf_counter()
    print_build(ensure_image(docker_client(), rebuild=args.rebuild), t0)
    return 0


def print_build(report: BuildReport, started: float) -> None:
    """What an image build did, step by step, for the ``python -m`` entry points."""
    print(f"{report.image} {report.image_id}")
    for step, seconds in report.timings_s.items():
        print(f"  {step}: {seconds:.1f} s")
    print(f"  built: {', '.join(report.built) or 'nothing (cached)'}; total {time.perf_counter() - started:.1f} s")


def run_main(main: Callable[[], int], prog: str) -> None:
    """Exit with ``main()``'s code; a harness error is one line naming ``prog`` and exit 2, never a traceback."""
    try:
        sys.exit(main())
    except HarnessError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    run_main(main, "qualify.runtime.standin")
