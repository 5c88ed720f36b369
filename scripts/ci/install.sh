#!/usr/bin/env bash
# Install the harness on a release runner from requirements/release.lock: every package pinned to
# one version and to the sha256 of its files (pip refuses anything else), the harness itself
# from this checkout without resolving anything more. Nothing is chosen at install time.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}

"$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --require-hashes --no-deps -r requirements/release.lock
.venv/bin/python -m pip install --quiet --no-deps --no-build-isolation -e .
.venv/bin/qualify --version
