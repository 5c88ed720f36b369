"""The identifiers a run names things by: commits, digests and run ids (one home for each pattern).

The JSON schemas spell the same patterns for the files they validate; ``tests/util/test_identifiers.py``
holds the two in step.
"""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime

#: An immutable git (and Hugging Face hub) commit: 40 lowercase hex digits.
COMMIT_RE = re.compile(r"[0-9a-f]{40}")
#: A sha256 hex digest, as the manifest and the report record file contents.
SHA256_RE = re.compile(r"[0-9a-f]{64}")
#: A container image digest (an image ID or a repo digest's right-hand side).
IMAGE_DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")


def is_commit(text: object) -> bool:
    """Whether ``text`` is an immutable commit (never a branch, a tag or an abbreviation)."""
    return isinstance(text, str) and COMMIT_RE.fullmatch(text) is not None


def is_image_digest(text: object) -> bool:
    """Whether ``text`` is ``sha256:`` and 64 lowercase hex digits."""
    return isinstance(text, str) and IMAGE_DIGEST_RE.fullmatch(text) is not None


def new_run_id(profile_name: str) -> str:
    """A run id: UTC time, the profile's name made path-safe, and 24 random bits.

    The random part keeps two runs started in the same second apart; a clash is still
    checked where the run folder is made (:func:`qualify.run.runner.claim_run_dir`).
    """
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in profile_name)
    return f"{stamp}-{safe}-{secrets.token_hex(3)}"
