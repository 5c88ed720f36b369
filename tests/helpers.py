"""Helpers shared by the harness's own tests."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "fixtures" / "dflash2-tiny"
TRACEBACK = "Traceback (most recent call last)"


def run_qualify(*args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a user would, in its own process."""
    return subprocess.run(
        [sys.executable, "-m", "qualify.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def write_checkpoint(root: Path, tensors: dict, *, config: dict | None = None, hf_quant: dict | None = None) -> Path:
    """A small checkpoint directory from a dict of tensors (and optional config files)."""
    import json

    from qualify.checkpoint.safetensors_writer import TORCH_TO_SAFETENSORS, PlannedTensor, write_safetensors

    root.mkdir(parents=True, exist_ok=True)
    planned = [
        PlannedTensor(n, TORCH_TO_SAFETENSORS[t.dtype], tuple(t.shape), lambda t=t: t) for n, t in tensors.items()
    ]
    write_safetensors(root / "model.safetensors", planned)
    if config is not None:
        (root / "config.json").write_text(json.dumps(config))
    if hf_quant is not None:
        (root / "hf_quant_config.json").write_text(json.dumps(hf_quant))
    return root


def hf_quant(exclude=("lm_head",), **overrides):
    q = {"quant_algo": "MXFP8", "kv_cache_quant_algo": None, "group_size": 32, "exclude_modules": list(exclude)}
    q.update(overrides)
    return {"producer": {"name": "test", "version": "0"}, "quantization": q}


@contextlib.contextmanager
def peak_allocation() -> Iterator[Callable[[], int]]:
    """Measure the peak of Python (and NumPy) allocations inside the block, in bytes.

    A memory claim ("refused without allocating what the header declares") is checked by what
    was allocated, never by how long it took, so a loaded machine cannot fail it.
    """
    peak = 0
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        yield lambda: peak
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()


def write_key(folder: Path, name: str, curve: Any = None,
              password: bytes | None = None) -> tuple[Path, Path]:
    """(private PEM, public PEM) of a fresh EC key (P-256 unless ``curve``), for signing tests."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(curve or ec.SECP256R1())
    enc = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    priv, pub = folder / f"{name}.pem", folder / f"{name}.pub.pem"
    priv.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc))
    pub.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo))
    return priv, pub
