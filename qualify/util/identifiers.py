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

# A hub repository id: owner/name, each of letters, digits, '-', '_' and '.', starting and ending with a letter or
# digit, at most 96 characters (huggingface_hub's validate_repo_id, stricter: no '--' or '..', see is_repo_id).
_REPO_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
REPO_ID_RE = re.compile(rf"{_REPO_PART}/{_REPO_PART}")


def is_repo_id(text: object) -> bool:
    """Whether ``text`` is a plain hub repository id ``owner/name`` (no URL, path, '..', '--' or shell character)."""
    return (isinstance(text, str) and REPO_ID_RE.fullmatch(text) is not None and "--" not in text
            and ".." not in text)


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
